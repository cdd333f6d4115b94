package toolsets

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/toolsets/computer"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// externalTool is a tool of another process's namespace, as its published catalog describes it.
func externalTool(t testing.TB, name, category string) *toolbus.Tool {
	t.Helper()
	tool, err := toolbus.Define(toolbus.Def[struct {
		Query string `json:"query"`
	}]{
		Name: name, Description: "external " + name, Category: category, Namespace: "crm",
		Execute: func(context.Context, toolbus.Call, struct {
			Query string `json:"query"`
		}) (toolbus.Result, error) {
			return toolbus.TextResult("remote"), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func TestTextTurnOrder(t *testing.T) {
	set, err := TextTurn(TurnContext{
		Agent:    "agent-1",
		External: []*toolbus.Tool{externalTool(t, "crm_search", "crm"), externalTool(t, "crm_get", "crm")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"todo_read", "todo_write", "list_files", "read_file", "write_file", "run_command", "crm_search", "crm_get"}
	if got := set.Names(); !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
	// Categories appear in assembly order, each in one run.
	var cats []string
	for _, tool := range set.Tools() {
		if len(cats) == 0 || cats[len(cats)-1] != tool.Category {
			cats = append(cats, tool.Category)
		}
	}
	if !slices.Equal(cats, []string{"todo", "computer", "crm"}) {
		t.Errorf("category runs %v", cats)
	}
	if !slices.Equal(Categories(), []string{"todo", "computer"}) {
		t.Errorf("Categories() = %v", Categories())
	}
	// Names are unique and every tool can be looked up.
	seen := map[string]bool{}
	for _, name := range set.Names() {
		if seen[name] {
			t.Errorf("duplicate %s", name)
		}
		seen[name] = true
		if _, ok := set.Lookup(name); !ok {
			t.Errorf("lookup %s failed", name)
		}
	}
}

func TestTextTurnRefusesBadExternals(t *testing.T) {
	for _, tc := range []struct {
		name     string
		external []*toolbus.Tool
		want     string
	}{
		{"duplicate name", []*toolbus.Tool{externalTool(t, "read_file", "crm")}, `duplicate tool name "read_file"`},
		{"duplicate among externals", []*toolbus.Tool{externalTool(t, "x", "crm"), externalTool(t, "x", "crm")}, `duplicate tool name "x"`},
		{"built-in category", []*toolbus.Tool{externalTool(t, "shell", "computer")}, `shell claims the built-in category "computer"`},
		{"nil tool", []*toolbus.Tool{nil}, "tool 0 is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := TextTurn(TurnContext{External: tc.external})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// sampleArgs are valid arguments for every built-in tool.
var sampleArgs = map[string]string{
	"todo_read":   `{}`,
	"todo_write":  `{"todos":[{"id":"1","content":"Plan","status":"in_progress"}]}`,
	"list_files":  `{"path":"src","recursive":true,"max_entries":50}`,
	"read_file":   `{"path":"notes.md","offset":1,"limit":20}`,
	"write_file":  `{"path":"notes.md","content":"hello\n","append":true}`,
	"run_command": `{"command":"go test ./...","timeout_seconds":30,"cwd":"src"}`,
}

func TestEveryToolIsComplete(t *testing.T) {
	set, err := TextTurn(TurnContext{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range set.Tools() {
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
	kv := newBucket(t)
	for _, tc := range []struct {
		category string
		tc       TurnContext
		names    []string
		err      string
	}{
		{"computer", TurnContext{}, []string{"list_files", "read_file", "write_file", "run_command"}, ""},
		{"todo", TurnContext{Todos: kv}, []string{"todo_read", "todo_write"}, ""},
		{"todo", TurnContext{}, nil, "needs a todo bucket"},
		{"web", TurnContext{}, nil, `unknown tool category "web" (this build hosts todo, computer)`},
	} {
		t.Run(tc.category, func(t *testing.T) {
			tools, err := ForCategory(tc.category, tc.tc)
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
	tools, err := ForCategory("todo", TurnContext{Todos: kv})
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

func TestComputerConfigReachesTools(t *testing.T) {
	set, err := TextTurn(TurnContext{Computer: computer.Config{CommandTimeout: 7 * time.Second, MaxCommandTimeout: 9 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	run, _ := set.Lookup("run_command")
	if !strings.Contains(run.Description, "7.0 s timeout") || !strings.Contains(run.Description, "at most 9.0 s") {
		t.Errorf("description %q", run.Description)
	}
}

func newBucket(t testing.TB) jetstream.KeyValue {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		ServerName: "toolsets-test", DontListen: true, JetStream: true, StoreDir: t.TempDir(),
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 256 << 20, NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(s))
	if err != nil {
		s.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		s.Shutdown()
		s.WaitForShutdown()
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "todos"})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func BenchmarkTextTurn(b *testing.B) {
	ext := []*toolbus.Tool{externalTool(b, "crm_search", "crm")}
	set, err := TextTurn(TurnContext{External: ext})
	if err != nil {
		b.Fatal(err)
	}
	built := set.Tools()
	b.Run("baseline=NewSet of built tools", func(b *testing.B) {
		for b.Loop() {
			if _, err := toolbus.NewSet(built...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("TextTurn", func(b *testing.B) {
		for b.Loop() {
			if _, err := TextTurn(TurnContext{External: ext}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
