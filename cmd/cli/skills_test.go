package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/toolsets"
)

// writeSkillFile writes a file of a home, making its folders.
func writeSkillFile(t *testing.T, home, name, text string) {
	t.Helper()
	p := filepath.Join(home, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// matches reports whether s matches the regular expression re.
func matches(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// toolNames are the names in a tools -json array (Responses format).
func toolNames(t *testing.T, out string) []string {
	t.Helper()
	var defs []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(out), &defs); err != nil {
		t.Fatalf("tools -json: %v\n%s", err, out)
	}
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	return names
}

// TestSkills enables skills with agent set, lists and shows them, sees load_skill in the
// agent's tools (and not in another's), and runs a turn that loads one.
func TestSkills(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, false)
	ctx := testContext(t)
	root := t.TempDir()
	home := filepath.Join(root, "ann")
	writeSkillFile(t, home, "skills/notes/SKILL.md", "---\nname: notes\ndescription: Keeps the team's notes.\nmcp:\n  everything:\n    command: mcp-server-everything\n    args: [stdio]\n---\nWrite short notes.\n")
	writeSkillFile(t, home, "skills/notes/style.md", "One idea a line.\n")
	writeSkillFile(t, home, "skills/broken/SKILL.md", "---\nname: broken\ndescription: d\nmcp:\n  x:\n    comand: y\n---\n")
	writeSkillFile(t, home, "skills/draft/SKILL.md", "---\nname: draft\ndescription: Not enabled yet.\n---\nLater.\n")

	// bargs are `toolbus <words> <bus flags> <rest...>`.
	bargs := func(words string, rest ...string) []string {
		return append(append(strings.Fields(words), "-server", rb.url, "-user", "ops", "-pass-file", rb.passFile), rest...)
	}

	// The turn node reads homes under root.
	node, err := actors.StartNode(ctx, actors.NodeConfig{
		Name: "skills1", Connect: func(name string) (*nats.Conn, error) { return rb.srv.Connect(name) },
		Categories: toolsets.Categories(), Turns: true, HomeRoot: root, Logger: actors.DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)

	code, out, errOut := cli(ctx, bargs("agent set", "-skill", "notes,broken", "-skill", "gone", "ann")...)
	if code != exitOK || !strings.Contains(errOut, "agent ann: profile stored (built-in tools only; skills notes, broken, gone)") {
		t.Fatalf("agent set: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli(ctx, bargs("agent set", "bob")...)
	if code != exitOK {
		t.Fatalf("agent set bob: exit %d\n%s%s", code, out, errOut)
	}

	// tools -json: load_skill for ann, whose profile enables skills; not for bob, nor for
	// ann's task turns.
	code, out, errOut = cli(ctx, bargs("tools", "-agent", "ann", "-json")...)
	if names := toolNames(t, out); code != exitOK || !slices.Contains(names, "load_skill") || !slices.Contains(names, "run_command") {
		t.Errorf("ann's tools (exit %d): %q\n%s", code, names, errOut)
	}
	code, out, errOut = cli(ctx, bargs("tools", "-agent", "bob", "-json")...)
	if names := toolNames(t, out); code != exitOK || slices.Contains(names, "load_skill") {
		t.Errorf("bob's tools (exit %d): %q\n%s", code, names, errOut)
	}
	code, out, _ = cli(ctx, bargs("tools", "-agent", "ann", "-kind", "task", "-json")...)
	if code != exitOK || strings.Contains(out, "load_skill") {
		t.Errorf("ann's task turn lists load_skill:\n%s", out)
	}

	// skills list: present and enabled, with problems.
	code, out, errOut = cli(ctx, bargs("skills list", "-agent", "ann", "-home-root", root)...)
	if code != exitOK {
		t.Fatalf("skills list: exit %d\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		`^SKILL +ENABLED +MCP SERVERS +DESCRIPTION$`,
		`^notes +yes +everything +Keeps the team's notes\.$`,
		`^broken +yes +- +PROBLEM skills/broken/SKILL\.md:6: front matter: unknown key "comand"`,
		`^gone +yes +- +PROBLEM skills/gone/SKILL\.md: skill gone is enabled but this file does not exist`,
		`^draft +no +- +Not enabled yet\.$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("skills list:\n%s", out)
	}
	for i, w := range want {
		if !matches(w, lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], w)
		}
	}
	if !strings.Contains(errOut, "agent ann, home "+home) {
		t.Errorf("skills list stderr: %s", errOut)
	}

	code, out, errOut = cli(ctx, bargs("skills list", "-agent", "ann", "-home-root", root, "-json")...)
	var doc struct {
		Agent       string       `json:"agent"`
		Home        string       `json:"home"`
		ProfileRead bool         `json:"profile_read"`
		Skills      []skillEntry `json:"skills"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &doc) != nil {
		t.Fatalf("skills list -json: exit %d\n%s%s", code, out, errOut)
	}
	if doc.Agent != "ann" || doc.Home != home || !doc.ProfileRead || len(doc.Skills) != 4 ||
		doc.Skills[0].Name != "notes" || !*doc.Skills[0].Enabled || !doc.Skills[0].Present || doc.Skills[0].Files != 1 ||
		!slices.Equal(doc.Skills[0].Servers, []string{"everything"}) || doc.Skills[2].Present || *doc.Skills[3].Enabled {
		t.Errorf("skills list -json:\n%s", out)
	}

	// Without -server no profile is read: what the home holds, ENABLED unknown.
	code, out, errOut = cli(ctx, "skills", "list", "-home", home)
	if code != exitOK || !strings.Contains(errOut, "no profile is read") || !matches(`(?m)^draft +\? +- +Not enabled yet\.$`, out) || strings.Contains(out, "gone") {
		t.Errorf("skills list without -server: exit %d\n%s%s", code, out, errOut)
	}

	// skills show: the text load_skill returns, a file, a broken skill.
	code, out, errOut = cli(ctx, "skills", "show", "-home", home, "notes")
	if code != exitOK || !strings.HasPrefix(out, "# Skill notes\n\nWrite short notes.\n") || !strings.Contains(out, "`mcporter list everything`") {
		t.Errorf("skills show: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = cli(ctx, "skills", "show", "-home", home, "-file", "style.md", "notes")
	if code != exitOK || out != "One idea a line.\n" {
		t.Errorf("skills show -file: exit %d %q", code, out)
	}
	code, _, errOut = cli(ctx, "skills", "show", "-home", home, "-file", "../broken/SKILL.md", "notes")
	if code != exitFailed || !strings.Contains(errOut, "leaves the skill's folder") {
		t.Errorf("skills show -file ..: exit %d %s", code, errOut)
	}
	code, _, errOut = cli(ctx, "skills", "show", "-home", home, "broken")
	if code != exitFailed || !strings.Contains(errOut, `toolbus: skills/broken/SKILL.md:6: front matter: unknown key "comand"`) {
		t.Errorf("skills show broken: exit %d %s", code, errOut)
	}
	code, _, errOut = cli(ctx, bargs("skills show", "-agent", "ann", "-home-root", root, "draft")...)
	if code != exitOK || !strings.Contains(errOut, "skill draft is not enabled for agent ann") {
		t.Errorf("skills show draft: exit %d %s", code, errOut)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"skills"}, "want a subcommand: list or show"},
		{[]string{"skills", "edit"}, `unknown subcommand "edit"`},
		{[]string{"skills", "show"}, "want one skill name"},
		{[]string{"skills", "show", "../x"}, "is not a skill name"},
		{[]string{"skills", "list", "-home", home, "-home-root", root}, "give one"},
		{[]string{"agent", "set", "-server", rb.url, "-f", "x.json", "-skill", "notes", "ann"}, "-f gives the whole document"},
	} {
		code, out, errOut := cli(ctx, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want usage error %q (stdout %q)", tc.args, code, errOut, tc.want, out)
		}
	}
	code, _, errOut = cli(ctx, bargs("agent set", "-skill", "no/slash", "ann")...)
	if code != exitFailed || !strings.Contains(errOut, "/skills/0") {
		t.Errorf("bad skill name: exit %d %s", code, errOut)
	}

	// A turn of ann: its instructions list notes, load_skill answers, the broken and the
	// missing skill are notes of its status, and notes' server is configured in the home.
	script := filepath.Join(t.TempDir(), "script.json")
	writeSkillFile(t, filepath.Dir(script), "script.json", `{"responses": [
		{"calls": [{"name": "load_skill", "arguments": "{\"name\": \"notes\"}"}, {"name": "load_skill", "arguments": "{\"name\": \"notes\", \"file\": \"style.md\"}"}]},
		{"text": "Loaded."}]}`)
	code, out, errOut = cli(ctx, bargs("run", "-agent", "ann", "-model", "script:"+script, "-json", "take a note")...)
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	var res struct {
		Status struct {
			Calls []struct {
				Label   string          `json:"label"`
				Details json.RawMessage `json:"details"`
			} `json:"calls"`
		} `json:"status"`
		Transcript []struct {
			Kind   string `json:"kind"`
			Output []struct {
				Text string `json:"text"`
			} `json:"output"`
		} `json:"transcript"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("run -json: %v\n%s", err, out)
	}
	var outputs []string
	for _, it := range res.Transcript {
		if it.Kind == "function_call_output" && len(it.Output) > 0 {
			outputs = append(outputs, it.Output[0].Text)
		}
	}
	if len(outputs) != 2 || !strings.HasPrefix(outputs[0], "# Skill notes\n\nWrite short notes.") || outputs[1] != "One idea a line.\n" {
		t.Errorf("load_skill outputs %q", outputs)
	}
	// The calls carry load_skill's labels and details, as a host's calls do.
	if c := res.Status.Calls; len(c) != 2 || !strings.HasPrefix(c[0].Label, "Loaded skill notes (") ||
		c[1].Label != "Read style.md of skill notes (17 B)" || !matches(`"file": ?"style.md"`, string(c[1].Details)) {
		t.Errorf("call records %+v", c)
	}
	if b, err := os.ReadFile(filepath.Join(home, "config", "mcporter.json")); err != nil || !strings.Contains(string(b), "mcp-server-everything") {
		t.Errorf("mcporter config after the turn: %s %v", b, err)
	}
}

// TestSkillsShowWithoutServer: without -server no profile is read, so skills show says
// that whether the skill is enabled is unknown, and a missing skill is not called enabled.
func TestSkillsShowWithoutServer(t *testing.T) {
	ctx := testContext(t)
	home := t.TempDir()
	writeSkillFile(t, home, "skills/notes/SKILL.md", "---\nname: notes\ndescription: Keeps notes.\n---\nWrite short notes.\n")
	code, out, errOut := cli(ctx, "skills", "show", "-home", home, "notes")
	if want := "toolbus: note: skill notes: enabled: unknown (no -server: the profile of agent default was not read)\n"; code != exitOK || errOut != want || !strings.HasPrefix(out, "# Skill notes\n") {
		t.Errorf("exit %d, stderr %q (want %q), stdout %q", code, errOut, want, out)
	}
	code, _, errOut = cli(ctx, "skills", "show", "-home", home, "nope")
	if want := "toolbus: skills/nope/SKILL.md: no skill nope in the agent home " + home + ": this file does not exist\n"; code != exitFailed || !strings.HasSuffix(errOut, want) || strings.Contains(errOut, "is enabled") {
		t.Errorf("missing skill: exit %d, stderr %q, want it to end %q", code, errOut, want)
	}
}
