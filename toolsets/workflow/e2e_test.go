package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// These tests run workflows end to end on a real embedded server: a node that hosts the
// workflow category and runs turns from the intake; task turns play inline scripts.

const agent = "wf-limits"

type harness struct {
	t    *testing.T
	node *actors.Node
	nc   *nats.Conn
	js   jetstream.JetStream
	logs *bustest.Buffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := bus.Start(ctx, bus.Config{StoreDir: t.TempDir(), Logger: actors.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	logs := &bustest.Buffer{}
	n, err := actors.StartNode(ctx, actors.NodeConfig{
		Name:       "n1",
		Connect:    func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Categories: []string{workflow.Category},
		Turns:      true,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		AbortGrace: 300 * time.Millisecond,
		TurnLease:  3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	nc, err := srv.Connect("client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, node: n, nc: nc, js: js, logs: logs}
}

// call calls a workflow tool over the bus as the test agent and returns its reply and
// the size of the reply message.
func (h *harness) call(tool string, args any) (bus.ToolReply, int) {
	h.t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		h.t.Fatal(err)
	}
	m := nats.NewMsg(bus.ToolSubject(workflow.Category, tool))
	m.Data = b
	bus.ToolRequest{Turn: "caller-" + bus.NewID(), Call: bus.NewID(), Agent: agent, Deadline: time.Now().Add(time.Minute)}.SetHeaders(m.Header)
	resp, err := h.nc.RequestMsg(m, time.Minute)
	if err != nil {
		h.t.Fatalf("%s: %v", tool, err)
	}
	var r bus.ToolReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		h.t.Fatalf("%s: %v: %s", tool, err, resp.Data)
	}
	return r, len(resp.Data)
}

func text(r bus.ToolReply) string {
	var parts []string
	for _, p := range r.Content {
		parts = append(parts, p.Text)
	}
	return strings.Join(parts, "\n")
}

func (h *harness) start(def workflow.Definition) *bus.Workflow {
	h.t.Helper()
	r, _ := h.call("workflow_start", def)
	if r.Outcome != bus.OutcomeOK {
		h.t.Fatalf("workflow_start: %s: %s %s", r.Outcome, r.Error, text(r))
	}
	var wf bus.Workflow
	if err := json.Unmarshal(r.Details, &wf); err != nil {
		h.t.Fatal(err)
	}
	return &wf
}

func (h *harness) workflow(id string) *bus.Workflow {
	h.t.Helper()
	wf, _, err := h.node.Services().Workflows().Get(context.Background(), agent, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return wf
}

func (h *harness) waitEnded(id string) *bus.Workflow {
	h.t.Helper()
	var wf *bus.Workflow
	bustest.CheckFor(h.t, 30*time.Second, 20*time.Millisecond, func() error {
		wf = h.workflow(id)
		if !wf.State.Ended() {
			var tasks []string
			for _, t := range wf.Tasks {
				tasks = append(tasks, fmt.Sprintf("%s %s (%d attempts)", t.ID, t.State, len(t.Attempts)))
			}
			return fmt.Errorf("workflow still %s: %s", wf.State, strings.Join(tasks, ", "))
		}
		return nil
	})
	return wf
}

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

const textSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`

// TestTemplateTooLargeFailsTask: a task whose instructions repeat the ~40 KB result of
// the task it depends on 30 times (1.2 MB: more than the bus carries in one message)
// fails as soon as a's result is in, with the cap's reason in the workflow's document
// and no turn; the task after it fails as a dependency's failure says, the task that
// does not need it runs, and the workflow ends. The turn whose end started b is settled
// once and acknowledged: no warning, no redelivery, nothing left in the intake.
func TestTemplateTooLargeFailsTask(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
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
	started := time.Now()
	wf := h.start(def)
	got := h.waitEnded(wf.ID)
	took := time.Since(started)
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
	if took > 10*time.Second {
		t.Errorf("the workflow took %v to end", took)
	}
	// b never had a turn.
	turns, err := durable.Open(t.Context(), h.js, durable.Config{})
	if err != nil {
		t.Fatal(err)
	}
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
	if logs := h.logs.String(); strings.Contains(logs, "level=WARN") || strings.Contains(logs, "delivered again") {
		t.Errorf("the node warned or took a turn again:\n%.2000s", logs)
	}
	// The view says so too.
	r, _ := h.call("workflow_view", map[string]string{"workflow_id": wf.ID, "task_id": "b"})
	if r.Outcome != bus.OutcomeOK || !strings.Contains(text(r), "- b: failed\n  error: not started: the instructions of task b expand to 1.2 MiB") {
		t.Errorf("workflow_view of b: %s %s\n%s", r.Outcome, r.Error, text(r))
	}
}
