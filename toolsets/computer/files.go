package computer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus"
)

// Listing limits.
const (
	defaultMaxEntries = 200
	maxMaxEntries     = 5000
)

// maxLineBytes is the longest line read_file shows whole; longer lines are cut.
const maxLineBytes = 4000

// sniffBytes is how much of a file decides whether it is text (git looks at 8000 bytes too).
const sniffBytes = 8000

type listArgs struct {
	Path       string `json:"path,omitempty" jsonschema_description:"The directory to list, relative to the agent home. Default: the home itself."`
	Recursive  bool   `json:"recursive,omitempty" jsonschema_description:"List the whole tree below the directory instead of its direct entries only."`
	MaxEntries int    `json:"max_entries,omitempty" jsonschema:"minimum=1,maximum=5000" jsonschema_description:"The most entries to list. Default 200."`
}

// Entry is one listed directory entry.
type Entry struct {
	// Path is relative to the agent home, slash-separated, as the model passes it back.
	Path string `json:"path"`
	// Type is "file", "dir", "symlink" or "other".
	Type   string `json:"type"`
	Size   int64  `json:"size,omitempty"`
	Target string `json:"target,omitempty"` // what a symbolic link points to
	Error  string `json:"error,omitempty"`  // why a directory could not be read
}

// ListDetails are the details of a list_files result.
type ListDetails struct {
	Path      string  `json:"path"`
	Recursive bool    `json:"recursive,omitempty"`
	Entries   []Entry `json:"entries"`
	// Truncated says the listing stopped at the entry or output limit.
	Truncated bool `json:"truncated,omitempty"`
	// Omitted counts entries known to exist but not listed (direct listings only).
	Omitted int `json:"omitted,omitempty"`
}

type readArgs struct {
	Path   string `json:"path" jsonschema:"minLength=1" jsonschema_description:"The file to read, relative to the agent home."`
	Offset int    `json:"offset,omitempty" jsonschema:"minimum=1" jsonschema_description:"The first line to return, counting from 1. Default 1."`
	Limit  int    `json:"limit,omitempty" jsonschema:"minimum=1" jsonschema_description:"The most lines to return. Default: as many as fit in the output limit."`
}

// ReadDetails are the details of a read_file result.
type ReadDetails struct {
	Path       string `json:"path"`
	Bytes      int64  `json:"bytes"`
	TotalLines int    `json:"total_lines"`
	FirstLine  int    `json:"first_line,omitempty"`
	LastLine   int    `json:"last_line,omitempty"`
	// NextOffset continues the read; zero when the last line was returned.
	NextOffset int `json:"next_offset,omitempty"`
	// Truncated says the output limit, not the end of the file or the line limit, ended the read.
	Truncated bool `json:"truncated,omitempty"`
}

// Lines is the number of lines returned.
func (d ReadDetails) Lines() int {
	if d.LastLine < d.FirstLine || d.FirstLine == 0 {
		return 0
	}
	return d.LastLine - d.FirstLine + 1
}

type writeArgs struct {
	Path    string `json:"path" jsonschema:"minLength=1" jsonschema_description:"The file to write, relative to the agent home. Missing parent directories are created."`
	Content string `json:"content" jsonschema_description:"The text to write."`
	Append  bool   `json:"append,omitempty" jsonschema_description:"Add the content at the end of the file instead of replacing the file."`
}

// WriteDetails are the details of a write_file result.
type WriteDetails struct {
	Path    string `json:"path"`
	Bytes   int64  `json:"bytes"` // written by this call
	Lines   int    `json:"lines"` // lines in the content written
	Size    int64  `json:"size"`  // of the file afterwards
	Append  bool   `json:"append,omitempty"`
	Created bool   `json:"created,omitempty"`
}

func (c Config) listFiles(ctx context.Context, call toolbus.Call, a listArgs) (toolbus.Result, error) {
	h, t, fi, err := c.openStat(call, a.Path)
	if err != nil {
		return toolbus.Result{}, err
	}
	defer h.Close()
	if !fi.IsDir() {
		return toolbus.Result{}, fmt.Errorf("%s is a file, not a directory; read it with read_file", t.shown)
	}
	limit := a.MaxEntries
	if limit <= 0 {
		limit = defaultMaxEntries
	}
	limit = min(limit, maxMaxEntries)

	d := ListDetails{Path: t.shown, Recursive: a.Recursive, Entries: []Entry{}}
	if a.Recursive {
		err = h.walk(ctx, t, limit, &d)
	} else {
		err = h.readDir(t, limit, &d)
	}
	if err != nil {
		return toolbus.Result{}, err
	}

	var b strings.Builder
	where := display(t.shown)
	switch {
	case len(d.Entries) == 0:
		if t.shown == "." {
			b.WriteString("The home directory is empty.")
		} else {
			fmt.Fprintf(&b, "%s is empty.", t.shown)
		}
		return toolbus.TextResult(b.String()).WithDetails(d), nil
	case a.Recursive:
		fmt.Fprintf(&b, "%s under %s:\n", plural(len(d.Entries), "entry", "entries"), where)
	default:
		fmt.Fprintf(&b, "%s in %s:\n", plural(len(d.Entries)+d.Omitted, "entry", "entries"), where)
	}
	for i, e := range d.Entries {
		line := formatEntry(e)
		if b.Len()+len(line)+1 > c.MaxOutput {
			d.Omitted += len(d.Entries) - i
			d.Entries = d.Entries[:i]
			d.Truncated = true
			break
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	switch {
	case d.Truncated && d.Omitted > 0:
		fmt.Fprintf(&b, "[%s not shown; list a subdirectory or use max_entries]", plural(d.Omitted, "more entry", "more entries"))
	case d.Truncated:
		fmt.Fprintf(&b, "[listing stopped after %d entries; list a subdirectory or raise max_entries]", len(d.Entries))
	}
	return toolbus.TextResult(strings.TrimSuffix(b.String(), "\n")).WithDetails(d), nil
}

// readDir lists the direct entries of t, sorted by name.
func (h *home) readDir(t target, limit int, d *ListDetails) error {
	f, err := h.root.Open(t.rel)
	if err != nil {
		return describe(t, err)
	}
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return describe(t, err)
	}
	slices.SortFunc(des, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	if len(des) > limit {
		d.Omitted = len(des) - limit
		d.Truncated = true
		des = des[:limit]
	}
	for _, de := range des {
		d.Entries = append(d.Entries, h.entry(path.Join(t.shown, de.Name()), filepath.Join(t.rel, de.Name()), de))
	}
	return nil
}

// walk lists the tree below t in lexical order, without following links to directories.
func (h *home) walk(ctx context.Context, t target, limit int, d *ListDetails) error {
	start := filepath.ToSlash(t.rel)
	return fs.WalkDir(h.root.FS(), start, func(p string, de fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if p == start {
			if err != nil {
				return describe(t, err)
			}
			return nil
		}
		rel := strings.TrimPrefix(p, start+"/")
		if start == "." {
			rel = p
		}
		shown := path.Join(t.shown, rel)
		if err != nil {
			// ReadDir failed on a directory already listed: note it on that entry.
			if n := len(d.Entries); n > 0 && d.Entries[n-1].Path == shown {
				d.Entries[n-1].Error = pathErr(err).Error()
				return nil
			}
			d.Entries = append(d.Entries, Entry{Path: shown, Type: "dir", Error: pathErr(err).Error()})
			return nil
		}
		if len(d.Entries) == limit {
			d.Truncated = true
			return fs.SkipAll
		}
		d.Entries = append(d.Entries, h.entry(shown, filepath.FromSlash(p), de))
		return nil
	})
}

func (h *home) entry(shown, rel string, de fs.DirEntry) Entry {
	e := Entry{Path: shown}
	switch typ := de.Type(); {
	case typ.IsDir():
		e.Type = "dir"
	case typ&fs.ModeSymlink != 0:
		e.Type = "symlink"
		e.Target, _ = h.root.Readlink(rel)
	case typ.IsRegular():
		e.Type = "file"
		if fi, err := de.Info(); err == nil {
			e.Size = fi.Size()
		}
	default:
		e.Type = "other"
	}
	return e
}

func formatEntry(e Entry) string {
	var s string
	switch e.Type {
	case "dir":
		s = e.Path + "/"
	case "symlink":
		s = e.Path + " -> " + e.Target
	case "file":
		s = e.Path + "  (" + formatSize(e.Size) + ")"
	default:
		s = e.Path + "  (special file)"
	}
	if e.Error != "" {
		s += "  [unreadable: " + e.Error + "]"
	}
	return s
}

func (c Config) readFile(ctx context.Context, call toolbus.Call, a readArgs) (toolbus.Result, error) {
	// Stat before opening: opening a FIFO would block until someone writes to it.
	h, t, fi, err := c.openStat(call, a.Path)
	if err != nil {
		return toolbus.Result{}, err
	}
	defer h.Close()
	if err := c.checkReadable(t, fi); err != nil {
		return toolbus.Result{}, err
	}
	f, err := h.root.Open(t.rel)
	if err != nil {
		return toolbus.Result{}, describe(t, err)
	}
	defer f.Close()
	// Size the buffer from the stat; the limit still holds if the file grew since.
	buf := bytes.NewBuffer(make([]byte, 0, fi.Size()+bytes.MinRead))
	_, err = buf.ReadFrom(io.LimitReader(f, c.MaxFileSize+1))
	data := buf.Bytes()
	if err != nil {
		return toolbus.Result{}, describe(t, err)
	}
	if int64(len(data)) > c.MaxFileSize {
		return toolbus.Result{}, c.errTooBig(t, int64(len(data)))
	}
	if err := ctx.Err(); err != nil {
		return toolbus.Result{}, err
	}
	if looksBinary(data) {
		return toolbus.Result{}, fmt.Errorf("%s looks like a binary file, and read_file shows text only; inspect it with run_command (for example `file %[1]s` or `xxd %[1]s | head`)", t.shown)
	}
	return c.renderLines(t, data, a.Offset, a.Limit)
}

func (c Config) checkReadable(t target, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return fmt.Errorf("%s is a directory, not a file; list it with list_files", display(t.shown))
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%s)", t.shown, fi.Mode().Type())
	case fi.Size() > c.MaxFileSize:
		return c.errTooBig(t, fi.Size())
	}
	return nil
}

func (c Config) errTooBig(t target, size int64) error {
	return fmt.Errorf("%s is %s, larger than the %s read_file limit; look at parts of it with run_command (for example `sed -n '1,200p' %[1]s` or `grep -n PATTERN %[1]s`)",
		t.shown, formatSize(size), formatSize(c.MaxFileSize))
}

// looksBinary applies git's test (a NUL byte near the start) and refuses text that is not UTF-8.
func looksBinary(data []byte) bool {
	sniff := data[:min(len(data), sniffBytes)]
	if bytes.IndexByte(sniff, 0) >= 0 {
		return true
	}
	if len(sniff) < len(data) {
		sniff = validPrefix(sniff)
	}
	return !utf8.Valid(sniff)
}

// renderLines shows lines offset.. of data, numbered like cat -n, within the output limit.
func (c Config) renderLines(t target, data []byte, offset, limit int) (toolbus.Result, error) {
	total := bytes.Count(data, []byte{'\n'})
	if len(data) > 0 && data[len(data)-1] != '\n' {
		total++
	}
	d := ReadDetails{Path: t.shown, Bytes: int64(len(data)), TotalLines: total}
	if total == 0 {
		return toolbus.TextResult(t.shown + " is empty (0 lines).").WithDetails(d), nil
	}
	offset = max(offset, 1)
	if offset > total {
		return toolbus.Result{}, fmt.Errorf("offset %d is past the end of %s, which has %d lines", offset, t.shown, total)
	}
	pos := 0
	for range offset - 1 {
		pos += bytes.IndexByte(data[pos:], '\n') + 1
	}
	lineCap := min(maxLineBytes, c.MaxOutput/2)
	body := make([]byte, 0, min(len(data)-pos, c.MaxOutput)+64)
	var entry []byte
	var numBuf [20]byte
	n := offset
	for pos < len(data) && (limit <= 0 || n < offset+limit) {
		var ln []byte
		if i := bytes.IndexByte(data[pos:], '\n'); i >= 0 {
			ln, pos = data[pos:pos+i], pos+i+1
		} else {
			ln, pos = data[pos:], len(data)
		}
		ln = bytes.TrimSuffix(ln, []byte{'\r'})
		cut := 0
		if len(ln) > lineCap {
			cut = len(ln) - lineCap
			ln = validPrefix(ln[:lineCap])
		}
		// One line as cat -n prints it: the number right-aligned in six columns, a tab, the text.
		entry = entry[:0]
		num := strconv.AppendInt(numBuf[:0], int64(n), 10)
		for range 6 - len(num) {
			entry = append(entry, ' ')
		}
		entry = append(entry, num...)
		entry = append(entry, '\t')
		if utf8.Valid(ln) {
			entry = append(entry, ln...)
		} else {
			entry = append(entry, strings.ToValidUTF8(string(ln), "\uFFFD")...)
		}
		if cut > 0 {
			entry = fmt.Appendf(entry, " [line cut: %d more bytes]", cut)
		}
		entry = append(entry, '\n')
		if len(body)+len(entry) > c.MaxOutput && n > offset {
			d.Truncated = true
			break
		}
		body = append(body, entry...)
		n++
	}
	d.FirstLine, d.LastLine = offset, n-1
	if d.LastLine < total {
		d.NextOffset = d.LastLine + 1
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%s: lines %d-%d of %d\n", t.shown, d.FirstLine, d.LastLine, total)
	b.Write(body)
	switch {
	case d.Truncated:
		fmt.Fprintf(&b, "[output limit of %s reached; continue with offset=%d]", formatSize(int64(c.MaxOutput)), d.NextOffset)
	case d.NextOffset > 0:
		fmt.Fprintf(&b, "[%d more lines; continue with offset=%d]", total-d.LastLine, d.NextOffset)
	}
	return toolbus.TextResult(strings.TrimSuffix(b.String(), "\n")).WithDetails(d), nil
}

func (c Config) writeFile(ctx context.Context, call toolbus.Call, a writeArgs) (toolbus.Result, error) {
	h, err := c.openHome(call)
	if err != nil {
		return toolbus.Result{}, err
	}
	defer h.Close()
	t, err := h.resolve(a.Path)
	if err != nil {
		return toolbus.Result{}, err
	}
	if t.rel == "." {
		return toolbus.Result{}, errors.New("the path names the home directory itself; give a file name such as \"notes.md\"")
	}
	size := int64(len(a.Content))
	if size > c.MaxFileSize {
		return toolbus.Result{}, fmt.Errorf("content is %s, larger than the %s write_file limit; write the file in parts with append", formatSize(size), formatSize(c.MaxFileSize))
	}
	d := WriteDetails{Path: t.shown, Bytes: size, Lines: countLines(a.Content), Append: a.Append, Size: size}
	switch fi, err := h.root.Stat(t.rel); {
	case errors.Is(err, fs.ErrNotExist):
		d.Created = true
		if dir := filepath.Dir(t.rel); dir != "." {
			if err := h.root.MkdirAll(dir, 0o755); err != nil {
				return toolbus.Result{}, describe(target{shown: path.Dir(t.shown)}, err)
			}
		}
	case err != nil:
		return toolbus.Result{}, describe(t, err)
	case fi.IsDir():
		return toolbus.Result{}, fmt.Errorf("%s is a directory; give a file name", t.shown)
	case !fi.Mode().IsRegular():
		return toolbus.Result{}, fmt.Errorf("%s is not a regular file (%s)", t.shown, fi.Mode().Type())
	case a.Append:
		d.Size = fi.Size() + size
		if d.Size > c.MaxFileSize {
			return toolbus.Result{}, fmt.Errorf("appending %s to %s (%s) would pass the %s file limit", formatSize(size), t.shown, formatSize(fi.Size()), formatSize(c.MaxFileSize))
		}
	}
	if err := ctx.Err(); err != nil {
		return toolbus.Result{}, err
	}
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if a.Append {
		flag = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := h.root.OpenFile(t.rel, flag, 0o644)
	if err != nil {
		return toolbus.Result{}, describe(t, err)
	}
	_, werr := f.WriteString(a.Content)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return toolbus.Result{}, fmt.Errorf("write %s: %w", t.shown, pathErr(werr))
	}

	var msg string
	switch {
	case a.Append && !d.Created:
		msg = fmt.Sprintf("Appended %s (%s) to %s; it now holds %s.", plural(d.Lines, "line", "lines"), formatSize(size), t.shown, formatSize(d.Size))
	case d.Created:
		msg = fmt.Sprintf("Wrote %s (%s) to %s, a new file.", plural(d.Lines, "line", "lines"), formatSize(size), t.shown)
	default:
		msg = fmt.Sprintf("Wrote %s (%s) to %s, replacing its content.", plural(d.Lines, "line", "lines"), formatSize(size), t.shown)
	}
	return toolbus.TextResult(msg).WithDetails(d), nil
}

func countLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// plural counts things: "1 line", "2 lines", "3 entries".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
