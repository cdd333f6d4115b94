package computer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus/bustest"

	"github.com/toolbus/toolbus/internal/label"
	"github.com/toolbus/toolbus/internal/needs"
	"github.com/toolbus/toolbus/internal/testmain"
)

// Secrets in this process's environment, the node's here: no command may see them. Set
// once for the package (not with t.Setenv), so that the tests that look for them run in
// parallel.
const (
	testSecretVar = "TOOLBUS_TEST_SECRET"
	testSecret    = "hunter2"
	testAPIKey    = "sk-test-4f9a0c-not-a-real-key"
)

// parallelTests: the tests mostly wait on commands (kill graces, timeouts, sandboxes
// starting); the package took 4.5 s with go test's default (2 here) and 2.3 s with 8.
const parallelTests = 8

func TestMain(m *testing.M) {
	if err := errors.Join(os.Setenv(testSecretVar, testSecret), os.Setenv("OPENAI_API_KEY", testAPIKey)); err != nil {
		fmt.Fprintln(os.Stderr, "computer:", err)
		os.Exit(1)
	}
	testmain.Main(m, testmain.Config{Parallel: parallelTests, Done: func() error {
		// Once, after all tests, which run commands side by side: a cgroup of this
		// process still there is one a command left behind.
		if left := ownCgroups(testConfig.hostCgroups()); len(left) > 0 {
			return fmt.Errorf("cgroups left behind by the tests' commands: %v", left)
		}
		return nil
	}})
}

// testConfig keeps kill grace short so that stop paths finish quickly.
var testConfig = Config{KillGrace: 200 * time.Millisecond}

// progress records the progress labels of a call.
type progress struct {
	mu     sync.Mutex
	labels []string
}

func (p *progress) add(label string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.labels = append(p.labels, label)
}

func (p *progress) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.labels...)
}

func toolNamed(t testing.TB, cfg Config, name string) *toolbus.Tool {
	t.Helper()
	for _, tool := range Tools(cfg) {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

// run validates args against the tool's schema, as the category host does, then executes.
func run(t testing.TB, ctx context.Context, tool *toolbus.Tool, home string, args any) (toolbus.Result, error, *progress) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	if err := tool.Params.Validate(raw); err != nil {
		t.Fatalf("%s: args %s rejected by the schema: %v", tool.Name, raw, err)
	}
	p := &progress{}
	res, err := tool.Execute(ctx, toolbus.Call{
		Turn: "turn-1", ID: "call-1", Tool: tool.Name, Agent: "agent-1", Home: home,
		Args: raw, Progress: p.add,
	})
	return res, err, p
}

func details[T any](t testing.TB, res toolbus.Result) T {
	t.Helper()
	d, ok := label.DetailsOf[T](res.Details)
	if !ok {
		t.Fatalf("result has no %T details: %s", d, res.Details)
	}
	return d
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// escapes is a home with a secret next to it and links that point out of it.
type escapes struct {
	home, outside string
}

func newEscapes(t *testing.T) escapes {
	t.Helper()
	base := t.TempDir()
	s := escapes{home: filepath.Join(base, "home"), outside: filepath.Join(base, "outside")}
	writeFile(t, filepath.Join(s.outside, "secret.txt"), "secret\n")
	writeFile(t, filepath.Join(s.home, "sub", "dir", "file.txt"), "nested\n")
	for link, target := range map[string]string{
		"outlink":  s.outside,                              // directory outside
		"passwd":   filepath.Join(s.outside, "secret.txt"), // file outside
		"dangling": filepath.Join(s.outside, "missing.txt"),
		"inlink":   filepath.Join(s.home, "sub"), // stays inside
	} {
		if err := os.Symlink(target, filepath.Join(s.home, link)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestPathConfinement(t *testing.T) {
	t.Parallel()
	s := newEscapes(t)
	cases := []struct {
		name, path string
		wantErr    string // "" means the path is accepted
	}{
		{"parent", "../outside/secret.txt", "is outside the agent home"},
		{"nested parent", "sub/../../outside/secret.txt", "is outside the agent home"},
		{"absolute outside", filepath.Join(s.outside, "secret.txt"), "is outside the agent home"},
		{"absolute system", "/etc/passwd", "is outside the agent home"},
		{"symlink dir escape", "outlink/secret.txt", "symbolic link that points out of the home"},
		{"symlink file escape", "passwd", "symbolic link that points out of the home"},
		{"symlink escape, new file", "outlink/new.txt", "symbolic link that points out of the home"},
		{"dangling symlink", "dangling", "broken symbolic link"},
		{"nested", "sub/dir/file.txt", ""},
		{"absolute inside", filepath.Join(s.home, "sub", "dir", "file.txt"), ""},
		{"symlink inside", "inlink/dir/file.txt", ""},
		{"dot dot staying inside", "sub/dir/../dir/file.txt", ""},
	}
	// Each file tool gets the same table; run_command gets it through cwd.
	argsFor := map[string]func(p string) any{
		"read_file":  func(p string) any { return map[string]any{"path": p} },
		"write_file": func(p string) any { return map[string]any{"path": p, "content": "nested\n"} },
		"list_files": func(p string) any { return map[string]any{"path": filepath.Dir(p)} },
		"run_command": func(p string) any {
			return map[string]any{"command": "pwd", "cwd": filepath.Dir(p)}
		},
	}
	for _, toolName := range []string{"read_file", "write_file", "list_files", "run_command"} {
		tool := toolNamed(t, testConfig, toolName)
		for _, tc := range cases {
			t.Run(toolName+"/"+tc.name, func(t *testing.T) {
				if toolName == "run_command" {
					needs.Bwrap(t) // its commands run in the default sandbox
				}
				p := tc.path
				if (toolName == "list_files" || toolName == "run_command") && filepath.Dir(p) == "." {
					p = p + "/x" // the file itself is the directory under test
				}
				res, err, _ := run(t, t.Context(), tool, s.home, argsFor[toolName](p))
				if tc.wantErr == "" {
					if err != nil || res.IsError {
						t.Fatalf("want success, got err=%v result=%q", err, res.Text())
					}
					return
				}
				if err == nil {
					t.Fatalf("want error %q, got result %q", tc.wantErr, res.Text())
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %q does not say %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), s.home) {
					t.Errorf("error %q reveals the host path of the home", err)
				}
			})
		}
	}
	// Nothing was written outside the home.
	entries, err := os.ReadDir(s.outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("outside dir has %d entries, want only secret.txt", len(entries))
	}
	if b, _ := os.ReadFile(filepath.Join(s.outside, "secret.txt")); string(b) != "secret\n" {
		t.Errorf("secret.txt changed: %q", b)
	}
}

func TestHomeRoot(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cfg := testConfig
	cfg.HomeRoot = root
	tool := toolNamed(t, cfg, "write_file")
	args := json.RawMessage(`{"path":"a.txt","content":"x"}`)

	// Without Call.Home the home is HomeRoot/<agent>, created on first use.
	res, err := tool.Execute(t.Context(), toolbus.Call{Agent: "agent-7", Args: args, Progress: func(string) {}})
	if err != nil || res.IsError {
		t.Fatalf("write in derived home: %v %q", err, res.Text())
	}
	if b, err := os.ReadFile(filepath.Join(root, "agent-7", "a.txt")); err != nil || string(b) != "x" {
		t.Fatalf("file in derived home: %q, %v", b, err)
	}

	for _, tc := range []struct {
		name string
		call toolbus.Call
		want string
	}{
		{"home outside root", toolbus.Call{Agent: "a", Home: t.TempDir()}, "outside the home root"},
		{"agent id with slash", toolbus.Call{Agent: "../evil"}, "cannot name a home directory"},
		{"no agent", toolbus.Call{}, "cannot name a home directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.call.Args, tc.call.Progress = args, func(string) {}
			_, err := tool.Execute(t.Context(), tc.call)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}

	// Without HomeRoot a call needs a home.
	_, err = toolNamed(t, testConfig, "write_file").Execute(t.Context(), toolbus.Call{Agent: "a", Args: args})
	if err == nil || !strings.Contains(err.Error(), "no agent home") {
		t.Fatalf("err = %v, want a missing-home error", err)
	}
}

func numberedLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestReadFileOffsetLimit(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "ten.txt"), numberedLines(10))
	writeFile(t, filepath.Join(home, "noeol.txt"), "a\nb")
	tool := toolNamed(t, testConfig, "read_file")
	cases := []struct {
		name                string
		args                map[string]any
		first, last, next   int
		total               int
		wantText, wantNotIn string
	}{
		{"whole", map[string]any{"path": "ten.txt"}, 1, 10, 0, 10, "     1\tline 1\n", ""},
		{"offset", map[string]any{"path": "ten.txt", "offset": 4}, 4, 10, 0, 10, "     4\tline 4", "line 3\n"},
		{"limit", map[string]any{"path": "ten.txt", "limit": 3}, 1, 3, 4, 10, "[7 more lines; continue with offset=4]", "line 4"},
		{"offset and limit", map[string]any{"path": "ten.txt", "offset": 5, "limit": 2}, 5, 6, 7, 10, "ten.txt: lines 5-6 of 10", "line 7"},
		{"last line", map[string]any{"path": "ten.txt", "offset": 10}, 10, 10, 0, 10, "line 10", "line 9"},
		{"no final newline", map[string]any{"path": "noeol.txt"}, 1, 2, 0, 2, "     2\tb", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err, _ := run(t, t.Context(), tool, home, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			d := details[ReadDetails](t, res)
			if d.FirstLine != tc.first || d.LastLine != tc.last || d.NextOffset != tc.next || d.TotalLines != tc.total {
				t.Errorf("details = %+v, want lines %d-%d of %d, next %d", d, tc.first, tc.last, tc.total, tc.next)
			}
			if !strings.Contains(res.Text(), tc.wantText) {
				t.Errorf("text %q lacks %q", res.Text(), tc.wantText)
			}
			if tc.wantNotIn != "" && strings.Contains(res.Text(), tc.wantNotIn) {
				t.Errorf("text %q holds %q", res.Text(), tc.wantNotIn)
			}
		})
	}
}

func TestReadFileRefusals(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "bin.dat"), "ELF\x00\x01\x02")
	writeFile(t, filepath.Join(home, "latin1.txt"), "caf\xe9\n")
	writeFile(t, filepath.Join(home, "big.txt"), strings.Repeat("x", 2000))
	writeFile(t, filepath.Join(home, "ten.txt"), numberedLines(10))
	writeFile(t, filepath.Join(home, "empty.txt"), "")
	if err := os.Mkdir(filepath.Join(home, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig
	cfg.MaxFileSize = 1000
	tool := toolNamed(t, cfg, "read_file")
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"binary", map[string]any{"path": "bin.dat"}, "looks like a binary file"},
		{"not utf-8", map[string]any{"path": "latin1.txt"}, "looks like a binary file"},
		{"directory", map[string]any{"path": "dir"}, "dir is a directory, not a file; list it with list_files"},
		{"home", map[string]any{"path": "."}, "the home directory is a directory"},
		{"too big", map[string]any{"path": "big.txt"}, "larger than the 1000 B read_file limit"},
		{"missing", map[string]any{"path": "nope.txt"}, "nope.txt does not exist"},
		{"offset past end", map[string]any{"path": "ten.txt", "offset": 11}, "offset 11 is past the end of ten.txt, which has 10 lines"},
		{"file as parent", map[string]any{"path": "ten.txt/x"}, "a parent of it is a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err, _ := run(t, t.Context(), tool, home, tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v (result %q), want %q", err, res.Text(), tc.want)
			}
		})
	}
	res, err, _ := run(t, t.Context(), tool, home, map[string]any{"path": "empty.txt"})
	if err != nil || !strings.Contains(res.Text(), "empty.txt is empty (0 lines)") {
		t.Fatalf("empty file: %v %q", err, res.Text())
	}
}

func TestReadFileOutputCap(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "long.txt"), numberedLines(1000))
	writeFile(t, filepath.Join(home, "wide.txt"), strings.Repeat("é", 3000)+"\nend\n")
	cfg := testConfig
	cfg.MaxOutput = 1024
	tool := toolNamed(t, cfg, "read_file")

	res, err, _ := run(t, t.Context(), tool, home, map[string]any{"path": "long.txt"})
	if err != nil {
		t.Fatal(err)
	}
	d := details[ReadDetails](t, res)
	if !d.Truncated || d.NextOffset != d.LastLine+1 || d.LastLine < 10 || d.LastLine >= 1000 {
		t.Fatalf("details = %+v, want a read cut by the output limit", d)
	}
	if want := fmt.Sprintf("continue with offset=%d", d.NextOffset); !strings.Contains(res.Text(), want) {
		t.Errorf("text lacks %q", want)
	}
	if len(res.Text()) > cfg.MaxOutput+200 {
		t.Errorf("text is %d bytes, limit %d", len(res.Text()), cfg.MaxOutput)
	}

	// The next read continues where the cut fell.
	res, err, _ = run(t, t.Context(), tool, home, map[string]any{"path": "long.txt", "offset": d.NextOffset, "limit": 1})
	if err != nil || !strings.Contains(res.Text(), fmt.Sprintf("\tline %d", d.NextOffset)) {
		t.Fatalf("continuation: %v %q", err, res.Text())
	}

	// A line longer than the cap is cut on a rune boundary and says so.
	res, err, _ = run(t, t.Context(), tool, home, map[string]any{"path": "wide.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Text(), "[line cut:") || !strings.Contains(res.Text(), "\tend") {
		t.Errorf("wide line not cut as expected: %q", res.Text())
	}
	if !json.Valid(res.Details) || strings.ContainsRune(res.Text(), '\uFFFD') {
		t.Errorf("a rune was split: %q", res.Text())
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	write := toolNamed(t, testConfig, "write_file")
	read := toolNamed(t, testConfig, "read_file")

	res, err, _ := run(t, t.Context(), write, home, map[string]any{"path": "notes/2024/today.md", "content": "one\ntwo\n"})
	if err != nil {
		t.Fatal(err)
	}
	d := details[WriteDetails](t, res)
	if !d.Created || d.Lines != 2 || d.Bytes != 8 || d.Path != "notes/2024/today.md" {
		t.Errorf("write details = %+v", d)
	}
	if got := write.CompletedLabel(mustJSON(t, map[string]any{"path": "notes/2024/today.md", "content": "one\ntwo\n"}), res); got != "Wrote 2 lines to notes/2024/today.md" {
		t.Errorf("completed label = %q", got)
	}

	res, err, _ = run(t, t.Context(), write, home, map[string]any{"path": "notes/2024/today.md", "content": "three", "append": true})
	if err != nil {
		t.Fatal(err)
	}
	if d := details[WriteDetails](t, res); d.Created || !d.Append || d.Size != 13 {
		t.Errorf("append details = %+v", d)
	}

	res, err, _ = run(t, t.Context(), read, home, map[string]any{"path": "notes/2024/today.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := "notes/2024/today.md: lines 1-3 of 3\n     1\tone\n     2\ttwo\n     3\tthree"
	if res.Text() != want {
		t.Errorf("read back:\n%s\nwant:\n%s", res.Text(), want)
	}

	// Replacing truncates.
	if _, err, _ := run(t, t.Context(), write, home, map[string]any{"path": "notes/2024/today.md", "content": "new\n"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(home, "notes/2024/today.md")); string(b) != "new\n" {
		t.Errorf("after replace: %q", b)
	}
}

func TestWriteFileRefusals(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "full.txt"), strings.Repeat("x", 90))
	if err := os.Mkdir(filepath.Join(home, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig
	cfg.MaxFileSize = 100
	tool := toolNamed(t, cfg, "write_file")
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"directory", map[string]any{"path": "dir", "content": "x"}, "dir is a directory"},
		{"home itself", map[string]any{"path": ".", "content": "x"}, "names the home directory itself"},
		{"too big", map[string]any{"path": "a.txt", "content": strings.Repeat("y", 101)}, "larger than the 100 B write_file limit"},
		{"append past limit", map[string]any{"path": "full.txt", "content": strings.Repeat("y", 11), "append": true}, "would pass the 100 B file limit"},
		{"parent is a file", map[string]any{"path": "full.txt/x", "content": "x"}, "a parent of it is a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err, _ := run(t, t.Context(), tool, home, tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(home, "a.txt")); !os.IsNotExist(err) {
		t.Errorf("a refused write created a.txt: %v", err)
	}
}

func TestListFiles(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "b.txt"), "bb")
	writeFile(t, filepath.Join(home, "a.txt"), "a")
	writeFile(t, filepath.Join(home, "src", "main.go"), "package main\n")
	writeFile(t, filepath.Join(home, "src", "lib", "lib.go"), "package lib\n")
	if err := os.Symlink("src/main.go", filepath.Join(home, "link")); err != nil {
		t.Fatal(err)
	}
	tool := toolNamed(t, testConfig, "list_files")
	paths := func(d ListDetails) []string {
		var out []string
		for _, e := range d.Entries {
			out = append(out, e.Path)
		}
		return out
	}
	cases := []struct {
		name      string
		args      map[string]any
		want      []string
		truncated bool
		text      string
	}{
		{"home", map[string]any{}, []string{"a.txt", "b.txt", "link", "src"}, false, "\nsrc/"},
		{"subdir", map[string]any{"path": "src"}, []string{"src/lib", "src/main.go"}, false, "src/main.go  (13 B)"},
		{"recursive", map[string]any{"recursive": true}, []string{"a.txt", "b.txt", "link", "src", "src/lib", "src/lib/lib.go", "src/main.go"}, false, "link -> src/main.go"},
		{"recursive subdir", map[string]any{"path": "src", "recursive": true}, []string{"src/lib", "src/lib/lib.go", "src/main.go"}, false, "3 entries under src"},
		{"max entries", map[string]any{"max_entries": 2}, []string{"a.txt", "b.txt"}, true, "[2 more entries not shown"},
		{"max entries recursive", map[string]any{"recursive": true, "max_entries": 3}, []string{"a.txt", "b.txt", "link"}, true, "listing stopped after 3 entries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err, _ := run(t, t.Context(), tool, home, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			d := details[ListDetails](t, res)
			if got := paths(d); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("entries = %v, want %v", got, tc.want)
			}
			if d.Truncated != tc.truncated {
				t.Errorf("truncated = %v, want %v", d.Truncated, tc.truncated)
			}
			if !strings.Contains(res.Text(), tc.text) {
				t.Errorf("text %q lacks %q", res.Text(), tc.text)
			}
		})
	}
	res, err, _ := run(t, t.Context(), tool, home, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if got := tool.CompletedLabel(json.RawMessage(`{}`), res); got != "Listed 4 entries in the home directory" {
		t.Errorf("completed label %q", got)
	}
	if _, err, _ := run(t, t.Context(), tool, home, map[string]any{"path": "a.txt"}); err == nil || !strings.Contains(err.Error(), "is a file, not a directory") {
		t.Errorf("listing a file: err = %v", err)
	}
	empty := t.TempDir()
	if res, err, _ := run(t, t.Context(), tool, empty, map[string]any{}); err != nil || res.Text() != "The home directory is empty." {
		t.Errorf("empty home: %v %q", err, res.Text())
	}
}

func TestRunCommand(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			testRunCommand(t, mode)
		})
	}
}

func testRunCommand(t *testing.T, mode SandboxMode) {
	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, "afile"), "x")
	tool := toolNamed(t, inMode(t, mode), "run_command")
	// A shell killed by a signal: bare, the host sees the signal; bubblewrap reports
	// it the way shells do, as exit code 128+n.
	signal := struct {
		exit         int
		signal, want string
	}{-1, "SIGKILL", "Killed by signal SIGKILL"}
	if mode == SandboxBwrap {
		signal.exit, signal.signal, signal.want = 137, "", "Exit code 137"
	}
	cases := []struct {
		name     string
		args     map[string]any
		exit     int
		isError  bool
		signal   string
		want     string // in the text
		wantNot  string
		exactOut string // the output section, when set
	}{
		{name: "ok", args: map[string]any{"command": "echo hello"}, want: "Exit code 0", exactOut: "hello"},
		{name: "stderr and exit code", args: map[string]any{"command": "echo out; echo err >&2; exit 3"}, exit: 3, isError: true, want: "Exit code 3", exactOut: "out\nerr"},
		{name: "no output", args: map[string]any{"command": "true"}, want: "(no output)"},
		{name: "cwd", args: map[string]any{"command": "pwd", "cwd": "sub"}, exactOut: filepath.Join(home, "sub")},
		{name: "home", args: map[string]any{"command": "pwd; echo $HOME"}, exactOut: home + "\n" + home},
		{name: "minimal env", args: map[string]any{"command": "env"}, want: "LANG=C.UTF-8", wantNot: testSecret},
		{name: "no stdin", args: map[string]any{"command": "cat"}, want: "(no output)"},
		{name: "signal", args: map[string]any{"command": "kill -KILL $$"}, exit: signal.exit, isError: true, signal: signal.signal, want: signal.want},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err, _ := run(t, t.Context(), tool, home, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			d := details[CommandDetails](t, res)
			if d.ExitCode != tc.exit || res.IsError != tc.isError || d.Signal != tc.signal {
				t.Errorf("exit %d error %v signal %q, want %d %v %q (%q)", d.ExitCode, res.IsError, d.Signal, tc.exit, tc.isError, tc.signal, res.Text())
			}
			text := res.Text()
			if tc.want != "" && !strings.Contains(text, tc.want) {
				t.Errorf("text %q lacks %q", text, tc.want)
			}
			if tc.wantNot != "" && strings.Contains(text, tc.wantNot) {
				t.Errorf("text %q holds %q", text, tc.wantNot)
			}
			if tc.exactOut != "" {
				_, out, _ := strings.Cut(text, "Output (stdout and stderr):\n")
				if out != tc.exactOut {
					t.Errorf("output %q, want %q", out, tc.exactOut)
				}
			}
		})
	}
	for _, tc := range []struct{ cwd, want string }{
		{"..", "is outside the agent home"},
		{"/tmp", "is outside the agent home"},
		{"afile", "cwd afile is not a directory"},
		{"nope", "nope does not exist"},
	} {
		if _, err, _ := run(t, t.Context(), tool, home, map[string]any{"command": "pwd", "cwd": tc.cwd}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cwd %q: err = %v, want %q", tc.cwd, err, tc.want)
		}
	}
}

func TestRunCommandOutputCap(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	cfg := testConfig
	cfg.MaxOutput = 2000
	tool := toolNamed(t, cfg, "run_command")
	// 200 000 bytes between a first and a last line.
	cmd := `echo FIRST; i=0; while [ $i -lt 2000 ]; do printf '%099d\n' $i; i=$((i+1)); done; echo LAST`
	res, err, _ := run(t, t.Context(), tool, t.TempDir(), map[string]any{"command": cmd})
	if err != nil {
		t.Fatal(err)
	}
	d := details[CommandDetails](t, res)
	text := res.Text()
	if !strings.Contains(text, "FIRST\n") || !strings.HasSuffix(text, "LAST") {
		t.Errorf("head or tail lost:\n%s", text)
	}
	if d.OutputBytes != 6+2000*100+5 || d.OutputCut <= 0 {
		t.Errorf("details %+v", d)
	}
	if want := fmt.Sprintf("of output cut (%d bytes)", d.OutputCut); !strings.Contains(text, want) {
		t.Errorf("text lacks %q", want)
	}
	if len(text) > cfg.MaxOutput+200 {
		t.Errorf("text is %d bytes for a %d limit", len(text), cfg.MaxOutput)
	}
}

// alive reports whether pid is a live process; a zombie is dead, whoever reaps it.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}

// waitFor waits until the command has created file.
func waitFor(t *testing.T, file string) {
	t.Helper()
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		_, err := os.Stat(file)
		return err
	})
}

func TestRunCommandCancelKillsProcessTree(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			home := t.TempDir()
			tool := toolNamed(t, inMode(t, mode), "run_command")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type outcome struct {
				res toolbus.Result
				err error
			}
			done := make(chan outcome, 1)
			m := newMarker()
			go func() {
				// The inner sh makes the background sleep a grandchild of the command's shell.
				res, err, _ := run(t, ctx, tool, home, map[string]any{
					"command": fmt.Sprintf(`sh -c 'sleep %s & touch started; sleep %s'`, m, m),
				})
				done <- outcome{res, err}
			}()
			waitFor(t, filepath.Join(home, "started"))
			bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error { return sleepers(m, 2) })
			cancel()
			o := <-done
			if o.err != nil {
				t.Fatal(o.err)
			}
			d := details[CommandDetails](t, o.res)
			if !d.Cancelled || d.TimedOut || !o.res.IsError || !strings.Contains(o.res.Text(), "the call was cancelled") {
				t.Errorf("result %q, details %+v", o.res.Text(), d)
			}
			noneLeft(t, m)
		})
	}
}

func TestRunCommandTimeoutKillsStubbornTree(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			home := t.TempDir()
			cfg := inMode(t, mode)
			cfg.MaxCommandTimeout = time.Second
			tool := toolNamed(t, cfg, "run_command")
			m := newMarker()
			// The grandchild ignores SIGTERM, so only the SIGKILL after the grace period stops
			// it; the timeout asked for is above the maximum and gets capped.
			res, err, _ := run(t, t.Context(), tool, home, map[string]any{
				"command":         fmt.Sprintf(`sh -c 'trap "" TERM; sleep %s & touch started; wait'`, m),
				"timeout_seconds": 60,
			})
			if err != nil {
				t.Fatal(err)
			}
			d := details[CommandDetails](t, res)
			if !d.TimedOut || d.Cancelled || !d.TimeoutCapped || d.TimeoutMS != 1000 || !res.IsError {
				t.Errorf("details %+v", d)
			}
			for _, want := range []string{"Timed out after 1.0 s", "capped at 1.0 s"} {
				if !strings.Contains(res.Text(), want) {
					t.Errorf("text %q lacks %q", res.Text(), want)
				}
			}
			if got := tool.CompletedLabel(mustJSON(t, map[string]any{"command": "sleep"}), res); !strings.HasPrefix(got, "Timed out running `sleep` after") {
				t.Errorf("label %q", got)
			}
			if _, err := os.Stat(filepath.Join(home, "started")); err != nil {
				t.Errorf("the command never started its sleep: %v", err)
			}
			noneLeft(t, m)
		})
	}
}

func TestRunCommandBackgroundProcessesDoNotOutliveIt(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			home := t.TempDir()
			tool := toolNamed(t, inMode(t, mode), "run_command")
			for _, cmd := range []string{
				`sleep %s >/dev/null 2>&1 & echo started`, // output detached
				`sleep %s & echo started`,                 // still holds the output pipe
			} {
				m := newMarker()
				cmd = fmt.Sprintf(cmd, m)
				res, err, _ := run(t, t.Context(), tool, home, map[string]any{"command": cmd})
				if err != nil {
					t.Fatal(err)
				}
				if d := details[CommandDetails](t, res); d.ExitCode != 0 || !strings.HasSuffix(res.Text(), "started") {
					t.Errorf("%s: %q", cmd, res.Text())
				}
				noneLeft(t, m)
			}
		})
	}
}

func TestRunCommandProgress(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	tool := toolNamed(t, testConfig, "run_command")
	res, err, p := run(t, t.Context(), tool, t.TempDir(), map[string]any{"command": "echo tick; sleep 2.2"})
	if err != nil || res.IsError {
		t.Fatalf("%v %q", err, res.Text())
	}
	labels := p.all()
	if len(labels) < 1 || len(labels) > 3 {
		t.Fatalf("progress labels %q: want one or two, one a second", labels)
	}
	if want := "Running `echo tick; sleep 2.2`: "; !strings.HasPrefix(labels[0], want) || !strings.HasSuffix(labels[0], "5 B of output") {
		t.Errorf("label %q", labels[0])
	}
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestToolContract(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "notes.md"), "a\nb\nc\n")
	samples := map[string]struct {
		args              map[string]any
		running, finished string
	}{
		"list_files":  {map[string]any{"path": "."}, "Listing the home directory", "Listed 1 entry in the home directory"},
		"read_file":   {map[string]any{"path": "notes.md"}, "Reading notes.md", "Read 3 lines of notes.md"},
		"write_file":  {map[string]any{"path": "out/x.md", "content": "hi\n"}, "Writing out/x.md", "Wrote 1 line to out/x.md"},
		"run_command": {map[string]any{"command": "exit 0"}, "Running `exit 0`", "Ran `exit 0` (exit 0)"},
	}
	wantMode := map[string]struct {
		mode                  toolbus.Mode
		readOnly, destructive bool
	}{
		"list_files":  {toolbus.Parallel, true, false},
		"read_file":   {toolbus.Parallel, true, false},
		"write_file":  {toolbus.Sequential, false, true},
		"run_command": {toolbus.Sequential, false, true},
	}
	tools := Tools(testConfig)
	if len(tools) != len(samples) {
		t.Fatalf("%d tools, want %d", len(tools), len(samples))
	}
	for _, tool := range tools {
		t.Run(tool.Name, func(t *testing.T) {
			if tool.Name == "run_command" {
				needs.Bwrap(t) // its commands run in the default sandbox
			}
			s, ok := samples[tool.Name]
			if !ok {
				t.Fatalf("no sample for %s", tool.Name)
			}
			if tool.Category != Category || tool.Description == "" {
				t.Errorf("category %q, description %q", tool.Category, tool.Description)
			}
			if m := wantMode[tool.Name]; tool.Mode != m.mode || tool.ReadOnly != m.readOnly || tool.Destructive != m.destructive {
				t.Errorf("mode %v read-only %v destructive %v", tool.Mode, tool.ReadOnly, tool.Destructive)
			}
			raw := mustJSON(t, s.args)
			if got := tool.ActivityLabel(raw); got != s.running {
				t.Errorf("activity label %q, want %q", got, s.running)
			}
			res, err, _ := run(t, t.Context(), tool, home, s.args)
			if err != nil || res.IsError {
				t.Fatalf("%v %q", err, res.Text())
			}
			if got := tool.CompletedLabel(raw, res); !strings.HasPrefix(got, s.finished) {
				t.Errorf("completed label %q, want prefix %q", got, s.finished)
			}
			// A failed call gets a label too.
			if got := tool.CompletedLabel(raw, toolbus.ErrorResult("boom")); !strings.HasPrefix(got, "Could not") {
				t.Errorf("failure label %q", got)
			}
		})
	}
}

func TestSchemasRejectBadArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ tool, args string }{
		{"read_file", `{}`},
		{"read_file", `{"path":"a","offset":0}`},
		{"read_file", `{"path":"a","limit":"ten"}`},
		{"write_file", `{"path":"a"}`},
		{"list_files", `{"max_entries":0}`},
		{"list_files", `{"max_entries":100000}`},
		{"run_command", `{"command":""}`},
		{"run_command", `{"command":"ls","timeout_seconds":0}`},
	} {
		tool := toolNamed(t, testConfig, tc.tool)
		if err := tool.Params.Validate(json.RawMessage(tc.args)); err == nil {
			t.Errorf("%s accepted %s", tc.tool, tc.args)
		}
	}
}

func TestCapture(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limit  int
		writes []string
		want   string
		cut    int64
	}{
		{"fits", 10, []string{"abc", "def"}, "abcdef", 0},
		{"exactly", 6, []string{"abc", "def"}, "abcdef", 0},
		{"head and tail", 6, []string{"abcdefghij"}, "abc\n[… 4 B of output cut (4 bytes) …]\nhij", 4},
		{"many small writes", 6, []string{"a", "b", "c", "d", "e", "f", "g", "h"}, "abc\n[… 2 B of output cut (2 bytes) …]\nfgh", 2},
		{"line aligned", 16, []string{"abcdef\n", strings.Repeat("X", 20) + "\n", "z\ntail12\n"}, "abcdef\n[… 23 B of output cut (23 bytes) …]\ntail12\n", 23},
		{"line too far to align", 16, []string{"ab\ncdefgh", strings.Repeat("X", 20), "tail12\nz"}, "ab\ncdefg\n[… 21 B of output cut (21 bytes) …]\ntail12\nz", 21},
		{"runes", 8, []string{"ééééé", "xxxx", "ééééé"}, "éé\n[… 16 B of output cut (16 bytes) …]\néé", 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCapture(tc.limit)
			for _, w := range tc.writes {
				c.Write([]byte(w))
			}
			got, cut := c.Output()
			if got != tc.want || cut != tc.cut {
				t.Errorf("got %q cut %d, want %q cut %d", got, cut, tc.want, tc.cut)
			}
		})
	}
}

func BenchmarkResolve(b *testing.B) {
	home := b.TempDir()
	writeFile(b, filepath.Join(home, "src", "pkg", "file.go"), "package pkg\n")
	h, err := testConfig.withDefaults().openHome(toolbus.Call{Home: home})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	b.Run("baseline=Join+Stat", func(b *testing.B) {
		for b.Loop() {
			if _, err := os.Stat(filepath.Join(home, "src/pkg/file.go")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("resolve", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.resolve("src/pkg/file.go"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkReadFile(b *testing.B) {
	home := b.TempDir()
	writeFile(b, filepath.Join(home, "notes.md"), numberedLines(500))
	tool := toolNamed(b, testConfig, "read_file")
	call := toolbus.Call{Home: home, Args: json.RawMessage(`{"path":"notes.md"}`), Progress: func(string) {}}
	b.Run("baseline=os.ReadFile", func(b *testing.B) {
		for b.Loop() {
			if _, err := os.ReadFile(filepath.Join(home, "notes.md")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read_file", func(b *testing.B) {
		for b.Loop() {
			if _, err := tool.Execute(b.Context(), call); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkRunCommand(b *testing.B) {
	home := b.TempDir()
	call := toolbus.Call{Home: home, Args: json.RawMessage(`{"command":"true"}`), Progress: func(string) {}}
	b.Run("baseline=exec.Command", func(b *testing.B) {
		for b.Loop() {
			if err := execTrue(home); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, mode := range []SandboxMode{SandboxOff, SandboxBwrap} {
		b.Run("run_command/sandbox="+string(mode), func(b *testing.B) {
			tool := toolNamed(b, inMode(b, mode), "run_command")
			for b.Loop() {
				if _, err := tool.Execute(b.Context(), call); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// execTrue is the benchmark baseline: the same shell command with nothing around it.
func execTrue(dir string) error {
	cmd := exec.Command("/bin/sh", "-c", "true")
	cmd.Dir = dir
	return cmd.Run()
}

func TestRunCommandCancelledBeforeStart(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	tool := toolNamed(t, testConfig, "run_command")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	args := map[string]any{"command": "sleep 30"}
	res, err, _ := run(t, ctx, tool, t.TempDir(), args)
	if err != nil {
		t.Fatal(err)
	}
	d := details[CommandDetails](t, res)
	if !d.Cancelled || !res.IsError || !strings.Contains(res.Text(), "not started") {
		t.Errorf("result %q, details %+v", res.Text(), d)
	}
	raw, _ := json.Marshal(args)
	if got := tool.CompletedLabel(raw, res); !strings.HasPrefix(got, "Stopped `sleep 30` after ") {
		t.Errorf("label %q", got)
	}
}
