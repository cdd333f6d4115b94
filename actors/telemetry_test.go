package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/telemetry"
	"github.com/toolbus/toolbus/telemetry/otlptest"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/schedule"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// The telemetry tests export through the real OTLP/HTTP exporter, configured by the
// standard variables, to an OTLP receiver in the test that decodes the protobuf.

// envOf is an environment lookup over m.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// tracingTo opens the telemetry of node, exporting to r; edit changes its config.
func tracingTo(t *testing.T, node string, r *otlptest.Receiver, edit func(*telemetry.Config)) *telemetry.Telemetry {
	t.Helper()
	cfg := telemetry.Config{Node: node, Env: envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": r.URL(), "OTEL_SERVICE_NAME": "toolbus-test",
	})}
	if edit != nil {
		edit(&cfg)
	}
	tel, err := telemetry.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Tracing() {
		t.Fatal("an OTLP endpoint is set, and the telemetry does not trace")
	}
	t.Cleanup(func() { _ = tel.CloseTimeout(5 * time.Second) })
	return tel
}

// startTracedNode starts a node on srv with tel.
func startTracedNode(t *testing.T, srv *server.Server, name string, tel *telemetry.Telemetry, edit func(*NodeConfig)) *Node {
	t.Helper()
	cfg := NodeConfig{
		Name:      name,
		Connect:   func(n string) (*nats.Conn, error) { return srv.Connect(n) },
		Logger:    DiscardLogger(),
		Telemetry: tel,
	}
	if edit != nil {
		edit(&cfg)
	}
	n, err := StartNode(bustest.Context(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// waitSpans flushes tels until r's spans pass check.
func waitSpans(t *testing.T, r *otlptest.Receiver, check func([]otlptest.Span) error, tels ...*telemetry.Telemetry) []otlptest.Span {
	t.Helper()
	var spans []otlptest.Span
	bustest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		for _, tel := range tels {
			if err := tel.Flush(t.Context()); err != nil {
				return err
			}
		}
		spans = r.Spans()
		return check(spans)
	})
	return spans
}

// named is the spans of trace whose name starts with prefix.
func named(spans []otlptest.Span, trace, prefix string) []otlptest.Span {
	var out []otlptest.Span
	for _, s := range spans {
		if (trace == "" || s.TraceID == trace) && strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// echoTool is a tool of category cat that answers its text.
func echoTool(cat string) *toolbus.Tool {
	type args struct {
		Text string `json:"text"`
	}
	return toolbus.MustDefine(toolbus.Def[args]{
		Spec: toolbus.Spec{Name: "echo", Description: "Echoes.", Category: cat},
		Execute: func(_ context.Context, _ toolbus.Call, a args) (toolbus.Result, error) {
			return toolbus.TextResult(a.Text), nil
		},
	})
}

// TestTraceAcrossNodes: two nodes, each on its own server of one NATS cluster and each
// exporting its own spans; a turn on n1 calls a category hosted on n2. One trace: the
// turn's invoke_agent span, a chat span per step, the call's execute_tool span under the
// step that asked for it, and under that the host's span, exported by n2.
func TestTraceAcrossNodes(t *testing.T) {
	t.Parallel()
	r := otlptest.New()
	defer r.Close()
	srvs := bustest.Cluster(t, 2, nil)
	tel1, tel2 := tracingTo(t, "n1", r, nil), tracingTo(t, "n2", r, nil)
	n1 := startTracedNode(t, srvs[0], "n1", tel1, nil)
	n2 := startTracedNode(t, srvs[1], "n2", tel2, nil)
	tool := echoTool("far")
	if err := n2.Host(bustest.Context(t), "far", []*toolbus.Tool{tool}); err != nil {
		t.Fatal(err)
	}
	// The host's interest crosses the route before the turn calls it.
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !srvs[0].Interest(bus.ToolSubject("far", "echo")) {
			return errors.New("n1's server does not see n2's host yet")
		}
		return nil
	})
	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
		step(gateway.ScriptCall{ID: "c1", Name: "echo", Arguments: `{"text":"hello"}`}), say("done"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := n1.Run(bustest.Context(t), TurnConfig{Spec: bus.TurnSpec{Agent: "ann", Input: "go", Model: "openai:gpt-test"}, Model: model, Kit: kitOf(t, tool)})
	if err != nil || res.State != bus.TurnCompleted || len(res.Calls) != 1 || res.Calls[0].Outcome != bus.OutcomeOK {
		t.Fatalf("turn: %+v %v", res, err)
	}
	trace := telemetry.TurnTraceID(res.Turn).String()
	spans := waitSpans(t, r, func(spans []otlptest.Span) error {
		if len(named(spans, trace, "invoke_agent")) != 1 || len(named(spans, trace, "chat")) != 2 ||
			len(named(spans, trace, "execute_tool")) != 1 || len(named(spans, trace, telemetry.HostSpanPrefix)) != 1 {
			return fmt.Errorf("spans of trace %s so far: %d in all", trace, len(spans))
		}
		return nil
	}, tel1, tel2)

	agent, tool1, host := named(spans, trace, "invoke_agent")[0], named(spans, trace, "execute_tool")[0], named(spans, trace, telemetry.HostSpanPrefix)[0]
	chats := named(spans, trace, "chat")
	var first otlptest.Span
	for _, c := range chats {
		if c.Attrs["toolbus.step"] == "1" {
			first = c
		}
		if c.ParentID != agent.SpanID {
			t.Errorf("chat span %s: parent %s, want the turn's %s", c.SpanID, c.ParentID, agent.SpanID)
		}
	}
	switch {
	case agent.Name != "invoke_agent ann" || agent.Attrs["gen_ai.operation.name"] != "invoke_agent" || agent.Attrs["gen_ai.conversation.id"] != res.Turn ||
		agent.Attrs["gen_ai.agent.name"] != "ann" || agent.Attrs["gen_ai.provider.name"] != "openai" || agent.Attrs["toolbus.turn.state"] != "completed":
		t.Errorf("invoke_agent span: %s %v", agent.Name, agent.Attrs)
	case agent.ParentID != "" || agent.Instance != "n1" || agent.Service != "toolbus-test":
		t.Errorf("invoke_agent span: parent %q, node %q, service %q", agent.ParentID, agent.Instance, agent.Service)
	case first.SpanID == "" || first.Name != "chat gpt-test" || first.Attrs["gen_ai.response.finish_reasons"] != "[tool_calls]" || first.Kind != "SPAN_KIND_CLIENT":
		t.Errorf("first chat span: %+v", first)
	case tool1.ParentID != first.SpanID:
		t.Errorf("execute_tool's parent is %s, want the step's chat span %s", tool1.ParentID, first.SpanID)
	case tool1.Name != "execute_tool echo" || tool1.Attrs["gen_ai.tool.name"] != "echo" || tool1.Attrs["gen_ai.tool.call.id"] != "c1" ||
		tool1.Attrs["gen_ai.tool.type"] != "function" || tool1.Attrs["toolbus.call.outcome"] != "ok" || tool1.Instance != "n1":
		t.Errorf("execute_tool span: %s on %s %v", tool1.Name, tool1.Instance, tool1.Attrs)
	case host.ParentID != tool1.SpanID || host.Instance != "n2" || host.Kind != "SPAN_KIND_SERVER" || host.Attrs["toolbus.tool.category"] != "far":
		t.Errorf("host span: parent %s (want %s), node %s, %s %v", host.ParentID, tool1.SpanID, host.Instance, host.Kind, host.Attrs)
	}
	if t.Failed() || testing.Verbose() {
		t.Log(otlptest.Tree(spans, trace, "gen_ai.tool.call.id", "toolbus.tool.category"))
		for _, s := range named(spans, trace, "") {
			t.Logf("%s (%s): %v", s.Name, s.Instance, s.Attrs)
		}
	}
}

// TestTraceLinksJobsAndTasks: a main turn that starts a background job, a workflow and a
// schedule; the job's turn, the workflow task's turn and the schedule firing's turn are
// traces of their own whose invoke_agent spans link to the main turn's.
func TestTraceLinksJobsAndTasks(t *testing.T) {
	t.Parallel()
	r := otlptest.New()
	defer r.Close()
	srv := bustest.Server(t, nil)
	tel := tracingTo(t, "n1", r, nil)
	n := startTracedNode(t, srv, "n1", tel, func(c *NodeConfig) {
		c.Categories, c.Turns, c.TurnLease = []string{jobs.Category, workflow.Category, schedule.Category}, true, 5*time.Second
	})
	p, err := n.Profiles(bustest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Put(bustest.Context(t), []byte(`{"version":3,"agent":"ann","jobs":{"spawn":true},"schedules":{"enabled":true}}`)); err != nil {
		t.Fatal(err)
	}
	def, err := json.Marshal(oneTask(script(t, submit(`{"n":1,"note":"one"}`)), 1))
	if err != nil {
		t.Fatal(err)
	}
	main, err := json.Marshal(gateway.Script{
		Responses: []gateway.ScriptStep{
			step(call("job_start", `{"prompt":"look it up"}`)),
			step(gateway.ScriptCall{Name: "workflow_start", Arguments: string(def)}),
			step(call("schedule_create", `{"prompt":"tick","every":"1h"}`)),
			say("started them"),
		},
		Child: &gateway.Script{Responses: []gateway.ScriptStep{say("found it")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	nc := bustest.Conn(t, srv, "client")
	id := "main-" + bus.NewID()
	done, err := nc.SubscribeSync(bus.TurnStatusSubject(id, bus.StatusDone))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.submit(bustest.Context(t), bus.TurnSpec{ID: id, Agent: "ann", Input: "start them", Script: main}, ""); err != nil {
		t.Fatal(err)
	}
	m, err := done.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatal("the main turn did not end:", err)
	}
	var st bus.TurnStatus
	if err := json.Unmarshal(m.Data, &st); err != nil || st.State != bus.TurnCompleted || len(st.Calls) != 3 ||
		st.Calls[0].Outcome != bus.OutcomeOK || st.Calls[1].Outcome != bus.OutcomeOK || st.Calls[2].Outcome != bus.OutcomeOK {
		t.Fatalf("main turn: %+v %v", st, err)
	}
	var sch schedule.Schedule
	if err := json.Unmarshal(st.Calls[2].Details, &sch); err != nil {
		t.Fatal(err)
	}
	store, err := schedule.Open(bustest.Context(t), bustest.JetStream(t, srv, "scheduler"), 1, schedule.Config{})
	if err == nil {
		err = store.FireNow(bustest.Context(t), "ann", sch.ID) // as the server does when it is due
	}
	if err != nil {
		t.Fatal(err)
	}

	mainTrace := telemetry.TurnTraceID(id).String()
	kinds := func(spans []otlptest.Span, kind string) []otlptest.Span {
		var out []otlptest.Span
		for _, s := range named(spans, "", "invoke_agent") {
			if s.Attrs["toolbus.turn.kind"] == kind && s.Attrs["toolbus.turn.state"] != "" {
				out = append(out, s)
			}
		}
		return out
	}
	spans := waitSpans(t, r, func(spans []otlptest.Span) error {
		if len(kinds(spans, "main")) != 2 || len(kinds(spans, "job")) != 1 || len(kinds(spans, "task")) != 1 {
			return fmt.Errorf("ended turns' spans so far: main %d (with the schedule's), job %d, task %d", len(kinds(spans, "main")), len(kinds(spans, "job")), len(kinds(spans, "task")))
		}
		return nil
	}, tel)
	var root, fired otlptest.Span
	for _, s := range kinds(spans, "main") {
		if s.Attrs["gen_ai.conversation.id"] == id {
			root = s
		} else {
			fired = s
		}
	}
	if root.TraceID != mainTrace {
		t.Fatalf("main turn's trace %s, want %s", root.TraceID, mainTrace)
	}
	started := map[string]otlptest.Span{"job": kinds(spans, "job")[0], "task": kinds(spans, "task")[0], "schedule": fired}
	for _, kind := range []string{"job", "task", "schedule"} {
		s := started[kind]
		conv := s.Attrs["gen_ai.conversation.id"]
		if s.TraceID == mainTrace || s.TraceID != telemetry.TurnTraceID(conv).String() {
			t.Errorf("%s turn %s: trace %s, want its own (%s)", kind, conv, s.TraceID, telemetry.TurnTraceID(conv))
		}
		found := false
		for _, l := range s.Links {
			found = found || (l.TraceID == root.TraceID && l.SpanID == root.SpanID && l.Attrs["toolbus.link"] == "parent_turn")
		}
		if !found || s.Attrs["toolbus.turn.parent_id"] != id {
			t.Errorf("%s turn's span links %+v (parent %q), want a link to the main turn's span %s/%s", kind, s.Links, s.Attrs["toolbus.turn.parent_id"], root.TraceID, root.SpanID)
		}
		if kind == "task" && s.Attrs["toolbus.workflow.id"] == "" {
			t.Errorf("task turn's span names no workflow: %v", s.Attrs)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Log(otlptest.Tree(spans, mainTrace, "gen_ai.tool.call.id", "toolbus.call.outcome", "gen_ai.usage.input_tokens"))
		for _, kind := range []string{"job", "task", "schedule"} {
			t.Log(otlptest.Tree(spans, started[kind].TraceID, "gen_ai.tool.call.id", "toolbus.turn.kind", "toolbus.workflow.id"))
		}
	}
}

// TestNoSecretsInSpans: by default the spans carry no argument, no result and no error
// text, so an API key a model passes and a file a tool reads never reach the exporter;
// with RecordContent they do, redacted (the registered key) and capped.
func TestNoSecretsInSpans(t *testing.T) {
	t.Parallel()
	key := "sk-test-" + bus.NewID() + bus.NewID()
	redact.AddSecrets(key)
	dir := t.TempDir()
	secretText := "the-file-says-" + bus.NewID()
	path := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(path, []byte(secretText+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type args struct {
		APIKey string `json:"api_key"`
		Path   string `json:"path"`
	}
	read := toolbus.MustDefine(toolbus.Def[args]{
		Spec: toolbus.Spec{Name: "read_with_key", Description: "Reads a file.", Category: "files"},
		Execute: func(_ context.Context, _ toolbus.Call, a args) (toolbus.Result, error) {
			b, err := os.ReadFile(a.Path)
			if err != nil {
				return toolbus.Result{}, err
			}
			return toolbus.TextResult(string(b)), nil
		},
	})
	fail := toolbus.MustDefine(toolbus.Def[args]{
		Spec: toolbus.Spec{Name: "fail_quoting", Description: "Fails, quoting the file.", Category: "files"},
		Execute: func(_ context.Context, _ toolbus.Call, a args) (toolbus.Result, error) {
			b, _ := os.ReadFile(a.Path)
			return toolbus.Result{}, errors.New("cannot parse " + string(b) + " with " + a.APIKey)
		},
	})
	argsJSON, _ := json.Marshal(args{APIKey: key, Path: path})
	run := func(t *testing.T, r *otlptest.Receiver, content bool) []otlptest.Span {
		srv := bustest.Server(t, nil)
		tel := tracingTo(t, "n1", r, func(c *telemetry.Config) { c.RecordContent = content })
		n := startTracedNode(t, srv, "n1", tel, nil)
		if err := n.Host(bustest.Context(t), "files", []*toolbus.Tool{read, fail}); err != nil {
			t.Fatal(err)
		}
		model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
			step(call("read_with_key", string(argsJSON)), call("fail_quoting", string(argsJSON))), say("read it"),
		}})
		if err != nil {
			t.Fatal(err)
		}
		res, err := n.Run(bustest.Context(t), TurnConfig{Spec: bus.TurnSpec{Input: "read"}, Model: model, Kit: kitOf(t, read, fail)})
		if err != nil || res.State != bus.TurnCompleted || len(res.Calls) != 2 {
			t.Fatalf("turn: %+v %v", res, err)
		}
		trace := telemetry.TurnTraceID(res.Turn).String()
		return waitSpans(t, r, func(spans []otlptest.Span) error {
			if len(named(spans, trace, "execute_tool")) != 2 || len(named(spans, trace, telemetry.HostSpanPrefix)) != 2 || len(named(spans, trace, "invoke_agent")) != 1 {
				return fmt.Errorf("%d spans so far", len(spans))
			}
			return nil
		}, tel)
	}

	t.Run("default", func(t *testing.T) {
		t.Parallel()
		r := otlptest.New()
		defer r.Close()
		spans := run(t, r, false)
		if r.Contains([]byte(key)) || r.Contains([]byte(secretText)) {
			t.Errorf("an exported span holds the key or the file's contents:\n%+v", spans)
		}
		for _, s := range named(spans, "", "execute_tool") {
			if _, ok := s.Attrs["gen_ai.tool.call.arguments"]; ok {
				t.Errorf("%s records its arguments by default", s.Name)
			}
			if s.Name == "execute_tool fail_quoting" && (s.Status != "STATUS_CODE_ERROR" || s.StatusMessage != "error") {
				t.Errorf("the failed call's span: %s %q", s.Status, s.StatusMessage)
			}
		}
	})
	t.Run("record content", func(t *testing.T) {
		t.Parallel()
		r := otlptest.New()
		defer r.Close()
		spans := run(t, r, true)
		if r.Contains([]byte(key)) {
			t.Error("the registered API key reached the exporter with content recorded")
		}
		var args, result string
		for _, s := range named(spans, "", "execute_tool read_with_key") {
			args, result = s.Attrs["gen_ai.tool.call.arguments"], s.Attrs["gen_ai.tool.call.result"]
		}
		if !strings.Contains(args, path) || strings.Contains(args, key) || !strings.Contains(result, secretText) {
			t.Errorf("recorded arguments %q, result %q: want the path and the file's text, the key redacted", args, result)
		}
	})
}

// TestNoExporterNoCost: with no exporter configured (nothing set, or OTEL_TRACES_EXPORTER
// none beside an endpoint) nothing traces, no span reaches an endpoint, the turn's calls
// into telemetry get a nil handle, and the calls' traceparent keeps its shape. (That the
// nil handles allocate nothing: telemetry's TestNilHandlesCostNothing.)
func TestNoExporterNoCost(t *testing.T) {
	t.Parallel()
	r := otlptest.New()
	defer r.Close()
	for _, env := range []map[string]string{
		{},
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": r.URL()},
	} {
		tel, err := telemetry.Open(t.Context(), telemetry.Config{Node: "n1", Env: envOf(env)})
		if err != nil {
			t.Fatal(err)
		}
		if tel.Tracing() {
			t.Fatalf("env %v: tracing is on", env)
		}
		if tt := tel.StartTurn(telemetry.TurnInfo{ID: "t1"}); tt != nil {
			t.Fatalf("env %v: StartTurn made a turn's telemetry with nothing to record", env)
		}
		// A node with it runs a turn: nothing is sent, and the call's traceparent is the
		// turn's own, not sampled.
		srv := bustest.Server(t, nil)
		n := startTracedNode(t, srv, "n1", tel, nil)
		seen := make(chan string, 1)
		peek := toolbus.MustDefine(toolbus.Def[struct{}]{
			Spec: toolbus.Spec{Name: "peek", Description: "Peeks.", Category: "peek"},
			Execute: func(context.Context, toolbus.Call, struct{}) (toolbus.Result, error) {
				return toolbus.TextResult("ok"), nil
			},
		})
		if err := n.Host(bustest.Context(t), "peek", []*toolbus.Tool{peek}); err != nil {
			t.Fatal(err)
		}
		spy := bustest.Conn(t, srv, "spy")
		sub, err := spy.Subscribe(bus.ToolSubject("peek", "peek"), func(m *nats.Msg) {
			select {
			case seen <- m.Header.Get(bus.HeaderTraceparent):
			default:
			}
		})
		if err == nil {
			err = spy.Flush()
		}
		if err != nil {
			t.Fatal(err)
		}
		model, _ := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{step(call("peek", `{}`)), say("ok")}})
		res, err := n.Run(bustest.Context(t), TurnConfig{Spec: bus.TurnSpec{Input: "go"}, Model: model, Kit: kitOf(t, peek)})
		if err != nil || res.State != bus.TurnCompleted {
			t.Fatalf("turn: %+v %v", res, err)
		}
		var tp string
		select {
		case tp = <-seen:
		case <-time.After(10 * time.Second):
			t.Fatal("the spy saw no request")
		}
		_ = sub.Unsubscribe()
		if want := "00-" + telemetry.TurnTraceID(res.Turn).String() + "-"; len(tp) != 55 || !strings.HasPrefix(tp, want) || !strings.HasSuffix(tp, "-00") {
			t.Errorf("traceparent %q: want the turn's own trace (%s…), not sampled", tp, want)
		}
		if err := tel.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := r.Requests(); n != 0 {
			t.Errorf("env %v: %d export requests with no exporter", env, n)
		}
	}
}
