package skills

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// writeFile writes a file under dir, making its folders.
func writeFile(t *testing.T, dir, name, text string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

const notesSkill = `---
name: notes
description: Keeps the team's notes.
mcp:
  everything:
    command: mcp-server-everything
    args: [stdio]
    env:
      LEVEL: "1"
  remote:
    url: https://mcp.example.com/mcp
    headers:
      Authorization: Bearer $NOTES_TOKEN
---
# Notes

Write notes as the team does.
`

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		text string
		want string // the error; "" for none
	}{
		{"valid", notesSkill, ""},
		{"no servers", "---\nname: notes\ndescription: d\n---\nbody", ""},
		{"common extra keys", "---\nname: notes\ndescription: d\nlicense: MIT\nallowed-tools: [Read]\nmetadata: {a: b}\n---\n", ""},
		{"CRLF and BOM", "\ufeff---\r\nname: notes\r\ndescription: d\r\n---\r\nbody\r\n", ""},
		{"missing name", "---\ndescription: d\n---\n", `skills/notes/SKILL.md:1: the front matter has no name: add "name: notes"`},
		{"missing description", "---\nname: notes\n---\n", "skills/notes/SKILL.md:1: the front matter has no description"},
		{"name differs", "---\ndescription: d\nname: other\n---\n", `skills/notes/SKILL.md:3: name "other" differs from the skill's folder "notes"`},
		{"no front matter", "# Notes\n", "skills/notes/SKILL.md:1: no front matter"},
		{"unclosed", "---\nname: notes\n", `skills/notes/SKILL.md:1: the front matter that starts here has no closing "---" line`},
		{"bad YAML", "---\nname: notes\ndescription: [a\n---\n", "skills/notes/SKILL.md:3: front matter: sequence end token ']' not found"},
		{"bad quote", "---\nname: notes\ndescription: 'open\n---\n", "skills/notes/SKILL.md:3: front matter: could not find end character of single-quoted text"},
		{"tab", "---\nname: notes\ndescription: d\n\tx: 1\n---\n", "skills/notes/SKILL.md:4: front matter: found character '\t' that cannot start any token"},
		{"unknown key", "---\nname: notes\ndescription: d\nmcpServers: {}\n---\n", `skills/notes/SKILL.md:4: front matter: unknown key "mcpServers"`},
		{"unknown server key", "---\nname: notes\ndescription: d\nmcp:\n  e:\n    comand: x\n---\n", `skills/notes/SKILL.md:6: front matter: unknown key "comand"`},
		{"duplicate key", "---\nname: notes\nname: notes\ndescription: d\n---\n", `skills/notes/SKILL.md:3: front matter: mapping key "name" already defined on line 2`},
		{"args not a list", "---\nname: notes\ndescription: d\nmcp:\n  e:\n    command: x\n    args: stdio\n---\n", "skills/notes/SKILL.md:7: front matter: string was used where sequence is expected"},
		{"not a mapping", "---\n- a\n---\n", "skills/notes/SKILL.md:2: the front matter is not a mapping"},
		{"server without command", "---\nname: notes\ndescription: d\nmcp:\n  e:\n    args: [x]\n---\n", "skills/notes/SKILL.md:5: MCP server e has neither a command"},
		{"server with both", "---\nname: notes\ndescription: d\nmcp:\n  e:\n    command: x\n    url: http://x\n---\n", "skills/notes/SKILL.md:5: MCP server e has both a command and a url"},
		{"server name with a dot", "---\nname: notes\ndescription: d\nmcp:\n  e.x:\n    command: x\n---\n", `skills/notes/SKILL.md:5: MCP server name "e.x"`},
		{"long description", "---\nname: notes\ndescription: " + strings.Repeat("x", MaxDescription+1) + "\n---\n", "skills/notes/SKILL.md:3: the description is 1025 characters long"},
		{"binary", "---\x00\n", "skills/notes/SKILL.md: not a UTF-8 text file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("notes", []byte(tc.text))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if s.Name != "notes" || s.Description == "" {
					t.Errorf("skill %+v", s)
				}
				return
			}
			var p *Problem
			if !errors.As(err, &p) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v, want one starting %q", err, tc.want)
			}
		})
	}

	s, err := Parse("notes", []byte(notesSkill))
	if err != nil {
		t.Fatal(err)
	}
	if s.Body != "# Notes\n\nWrite notes as the team does." {
		t.Errorf("body %q", s.Body)
	}
	if len(s.Servers) != 2 || s.Servers[0].Name != "everything" || s.Servers[0].Command != "mcp-server-everything" ||
		!slices.Equal(s.Servers[0].Args, []string{"stdio"}) || s.Servers[0].Env["LEVEL"] != "1" ||
		s.Servers[1].Name != "remote" || s.Servers[1].URL != "https://mcp.example.com/mcp" {
		t.Errorf("servers %+v", s.Servers)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, home, "skills/notes/SKILL.md", notesSkill)
	writeFile(t, home, "skills/notes/reference.md", "# Reference\n")
	writeFile(t, home, "skills/notes/scripts/fetch.sh", "echo fetch\n")
	writeFile(t, home, "skills/notes/.git/config", "hidden\n")
	writeFile(t, home, "skills/broken/SKILL.md", "---\nname: broken\ndescription: [\n---\n")
	writeFile(t, home, "skills/big/SKILL.md", "---\nname: big\ndescription: d\n---\n"+strings.Repeat("x", MaxSkillSize))
	writeFile(t, home, "skills/plain/SKILL.md", "---\nname: plain\ndescription: A plain skill.\n---\nDo it plainly.\n")
	outside := t.TempDir()
	writeFile(t, outside, "away/SKILL.md", "---\nname: away\ndescription: d\n---\n")
	if err := os.Symlink(filepath.Join(outside, "away"), filepath.Join(home, "skills", "away")); err != nil {
		t.Fatal(err)
	}

	got, errs := Load(home, []string{"notes", "broken", "gone", "big", "away", "plain"})
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"notes", "plain"}) {
		t.Errorf("loaded %q", names)
	}
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	want := []string{
		"skills/broken/SKILL.md:3: front matter:",
		"skills/gone/SKILL.md: skill gone is enabled but this file does not exist in the agent home " + home,
		"skills/big/SKILL.md: SKILL.md is 64.0 KiB, more than the 64.0 KiB a SKILL.md may hold",
		"skills/away/SKILL.md: it is reached through a symbolic link that leaves the agent home",
	}
	if len(msgs) != len(want) {
		t.Fatalf("problems %q", msgs)
	}
	for i := range want {
		if !strings.HasPrefix(msgs[i], want[i]) {
			t.Errorf("problem %d: %q, want it to start %q", i, msgs[i], want[i])
		}
	}
	if !errors.Is(errs[1], ErrNotFound) || errors.Is(errs[0], ErrNotFound) {
		t.Errorf("ErrNotFound: %v, %v", errors.Is(errs[1], ErrNotFound), errors.Is(errs[0], ErrNotFound))
	}

	notes := got[0]
	real, _ := filepath.EvalSymlinks(filepath.Join(home, "skills", "notes"))
	if notes.Dir != real {
		t.Errorf("dir %q, want %q", notes.Dir, real)
	}
	if !slices.Equal(notes.Files, []FileInfo{{"reference.md", 12}, {"scripts/fetch.sh", 11}}) {
		t.Errorf("files %+v", notes.Files)
	}

	// A home that does not exist has no skills; each enabled one is missing.
	got, errs = Load(filepath.Join(home, "nobody"), []string{"notes"})
	if len(got) != 0 || len(errs) != 1 || !errors.Is(errs[0], ErrNotFound) {
		t.Errorf("missing home: %v %v", got, errs)
	}
	// A name that cannot be a folder is refused before any file is read.
	if _, errs = Load(home, []string{"../notes"}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "is not a skill name") {
		t.Errorf("bad name: %v", errs)
	}

	present, err := Present(home)
	if err != nil || !slices.Equal(present, []string{"big", "broken", "notes", "plain"}) {
		t.Errorf("Present: %q %v", present, err)
	}
	if present, err := Present(filepath.Join(home, "nobody")); err != nil || len(present) != 0 {
		t.Errorf("Present of a missing home: %q %v", present, err)
	}
}

func TestLoadBoundsTheFileList(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, home, "skills/many/SKILL.md", "---\nname: many\ndescription: d\n---\n")
	for i := range MaxFiles + 20 {
		writeFile(t, home, "skills/many/data/"+strings.Repeat("f", 1+i%7)+string(rune('a'+i%26))+string(rune('a'+i/26)), "x")
	}
	got, errs := Load(home, []string{"many"})
	if len(errs) != 0 || len(got) != 1 {
		t.Fatalf("%v %v", got, errs)
	}
	if len(got[0].Files) != MaxFiles || !got[0].FilesCut {
		t.Errorf("%d files, cut %v", len(got[0].Files), got[0].FilesCut)
	}
	if !strings.Contains(got[0].Text(), "only the first 100 are listed") {
		t.Errorf("text does not say the list is cut:\n%s", got[0].Text())
	}
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, home, "skills/notes/SKILL.md", notesSkill)
	writeFile(t, home, "skills/notes/reference.md", "# Reference\n")
	writeFile(t, home, "skills/notes/sub/deep.md", "deep\n")
	writeFile(t, home, "skills/notes/big.txt", strings.Repeat("x", MaxFileSize+1))
	writeFile(t, home, "skills/notes/blob.bin", "a\x00b")
	writeFile(t, home, "secret.txt", "the home's own file\n")
	writeFile(t, home, "skills/other/SKILL.md", "---\nname: other\ndescription: d\n---\n")
	outside := t.TempDir()
	writeFile(t, outside, "passwd", "root:x:0:0\n")
	for link, to := range map[string]string{
		"out":     filepath.Join(outside, "passwd"),
		"up":      filepath.Join(home, "secret.txt"),
		"sibling": filepath.Join(home, "skills", "other", "SKILL.md"),
		"inside":  "sub/../reference.md", // relative: os.Root takes an absolute link for one that leaves
	} {
		if err := os.Symlink(to, filepath.Join(home, "skills", "notes", link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		file, want, err string
	}{
		{"reference.md", "# Reference\n", ""},
		{"./sub/../reference.md", "", "leaves the skill's folder (..)"},
		{"sub/deep.md", "deep\n", ""},
		{"inside", "# Reference\n", ""},
		{"../other/SKILL.md", "", "leaves the skill's folder (..)"},
		{"..", "", "leaves the skill's folder (..)"},
		{filepath.Join(home, "secret.txt"), "", "is an absolute path"},
		{"out", "", "goes through a symbolic link that leaves the skill's folder"},
		{"up", "", "goes through a symbolic link that leaves the skill's folder"},
		{"sibling", "", "goes through a symbolic link that leaves the skill's folder"},
		{"missing.md", "", "skill notes has no file missing.md"},
		{"sub", "", "sub is a folder"},
		{".", "", "is the skill's folder itself"},
		{"", "", "the file's path is empty"},
		{"big.txt", "", "big.txt is 256.0 KiB, more than the 256.0 KiB load_skill returns; read parts of it with read_file (skills/notes/big.txt)"},
		{"blob.bin", "", "blob.bin is not a text file"},
	} {
		got, err := ReadFile(home, "notes", tc.file)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %q, %v", tc.file, got, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.file, err, tc.err)
		}
	}
	if _, err := ReadFile(home, "ghost", "a.md"); err == nil || err.Error() != "skill ghost is not in the agent home" {
		t.Errorf("missing skill: %v", err)
	}
	if _, err := ReadFile(home, "..", "a.md"); err == nil || !strings.Contains(err.Error(), "is not a skill name") {
		t.Errorf("bad skill name: %v", err)
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, home, "skills/notes/SKILL.md", notesSkill)
	writeFile(t, home, "skills/notes/reference.md", "# Reference\n")
	got, errs := Load(home, []string{"notes"})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	text := got[0].Text()
	for _, want := range []string{
		"# Skill notes\n\n# Notes\n\nWrite notes as the team does.\n",
		"## Files of this skill\n\nskills/notes/ holds these files besides SKILL.md; read one with load_skill {\"name\": \"notes\", \"file\": \"PATH\"}:\n\n- reference.md (12 B)\n",
		"## MCP servers of this skill",
		"where config/mcporter.json configures them",
		"- everything: `mcporter list everything` lists its tools",
		"`mcporter call everything.TOOL key=value ...` calls one.",
		"- remote: `mcporter list remote`",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	plain, _ := Parse("plain", []byte("---\nname: plain\ndescription: d\n---\nJust this.\n"))
	if got := plain.Text(); got != "# Skill plain\n\nJust this.\n" {
		t.Errorf("plain text %q", got)
	}

	ins := Instructions([]*Skill{got[0], plain})
	want := "# Skills\n\nYou have skills: instructions for particular kinds of work, each in a folder skills/<name>/ of your home. " +
		"When a task is one a skill below is for, call load_skill with the skill's name before you start, and follow what it says.\n\n" +
		"- notes: Keeps the team's notes.\n- plain: d"
	if ins != want {
		t.Errorf("instructions:\n%s\nwant:\n%s", ins, want)
	}
	if Instructions(nil) != "" {
		t.Error("instructions without skills")
	}
}

// A named pipe in a skill's place is refused at once: opening it for reading would
// otherwise wait for a writer, and hold the turn's assembly.
func TestNamedPipesDoNotBlock(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, home, "skills/notes/SKILL.md", notesSkill)
	for _, p := range []string{"skills/pipe/SKILL.md", "skills/notes/pipe.md", "config/mcporter.json"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(home, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(filepath.Join(home, p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, errs := Load(home, []string{"pipe", "notes"})
	if len(got) != 1 || len(errs) != 1 || errs[0].Error() != "skills/pipe/SKILL.md: not a regular file" {
		t.Errorf("Load: %v %v", got, errs)
	}
	if _, err := ReadFile(home, "notes", "pipe.md"); err == nil || err.Error() != "pipe.md: not a regular file" {
		t.Errorf("ReadFile: %v", err)
	}
	if _, err := WriteMcporterConfig(home, got); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("WriteMcporterConfig: %v", err)
	}
}

// The front matter is bounded before the YAML parser reads it, whose memory grows with
// the square of the depth: depth counts blocks and flow collections alike; what is
// quoted, in a block scalar or in a comment does not nest.
func TestFrontMatterBounds(t *testing.T) {
	t.Parallel()
	fm := func(yml string) string { return "---\nname: notes\ndescription: d\n" + yml + "---\nbody\n" }
	var indented strings.Builder
	indented.WriteString("metadata:\n")
	for i := 1; i <= MaxFrontMatterDepth; i++ {
		indented.WriteString(strings.Repeat("  ", i) + "a:\n")
	}
	const deeper = "front matter nested deeper than 32 levels"
	for _, tc := range []struct {
		name string
		text string
		want string // the error; "" for none
	}{
		{"a skill", notesSkill, ""},
		// The root mapping is one level, and each list one more.
		{"flow at the bound", fm("metadata: " + strings.Repeat("[", MaxFrontMatterDepth-1) + strings.Repeat("]", MaxFrontMatterDepth-1) + "\n"), ""},
		{"flow past it", fm("metadata: " + strings.Repeat("[", MaxFrontMatterDepth) + strings.Repeat("]", MaxFrontMatterDepth) + "\n"), "skills/notes/SKILL.md:4: " + deeper},
		{"unclosed flow", fm("metadata: " + strings.Repeat("[", 63000) + "\n"), "skills/notes/SKILL.md:4: " + deeper},
		{"flow mappings", fm("metadata: " + strings.Repeat("{a: ", 40) + "b" + strings.Repeat("}", 40) + "\n"), "skills/notes/SKILL.md:4: " + deeper},
		{"flow over lines", fm("metadata:\n" + strings.Repeat("  [\n", 40)), "skills/notes/SKILL.md:"},
		{"indentation", fm(indented.String()), "skills/notes/SKILL.md:36: " + deeper},
		{"indentation at the bound", fm(strings.Join(strings.Split(indented.String(), "\n")[:MaxFrontMatterDepth], "\n") + "\n"), ""},
		{"sequences on a line", fm("metadata:\n  " + strings.Repeat("- ", 40) + "x\n"), "skills/notes/SKILL.md:5: " + deeper},
		// Each line goes on in the innermost sequence of the line before.
		{"sequences over lines", fm("metadata:\n  " + strings.Repeat("- ", 10) + "x\n" + strings.Repeat(" ", 20) + strings.Repeat("- ", 10) + "y\n" +
			strings.Repeat(" ", 38) + strings.Repeat("- ", 10) + "z\n" + strings.Repeat(" ", 56) + strings.Repeat("- ", 10) + "w\n"), "skills/notes/SKILL.md:8: " + deeper},
		{"complex keys", fm("metadata:\n  " + strings.Repeat("? ", 40) + "x\n"), deeper},
		{"blocks then flow", fm("metadata:\n  - a:\n      - " + strings.Repeat("[{b: ", 15) + "c" + strings.Repeat("}]", 15) + "\n"), "skills/notes/SKILL.md:6: " + deeper},
		// Brackets that are text do not nest.
		{"quoted", fm("metadata:\n  a: \"" + strings.Repeat("[", 100) + "\"\n  b: '" + strings.Repeat("{", 100) + "'\n"), ""},
		{"block scalar", fm("metadata: |\n" + strings.Repeat("  [[[[ - - - - ? ? ? : {{{{\n", 20)), ""},
		{"comment", fm("# " + strings.Repeat("[", 100) + "\nmetadata: x # " + strings.Repeat("- ", 100) + "\n"), ""},
		{"plain scalar", fm("metadata: a" + strings.Repeat("[", 100) + "\n"), ""},
		{"size", fm("metadata: \"" + strings.Repeat("x", MaxFrontMatterSize) + "\"\n"), "skills/notes/SKILL.md:1: the front matter is 16.0 KiB, more than the 16.0 KiB it may hold"},
		{"file size", fm("") + strings.Repeat("x", MaxSkillSize), "skills/notes/SKILL.md: SKILL.md is 64.0 KiB, more than the 64.0 KiB a SKILL.md may hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("notes", []byte(tc.text))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			var p *Problem
			if !errors.As(err, &p) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

// FuzzParse checks that no SKILL.md brings the parser down: a panic, or memory beyond the
// bounds, on text the agent can write would take the node with it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		notesSkill,
		"---\nname: notes\ndescription: d\n---\n",
		"---\nname: notes\ndescription: d\nmetadata: " + strings.Repeat("[", 5000) + "\n---\n",
		"---\nname: notes\ndescription: d\nmetadata:\n  " + strings.Repeat("- ", 5000) + "x\n---\n",
		"---\nname: notes\ndescription: d\nmetadata: {" + strings.Repeat("a: b, ", 100) + "}\n---\n",
		"---\nname: notes\ndescription: d\nmcp:\n  e:\n    command: x\n    cwd: ../../../../etc\n---\n",
		"---\na: &a [*a]\n---\n",
		"---\n? [a, {b: c}]\n: d\n---\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s, err := Parse("notes", data)
		runtime.ReadMemStats(&after)
		var p *Problem
		switch {
		case err != nil && !errors.As(err, &p):
			t.Fatalf("error %T %v is not a Problem", err, err)
		case err == nil && s.Name != "notes":
			t.Fatalf("skill %+v", s)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
			t.Fatalf("Parse allocated %d MB", grew>>20)
		}
	})
}

// goccy/go-yaml has panicked on malformed text before (its issues 274, 439, 479); a panic
// is a problem of the skill, not the node's end.
func TestGuardedRecovers(t *testing.T) {
	t.Parallel()
	err := guarded(func() error { panic("index out of range [1] with length 1") })
	if err == nil || err.Error() != "the YAML parser failed on it (index out of range [1] with length 1)" {
		t.Errorf("guarded: %v", err)
	}
}
