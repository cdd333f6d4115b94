package actors

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets"
)

// foreignHost is a category served by a plain micro service that follows
// docs/protocol.md by hand, as a worker in another language would: no toolbus host.
type foreignHost struct {
	mu       sync.Mutex
	requests []foreignRequest
	active   int
	peak     int // most sequential calls at once
}

type foreignRequest struct {
	tool     string
	args     string
	deadline time.Time
	received time.Time
	agent    string
}

func (f *foreignHost) handle(s *toolbus.Spec, r micro.Request) {
	req, err := bus.ParseToolRequest(nats.Header(r.Headers()))
	f.mu.Lock()
	f.requests = append(f.requests, foreignRequest{tool: s.Name, args: string(r.Data()), deadline: req.Deadline, received: time.Now(), agent: req.Agent})
	f.mu.Unlock()
	reply := func(rep bus.ToolReply) {
		rep.Call, rep.Tool = req.Call, s.Name
		b, _ := json.Marshal(rep)
		_ = r.Respond(b)
	}
	if err != nil {
		reply(bus.ToolReply{Outcome: bus.OutcomeInvalid, Error: err.Error()})
		return
	}
	switch s.Name {
	case "slow":
		// Never answers: the turn's deadline must end the call.
		return
	case "note":
		go func() {
			f.mu.Lock()
			f.active++
			f.peak = max(f.peak, f.active)
			f.mu.Unlock()
			time.Sleep(20 * time.Millisecond) // long enough for an overlap to show
			f.mu.Lock()
			f.active--
			f.mu.Unlock()
			reply(bus.ToolReply{Outcome: bus.OutcomeOK, Content: []bus.ContentPart{{Type: bus.ContentText, Text: "noted " + string(r.Data())}}})
		}()
		return
	}
	reply(bus.ToolReply{Outcome: bus.OutcomeOK, Label: "Looked it up", Content: []bus.ContentPart{{Type: bus.ContentText, Text: s.Name + " " + string(r.Data())}}})
}

func (f *foreignHost) seen() []foreignRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func TestForeignNamespaceInATurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	idSchema := schema.MustFromJSON([]byte(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":false}`))
	f := &foreignHost{}
	hostConn, err := h.srv.Connect("worker")
	if err != nil {
		t.Fatal(err)
	}
	defer hostConn.Close()
	svc, err := catalog.Serve(hostConn, catalog.Service{Category: "crm", Node: "worker", Handle: f.handle, Specs: []*toolbus.Spec{
		{Name: "lookup", Category: "crm", Namespace: "crm", Params: idSchema, ReadOnly: true},
		// Same name as the built-in read_file: the namespace keeps them apart.
		{Name: "read_file", Category: "crm", Namespace: "crm", Params: idSchema, ReadOnly: true},
		{Name: "note", Category: "crm", Namespace: "crm", Params: idSchema, Mode: toolbus.Sequential},
		{Name: "slow", Category: "crm", Namespace: "crm", Params: idSchema, Timeout: 200 * time.Millisecond},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	profiles, err := h.node.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.Put(ctx, []byte(`{"version":1,"agent":"ann","namespaces":[{"name":"crm","load":"upfront"},{"name":"ghost"}]}`)); err != nil {
		t.Fatal(err)
	}

	statuses := make(chan *nats.Msg, 64)
	watch, err := h.srv.Connect("watch")
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	sub, err := watch.ChanSubscribe(bus.AllStatuses, statuses)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}

	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{
			{ID: "repaired", Name: "lookup", Namespace: "crm", Arguments: `{"id": "c1",}`},
			{ID: "invalid", Name: "lookup", Namespace: "crm", Arguments: `{"id": 7}`},
			{ID: "clash", Name: "read_file", Namespace: "crm", Arguments: `{"id":"doc"}`},
			{ID: "unknown", Name: "delete", Namespace: "crm", Arguments: `{}`},
			{ID: "slow", Name: "slow", Namespace: "crm", Arguments: `{"id":"s"}`},
		}},
		{Calls: []gateway.ScriptCall{
			{ID: "n1", Name: "note", Namespace: "crm", Arguments: `{"id":"a"}`},
			{ID: "n2", Name: "note", Namespace: "crm", Arguments: `{"id":"b"}`},
			{ID: "n3", Name: "note", Namespace: "crm", Arguments: `{"id":"c"}`},
		}},
		{Text: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.node.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Agent: "ann", Input: "go"}, Model: model})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bus.TurnCompleted || res.Text != "done" {
		t.Fatalf("turn %s (%s): %q", res.State, res.ErrorText(), res.Text)
	}
	want := []string{"lookup:ok", "lookup:invalid", "read_file:ok", "delete:invalid", "slow:timeout", "note:ok", "note:ok", "note:ok"}
	if got := outcomes(res); !slices.Equal(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	out := outputs(res)
	if got := outputText(out["repaired"]); got != `lookup {"id":"c1"}` {
		t.Errorf("repaired call's output %q", got)
	}
	if rec := res.Calls[0]; !slices.Contains(rec.Rungs, "repair") || rec.Namespace != "crm" || rec.Label != "Looked it up" {
		t.Errorf("repaired call's record %+v", rec)
	}
	if got := outputText(out["invalid"]); !strings.Contains(got, "invalid arguments for lookup") || !strings.Contains(got, "/id") {
		t.Errorf("invalid call's output %q", got)
	}
	if got := outputText(out["clash"]); got != `read_file {"id":"doc"}` {
		t.Errorf("crm.read_file reached %q, not the worker", got)
	}
	if got := outputText(out["unknown"]); !strings.Contains(got, `unknown tool "crm.delete"`) || !strings.Contains(got, "crm.lookup") {
		t.Errorf("unknown call's output %q", got)
	}
	if got := outputText(out["slow"]); !strings.Contains(got, "did not answer before its deadline") {
		t.Errorf("slow call's output %q", got)
	}

	// The worker saw each call that passed the turn's checks once, with the validated
	// arguments and the call's deadline from its spec's timeout; the invalid one never
	// left the turn.
	var tools []string
	for _, r := range f.seen() {
		tools = append(tools, r.tool)
		if r.agent != "ann" {
			t.Errorf("%s: agent %q", r.tool, r.agent)
		}
		// From its receipt, not the turn's start: under load the call went out 7.7 s
		// after the turn began (seen with three packages' tests at once).
		if r.tool == "slow" && r.deadline.Sub(r.received) > 5*time.Second {
			t.Errorf("slow's deadline %s after the worker had it is not its 200 ms timeout", r.deadline.Sub(r.received))
		}
	}
	slices.Sort(tools[:3]) // the first batch is parallel
	if want := []string{"lookup", "read_file", "slow", "note", "note", "note"}; !slices.Equal(tools, want) {
		t.Errorf("the worker saw %v, want %v", tools, want)
	}
	if f.peak != 1 {
		t.Errorf("sequential calls overlapped: %d at once", f.peak)
	}

	// The namespace no host serves is in the turn's started status, and the turn ran.
	for {
		select {
		case m := <-statuses:
			if !strings.HasSuffix(m.Subject, "."+bus.StatusStarted) {
				continue
			}
			var st bus.TurnStatus
			if err := json.Unmarshal(m.Data, &st); err != nil {
				t.Fatal(err)
			}
			if len(st.Notes) != 1 || !strings.Contains(st.Notes[0], "namespace ghost is left out") {
				t.Errorf("started status notes %q", st.Notes)
			}
			return
		case <-ctx.Done():
			t.Fatal("no started status")
		}
	}
}

// A task turn must end through a call; text alone gets one repair instruction, then the
// turn fails.
func TestTaskTurnRepairsTextOnceThenFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	policy, err := toolsets.PolicyFor(bus.TurnTask)
	if err != nil {
		t.Fatal(err)
	}
	set, _ := toolbus.NewSet()
	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{{Text: "I think so."}, {Text: "Really."}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.node.Run(t.Context(), TurnConfig{Spec: bus.TurnSpec{Kind: bus.TurnTask, Task: "t1", Input: "go"}, Model: model,
		Kit: &toolsets.Kit{Tools: set, Policy: policy}})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bus.TurnFailed || !errors.Is(res.Err, ErrNoToolCall) || res.Steps != 2 {
		t.Fatalf("state %s after %d steps: %v", res.State, res.Steps, res.Err)
	}
	var repairs int
	for _, it := range res.Transcript {
		if it.Kind == toolbus.KindMessage && it.Role == toolbus.RoleDeveloper && it.Text == policy.RepairInstruction {
			repairs++
		}
	}
	if repairs != 1 {
		t.Errorf("%d repair instructions in the transcript, want 1", repairs)
	}
}

// A local tool is answered inside the turn, after the same validation as any call, and
// its Terminate ends the turn.
func TestLocalToolIsAnsweredInsideTheTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	submit := &toolbus.Spec{Name: "submit_result", Category: toolsets.LocalCategory,
		Params: schema.MustFromJSON([]byte(`{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}`))}
	var got []string
	local := toolsets.LocalTool{Spec: submit, Answer: func(_ context.Context, args json.RawMessage) (toolbus.Result, error) {
		got = append(got, string(args)) // the turn runs one local call at a time here
		return toolbus.Result{Content: []toolbus.ContentPart{toolbus.Text("accepted")}, Terminate: true}, nil
	}}
	set, err := toolbus.NewSet(submit)
	if err != nil {
		t.Fatal(err)
	}
	policy, _ := toolsets.PolicyFor(bus.TurnTask)
	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{{ID: "bad", Name: "submit_result", Arguments: `{"answer":"x"}`}}},
		{Calls: []gateway.ScriptCall{{ID: "good", Name: "submit_result", Arguments: `{"answer": 42,}`}}},
		{Text: "never asked"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.node.Run(t.Context(), TurnConfig{Spec: bus.TurnSpec{Kind: bus.TurnTask, Task: "t1", Input: "go"}, Model: model,
		Kit: &toolsets.Kit{Tools: set, Policy: policy, Local: map[string]toolsets.LocalTool{"submit_result": local}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bus.TurnTerminated || res.Steps != 2 {
		t.Fatalf("state %s after %d steps (%s)", res.State, res.Steps, res.ErrorText())
	}
	if want := []string{"submit_result:invalid", "submit_result:ok"}; !slices.Equal(outcomes(res), want) {
		t.Errorf("outcomes %v, want %v", outcomes(res), want)
	}
	if !slices.Equal(got, []string{`{"answer":42}`}) {
		t.Errorf("the local tool saw %q", got)
	}
}
