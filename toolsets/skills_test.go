package toolsets

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/toolsets/skills"
)

// writeHomeFile writes a file of an agent home, making its folders.
func writeHomeFile(t *testing.T, home, name, text string) {
	t.Helper()
	p := filepath.Join(home, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// skillHome is a home root with agent ann's skills: notes (with an MCP server and a
// file), broken (bad YAML on line 3) and plain.
func skillHome(t *testing.T) (root, home string) {
	t.Helper()
	root = t.TempDir()
	home = filepath.Join(root, "ann")
	writeHomeFile(t, home, "skills/notes/SKILL.md", "---\nname: notes\ndescription: Keeps the team's notes.\nmcp:\n  everything:\n    command: mcp-server-everything\n    args: [stdio]\n---\nWrite notes.\n")
	writeHomeFile(t, home, "skills/notes/style.md", "Short lines.\n")
	writeHomeFile(t, home, "skills/broken/SKILL.md", "---\nname: broken\ndescription: [oops\n---\n")
	writeHomeFile(t, home, "skills/plain/SKILL.md", "---\nname: plain\ndescription: Does things plainly.\n---\nPlainly.\n")
	return root, home
}

func TestAssembleSkills(t *testing.T) {
	t.Parallel()
	root, home := skillHome(t)
	withSkills := &Profile{Version: 3, Agent: "ann", Skills: []string{"notes", "broken", "plain", "gone"}}
	without := &Profile{Version: 3, Agent: "ann"}
	opts := Options{HomeRoot: root}
	withLoad := append(slices.Clone(builtins), skills.ToolName)
	jobWithLoad := append(slices.Clone(jobBuiltins), skills.ToolName)

	for _, tc := range []struct {
		name    string
		kind    bus.TurnKind
		profile *Profile
		opts    Options
		names   []string
		notes   []string
		skills  bool // the instructions list notes and plain
	}{
		{name: "main", kind: bus.TurnMain, profile: withSkills, opts: opts, names: withLoad, skills: true, notes: []string{
			"skill left out: skills/broken/SKILL.md:3: front matter: sequence end token ']' not found",
			"skill left out: skills/gone/SKILL.md: skill gone is enabled but this file does not exist in the agent home " + home,
		}},
		{name: "job", kind: bus.TurnJob, profile: withSkills, opts: opts, names: jobWithLoad, skills: true, notes: []string{"skills/broken/SKILL.md:3", "skills/gone/SKILL.md"}},
		{name: "task", kind: bus.TurnTask, profile: withSkills, opts: opts, names: []string{"submit_result"}},
		{name: "no skills enabled", kind: bus.TurnMain, profile: without, opts: opts, names: builtins},
		{name: "no profile", kind: bus.TurnMain, opts: opts, names: builtins},
		// Where no home is known (toolbus tools), load_skill is listed all the same.
		{name: "no home", kind: bus.TurnMain, profile: withSkills, names: withLoad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := bus.TurnSpec{Kind: tc.kind, Agent: "ann"}
			if tc.kind == bus.TurnTask {
				spec.Workflow, spec.Task, spec.ResultSchema = "w1", "t1", []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
			}
			kit, err := Assemble(spec, tc.profile, nil, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := kit.Tools.Names(); !slices.Equal(got, tc.names) {
				t.Errorf("tools %v, want %v", got, tc.names)
			}
			if len(kit.Notes) != len(tc.notes) {
				t.Fatalf("notes %q, want %d like %q", kit.Notes, len(tc.notes), tc.notes)
			}
			for i, want := range tc.notes {
				if !strings.HasPrefix(kit.Notes[i], want) && !strings.Contains(kit.Notes[i], want) {
					t.Errorf("note %d %q lacks %q", i, kit.Notes[i], want)
				}
			}
			listed := strings.Contains(kit.Instructions, "- notes: Keeps the team's notes.\n- plain: Does things plainly.")
			if listed != tc.skills {
				t.Errorf("instructions list the skills: %v, want %v:\n%s", listed, tc.skills, kit.Instructions)
			}
			if strings.Contains(kit.Instructions, "broken") {
				t.Errorf("the broken skill is listed:\n%s", kit.Instructions)
			}
			_, local := kit.Local[skills.ToolName]
			if local != slices.Contains(tc.names, skills.ToolName) {
				t.Errorf("local load_skill: %v", local)
			}
			if local {
				s := kit.Tools.Specs()[len(tc.names)-1]
				if s.Category != LocalCategory || !s.ReadOnly || s.Mode != toolbus.Parallel || kit.NeedsApproval(s) {
					t.Errorf("load_skill spec %+v", s)
				}
			}
		})
	}
	// The main turn wrote the mcporter configuration of notes' server into the home.
	b, err := os.ReadFile(filepath.Join(home, skills.McporterConfig))
	if err != nil || !strings.Contains(string(b), `"mcp-server-everything"`) {
		t.Errorf("mcporter config: %s %v", b, err)
	}
}

// A SKILL.md whose front matter nests deep, as an agent can write into its own enabled
// skill, is a note of the turn: before the bound, goccy/go-yaml took memory with the
// square of the depth, and 63 000 unclosed '[' (a 63 KB file) ran the node out of memory,
// again on each restart as it resumed the turn. The skill beside it still loads.
func TestDeepFrontMatterIsANote(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	home := filepath.Join(root, "ann")
	writeHomeFile(t, home, "skills/deep/SKILL.md", "---\nname: deep\ndescription: d\nmetadata: "+strings.Repeat("[", 63000)+"\n---\nbody\n")
	var blocks strings.Builder // mappings nested by indentation alone
	blocks.WriteString("---\nname: blocks\ndescription: d\nmetadata:\n")
	for i := 1; i <= 200; i++ {
		blocks.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	blocks.WriteString("---\nbody\n")
	writeHomeFile(t, home, "skills/blocks/SKILL.md", blocks.String())
	// Sequences nested on one line, two bytes a level.
	writeHomeFile(t, home, "skills/dashes/SKILL.md", "---\nname: dashes\ndescription: d\nmetadata:\n  "+strings.Repeat("- ", 30000)+"x\n---\nbody\n")
	writeHomeFile(t, home, "skills/plain/SKILL.md", "---\nname: plain\ndescription: Does things plainly.\n---\nPlainly.\n")
	profile := &Profile{Version: 3, Agent: "ann", Skills: []string{"deep", "blocks", "dashes", "plain"}}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	kit, err := Assemble(bus.TurnSpec{Kind: bus.TurnMain, Agent: "ann"}, profile, nil, Options{HomeRoot: root})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 100 << 20
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("assembly allocated %.1f MB", float64(grew)/(1<<20))
	if grew > limit {
		t.Errorf("assembly allocated %d MB, more than %d MB", grew>>20, limit>>20)
	}
	want := []string{
		"skill left out: skills/deep/SKILL.md:4: front matter nested deeper than 32 levels",
		"skill left out: skills/blocks/SKILL.md:36: front matter nested deeper than 32 levels",
		"skill left out: skills/dashes/SKILL.md:5: front matter nested deeper than 32 levels",
	}
	if len(kit.Notes) != len(want) {
		t.Fatalf("notes %q, want %q", kit.Notes, want)
	}
	for i := range want {
		if !strings.HasPrefix(kit.Notes[i], want[i]) {
			t.Errorf("note %d: %q, want it to start %q", i, kit.Notes[i], want[i])
		}
	}
	if !strings.Contains(kit.Instructions, "- plain: Does things plainly.") || strings.Contains(kit.Instructions, "deep") {
		t.Errorf("instructions:\n%s", kit.Instructions)
	}
	// load_skill, which reads the skill afresh, answers the same.
	res, err := kit.Local[skills.ToolName].Answer(t.Context(), json.RawMessage(`{"name": "deep"}`))
	if err != nil || !res.IsError || !strings.Contains(res.Text(), "skills/deep/SKILL.md:4: front matter nested deeper than 32 levels") {
		t.Errorf("load_skill deep: %v %q", err, res.Text())
	}
}

func TestLoadSkill(t *testing.T) {
	t.Parallel()
	root, home := skillHome(t)
	profile := &Profile{Version: 3, Agent: "ann", Skills: []string{"notes", "broken", "plain"}}
	kit, err := Assemble(bus.TurnSpec{Kind: bus.TurnMain, Agent: "ann"}, profile, nil, Options{HomeRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	load := kit.Local[skills.ToolName]
	call := func(args string) toolbus.Result {
		t.Helper()
		if err := load.Spec.Params.Validate([]byte(args)); err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		res, err := load.Answer(t.Context(), json.RawMessage(args))
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		return res
	}

	res := call(`{"name": "notes"}`)
	text := res.Text()
	if res.IsError || !strings.HasPrefix(text, "# Skill notes\n\nWrite notes.\n") ||
		!strings.Contains(text, "- style.md (13 B)") || !strings.Contains(text, "`mcporter list everything`") {
		t.Errorf("notes: %v\n%s", res.IsError, text)
	}
	var d LoadSkillDetails
	if err := json.Unmarshal(res.Details, &d); err != nil || d.Skill != "notes" || d.Bytes != len(text) {
		t.Errorf("details %s %v", res.Details, err)
	}
	if c := res.Completion; c == nil || !strings.HasPrefix(c.Label, "Loaded skill notes (") {
		t.Errorf("completion %+v", c)
	}
	if res := call(`{"name": "notes", "file": "style.md"}`); res.IsError || res.Text() != "Short lines.\n" ||
		res.Completion.Label != "Read style.md of skill notes (13 B)" {
		t.Errorf("file: %v %q %+v", res.IsError, res.Text(), res.Completion)
	}
	// The skill is read afresh: a fix takes effect in the same turn.
	writeHomeFile(t, home, "skills/plain/SKILL.md", "---\nname: plain\ndescription: Does things plainly.\n---\nPlainly, now.\n")
	if res := call(`{"name": "plain"}`); res.IsError || !strings.Contains(res.Text(), "Plainly, now.") {
		t.Errorf("plain: %v %q", res.IsError, res.Text())
	}
	for args, want := range map[string]string{
		`{"name": "broken"}`:                             "skill broken cannot be loaded: skills/broken/SKILL.md:3: front matter:",
		`{"name": "ghost"}`:                              `no enabled skill is named "ghost"; the enabled ones are notes, broken, plain`,
		`{"name": "notes", "file": "../plain/SKILL.md"}`: "../plain/SKILL.md leaves the skill's folder (..)",
		`{"name": "notes", "file": "/etc/passwd"}`:       "/etc/passwd is an absolute path",
	} {
		if res := call(args); !res.IsError || !strings.HasPrefix(res.Text(), want) {
			t.Errorf("%s: %v %q, want %q", args, res.IsError, res.Text(), want)
		}
	}

	// Assembled without a home, load_skill says why it reads nothing.
	kit, err = Assemble(bus.TurnSpec{Kind: bus.TurnMain, Agent: "ann"}, profile, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, _ = kit.Local[skills.ToolName].Answer(t.Context(), json.RawMessage(`{"name": "notes"}`))
	if !res.IsError || res.Text() != "this node has no agent homes, so it cannot read skills" {
		t.Errorf("no home: %q", res.Text())
	}
}

func TestAgentHome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts        Options
		agent, want string
	}{
		{Options{Home: "/h"}, "ann", "/h"},
		{Options{Home: "/h", HomeRoot: "/r"}, "ann", "/h"},
		{Options{HomeRoot: "/r"}, "ann", "/r/ann"},
		{Options{HomeRoot: "/r"}, "", "/r/default"},
		{Options{}, "ann", ""},
	} {
		if got := tc.opts.AgentHome(tc.agent); got != tc.want {
			t.Errorf("%+v %q: %q, want %q", tc.opts, tc.agent, got, tc.want)
		}
	}
}
