package toolsets

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/internal/testmain"
	"github.com/toolbus/toolbus/toolsets/computer"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/profile"
	"github.com/toolbus/toolbus/toolsets/schedule"
	"github.com/toolbus/toolbus/toolsets/web"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{})
}

// sampleArgs are valid arguments for every built-in tool.
var sampleArgs = map[string]string{
	"todo_read":   `{}`,
	"todo_write":  `{"todos":[{"id":"1","content":"Plan","status":"in_progress"}]}`,
	"list_files":  `{"path":"src","recursive":true,"max_entries":50}`,
	"read_file":   `{"path":"notes.md","offset":1,"limit":20}`,
	"write_file":  `{"path":"notes.md","content":"hello\n","append":true}`,
	"run_command": `{"command":"go test ./...","timeout_seconds":30,"cwd":"src"}`,
	"web_search":  `{"query":"tide pools","count":5}`,
	"web_fetch":   `{"url":"https://example.com/","offset":0,"max_chars":20000}`,

	"schedule_create": `{"prompt":"Check the build","cron":"0 30 9 * * mon-fri","time_zone":"Europe/Amsterdam"}`,
	"schedule_list":   `{}`,
	"schedule_cancel": `{"schedule_id":"s1"}`,
	"job_start":       `{"prompt":"Summarise the notes","instructions":"Be brief."}`,
	"job_status":      `{"job_id":"j1"}`,
	"job_result":      `{"job_id":"j1"}`,
	"job_cancel":      `{"job_id":"j1","reason":"not needed"}`,
	"recall":          `{"query":"how we deploy","limit":3,"tags":["ops"]}`,
	"get_page":        `{"id":"deploy","offset":8000}`,
	"workflow_start": `{"title":"Compare","tasks":[{"id":"a","instructions":"Find it.","result_schema":{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}},` +
		`{"id":"b","instructions":"Use {{tasks.a.result.x}}.","result_schema":{"type":"object","properties":{"y":{"type":"integer"}}},"depends_on":["a"],"max_attempts":2}]}`,
	"workflow_view":   `{"workflow_id":"w1"}`,
	"workflow_list":   `{"state":"running"}`,
	"workflow_cancel": `{"workflow_id":"w1","reason":"not needed"}`,
}

// everything is a profile whose main turns include every built-in category.
var everything = &Profile{Version: ProfileVersion, Agent: "ann",
	Web:  &web.Binding{Search: &web.SearchBinding{Provider: web.Brave}, Fetch: &web.FetchBinding{}},
	Jobs: &JobsPolicy{Spawn: true}, Schedules: &SchedulesPolicy{Enabled: true}, Brain: true}

func TestEveryToolIsComplete(t *testing.T) {
	t.Parallel()
	var tools []*toolbus.Tool
	h := newHandles(t)
	for _, c := range Categories() {
		ts, err := ForCategory(c, h)
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, ts...)
	}
	kit, err := Assemble(bus.TurnSpec{Agent: "ann"}, everything, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != kit.Tools.Len() {
		t.Fatalf("hosts run %d tools, a main turn shows %d", len(tools), kit.Tools.Len())
	}
	for i, tool := range tools {
		// What a turn shows is what a host runs.
		if spec := kit.Tools.Specs()[i]; spec.Name != tool.Name || string(spec.Params.JSON()) != string(tool.Params.JSON()) ||
			spec.Description != tool.Description || spec.Mode != tool.Mode || spec.Timeout != tool.Timeout {
			t.Errorf("spec %d %s differs from the host's tool %s", i, spec.Name, tool.Name)
		}
	}
	for _, tool := range tools {
		t.Run(tool.Name, func(t *testing.T) {
			if !slices.Contains(Categories(), tool.Category) {
				t.Errorf("category %q is not hosted by this build", tool.Category)
			}
			if tool.Description == "" || tool.Execute == nil || tool.DescribeActivity == nil || tool.DescribeCompletedActivity == nil {
				t.Errorf("incomplete definition")
			}
			args, ok := sampleArgs[tool.Name]
			if !ok {
				t.Fatalf("no sample arguments for %s", tool.Name)
			}
			if err := tool.Params.Validate(json.RawMessage(args)); err != nil {
				t.Errorf("sample %s: %v", args, err)
			}
			var root struct {
				Type       string                     `json:"type"`
				Properties map[string]json.RawMessage `json:"properties"`
			}
			if err := json.Unmarshal(tool.Params.JSON(), &root); err != nil || root.Type != "object" {
				t.Errorf("schema %s: root is not an object (%v)", tool.Params.JSON(), err)
			}
			if label := tool.ActivityLabel(json.RawMessage(args)); label == "" || label == tool.Name {
				t.Errorf("activity label %q", label)
			}
			if label := tool.CompletedLabel(json.RawMessage(args), toolbus.ErrorResult("failed")); label == "" || label == tool.Name {
				t.Errorf("completed label %q", label)
			}
		})
	}
}

func TestForCategory(t *testing.T) {
	t.Parallel()
	h := newHandles(t)
	kv := h.Todos
	for _, tc := range []struct {
		category string
		h        Handles
		names    []string
		err      string
	}{
		{"computer", Handles{}, []string{"list_files", "read_file", "write_file", "run_command"}, ""},
		{"todo", Handles{Todos: kv}, []string{"todo_read", "todo_write"}, ""},
		{"todo", Handles{}, nil, "needs a todo bucket"},
		{"web", Handles{}, nil, "the web category needs the agent profile store"},
		{"web", Handles{Profiles: h.Profiles}, []string{"web_search", "web_fetch"}, ""},
		{"schedule", h, []string{"schedule_create", "schedule_list", "schedule_cancel"}, ""},
		{"schedule", Handles{Profiles: h.Profiles}, nil, "needs the schedule store"},
		{"jobs", h, []string{"job_start", "job_status", "job_result", "job_cancel"}, ""},
		{"jobs", Handles{Jobs: h.Jobs}, nil, "needs the jobs store and the profiles"},
		{"brain", Handles{JS: h.JS}, []string{"recall", "get_page"}, ""},
		{"brain", Handles{}, nil, "the brain category keeps pages in JetStream"},
		{"nope", Handles{}, nil, `unknown tool category "nope" (this build hosts ` + strings.Join(Categories(), ", ") + ")"},
	} {
		t.Run(tc.category, func(t *testing.T) {
			tools, err := ForCategory(tc.category, tc.h)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range tools {
				names = append(names, tool.Name)
				if tool.Category != tc.category {
					t.Errorf("%s has category %q", tool.Name, tool.Category)
				}
			}
			if !slices.Equal(names, tc.names) {
				t.Errorf("tools %v, want %v", names, tc.names)
			}
		})
	}

	// The host's tools execute: a write through the todo host reads back through it.
	tools, err := ForCategory("todo", Handles{Todos: kv})
	if err != nil {
		t.Fatal(err)
	}
	call := toolbus.Call{Agent: "agent-1", Turn: "t1", ID: "c1", Progress: func(string) {}}
	call.Args = json.RawMessage(sampleArgs["todo_write"])
	if _, err := tools[1].Execute(t.Context(), call); err != nil {
		t.Fatal(err)
	}
	call.Args = json.RawMessage(`{}`)
	res, err := tools[0].Execute(t.Context(), call)
	if err != nil || !strings.Contains(res.Text(), "[>] Plan (id 1, in_progress)") {
		t.Fatalf("read back: %v %q", err, res.Text())
	}
}

// TestWebHostReadsProfiles: the web host finds each caller's binding in the profile
// store, at every call.
func TestWebHostReadsProfiles(t *testing.T) {
	t.Parallel()
	profiles := newHandles(t).Profiles
	tools, err := ForCategory(web.Category, Handles{Profiles: profiles})
	if err != nil {
		t.Fatal(err)
	}
	search := func(agent string) string {
		res, err := tools[0].Execute(t.Context(), toolbus.Call{Agent: agent, Args: json.RawMessage(`{"query":"q"}`), Progress: func(string) {}})
		if err != nil {
			return err.Error()
		}
		return res.Text()
	}
	if got := search("bob"); !strings.Contains(got, "the profile of agent bob binds no search provider") {
		t.Errorf("no profile: %s", got)
	}
	if _, err := profiles.Put(t.Context(), []byte(`{"version":3,"agent":"ann","web":{"fetch":{}}}`)); err != nil {
		t.Fatal(err)
	}
	if got := search("ann"); !strings.Contains(got, "the profile of agent ann binds no search provider") {
		t.Errorf("fetch only: %s", got)
	}
	// Brave's public API without a key on this host: refused before any request.
	if _, err := profiles.Put(t.Context(), []byte(`{"version":3,"agent":"ann","web":{"search":{"provider":"brave"}}}`)); err != nil {
		t.Fatal(err)
	}
	if got := search("ann"); !strings.Contains(got, "this web host has no Brave Search API key") {
		t.Errorf("brave without a key: %s", got)
	}
}

func TestComputerConfigReachesSpecs(t *testing.T) {
	t.Parallel()
	kit, err := Assemble(bus.TurnSpec{}, nil, nil, Options{Computer: computer.Config{CommandTimeout: 7 * time.Second, MaxCommandTimeout: 9 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	run, _ := kit.Tools.Lookup("", "run_command")
	if !strings.Contains(run.Description, "7.0 s timeout") || !strings.Contains(run.Description, "at most 9.0 s") {
		t.Errorf("description %q", run.Description)
	}
}

// newHandles are the handles of every built-in category, on a server of their own.
func newHandles(t testing.TB) Handles {
	t.Helper()
	js := newJetStream(t)
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "todos"})
	if err != nil {
		t.Fatal(err)
	}
	h := Handles{Todos: kv, JS: js, Workflows: workflow.NewEngine(js, 1, nil, nil)}
	if h.Profiles, err = OpenProfiles(t.Context(), js, 1); err != nil {
		t.Fatal(err)
	}
	if h.Jobs, err = jobs.Open(t.Context(), js, 1, nil); err != nil {
		t.Fatal(err)
	}
	if h.Schedules, err = schedule.Open(t.Context(), js, 1, schedule.Config{}); err != nil {
		t.Fatal(err)
	}
	return h
}

func newJetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	return bustest.JetStream(t, bustest.Server(t, nil), "toolsets-test")
}

// newStore is a JetStream of its own and a todo bucket on it.
func newStore(t testing.TB) (jetstream.JetStream, jetstream.KeyValue) {
	h := newHandles(t)
	return h.JS, h.Todos
}

// TestComputerHostReadsProfileLimits: run_command applies the calling agent's command
// limits from its profile (Profile.Computer), over the node's, at each call.
func TestComputerHostReadsProfileLimits(t *testing.T) {
	t.Parallel()
	profiles := newHandles(t).Profiles
	cfg := computer.Config{Sandbox: computer.SandboxConfig{Mode: computer.SandboxOff}}
	tools, err := ForCategory(computer.Category, Handles{Profiles: profiles, Computer: cfg})
	if err != nil {
		t.Fatal(err)
	}
	var run *toolbus.Tool
	for _, tl := range tools {
		if tl.Spec.Name == "run_command" {
			run = tl
		}
	}
	if run == nil {
		t.Fatal("no run_command")
	}
	limits := func(agent string) computer.Limits {
		t.Helper()
		res, err := run.Execute(t.Context(), toolbus.Call{Agent: agent, Home: t.TempDir(), Args: json.RawMessage(`{"command":"true"}`), Progress: func(string) {}})
		if err != nil {
			t.Fatal(err)
		}
		var d computer.CommandDetails
		if err := json.Unmarshal(res.Details, &d); err != nil || d.Limits == nil {
			t.Fatalf("details %s: %v", res.Details, err)
		}
		return d.Limits.Limits
	}
	if got := limits("bob"); got.Pids != computer.DefaultPids {
		t.Errorf("no profile: pids %d, want the node's %d", got.Pids, computer.DefaultPids)
	}
	if _, err := profiles.Put(t.Context(), []byte(`{"version":4,"agent":"ann","computer":{"limits":{"pids":64}}}`)); err != nil {
		t.Fatal(err)
	}
	if got := limits("ann"); got.Pids != 64 || got.Memory != computer.DefaultMemory {
		t.Errorf("ann's profile: %+v, want pids 64 and the node's memory", got)
	}
}

// TestBuiltinCategories: package profile's list of the built-in categories, by which a
// profile refuses to name one as an external namespace, is this registry's.
func TestBuiltinCategories(t *testing.T) {
	t.Parallel()
	if got, want := profile.BuiltinCategories(), Categories(); !slices.Equal(got, want) {
		t.Errorf("profile.BuiltinCategories() = %q, the registry has %q", got, want)
	}
}
