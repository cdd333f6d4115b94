package skills

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// readConfig decodes the home's mcporter configuration.
func readConfig(t *testing.T, home string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, McporterConfig))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v\n%s", McporterConfig, err, b)
	}
	return doc
}

func serverNames(doc map[string]any) []string {
	var names []string
	for k := range doc["mcpServers"].(map[string]any) {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func skill(t *testing.T, home, name, servers string) *Skill {
	t.Helper()
	writeFile(t, home, "skills/"+name+"/SKILL.md", "---\nname: "+name+"\ndescription: d\n"+servers+"---\nbody\n")
	got, errs := Load(home, []string{name})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return got[0]
}

func TestWriteMcporterConfig(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	notes := skill(t, home, "notes", "mcp:\n  everything:\n    command: mcp-server-everything\n    args: [stdio]\n    env: {LEVEL: debug}\n  local:\n    command: ./server.sh\n    cwd: bin\n")
	web := skill(t, home, "web", "mcp:\n  search:\n    url: https://mcp.example.com/mcp\n    headers: {Authorization: Bearer $TOKEN}\n  everything:\n    command: other-server\n")
	plain := skill(t, home, "plain", "")

	// No skill with servers and nothing written before: no file at all.
	if notes, err := WriteMcporterConfig(home, []*Skill{plain}); err != nil || len(notes) != 0 {
		t.Fatalf("%v %v", notes, err)
	}
	if _, err := os.Stat(filepath.Join(home, "config")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("config folder made for no server: %v", err)
	}

	got, err := WriteMcporterConfig(home, []*Skill{notes, web, plain})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "MCP server everything of skill web is not configured: skill notes declares a different server of that name") {
		t.Errorf("notes %q", got)
	}
	doc := readConfig(t, home)
	if names := serverNames(doc); !slices.Equal(names, []string{"everything", "local", "search"}) {
		t.Errorf("servers %q", names)
	}
	servers := doc["mcpServers"].(map[string]any)
	want := map[string]any{
		"description": "for skill notes (written by toolbus)",
		"command":     "env",
		"args":        []any{"-C", notes.Dir, "mcp-server-everything", "stdio"},
		"env":         map[string]any{"LEVEL": "debug"},
	}
	if !reflect.DeepEqual(servers["everything"], want) {
		t.Errorf("everything: %v\nwant %v", servers["everything"], want)
	}
	if args := servers["local"].(map[string]any)["args"]; !reflect.DeepEqual(args, []any{"-C", filepath.Join(notes.Dir, "bin"), "./server.sh"}) {
		t.Errorf("local args %v", args)
	}
	if s := servers["search"].(map[string]any); s["url"] != "https://mcp.example.com/mcp" || s["command"] != nil {
		t.Errorf("search %v", s)
	}

	// Written again unchanged: the files are left alone.
	st, _ := os.Stat(filepath.Join(home, McporterConfig))
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(home, McporterConfig), old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteMcporterConfig(home, []*Skill{notes, web, plain}); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(filepath.Join(home, McporterConfig)); !st2.ModTime().Equal(old) || st2.Size() != st.Size() {
		t.Errorf("rewritten without a change")
	}

	// The user adds a server and a key of their own, and changes one of toolbus's.
	doc["mcpServers"].(map[string]any)["mine"] = map[string]any{"command": "my-server"}
	doc["mcpServers"].(map[string]any)["search"] = map[string]any{"url": "https://mine.example.com/mcp"}
	doc["imports"] = []any{}
	b, _ := json.Marshal(doc)
	writeFile(t, home, McporterConfig, string(b))

	// web is disabled, notes stays: toolbus's search would go, but the user changed it, so
	// it is theirs now; everything and local stay; the user's own server and key stay.
	if got, err := WriteMcporterConfig(home, []*Skill{notes}); err != nil || len(got) != 0 {
		t.Fatalf("%q %v", got, err)
	}
	doc = readConfig(t, home)
	if names := serverNames(doc); !slices.Equal(names, []string{"everything", "local", "mine", "search"}) {
		t.Errorf("servers %q", names)
	}
	if doc["imports"] == nil || doc["mcpServers"].(map[string]any)["search"].(map[string]any)["url"] != "https://mine.example.com/mcp" {
		t.Errorf("the user's changes are gone: %v", doc)
	}

	// web enabled again: its search is not written over the user's.
	got, err = WriteMcporterConfig(home, []*Skill{notes, web})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !strings.HasPrefix(got[1], "MCP server search of skill web is not configured: config/mcporter.json has a server of that name that toolbus did not write") {
		t.Errorf("notes %q", got)
	}

	// Every skill disabled: toolbus's servers go, the user's stay, the record goes.
	if _, err := WriteMcporterConfig(home, nil); err != nil {
		t.Fatal(err)
	}
	doc = readConfig(t, home)
	if names := serverNames(doc); !slices.Equal(names, []string{"mine", "search"}) {
		t.Errorf("servers %q", names)
	}
	if _, err := os.Stat(filepath.Join(home, McporterRecord)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("record left: %v", err)
	}
}

func TestWriteMcporterConfigCleansUp(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	notes := skill(t, home, "notes", "mcp:\n  everything:\n    command: mcp-server-everything\n")
	if _, err := WriteMcporterConfig(home, []*Skill{notes}); err != nil {
		t.Fatal(err)
	}
	// Only toolbus's servers were there: with none left, neither file stays.
	if _, err := WriteMcporterConfig(home, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{McporterConfig, McporterRecord} {
		if _, err := os.Stat(filepath.Join(home, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestWriteMcporterConfigRefuses(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	notes := skill(t, home, "notes", "mcp:\n  everything:\n    command: mcp-server-everything\n")

	writeFile(t, home, McporterConfig, "{not json")
	if _, err := WriteMcporterConfig(home, []*Skill{notes}); err == nil || !strings.HasPrefix(err.Error(), "config/mcporter.json is not a JSON object") {
		t.Errorf("bad JSON: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(home, McporterConfig)); string(b) != "{not json" {
		t.Errorf("the user's file was changed: %q", b)
	}

	writeFile(t, home, McporterConfig, `{"mcpServers": [1]}`)
	if _, err := WriteMcporterConfig(home, []*Skill{notes}); err == nil || !strings.Contains(err.Error(), "mcpServers is not an object") {
		t.Errorf("bad mcpServers: %v", err)
	}

	// A config folder that links out of the home is not written through.
	if err := os.Remove(filepath.Join(home, McporterConfig)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(home, "config")); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(home, "config")); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteMcporterConfig(home, []*Skill{notes}); err == nil || !strings.Contains(err.Error(), "leaves the agent home") {
		t.Errorf("linked config folder: %v", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("written outside the home: %v", entries)
	}
}

// A stdio server's cwd stays in its skill's folder: "../../../../etc" once became
// `env -C /etc`. What leaves the folder, by "..", as an absolute path or through a
// symbolic link, leaves the skill out with a note that names its line.
func TestMCPCwdConfined(t *testing.T) {
	home := t.TempDir()
	outside := t.TempDir()
	writeFile(t, home, "skills/notes/bin/server.sh", "#!/bin/sh\n")
	dir := filepath.Join(home, "skills", "notes")
	for link, to := range map[string]string{
		"out":          outside,
		"in":           "bin",
		"gone-out":     filepath.Join(outside, "later"),
		"gone-in":      "build",
		"chain":        "gone-out",
		"bin/up":       "../..",
		"bin/sideways": "../../other",
	} {
		if err := os.Symlink(to, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cwd  string
		want string // the -C folder; "" when refused
		err  string
	}{
		{"", real, ""},
		{".", real, ""},
		{"bin", filepath.Join(real, "bin"), ""},
		{"./bin/../bin/", filepath.Join(real, "bin"), ""},
		{"build/out", filepath.Join(real, "build", "out"), ""}, // made later
		{"in", filepath.Join(real, "bin"), ""},
		{"gone-in/x", filepath.Join(real, "build", "x"), ""},
		{filepath.Join(dir, "bin"), filepath.Join(real, "bin"), ""},
		{"../../../../etc", "", "cwd ../../../../etc leaves the skill's folder (..)"},
		{"..", "", "cwd .. leaves the skill's folder (..)"},
		{"bin/../../other", "", "cwd bin/../../other leaves the skill's folder (..)"},
		{"/etc", "", "cwd /etc is not inside the skill's folder"},
		{filepath.Join(dir, "..", "other"), "", "is not inside the skill's folder"},
		{filepath.Join(dir, "out"), "", "is not inside the skill's folder"},
		{"out", "", "cwd out goes through a symbolic link that leaves the skill's folder"},
		{"out/sub/deeper", "", "cwd out/sub/deeper goes through a symbolic link that leaves the skill's folder"},
		{"gone-out", "", "cwd gone-out goes through a symbolic link that leaves the skill's folder"},
		{"chain/x", "", "cwd chain/x goes through a symbolic link that leaves the skill's folder"},
		{"bin/up", "", "cwd bin/up goes through a symbolic link that leaves the skill's folder"},
		{"bin/sideways", "", "cwd bin/sideways goes through a symbolic link that leaves the skill's folder"},
		{"bin/server.sh", "", "cwd bin/server.sh is a file, not a folder"},
	} {
		t.Run(tc.cwd, func(t *testing.T) {
			writeFile(t, home, "skills/notes/SKILL.md", "---\nname: notes\ndescription: d\nmcp:\n  local:\n    command: ./server.sh\n    cwd: '"+tc.cwd+"'\n---\n")
			got, errs := Load(home, []string{"notes"})
			if tc.want == "" {
				if len(got) != 0 || len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "skills/notes/SKILL.md:5: MCP server local: cwd ") ||
					!strings.Contains(errs[0].Error(), tc.err) {
					t.Fatalf("loaded %v, problems %v; want %q", got, errs, tc.err)
				}
				return
			}
			if len(errs) != 0 {
				t.Fatal(errs)
			}
			if _, err := WriteMcporterConfig(home, got); err != nil {
				t.Fatal(err)
			}
			args := readConfig(t, home)["mcpServers"].(map[string]any)["local"].(map[string]any)["args"]
			if !reflect.DeepEqual(args, []any{"-C", tc.want, "./server.sh"}) {
				t.Errorf("args %v, want -C %s", args, tc.want)
			}
		})
	}

	// A skill not read by Load (or whose folder changed since) is checked again when the
	// configuration is written: its server is left out, with a note.
	s := &Skill{Name: "notes", Dir: real, Servers: []Server{{Name: "local", Command: "x", Cwd: "../../../../etc"}, {Name: "fine", Command: "y", Cwd: "bin"}}}
	notes, err := WriteMcporterConfig(home, []*Skill{s})
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "MCP server local of skill notes is not configured: cwd ../../../../etc leaves the skill's folder (..)") {
		t.Errorf("notes %q", notes)
	}
	if names := serverNames(readConfig(t, home)); !slices.Equal(names, []string{"fine"}) {
		t.Errorf("servers %q", names)
	}

	// A home given relative to the working folder gives absolute folders all the same.
	writeFile(t, home, "skills/notes/SKILL.md", "---\nname: notes\ndescription: d\nmcp:\n  local:\n    command: x\n    cwd: bin\n---\n")
	t.Chdir(filepath.Dir(home))
	got, errs := Load(filepath.Base(home), []string{"notes"})
	if len(errs) != 0 || got[0].Dir != real {
		t.Fatalf("relative home: %v %v", got, errs)
	}
}
