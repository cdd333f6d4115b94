package skills

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// Where skills live in an agent home, and the bounds of what is read.
const (
	// Dir is the folder of the agent home that holds one folder per skill.
	Dir = "skills"
	// File is the skill's own file in its folder.
	File = "SKILL.md"
	// MaxSkillSize is the largest SKILL.md read.
	MaxSkillSize = 64 << 10
	// MaxDescription is the longest description, in characters: every turn's
	// instructions carry it.
	MaxDescription = 1024
	// MaxFiles is the most files a skill's text lists from its folder.
	MaxFiles = 100
	// MaxFileSize is the largest file of a skill's folder that load_skill returns.
	MaxFileSize = 256 << 10
	// MaxEnabled is the most skills a turn loads.
	MaxEnabled = 100
)

// Bounds of a SKILL.md's front matter, checked before the YAML parser reads it: a skill's
// folder is the agent's to write, and goccy/go-yaml's memory grows with the square of the
// nesting depth (30 000 levels took 1.46 GB; 63 000 unclosed '[' ran the node out of
// memory), its time with the square of a mapping's keys past a few thousand.
const (
	// MaxFrontMatterDepth is the deepest the front matter may nest: blocks and flow
	// collections ([...], {...}) together. A skill needs four (mcp, a server, its env, a
	// variable).
	MaxFrontMatterDepth = 32
	// MaxFrontMatterSize is the largest front matter, between the two "---" lines.
	MaxFrontMatterSize = 16 << 10
)

// Skill is one skill, read from its folder.
type Skill struct {
	// Name is the skill's folder name, which the profile enables and the front matter's
	// name repeats.
	Name        string
	Description string
	// Servers are the MCP servers the skill needs, by name.
	Servers []Server
	// Body is the Markdown after the front matter.
	Body string
	// Dir is the skill's folder, absolute, with symbolic links resolved: the path
	// commands in the sandbox see.
	Dir string
	// Files are the other files of the folder, relative to it and slash-separated, at
	// most MaxFiles; FilesCut says more were left out.
	Files    []FileInfo
	FilesCut bool
}

// FileInfo is a file of a skill's folder.
type FileInfo struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// Server is an MCP server a skill needs, in the common mcpServers shape: a command the
// client starts (stdio) or the URL of a running server (HTTP).
type Server struct {
	Name    string            `yaml:"-" json:"-"`
	line    int               // of its name in SKILL.md, for problems
	Command string            `yaml:"command" json:"command,omitempty"`
	Args    []string          `yaml:"args" json:"args,omitempty"`
	Env     map[string]string `yaml:"env" json:"env,omitempty"`
	// Cwd is the folder the command starts in, relative to the skill's folder (the
	// default) or absolute; either way inside the skill's folder.
	Cwd     string            `yaml:"cwd" json:"cwd,omitempty"`
	URL     string            `yaml:"url" json:"url,omitempty"`
	Headers map[string]string `yaml:"headers" json:"headers,omitempty"`
}

// frontMatter is what a SKILL.md's front matter may hold: toolbus's fields, and those
// of the common skill format that toolbus reads past.
type frontMatter struct {
	Name          string            `yaml:"name"`
	Description   string            `yaml:"description"`
	MCP           map[string]Server `yaml:"mcp"`
	License       any               `yaml:"license"`
	Compatibility any               `yaml:"compatibility"`
	AllowedTools  any               `yaml:"allowed-tools"`
	Metadata      any               `yaml:"metadata"`
	Version       any               `yaml:"version"`
}

// Problem is what is wrong with one skill: a SKILL.md that cannot be read or whose front
// matter is malformed, at a line when one is to blame, or a skill enabled but missing.
// The skill is left out; the others load.
type Problem struct {
	Skill string
	// File is relative to the agent home, slash-separated: skills/<name>/SKILL.md.
	File string
	// Line is 1-based; 0 when no line is to blame.
	Line    int
	Message string
	cause   error // ErrNotFound for a missing skill
}

func (p *Problem) Error() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	}
	return p.File + ": " + p.Message
}

func (p *Problem) Unwrap() error { return p.cause }

// ErrNotFound is wrapped by the Problem of an enabled skill that is not in the home.
var ErrNotFound = errors.New("skill not found")

var (
	skillName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	serverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
)

// CheckName reports whether name can name a skill's folder.
func CheckName(name string) error {
	if !skillName.MatchString(name) {
		return fmt.Errorf("%q is not a skill name: want up to 64 letters, digits, '_', '-' or '.', starting with a letter or digit", name)
	}
	return nil
}

// fileOf is a skill's SKILL.md relative to the home.
func fileOf(name string) string { return path.Join(Dir, name, File) }

// Load reads the enabled skills from the agent home, in the order given. A skill that
// is missing or whose SKILL.md is malformed is left out and reported as a *Problem; the
// rest load. A home that does not exist holds no skill.
func Load(home string, enabled []string) ([]*Skill, []error) {
	var (
		out  []*Skill
		errs []error
	)
	if len(enabled) > MaxEnabled {
		for _, name := range enabled[MaxEnabled:] {
			errs = append(errs, &Problem{Skill: name, File: fileOf(name), Message: fmt.Sprintf("left out: a turn loads at most %d skills", MaxEnabled)})
		}
		enabled = enabled[:MaxEnabled]
	}
	root, rootErr := openHome(home)
	if root != nil {
		defer root.Close()
	}
	for _, name := range enabled {
		switch {
		case errors.Is(rootErr, fs.ErrNotExist):
			errs = append(errs, missing(name, home))
			continue
		case rootErr != nil:
			errs = append(errs, &Problem{Skill: name, File: fileOf(name), Message: fmt.Sprintf("the agent home %s cannot be read: %s", home, readError(rootErr))})
			continue
		}
		s, err := load(root, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	return out, errs
}

// Present lists the skill folders of the home (those holding a SKILL.md), sorted; a home
// without skills has none.
func Present(home string) ([]string, error) {
	root, err := openHome(home)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list skills: %w", err)
	}
	var names []string
	for _, e := range entries {
		if CheckName(e.Name()) != nil {
			continue
		}
		if fi, err := root.Stat(fileOf(e.Name())); err == nil && fi.Mode().IsRegular() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// openHome opens the agent home as a root.
func openHome(home string) (*os.Root, error) {
	if home == "" {
		return nil, errors.New("no agent home")
	}
	return os.OpenRoot(home)
}

func missing(name, home string) error {
	return &Problem{Skill: name, File: fileOf(name), cause: ErrNotFound,
		Message: fmt.Sprintf("skill %s is enabled but this file does not exist in the agent home %s", name, home)}
}

// load reads one skill through the home's root.
func load(root *os.Root, name string) (*Skill, error) {
	file := fileOf(name)
	if err := CheckName(name); err != nil {
		return nil, &Problem{Skill: name, File: file, Message: err.Error()}
	}
	f, fi, err := openRegular(root, file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, missing(name, root.Name())
	case err != nil:
		return nil, &Problem{Skill: name, File: file, Message: readError(err)}
	}
	defer f.Close()
	if fi.Size() > MaxSkillSize {
		return nil, &Problem{Skill: name, File: file, Message: fmt.Sprintf("%s is %s, more than the %s a SKILL.md may hold: move the details into other files of the folder, which load_skill reads on request", File, FormatSize(fi.Size()), FormatSize(MaxSkillSize))}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSkillSize+1))
	if err != nil {
		return nil, &Problem{Skill: name, File: file, Message: readError(err)}
	}
	if len(data) > MaxSkillSize {
		return nil, &Problem{Skill: name, File: file, Message: fmt.Sprintf("%s grew past the %s a SKILL.md may hold while it was read", File, FormatSize(MaxSkillSize))}
	}
	s, err := Parse(name, data)
	if err != nil {
		return nil, err
	}
	dir, err := root.OpenRoot(path.Join(Dir, name))
	if err != nil {
		return nil, &Problem{Skill: name, File: file, Message: readError(err)}
	}
	defer dir.Close()
	s.Dir, s.Files = realDir(root.Name(), name), listFiles(dir)
	if len(s.Files) > MaxFiles {
		s.Files, s.FilesCut = s.Files[:MaxFiles], true
	}
	for _, srv := range s.Servers {
		if srv.Command == "" {
			continue
		}
		if _, err := serverDir(s.Dir, srv.Cwd); err != nil {
			return nil, &Problem{Skill: name, File: file, Line: srv.line, Message: fmt.Sprintf("MCP server %s: %v", srv.Name, err)}
		}
	}
	return s, nil
}

// serverDir is the folder a stdio server of the skill whose folder is dir starts in: dir
// itself, or cwd relative to it or absolute, with symbolic links resolved as far as the
// folder exists. A cwd that leaves dir, by "..", as an absolute path elsewhere or
// through a symbolic link, is refused.
func serverDir(dir, cwd string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", errors.New("the skill's folder is not known")
	}
	if cwd == "" {
		return dir, nil
	}
	if strings.IndexByte(cwd, 0) >= 0 {
		return "", fmt.Errorf("cwd %q holds a NUL byte", cwd)
	}
	const inside = "a server starts in the skill's folder or a folder inside it"
	p, abs := filepath.Clean(cwd), filepath.IsAbs(cwd)
	if !abs {
		if p == ".." || strings.HasPrefix(p, ".."+string(filepath.Separator)) {
			return "", fmt.Errorf("cwd %s leaves the skill's folder (..): %s", cwd, inside)
		}
		p = filepath.Join(dir, p)
	}
	// An absolute cwd is checked once resolved: the home may be reached through a link.
	real, err := resolveExisting(p)
	if err != nil {
		return "", fmt.Errorf("cwd %s: %s", cwd, readError(err))
	}
	switch {
	case !within(dir, real) && abs:
		return "", fmt.Errorf("cwd %s is not inside the skill's folder: %s", cwd, inside)
	case !within(dir, real):
		return "", fmt.Errorf("cwd %s goes through a symbolic link that leaves the skill's folder: %s", cwd, inside)
	}
	if fi, err := os.Stat(real); err == nil && !fi.IsDir() {
		return "", fmt.Errorf("cwd %s is a file, not a folder", cwd)
	}
	return real, nil
}

// within reports whether the clean absolute path p is dir or inside it.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// resolveExisting resolves the symbolic links of the clean absolute path p as far as it
// exists; what does not exist yet is joined to that as it is. A symbolic link that leads
// nowhere is followed as far as it goes, so that its target is checked.
func resolveExisting(p string) (string, error) {
	var missing []string
	for hops := 0; ; {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(append([]string{real}, missing...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if fi, lerr := os.Lstat(p); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			// A link to what does not exist yet: check where it leads, where a folder
			// may be made later. A relative target is relative to the link's folder,
			// resolved.
			target, err := os.Readlink(p)
			if err != nil {
				return "", err
			}
			if !filepath.IsAbs(target) {
				parent, err := filepath.EvalSymlinks(filepath.Dir(p))
				if err != nil {
					return "", err
				}
				target = filepath.Join(parent, target)
			}
			if hops++; hops > 40 {
				return "", errors.New("too many levels of symbolic links")
			}
			p = filepath.Clean(target)
			continue
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", err
		}
		missing = append([]string{filepath.Base(p)}, missing...)
		p = parent
	}
}

// Why openRegular refuses a file.
var (
	errNotRegular = errors.New("not a regular file") // a device, a pipe, a socket
	errFolder     = errors.New("a folder, not a file")
)

// openRegular opens a regular file through root. The open does not block: a named pipe
// put in a skill's place would otherwise hold assembly until someone writes to it.
func openRegular(root *os.Root, name string) (*os.File, fs.FileInfo, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errNotRegular
		if fi.IsDir() {
			err = errFolder
		}
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// readRegular reads a regular file of at most max bytes through root.
func readRegular(root *os.Root, name string, max int64) ([]byte, error) {
	f, fi, err := openRegular(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, fmt.Errorf("%s is %s, more than the %s read", name, FormatSize(fi.Size()), FormatSize(max))
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s grew past %s while it was read", name, FormatSize(max))
	}
	return b, err
}

// realDir is the skill's folder, absolute, with symbolic links resolved; os.Root has
// checked that it stays inside the home.
func realDir(home, name string) string {
	dir := filepath.Join(home, Dir, name)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		return real
	}
	return dir
}

// readError is an error of reading a skill's file, without the host's path.
func readError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if strings.Contains(err.Error(), "escapes from parent") {
		return "it is reached through a symbolic link that leaves the agent home"
	}
	return err.Error()
}

// listFiles lists the regular files of a skill's folder but SKILL.md, sorted, stopping
// one past MaxFiles; dot files and folders are left out.
func listFiles(dir *os.Root) []FileInfo {
	var files []FileInfo
	_ = fs.WalkDir(dir.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if p != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || p == File {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		files = append(files, FileInfo{Path: p, Size: fi.Size()})
		if len(files) > MaxFiles {
			return fs.SkipAll
		}
		return nil
	})
	slices.SortFunc(files, func(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return files
}

// Parse reads a SKILL.md of the folder name: front matter between two "---" lines, then
// the body. Its errors are *Problem values whose Line is the file's.
func Parse(name string, data []byte) (*Skill, error) {
	problem := func(line int, format string, args ...any) error {
		return &Problem{Skill: name, File: fileOf(name), Line: line, Message: fmt.Sprintf(format, args...)}
	}
	if len(data) > MaxSkillSize {
		return nil, problem(0, "%s is %s, more than the %s a SKILL.md may hold: move the details into other files of the folder, which load_skill reads on request", File, FormatSize(int64(len(data))), FormatSize(MaxSkillSize))
	}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		return nil, problem(0, "not a UTF-8 text file")
	}
	text := strings.TrimPrefix(string(data), "\ufeff")
	text = strings.ReplaceAll(text, "\r\n", "\n")
	first, rest, _ := strings.Cut(text, "\n")
	if strings.TrimRight(first, " \t") != "---" {
		return nil, problem(1, "no front matter: a SKILL.md starts with a line \"---\", then YAML with name and description, then another \"---\" line, then the instructions")
	}
	var (
		yml  string
		body string
		end  = -1
	)
	lines := strings.SplitAfter(rest, "\n")
	for i, l := range lines {
		if strings.TrimRight(l, " \t\n") == "---" {
			end = i
			break
		}
	}
	if end < 0 {
		return nil, problem(1, "the front matter that starts here has no closing \"---\" line")
	}
	yml = strings.Join(lines[:end], "")
	body = strings.TrimSpace(strings.Join(lines[end+1:], ""))
	// The YAML starts on the file's second line.
	const offset = 1

	// Bounded before the parser reads it; the lexer's work grows only with the size,
	// which MaxSkillSize bounds, and its tokens are what the parser nests.
	tokens := lexer.Tokenize(yml)
	if tk := tooDeep(tokens, MaxFrontMatterDepth); tk != nil {
		return nil, problem(offset+tk.Position.Line, "front matter nested deeper than %d levels (name, description and mcp need four at most)", MaxFrontMatterDepth)
	}
	if len(yml) > MaxFrontMatterSize {
		return nil, problem(1, "the front matter is %s, more than the %s it may hold: put the instructions after the closing \"---\" line, and the details in other files of the folder", FormatSize(int64(len(yml))), FormatSize(MaxFrontMatterSize))
	}

	var (
		fm   frontMatter
		file *ast.File
	)
	err := guarded(func() (err error) {
		file, err = parser.Parse(tokens, 0)
		return err
	})
	if err == nil && len(file.Docs) > 1 {
		return nil, problem(2, "the front matter holds more than one YAML document")
	}
	if err == nil && len(file.Docs) == 1 && file.Docs[0].Body != nil {
		if _, ok := file.Docs[0].Body.(*ast.MappingNode); !ok {
			if _, ok := file.Docs[0].Body.(*ast.MappingValueNode); !ok {
				return nil, problem(offset+file.Docs[0].Body.GetToken().Position.Line, "the front matter is not a mapping of keys (name, description, mcp) to values")
			}
		}
		err = guarded(func() error { return yaml.NodeToValue(file.Docs[0].Body, &fm, yaml.DisallowUnknownField()) })
	}
	if err != nil {
		line, msg := 0, err.Error()
		var ye yaml.Error
		if errors.As(err, &ye) {
			msg = yamlMessage(ye)
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				line = offset + tk.Position.Line
			}
		}
		return nil, problem(line, "front matter: %s", msg)
	}
	lineOf := func(keys ...string) int {
		if l := keyLine(file, keys...); l > 0 {
			return offset + l
		}
		return 1
	}
	fm.Name = strings.TrimSpace(fm.Name)
	fm.Description = strings.TrimSpace(fm.Description)
	switch {
	case fm.Name == "":
		return nil, problem(1, "the front matter has no name: add \"name: %s\"", name)
	case fm.Name != name:
		return nil, problem(lineOf("name"), "name %q differs from the skill's folder %q: a skill is enabled and loaded by its folder name; make them the same", fm.Name, name)
	case fm.Description == "":
		return nil, problem(1, "the front matter has no description: add one line that says what the skill is for and when to use it (every turn lists it)")
	case utf8.RuneCountInString(fm.Description) > MaxDescription:
		return nil, problem(lineOf("description"), "the description is %d characters long; at most %d are allowed (the instructions go in the body)", utf8.RuneCountInString(fm.Description), MaxDescription)
	}
	s := &Skill{Name: name, Description: fm.Description, Body: body}
	for _, n := range slices.Sorted(maps.Keys(fm.MCP)) {
		srv := fm.MCP[n]
		srv.Name = n
		at := lineOf("mcp", n)
		srv.line = at
		if !serverName.MatchString(n) {
			return nil, problem(at, "MCP server name %q: want up to 64 letters, digits, '_' or '-' (mcporter calls its tools as SERVER.TOOL)", n)
		}
		switch {
		case srv.Command == "" && srv.URL == "":
			return nil, problem(at, "MCP server %s has neither a command (a server mcporter starts) nor a url (a running server)", n)
		case srv.Command != "" && srv.URL != "":
			return nil, problem(at, "MCP server %s has both a command and a url: give one", n)
		case srv.URL != "" && (len(srv.Args) > 0 || len(srv.Env) > 0 || srv.Cwd != ""):
			return nil, problem(at, "MCP server %s has a url: args, env and cwd are for a command", n)
		case srv.Command != "" && len(srv.Headers) > 0:
			return nil, problem(at, "MCP server %s has a command: headers are for a url", n)
		}
		for k := range srv.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return nil, problem(at, "MCP server %s: invalid environment variable name %q", n, k)
			}
		}
		s.Servers = append(s.Servers, srv)
	}
	return s, nil
}

// guarded calls into the YAML library, whose panics on malformed text become errors: a
// SKILL.md the agent can write must not bring the node down, nor again each time the
// node comes back up and resumes the turn.
func guarded(call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the YAML parser failed on it (%v)", r)
		}
	}()
	return call()
}

// tooDeep is the first of tokens at which they nest deeper than limit, or nil. Its count is
// the block collections open, each at a column greater than the one it is in (every line's
// first token, every "-" and "?", and the key of every ":" opens one, or continues the
// one open at its column), plus the flow collections open. It is at least half the depth
// the parser reaches, whose memory grows with the square of it; comments and the
// contents of quoted and block scalars are single tokens and do not count.
func tooDeep(tokens token.Tokens, limit int) *token.Token {
	var (
		cols []int // columns of the open block collections, increasing
		flow int
		line = -1
		prev *token.Token
	)
	for _, tk := range tokens {
		if tk.Type == token.CommentType || tk.Position == nil {
			continue
		}
		first := tk.Position.Line != line
		line = tk.Position.Line
		if flow == 0 {
			col := -1
			switch {
			case tk.Type == token.MappingValueType && prev != nil && prev.Position.Line == tk.Position.Line:
				col = prev.Position.Column
			case first, tk.Type == token.SequenceEntryType, tk.Type == token.MappingKeyType:
				col = tk.Position.Column
			}
			if col >= 0 {
				for len(cols) > 0 && cols[len(cols)-1] >= col {
					cols = cols[:len(cols)-1]
				}
				cols = append(cols, col)
			}
		}
		switch tk.Type {
		case token.SequenceStartType, token.MappingStartType:
			flow++
		case token.SequenceEndType, token.MappingEndType:
			flow = max(flow-1, 0)
		}
		if len(cols)+flow > limit {
			return tk
		}
		prev = tk
	}
	return nil
}

// keyLine is the line of the key at the end of a path of mapping keys in file's first
// document; 0 when there is none.
func keyLine(file *ast.File, keys ...string) int {
	if file == nil || len(file.Docs) == 0 {
		return 0
	}
	node := file.Docs[0].Body
	line := 0
	for _, k := range keys {
		var values []*ast.MappingValueNode
		switch n := node.(type) {
		case *ast.MappingNode:
			values = n.Values
		case *ast.MappingValueNode:
			values = []*ast.MappingValueNode{n}
		default:
			return 0
		}
		found := false
		for _, v := range values {
			if v.Key != nil && v.Key.String() == k {
				if tk := v.Key.GetToken(); tk != nil && tk.Position != nil {
					line = tk.Position.Line
				}
				node, found = v.Value, true
				break
			}
		}
		if !found {
			return 0
		}
	}
	return line
}

// yamlAt is the position the library puts in some messages ("already defined at [1:1]"),
// which counts the front matter's lines.
var yamlAt = regexp.MustCompile(`at \[(\d+):\d+\]`)

// yamlMessage is a YAML error's message without the library's Go types.
func yamlMessage(e yaml.Error) string {
	var te *yaml.TypeError
	if errors.As(e, &te) {
		field := ""
		if te.StructFieldName != nil {
			field = strings.ToLower(*te.StructFieldName) + ": "
		}
		return fmt.Sprintf("%swant %s, not %s", field, kindName(te.DstType.String()), kindName(te.SrcType.String()))
	}
	msg := yamlAt.ReplaceAllStringFunc(e.GetMessage(), func(m string) string {
		line, _ := strconv.Atoi(yamlAt.FindStringSubmatch(m)[1])
		return fmt.Sprintf("on line %d", line+1)
	})
	if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return fmt.Sprintf("unknown key %s: the front matter holds name, description and mcp; an MCP server holds command, args, env and cwd, or url and headers", f)
	}
	return msg
}

// kindName names a Go type as YAML would.
func kindName(t string) string {
	switch {
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.Contains(t, "Server"), strings.Contains(t, "frontMatter"):
		return "a mapping"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "true or false"
	}
	return t
}

// FormatSize renders a size for messages as the computer tools do: 512 B, 2.1 KiB,
// 3.0 MiB.
func FormatSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
