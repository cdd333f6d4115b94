package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/web"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// The workflow tests run on a real embedded server: a node that hosts the workflow
// category and runs turns from the intake; task turns play inline scripts.

const wfAgent = "wf-tester"

// wfHarness is an embedded server and one node with the workflow category and turns.
type wfHarness struct {
	t     *testing.T
	srv   *server.Server
	node  *Node
	nc    *nats.Conn // a client's connection
	js    jetstream.JetStream
	store string
	lease time.Duration // of the node's turns
	logs  logBuffer     // the node's log, from Info up
}

// newWFHarness starts a harness whose turns hold 10 s leases: long enough that a loaded
// machine does not let a claimed task turn's delivery run out (with 3 s,
// TestTemplateTooLargeFailsTask saw a turn delivered again beside the other packages of
// go test -race ./...).
func newWFHarness(t *testing.T) *wfHarness { return newWFHarnessLease(t, 10*time.Second) }

// newWFHarnessLease starts a harness whose turns hold leases of lease: a test whose turn
// outlives its node waits one out.
func newWFHarnessLease(t *testing.T, lease time.Duration) *wfHarness {
	t.Helper()
	h := &wfHarness{t: t, store: t.TempDir(), lease: lease}
	h.start()
	return h
}

// start starts the server and the node on the harness's store.
func (h *wfHarness) start() {
	t := h.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{StoreDir: h.store, Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	n, err := StartNode(ctx, NodeConfig{
		Name:       "n1",
		Connect:    func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Categories: []string{workflow.Category},
		Turns:      true,
		Logger:     h.logs.logger(),
		AbortGrace: 300 * time.Millisecond,
		TurnLease:  h.lease,
	})
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	nc, err := srv.Connect("client")
	if err != nil {
		n.Close()
		srv.Close()
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h.srv, h.node, h.nc, h.js = srv, n, nc, js
	t.Cleanup(h.stop)
}

// stop closes the node and the server (again: harmless).
func (h *wfHarness) stop() {
	if h.node != nil {
		h.node.Close()
		h.node = nil
	}
	if h.srv != nil {
		h.nc.Close()
		h.srv.Close()
		h.srv = nil
	}
}

// script is an inline scripted model.
func script(t testing.TB, steps ...gateway.ScriptStep) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(gateway.Script{Responses: steps})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func submit(result string) gateway.ScriptStep {
	return gateway.ScriptStep{Calls: []gateway.ScriptCall{{Name: "submit_result", Arguments: `{"result":` + result + `}`}}}
}

// countSchema is a result schema: an object with an integer n and a string note.
const countSchema = `{"type":"object","properties":{"n":{"type":"integer","description":"how many"},"note":{"type":"string"}},"required":["n","note"]}`

// call calls a tool over the bus as the test agent, as a turn's call would go, and
// returns its reply.
func (h *wfHarness) call(tool string, args any) bus.ToolReply {
	h.t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		h.t.Fatal(err)
	}
	m := nats.NewMsg(bus.ToolSubject(workflow.Category, tool))
	m.Data = b
	bus.ToolRequest{Turn: "caller-" + bus.NewID(), Call: bus.NewID(), Agent: wfAgent, Deadline: time.Now().Add(time.Minute)}.SetHeaders(m.Header)
	resp, err := h.nc.RequestMsg(m, time.Minute)
	if err != nil {
		h.t.Fatalf("%s: %v", tool, err)
	}
	var r bus.ToolReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		h.t.Fatalf("%s: %v: %s", tool, err, resp.Data)
	}
	return r
}

func contentText(r bus.ToolReply) string {
	var parts []string
	for _, p := range r.Content {
		parts = append(parts, p.Text)
	}
	return strings.Join(parts, "\n")
}

// start starts a workflow with workflow_start and returns it.
func (h *wfHarness) startWorkflow(def workflow.Definition) *bus.Workflow {
	h.t.Helper()
	r := h.call("workflow_start", def)
	if r.Outcome != bus.OutcomeOK {
		h.t.Fatalf("workflow_start: %s: %s %s", r.Outcome, r.Error, contentText(r))
	}
	var wf bus.Workflow
	if err := json.Unmarshal(r.Details, &wf); err != nil {
		h.t.Fatal(err)
	}
	return &wf
}

// workflow reads a workflow's document.
func (h *wfHarness) workflow(id string) *bus.Workflow {
	h.t.Helper()
	kv, err := h.js.KeyValue(context.Background(), bus.BucketWorkflows)
	if err != nil {
		h.t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), bus.WorkflowKey(wfAgent, id))
	if err != nil {
		h.t.Fatal(err)
	}
	var wf bus.Workflow
	if err := json.Unmarshal(e.Value(), &wf); err != nil {
		h.t.Fatal(err)
	}
	return &wf
}

// waitEnded waits until the workflow has ended and returns it.
func (h *wfHarness) waitEnded(id string) *bus.Workflow {
	h.t.Helper()
	var wf *bus.Workflow
	bustest.CheckFor(h.t, 30*time.Second, 20*time.Millisecond, func() error {
		wf = h.workflow(id)
		if !wf.State.Ended() {
			return fmt.Errorf("workflow still %s:\n%s", wf.State, workflow.View(wf))
		}
		return nil
	})
	return wf
}

// turns opens the durable state of turns as a client does.
func (h *wfHarness) turns(ctx context.Context) *durable.Store {
	h.t.Helper()
	store, err := durable.Open(ctx, h.js, durable.Config{})
	if err != nil {
		h.t.Fatal(err)
	}
	return store
}

// turnRecord reads a turn's record (durable.ErrNoRecord: none).
func (h *wfHarness) turnRecord(id string) (bus.TurnRecord, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, _, err := h.turns(ctx).Record(ctx, id)
	return rec, err
}

// transcript reads a turn's transcript.
func (h *wfHarness) transcript(id string) []toolbus.Item {
	h.t.Helper()
	items, err := durable.ReadTranscript(context.Background(), h.js, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return items
}

// oneTask is a workflow of one task with the count schema and the given script.
func oneTask(s json.RawMessage, attempts int) workflow.Definition {
	return workflow.Definition{Title: "count", Tasks: []workflow.TaskDef{{
		ID: "count", Instructions: "Count the things.", ResultSchema: json.RawMessage(countSchema), Script: s, MaxAttempts: attempts,
	}}}
}

// TestTaskTurnCatalogIsFixed: a task turn's catalog is the web tools its agent's profile
// binds, recall and get_page when its brain is on, and its submit_result; nothing of the
// main turn's (computer, todo, workflow, namespaces), whatever the profile names. The web
// and brain tools are expected where this build has their categories.
func TestTaskTurnCatalogIsFixed(t *testing.T) {
	t.Parallel()
	h := newWFHarness(t)
	ctx := t.Context()
	profiles, err := h.node.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	put := func(p toolsets.Profile) {
		p.Version = toolsets.ProfileVersion
		b, err := p.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := profiles.Put(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	bound := &web.Binding{Search: &web.SearchBinding{Provider: web.Brave}, Fetch: &web.FetchBinding{}}
	put(toolsets.Profile{Agent: "plain", Namespaces: []toolsets.NamespaceRef{{Name: "crm"}}})
	put(toolsets.Profile{Agent: "webbed", Web: bound})
	put(toolsets.Profile{Agent: "brainy", Brain: true})
	put(toolsets.Profile{Agent: "both", Web: bound, Brain: true, Namespaces: []toolsets.NamespaceRef{{Name: "crm"}},
		Jobs: &toolsets.JobsPolicy{Spawn: true}, Schedules: &toolsets.SchedulesPolicy{Enabled: true}, Skills: []string{"notes"}})

	// present keeps the tools whose category this build has (web and brain come with
	// their own categories).
	present := func(tools ...string) []string {
		category := map[string]string{"web_search": web.Category, "web_fetch": web.Category, "recall": "brain", "get_page": "brain"}
		var out []string
		for _, name := range tools {
			if c, ok := category[name]; !ok || toolsets.Builtin(c) {
				out = append(out, name)
			}
		}
		return out
	}
	for _, tc := range []struct {
		agent string
		want  []string
	}{
		{"nobody", []string{"submit_result"}}, // no profile
		{"plain", []string{"submit_result"}},
		{"webbed", present("web_search", "web_fetch", "submit_result")},
		{"brainy", present("recall", "get_page", "submit_result")},
		{"both", present("web_search", "web_fetch", "recall", "get_page", "submit_result")},
	} {
		t.Run(tc.agent, func(t *testing.T) {
			spec := bus.TurnSpec{ID: "w-t-1", Kind: bus.TurnTask, Agent: tc.agent, Workflow: "w", Task: "t", Input: "go",
				ResultSchema: json.RawMessage(countSchema)}
			kit, err := h.node.Assemble(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := kit.Tools.Names(); !slices.Equal(got, tc.want) {
				t.Errorf("task turn tools %v, want %v", got, tc.want)
			}
			for _, s := range kit.Tools.Specs() {
				if s.Name != workflow.SubmitName && !s.ReadOnly {
					t.Errorf("%s is in a task turn and changes things", s.QualifiedName())
				}
			}
			local, ok := kit.Local[workflow.SubmitName]
			if !ok || !local.Final || local.Spec.Category != toolsets.LocalCategory || !local.Spec.Strict {
				t.Errorf("submit_result is not the turn's own final, strict tool: %+v", local)
			}
			if kit.Policy.Kind != bus.TurnTask || kit.Policy.Text != toolsets.TextRepairOnce {
				t.Errorf("policy %+v", kit.Policy)
			}
			// The same agent's main turn has the working tools a task turn lacks.
			main, err := h.node.Assemble(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: tc.agent, Input: "go"})
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"read_file", "run_command", "todo_write", "workflow_start"} {
				if !slices.Contains(main.Tools.Names(), name) {
					t.Errorf("the main turn lacks %s: %v", name, main.Tools.Names())
				}
			}
		})
	}
	// A task turn that comes with no result schema has no submit_result to end with:
	// it does not start.
	if _, err := h.node.Assemble(ctx, bus.TurnSpec{Kind: bus.TurnTask, Agent: "plain", Workflow: "w", Task: "t", Input: "go",
		ResultSchema: json.RawMessage(`{"type":"array"}`)}); err == nil || !strings.Contains(err.Error(), "root must be an object schema") {
		t.Errorf("a task turn with an array result schema: %v", err)
	}
}

// TestSubmitAcceptedEndsTurn: an accepted submit_result ends the task turn at once
// (terminated, no further model step), and its value becomes the task's result.
func TestSubmitAcceptedEndsTurn(t *testing.T) {
	t.Parallel()
	h := newWFHarness(t)
	wf := h.startWorkflow(oneTask(script(t,
		submit(`{"n": 3, "note": "three"}`),
		gateway.ScriptStep{Text: "never asked"},
	), 1))
	wf = h.waitEnded(wf.ID)
	task := wf.Task("count")
	if wf.State != bus.WorkflowCompleted || task.State != bus.TaskDone || string(task.Result) != `{"n":3,"note":"three"}` {
		t.Fatalf("workflow ended %s, task %s with result %s:\n%s", wf.State, task.State, task.Result, workflow.View(wf))
	}
	if len(task.Attempts) != 1 || task.Attempts[0].Outcome != bus.AttemptAccepted || task.Attempts[0].TurnState != bus.TurnTerminated ||
		task.Attempts[0].Turn != bus.AttemptTurn(wf.ID, "count", 1) {
		t.Errorf("attempts %+v", task.Attempts)
	}
	rec, err := h.turnRecord(task.Attempts[0].Turn)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != bus.TurnTerminated || rec.Step != 1 || string(rec.Submitted) != `{"result":{"n":3,"note":"three"}}` {
		t.Errorf("turn record: %s after %d steps, submitted %s", rec.State, rec.Step, rec.Submitted)
	}
	items := h.transcript(task.Attempts[0].Turn)
	if last := items[len(items)-1]; last.Kind != toolbus.KindCallOutput || last.IsError || !strings.Contains(outputText(last), "Result accepted") {
		t.Errorf("the transcript ends with %+v, want the accepted submission's output", last)
	}
	// The model saw the task's instructions as the turn's input.
	if items[0].Kind != toolbus.KindMessage || items[0].Text != "Count the things." {
		t.Errorf("first item %+v", items[0])
	}
}

// TestSubmitRejectedKeepsTurn: a submission the schema refuses is an error result that
// lists each leaf "path: message"; the turn goes on, and the model's fixed submission
// is accepted.
func TestSubmitRejectedKeepsTurn(t *testing.T) {
	t.Parallel()
	h := newWFHarness(t)
	wf := h.startWorkflow(oneTask(script(t,
		submit(`{"n": "three"}`), // n is a string, note is missing
		submit(`{"n": 3, "note": "fixed"}`),
	), 1))
	wf = h.waitEnded(wf.ID)
	task := wf.Task("count")
	if wf.State != bus.WorkflowCompleted || string(task.Result) != `{"n":3,"note":"fixed"}` {
		t.Fatalf("workflow %s, result %s:\n%s", wf.State, task.Result, workflow.View(wf))
	}
	turn := task.Attempts[0].Turn
	rec, _ := h.turnRecord(turn)
	if rec.Step != 2 || rec.State != bus.TurnTerminated {
		t.Errorf("turn %s after %d steps, want terminated after 2", rec.State, rec.Step)
	}
	var refusal string
	for _, it := range h.transcript(turn) {
		if it.Kind == toolbus.KindCallOutput && it.IsError {
			refusal = outputText(it)
		}
	}
	for _, leaf := range []string{"- /result: ", "note", "- /result/n: value is string but should be integer"} {
		if !strings.Contains(refusal, leaf) {
			t.Errorf("the refusal the model read lacks %q:\n%s", leaf, refusal)
		}
	}
	if !strings.HasPrefix(refusal, "invalid arguments for submit_result: arguments do not match the schema:\n- ") {
		t.Errorf("refusal %q", refusal)
	}
}

// TestTextOnlyGetsOneRepairThenFails: a task turn that answers with text gets exactly one
// developer message saying it must end with submit_result; a second text answer fails
// the task with a clear reason. After one repair, a submission still ends it well.
func TestTextOnlyGetsOneRepairThenFails(t *testing.T) {
	t.Parallel()
	h := newWFHarness(t)
	policy, _ := toolsets.PolicyFor(bus.TurnTask)
	repairs := func(items []toolbus.Item) int {
		n := 0
		for _, it := range items {
			if it.Kind == toolbus.KindMessage && it.Role == toolbus.RoleDeveloper {
				if it.Text != policy.RepairInstruction {
					t.Errorf("developer message %q", it.Text)
				}
				n++
			}
		}
		return n
	}

	failed := h.waitEnded(h.startWorkflow(oneTask(script(t,
		gateway.ScriptStep{Text: "There are three."},
		gateway.ScriptStep{Text: "Three, as I said."},
		submit(`{"n": 3, "note": "too late"}`),
	), 1)).ID)
	task := failed.Task("count")
	a := task.Attempts[0]
	if failed.State != bus.WorkflowFailed || task.State != bus.TaskFailed || a.Outcome != bus.AttemptFailed || a.TurnState != bus.TurnFailed {
		t.Fatalf("workflow %s, task %s, attempt %+v", failed.State, task.State, a)
	}
	if !strings.Contains(a.Reason, "the model answered without the call the turn needs: it was told once") ||
		!strings.Contains(task.Error, "attempt 1 of 1 failed") || task.Result != nil {
		t.Errorf("reason %q, task error %q, result %s", a.Reason, task.Error, task.Result)
	}
	if n := repairs(h.transcript(a.Turn)); n != 1 {
		t.Errorf("%d repair instructions, want 1", n)
	}
	if rec, _ := h.turnRecord(a.Turn); rec.Step != 2 {
		t.Errorf("the failed turn asked the model %d times, want 2", rec.Step)
	}

	ok := h.waitEnded(h.startWorkflow(oneTask(script(t,
		gateway.ScriptStep{Text: "There are three."},
		submit(`{"n": 3, "note": "after the reminder"}`),
	), 1)).ID)
	if task := ok.Task("count"); ok.State != bus.WorkflowCompleted || repairs(h.transcript(task.Attempts[0].Turn)) != 1 {
		t.Errorf("after one repair: workflow %s:\n%s", ok.State, workflow.View(ok))
	}
}

// TestPersistedSchemaRevalidation: the schema persisted with the task is stricter than
// the copy the task turn carried. The turn accepts the submission (its copy passes), the
// control plane refuses it against the persisted schema: nothing is written, the attempt
// fails with the reason, and the next attempt runs.
func TestPersistedSchemaRevalidation(t *testing.T) {
	t.Parallel()
	h := newWFHarness(t)
	ctx := t.Context()
	strict := `{"type":"object","properties":{"n":{"type":"integer","minimum":10},"note":{"type":"string"}},"required":["n","note"]}`
	id := bus.NewID()
	now := time.Now().UTC()
	wf := bus.Workflow{ID: id, Agent: wfAgent, Title: "revalidate", State: bus.WorkflowRunning, Created: now, Updated: now,
		Tasks: []bus.Task{{ID: "count", Instructions: "Count.", ResultSchema: json.RawMessage(strict), MaxAttempts: 2,
			Script: script(t, submit(`{"n": 3, "note": "small"}`)),
			State:  bus.TaskRunning, Attempts: []bus.Attempt{{N: 1, Turn: bus.AttemptTurn(id, "count", 1), Started: now}}}}}
	kv, err := bus.EnsureKeyValue(ctx, h.js, bus.WorkflowsBucketConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(wf)
	if _, err := kv.Create(ctx, bus.WorkflowKey(wfAgent, id), doc); err != nil {
		t.Fatal(err)
	}
	// The turn's own copy lacks the minimum.
	spec := bus.TurnSpec{ID: bus.AttemptTurn(id, "count", 1), Kind: bus.TurnTask, Agent: wfAgent, Workflow: id, Task: "count",
		Input: "Count.", ResultSchema: json.RawMessage(countSchema), Script: wf.Tasks[0].Script}
	if _, err := h.node.submit(ctx, spec, ""); err != nil {
		t.Fatal(err)
	}
	got := h.waitEnded(id)
	task := got.Task("count")
	first := task.Attempts[0]
	if first.Outcome != bus.AttemptFailed || first.TurnState != bus.TurnTerminated ||
		!strings.Contains(first.Reason, "the result failed the task's result schema as stored with the workflow, so it was not written") ||
		!strings.Contains(first.Reason, "- /result/n: ") {
		t.Errorf("first attempt %+v", first)
	}
	if rec, _ := h.turnRecord(first.Turn); rec.State != bus.TurnTerminated || rec.Submitted == nil {
		t.Errorf("the turn itself accepted the submission: %s, submitted %s", rec.State, rec.Submitted)
	}
	// The second attempt carries the persisted schema, so its turn refuses 3 itself; its
	// script has nothing more to say, so it fails too, and the task fails.
	if len(task.Attempts) != 2 || task.Attempts[1].Turn != bus.AttemptTurn(id, "count", 2) || task.State != bus.TaskFailed ||
		got.State != bus.WorkflowFailed {
		t.Errorf("after the refusal:\n%s", workflow.View(got))
	}
	// Nothing was ever written as the task's result: no revision of the document holds one.
	hist, err := kv.History(ctx, bus.WorkflowKey(wfAgent, id))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist {
		var w bus.Workflow
		if err := json.Unmarshal(e.Value(), &w); err != nil {
			t.Fatal(err)
		}
		if r := w.Task("count").Result; r != nil {
			t.Errorf("revision %d holds a result: %s", e.Revision(), r)
		}
	}
}

// TestWorkflowCancelAbortsTasks: workflow_cancel aborts the running task turns, records
// their attempts and tasks as cancelled, and starts nothing that waited.
func TestWorkflowCancelAbortsTasks(t *testing.T) {
	t.Parallel()
	h := newWFHarness(t)
	slow := script(t, gateway.ScriptStep{DelayMS: 60_000}, submit(`{"n":1,"note":"late"}`))
	statuses := make(chan *nats.Msg, 64)
	sub, err := h.nc.ChanSubscribe("toolbus.turn.*.status.>", statuses)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	wf := h.startWorkflow(workflow.Definition{Title: "slow", Tasks: []workflow.TaskDef{
		{ID: "a", Instructions: "A.", ResultSchema: json.RawMessage(countSchema), Script: slow},
		{ID: "b", Instructions: "B.", ResultSchema: json.RawMessage(countSchema), Script: slow},
		{ID: "c", Instructions: "C after {{tasks.a.result}}.", ResultSchema: json.RawMessage(countSchema), DependsOn: []string{"a"}, Script: slow},
	}})
	turnA, turnB := bus.AttemptTurn(wf.ID, "a", 1), bus.AttemptTurn(wf.ID, "b", 1)
	started, done := map[string]bool{}, map[string]bus.TurnStatus{}
	collect := func(until func() bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for !until() {
			select {
			case m := <-statuses:
				ts, _ := bus.ParseTurnSubject(m.Subject)
				var st bus.TurnStatus
				_ = json.Unmarshal(m.Data, &st)
				switch ts.Status {
				case bus.StatusStarted:
					started[ts.Turn] = true
				case bus.StatusDone:
					done[ts.Turn] = st
				}
			case <-deadline:
				t.Fatalf("started %v, done %v", started, done)
			}
		}
	}
	// Both independent tasks run (their models think for a minute); c waits for a.
	collect(func() bool { return started[turnA] && started[turnB] })

	r := h.call("workflow_cancel", map[string]string{"workflow_id": wf.ID, "reason": "changed my mind"})
	if r.Outcome != bus.OutcomeOK || !strings.Contains(contentText(r), "cancelled") {
		t.Fatalf("workflow_cancel: %s %s %s", r.Outcome, r.Error, contentText(r))
	}
	collect(func() bool { return done[turnA].State != "" && done[turnB].State != "" })
	for _, turn := range []string{turnA, turnB} {
		if st := done[turn]; st.State != bus.TurnAborted || !strings.Contains(st.Error, "changed my mind") {
			t.Errorf("turn %s ended %s (%s), want aborted by the cancel", turn, st.State, st.Error)
		}
	}
	got := h.waitEnded(wf.ID)
	if got.State != bus.WorkflowCancelled || !strings.Contains(got.Error, "changed my mind") {
		t.Errorf("workflow %s (%s)", got.State, got.Error)
	}
	for _, id := range []string{"a", "b", "c"} {
		task := got.Task(id)
		if task.State != bus.TaskCancelled {
			t.Errorf("task %s is %s", id, task.State)
		}
		if id == "c" {
			if len(task.Attempts) != 0 {
				t.Errorf("task c had attempts %+v", task.Attempts)
			}
			continue
		}
		if len(task.Attempts) != 1 || task.Attempts[0].Outcome != bus.AttemptCancelled {
			t.Errorf("task %s attempts %+v", id, task.Attempts)
		}
	}
	// The turns' ends were settled after the cancel without changing it, and c's turn
	// was never queued.
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		for _, turn := range []string{turnA, turnB} {
			if rec, err := h.turnRecord(turn); err != nil || rec.State != bus.TurnAborted {
				return fmt.Errorf("turn %s record: %s %v", turn, rec.State, err)
			}
		}
		return nil
	})
	if _, err := h.turnRecord(bus.AttemptTurn(wf.ID, "c", 1)); !errors.Is(err, durable.ErrNoRecord) {
		t.Errorf("task c's turn has a record: %v", err)
	}
	if again := h.workflow(wf.ID); again.Task("a").Attempts[0].Outcome != bus.AttemptCancelled || again.State != bus.WorkflowCancelled {
		t.Errorf("after the turns ended:\n%s", workflow.View(again))
	}
	if r := h.call("workflow_cancel", map[string]string{"workflow_id": wf.ID}); r.Outcome != bus.OutcomeError || !strings.Contains(r.Error, "has ended already (cancelled)") {
		t.Errorf("a second cancel: %s %s", r.Outcome, r.Error)
	}
	// workflow_list and workflow_view see it.
	if r := h.call("workflow_list", map[string]string{"state": "cancelled"}); r.Outcome != bus.OutcomeOK || !strings.Contains(contentText(r), wf.ID) {
		t.Errorf("workflow_list: %s %s", r.Outcome, contentText(r))
	}
	if r := h.call("workflow_view", map[string]string{"workflow_id": wf.ID}); !strings.Contains(contentText(r), "- c: cancelled") {
		t.Errorf("workflow_view:\n%s", contentText(r))
	}
}

// TestWorkflowStateSurvivesRestart: a workflow whose first task is done and whose second
// runs when its node and server stop is found whole on the same store after a restart:
// the first task's result, the second's attempt, which the restarted node resumes (not
// retries) and finishes, and the dependent input it was given.
func TestWorkflowStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	h := newWFHarnessLease(t, 3*time.Second)
	wf := h.startWorkflow(workflow.Definition{Title: "two steps", Tasks: []workflow.TaskDef{
		{ID: "first", Instructions: "Count.", ResultSchema: json.RawMessage(countSchema), Script: script(t, submit(`{"n":7,"note":"seven"}`))},
		{ID: "second", Instructions: "Double {{tasks.first.result.n}} ({{tasks.first.result.note}}).", DependsOn: []string{"first"},
			ResultSchema: json.RawMessage(countSchema),
			Script:       script(t, gateway.ScriptStep{DelayMS: 1500}, submit(`{"n":14,"note":"doubled"}`))},
	}})
	second := bus.AttemptTurn(wf.ID, "second", 1)
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if rec, err := h.turnRecord(second); err != nil || rec.State != bus.TurnRunning {
			return fmt.Errorf("second task's turn: %s %v", rec.State, err)
		}
		return nil
	})
	before := h.workflow(wf.ID)
	if before.Task("first").State != bus.TaskDone || before.Task("second").State != bus.TaskRunning {
		t.Fatalf("before the restart:\n%s", workflow.View(before))
	}
	h.stop()
	h.start()

	after := h.waitEnded(wf.ID)
	first, sec := after.Task("first"), after.Task("second")
	if after.State != bus.WorkflowCompleted || string(first.Result) != string(before.Task("first").Result) ||
		string(sec.Result) != `{"n":14,"note":"doubled"}` || len(sec.Attempts) != 1 || len(first.Attempts) != 1 {
		t.Fatalf("after the restart:\n%s", workflow.View(after))
	}
	rec, err := h.turnRecord(second)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Resumes) == 0 || rec.State != bus.TurnTerminated {
		t.Errorf("the second task's turn was not resumed: %s, resumes %+v", rec.State, rec.Resumes)
	}
	if items := h.transcript(second); items[0].Text != "Double 7 (seven)." {
		t.Errorf("the second task's input %q", items[0].Text)
	}
	if !after.Created.Equal(before.Created) || after.Title != "two steps" {
		t.Errorf("the document changed: %+v", after)
	}
}

// TestMainTurnStartsWorkflow: a main turn run through the intake starts a workflow with
// workflow_start and lists it; the workflow's parent is that turn, and its task turns
// run as turns of their own. A task turn nobody's workflow wants is refused at the
// intake.
func TestMainTurnStartsWorkflow(t *testing.T) {
	t.Parallel()
	h := newWFHarness(t)
	ctx := t.Context()
	def, err := json.Marshal(oneTask(script(t, submit(`{"n":1,"note":"one"}`)), 1))
	if err != nil {
		t.Fatal(err)
	}
	mainScript := script(t,
		gateway.ScriptStep{Calls: []gateway.ScriptCall{{ID: "s1", Name: "workflow_start", Arguments: string(def)}}},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{{ID: "l1", Name: "workflow_list", Arguments: `{}`}}},
		gateway.ScriptStep{Text: "Started."},
	)
	turn := "main-" + bus.NewID()
	done := make(chan *nats.Msg, 1)
	sub, err := h.nc.ChanSubscribe(bus.TurnStatusSubject(turn, bus.StatusDone), done)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if _, err := h.node.submit(ctx, bus.TurnSpec{ID: turn, Agent: wfAgent, Input: "start it", Script: mainScript}, ""); err != nil {
		t.Fatal(err)
	}
	var st bus.TurnStatus
	select {
	case m := <-done:
		_ = json.Unmarshal(m.Data, &st)
	case <-time.After(30 * time.Second):
		t.Fatal("the main turn did not end")
	}
	if st.State != bus.TurnCompleted || len(st.Calls) != 2 || st.Calls[0].Outcome != bus.OutcomeOK || st.Calls[1].Outcome != bus.OutcomeOK {
		t.Fatalf("main turn %s: %+v", st.State, st.Calls)
	}
	var wf bus.Workflow
	if err := json.Unmarshal(st.Calls[0].Details, &wf); err != nil {
		t.Fatal(err)
	}
	if wf.Parent != turn {
		t.Errorf("the workflow's parent is %q, want the main turn %s", wf.Parent, turn)
	}
	if got := h.waitEnded(wf.ID); got.State != bus.WorkflowCompleted {
		t.Errorf("workflow:\n%s", workflow.View(got))
	}
	rec, err := h.turnRecord(bus.AttemptTurn(wf.ID, "count", 1))
	if err != nil || rec.Spec.Kind != bus.TurnTask || rec.Spec.Parent != turn || rec.Spec.Workflow != wf.ID {
		t.Errorf("task turn record %+v, %v", rec.Spec, err)
	}

	// Over the bus, a task turn must be its task's live attempt.
	for _, tc := range []struct {
		spec bus.TurnSpec
		want string
	}{
		{bus.TurnSpec{ID: "stray-1", Kind: bus.TurnTask, Agent: wfAgent, Workflow: "nope", Task: "count", Input: "x",
			ResultSchema: json.RawMessage(countSchema), Script: script(t, submit(`{}`))}, "no such workflow"},
		{bus.TurnSpec{ID: "stray-2", Kind: bus.TurnTask, Agent: wfAgent, Workflow: wf.ID, Task: "count", Input: "x",
			ResultSchema: json.RawMessage(countSchema), Script: script(t, submit(`{}`))}, "turn stray-2 is not an attempt of task count of workflow " + wf.ID},
		{bus.TurnSpec{ID: bus.AttemptTurn(wf.ID, "count", 1), Kind: bus.TurnTask, Agent: wfAgent, Workflow: wf.ID, Task: "count", Input: "x",
			ResultSchema: json.RawMessage(countSchema), Script: script(t, submit(`{}`))}, "attempt 1 of task count has ended (accepted)"},
		{bus.TurnSpec{ID: "stray-3", Kind: bus.TurnTask, Agent: wfAgent, Task: "count", Input: "x"}, "a task turn needs a workflow_id"},
	} {
		b, _ := json.Marshal(tc.spec)
		m, err := h.nc.Request(bus.AnyNodeStartTurn, b, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var reply bus.StartTurnReply
		_ = json.Unmarshal(m.Data, &reply)
		if !strings.Contains(reply.Error, tc.want) {
			t.Errorf("start %s: %q, want %q", tc.spec.ID, reply.Error, tc.want)
		}
	}
}

// TestWorkflowHostWithoutTurns: a node that hosts the workflow category but runs no turns
// queues task turns through a node that does (toolbus.nodes.turn.start), and the
// workflow completes there.
func TestWorkflowHostWithoutTurns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{StoreDir: t.TempDir(), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	connect := func(name string) (*nats.Conn, error) { return srv.Connect(name) }
	runner, err := StartNode(ctx, NodeConfig{Name: "runner", Connect: connect, Turns: true, Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	host, err := StartNode(ctx, NodeConfig{Name: "host", Connect: connect, Categories: []string{workflow.Category}, Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	nc, err := srv.Connect("client")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	h := &wfHarness{t: t, nc: nc, js: js}
	wf := h.startWorkflow(oneTask(script(t, submit(`{"n":2,"note":"two"}`)), 1))
	got := h.waitEnded(wf.ID)
	if got.State != bus.WorkflowCompleted {
		t.Fatalf("workflow:\n%s", workflow.View(got))
	}
	rec, err := h.turnRecord(got.Task("count").Attempts[0].Turn)
	if err != nil || rec.Owner != "runner" {
		t.Errorf("the task turn ran on %q (%v), want the node that runs turns", rec.Owner, err)
	}
}

// TestResumedTaskEndsWithItsAcceptedSubmission: a task turn whose node was lost after its
// submit_result was accepted and stored, but before its end was, ends at once on the node
// that resumes it, terminated with that submission, without asking the model again; the
// result is written.
func TestResumedTaskEndsWithItsAcceptedSubmission(t *testing.T) {
	t.Parallel()
	h := newWFHarness(t)
	ctx := t.Context()
	id := bus.NewID()
	turn := bus.AttemptTurn(id, "count", 1)
	now := time.Now().UTC()
	never := script(t, gateway.ScriptStep{Text: "asked again"})
	wf := bus.Workflow{ID: id, Agent: wfAgent, Title: "resume", State: bus.WorkflowRunning, Created: now, Updated: now,
		Tasks: []bus.Task{{ID: "count", Instructions: "Count.", ResultSchema: json.RawMessage(countSchema), MaxAttempts: 1, Script: never,
			State: bus.TaskRunning, Attempts: []bus.Attempt{{N: 1, Turn: turn, Started: now}}}}}
	kv, err := bus.EnsureKeyValue(ctx, h.js, bus.WorkflowsBucketConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(wf)
	if _, err := kv.Create(ctx, bus.WorkflowKey(wfAgent, id), doc); err != nil {
		t.Fatal(err)
	}
	// What the lost node had stored: the response with the submission, then its output.
	for seq, items := range [][]toolbus.Item{
		{toolbus.UserMessage("Count."), {Kind: toolbus.KindFunctionCall, CallID: "c1", Name: "submit_result", Arguments: `{"result":{"n":5,"note":"five"}}`}},
		{{Kind: toolbus.KindCallOutput, CallID: "c1", Name: "submit_result", Output: []toolbus.ContentPart{toolbus.Text("Result accepted. The task is done.")}}},
	} {
		m := nats.NewMsg(bus.TranscriptSubject(turn))
		m.Data, _ = json.Marshal(items)
		m.Header.Set(bus.HeaderSeq, fmt.Sprint(seq+1))
		if _, err := h.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	spec := bus.TurnSpec{ID: turn, Kind: bus.TurnTask, Agent: wfAgent, Workflow: id, Task: "count", Input: "Count.",
		ResultSchema: json.RawMessage(countSchema), Script: never}
	turns := h.turns(ctx)
	if _, err := turns.RestoreRecord(ctx, bus.TurnRecord{Spec: spec, State: bus.TurnRunning, Owner: "ghost", Epoch: 1, Step: 1, Stored: 2,
		Batch: []bus.CallState{{Call: "c1", Tool: "submit_result", State: bus.CallPending}}, Created: now, Updated: now}); err != nil {
		t.Fatal(err)
	}
	// Its spec in the intake again, as an operator resumes a turn whose node was lost.
	if _, err := turns.Requeue(ctx, turn); err != nil {
		t.Fatal(err)
	}
	got := h.waitEnded(id)
	if task := got.Task("count"); got.State != bus.WorkflowCompleted || string(task.Result) != `{"n":5,"note":"five"}` {
		t.Fatalf("workflow:\n%s", workflow.View(got))
	}
	end, err := h.turnRecord(turn)
	if err != nil {
		t.Fatal(err)
	}
	if end.State != bus.TurnTerminated || end.Step != 1 || len(end.Resumes) != 1 || end.Resumes[0].From != "ghost" ||
		string(end.Submitted) != `{"result":{"n":5,"note":"five"}}` {
		t.Errorf("turn record: %s after %d steps, resumes %+v, submitted %s", end.State, end.Step, end.Resumes, end.Submitted)
	}
}

// textSchema is a result schema: an object with a string text.
const textSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`

// TestTemplateTooLargeFailsTask: a task whose instructions repeat the ~40 KB result of
// the task it depends on 30 times (1.2 MB: more than the bus carries in one message)
// fails as soon as a's result is in, with the cap's reason in the workflow's document
// and no turn; the task after it fails as a dependency's failure says, the task that
// does not need it runs, and the workflow ends. The turn whose end started b is settled
// once and acknowledged: no warning, no redelivery, nothing left in the intake.
func TestTemplateTooLargeFailsTask(t *testing.T) {
	t.Parallel()
	h := newWFHarness(t)
	aResult, _ := json.Marshal(map[string]string{"text": strings.Repeat("findings ", 40<<10/9)})
	def := workflow.Definition{Title: "too big", Tasks: []workflow.TaskDef{
		{ID: "a", Instructions: "Collect the findings.", ResultSchema: json.RawMessage(textSchema), Script: script(t, submit(string(aResult)))},
		{ID: "b", Instructions: strings.Repeat("Again: {{tasks.a.result}}\n", 30), ResultSchema: json.RawMessage(textSchema),
			DependsOn: []string{"a"}, Script: script(t, submit(`{"text":"never"}`))},
		{ID: "c", Instructions: "Sum up {{tasks.b.result.text}}", ResultSchema: json.RawMessage(textSchema),
			DependsOn: []string{"b"}, Script: script(t, submit(`{"text":"never"}`))},
		{ID: "d", Instructions: "Check {{tasks.a.result.text}}", ResultSchema: json.RawMessage(textSchema),
			DependsOn: []string{"a"}, Script: script(t, submit(`{"text":"checked"}`))},
	}}
	wf := h.startWorkflow(def)
	got := h.waitEnded(wf.ID)
	a, b, c, d := got.Task("a"), got.Task("b"), got.Task("c"), got.Task("d")
	if got.State != bus.WorkflowFailed || a.State != bus.TaskDone || b.State != bus.TaskFailed || c.State != bus.TaskFailed || d.State != bus.TaskDone {
		t.Fatalf("workflow %s; tasks a %s, b %s, c %s, d %s: %s", got.State, a.State, b.State, c.State, d.State, b.Error)
	}
	for _, part := range []string{
		"not started: the instructions of task b expand to 1.2 MiB (",
		"bytes, with 30 references filled in), over the 256 KiB a task's instructions may hold",
		"refer to each result once",
	} {
		if !strings.Contains(b.Error, part) {
			t.Errorf("b's error lacks %q: %s", part, b.Error)
		}
	}
	if len(b.Attempts) != 0 || c.Error != "task b, which it depends on, failed" || got.Error != "2 of 4 tasks did not finish: b, c" {
		t.Errorf("b's attempts %+v; c's error %q; the workflow's %q", b.Attempts, c.Error, got.Error)
	}
	// b never had a turn.
	turns := h.turns(t.Context())
	if _, _, err := turns.Record(t.Context(), bus.AttemptTurn(wf.ID, "b", 1)); !errors.Is(err, durable.ErrNoRecord) {
		t.Errorf("b's turn: %v, want no record", err)
	}
	// Every task turn's intake message is acknowledged (a's was, after its settle
	// moved the workflow on), and nothing was settled twice or warned about.
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		n, err := turns.IntakeMessages(t.Context())
		if err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%d turn messages are still in the intake", n)
		}
		return nil
	})
	// A turn message delivered again is not a fault here: on a machine loaded enough
	// (load 13 on 2 cores, in CI beside the other packages) a task's 10 s lease passed
	// before its end was acknowledged, and the intake gave it again, which the claim
	// settled as ended. A warning is one.
	if logs := h.logs.String(); strings.Contains(logs, "level=WARN") {
		t.Errorf("the node warned:\n%.2000s", logs)
	}
	// The view says so too.
	r := h.call("workflow_view", map[string]string{"workflow_id": wf.ID, "task_id": "b"})
	if r.Outcome != bus.OutcomeOK || !strings.Contains(contentText(r), "- b: failed\n  error: not started: the instructions of task b expand to 1.2 MiB") {
		t.Errorf("workflow_view of b: %s %s\n%s", r.Outcome, r.Error, contentText(r))
	}
}

// TestTaskResultFormatInTheTurn: a task whose first submission has "when": "yesterday",
// against a result schema whose when is a date-time, reads the refusal and submits
// again, in the same attempt (the formats themselves: toolsets/workflow's
// TestTaskResultFormatAsserted).
func TestTaskResultFormatInTheTurn(t *testing.T) {
	t.Parallel()
	h := newWFHarness(t)
	const when = `{"type":"object","properties":{"when":{"type":"string","format":"date-time"}},"required":["when"]}`
	def := workflow.Definition{Title: "formats", Tasks: []workflow.TaskDef{{
		ID: "a", Instructions: "When did it happen?", ResultSchema: json.RawMessage(when),
		Script: script(t, submit(`{"when":"yesterday"}`), submit(`{"when":"2025-01-31T09:30:00Z"}`)),
	}}}
	wf := h.startWorkflow(def)
	got := h.waitEnded(wf.ID)
	a := got.Task("a")
	if got.State != bus.WorkflowCompleted || a.State != bus.TaskDone || len(a.Attempts) != 1 {
		t.Fatalf("workflow %s, task %s with %d attempts: %s", got.State, a.State, len(a.Attempts), a.Error)
	}
	if string(a.Result) != `{"when":"2025-01-31T09:30:00Z"}` {
		t.Errorf("result %s", a.Result)
	}
	turns := h.turns(t.Context())
	var refusal string
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		items, err := turns.ReadTranscript(t.Context(), bus.AttemptTurn(wf.ID, "a", 1))
		if err != nil {
			return err
		}
		for _, it := range items {
			if it.Kind == toolbus.KindCallOutput && it.IsError {
				for _, p := range it.Output {
					refusal += p.Text
				}
				return nil
			}
		}
		return errors.New("no error result in the task's transcript")
	})
	if !strings.Contains(refusal, "/result/when: value does not match format 'date-time' (RFC 3339") {
		t.Errorf("the model read: %s", refusal)
	}
}
