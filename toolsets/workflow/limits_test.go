package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/durable"
)

const textSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`

// textResult is a result of textSchema holding about n bytes.
func textResult(n int) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"text": strings.Repeat("findings ", n/9)})
	return b
}

// TestInstructionsCapCheck: a task whose instructions expand past MaxInstructionsBytes
// fails in the step that would start it, with the sizes and what to do, and gets no
// attempt; the task after it fails as a dependency's failure says; a task that does not
// need it starts; the same instructions with fewer references start.
func TestInstructionsCapCheck(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	a := textResult(40 << 10)
	wf := &bus.Workflow{ID: "w", Agent: "x", Title: "caps", State: bus.WorkflowRunning, Tasks: []bus.Task{
		{ID: "a", State: bus.TaskDone, Result: a, MaxAttempts: 1, ResultSchema: json.RawMessage(textSchema)},
		{ID: "b", Instructions: strings.Repeat("Again: {{tasks.a.result}}\n", 30), DependsOn: []string{"a"}, MaxAttempts: 1,
			State: bus.TaskPending, ResultSchema: json.RawMessage(textSchema)},
		{ID: "c", Instructions: "after {{tasks.b.result.text}}", DependsOn: []string{"b"}, MaxAttempts: 1, State: bus.TaskPending,
			ResultSchema: json.RawMessage(textSchema)},
		{ID: "d", Instructions: "a field: {{tasks.a.result.text}}", DependsOn: []string{"a"}, MaxAttempts: 1, State: bus.TaskPending,
			ResultSchema: json.RawMessage(textSchema)},
	}}
	lim := limits{doc: MaxDocumentBytes, spec: 512 << 10, payload: 1 << 20}
	if !advance(wf, now, lim) {
		t.Fatal("advance changed nothing")
	}
	b, c, d := wf.Task("b"), wf.Task("c"), wf.Task("d")
	want := renderedSize(b.Instructions, map[string]json.RawMessage{"a": a})
	if got := len(Render(b.Instructions, map[string]json.RawMessage{"a": a})); got != want || want < 30*len(a) {
		t.Fatalf("renderedSize %d, len(Render) %d, 30 results %d", want, got, 30*len(a))
	}
	if b.State != bus.TaskFailed || len(b.Attempts) != 0 {
		t.Fatalf("b: %s with %d attempts, want failed without one", b.State, len(b.Attempts))
	}
	for _, part := range []string{
		"not started: the instructions of task b expand to 1.2 MiB (" + fmt.Sprint(want) + " bytes, with 30 references filled in)",
		"over the 256 KiB a task's instructions may hold",
		"refer to each result once",
	} {
		if !strings.Contains(b.Error, part) {
			t.Errorf("b's error lacks %q:\n%s", part, b.Error)
		}
	}
	if c.State != bus.TaskFailed || c.Error != "task b, which it depends on, failed" {
		t.Errorf("c: %s: %s", c.State, c.Error)
	}
	if d.State != bus.TaskRunning || len(d.Attempts) != 1 {
		t.Errorf("d: %s with %d attempts, want running", d.State, len(d.Attempts))
	}
	if wf.State != bus.WorkflowRunning {
		t.Errorf("workflow %s while d runs", wf.State)
	}

	// Five references: 200 KB, within the cap.
	wf.Tasks[1].State, wf.Tasks[1].Error = bus.TaskPending, ""
	wf.Tasks[1].Instructions = strings.Repeat("Again: {{tasks.a.result}}\n", 5)
	wf.Tasks[2].State, wf.Tasks[2].Error = bus.TaskPending, ""
	advance(wf, now, lim)
	if b.State != bus.TaskRunning || c.State != bus.TaskPending {
		t.Errorf("within the cap: b %s (%s), c %s", b.State, b.Error, c.State)
	}

	// A turn the bus cannot carry, though its instructions are within the cap.
	wf.Tasks[1].State, wf.Tasks[1].Attempts = bus.TaskPending, nil
	advance(wf, now, limits{doc: MaxDocumentBytes, spec: 100 << 10, payload: 200 << 10})
	if b.State != bus.TaskFailed || !strings.Contains(b.Error, "over the 100 KiB a task turn may be (half the 200 KiB the bus carries") {
		t.Errorf("a spec over the bus's half: b %s: %s", b.State, b.Error)
	}

	// As written, instructions over the cap are refused with the definition.
	def := Definition{Title: "t", Tasks: []TaskDef{{ID: "a", Instructions: strings.Repeat("x", MaxInstructionsBytes+1), ResultSchema: json.RawMessage(textSchema)}}}
	if err := def.Check(); err == nil || !strings.Contains(err.Error(), "task a: instructions are 256 KiB (262145 bytes), over the 256 KiB") {
		t.Errorf("instructions over the cap as written: %v", err)
	}
}

// TestResultOverDocumentCapFailsAttempt: a result that would take the workflow's document
// past its cap is not written; the attempt fails saying so, and the task tries again
// while it has attempts.
func TestResultOverDocumentCapFailsAttempt(t *testing.T) {
	t.Parallel()
	wf := &bus.Workflow{ID: "w", Agent: "x", Title: "doc", State: bus.WorkflowRunning, Tasks: []bus.Task{
		{ID: "a", Instructions: strings.Repeat("i", 6<<10), ResultSchema: json.RawMessage(textSchema), MaxAttempts: 2, State: bus.TaskRunning,
			Attempts: []bus.Attempt{{N: 1, Turn: "w-a-1"}}},
	}}
	sub, _ := json.Marshal(map[string]json.RawMessage{"result": textResult(8 << 10)})
	rec := bus.TurnRecord{Spec: bus.TurnSpec{ID: "w-a-1"}, State: bus.TurnTerminated, Submitted: sub}
	task := &wf.Tasks[0]
	recordAttempt(wf, task, &task.Attempts[0], rec, limits{doc: 12 << 10})
	a := task.Attempts[0]
	if a.Outcome != bus.AttemptFailed || task.Result != nil ||
		!strings.Contains(a.Reason, "the result is 8 KiB; with it the workflow's document would be ") ||
		!strings.Contains(a.Reason, "over the 12 KiB a workflow's document may hold, so it was not written") {
		t.Fatalf("attempt %s: %s (result %d bytes)", a.Outcome, a.Reason, len(task.Result))
	}
	if task.State != bus.TaskRunning || len(task.Attempts) != 2 {
		t.Errorf("task %s with %d attempts, want a second", task.State, len(task.Attempts))
	}
	// Within the cap it is written.
	recordAttempt(wf, task, &task.Attempts[1], rec, limits{doc: MaxDocumentBytes})
	if task.State != bus.TaskDone || len(task.Result) < 8<<10-16 {
		t.Errorf("task %s, result %d bytes", task.State, len(task.Result))
	}
	// A reason is clipped.
	long := bus.TurnRecord{Spec: bus.TurnSpec{ID: "w-a-1"}, State: bus.TurnFailed, Error: strings.Repeat("é", 4<<10)}
	wf.Tasks[0] = bus.Task{ID: "a", MaxAttempts: 1, State: bus.TaskRunning, Attempts: []bus.Attempt{{N: 1, Turn: "w-a-1"}}}
	recordAttempt(wf, task, &task.Attempts[0], long, limits{doc: MaxDocumentBytes})
	if r := task.Attempts[0].Reason; len(r) > MaxReasonBytes+64 || !strings.Contains(r, "… (clipped: ") || !strings.HasPrefix(r, "the turn ended failed: éé") {
		t.Errorf("reason of %d bytes: %.80s…", len(r), r)
	}
	if len(task.Error) > 2*MaxReasonBytes {
		t.Errorf("task error of %d bytes", len(task.Error))
	}
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nats.ErrMaxPayload, true},
		{fmt.Errorf("queue: %w", nats.ErrMaxPayload), true},
		{fmt.Errorf("start turn x: %w", durable.SpecTooLarge(1229588, 1048576)), true},
		{errors.New("the turn spec is 1229588 bytes, more than the bus carries in one message"), false}, // matched by value, never by text
		{errors.New("nats: no responders available for request"), false},
		{nil, false},
	} {
		if got := tooLarge(tc.err); got != tc.want {
			t.Errorf("tooLarge(%v) = %v", tc.err, got)
		}
	}
	if got := sizeOf(900) + ", " + sizeOf(64<<10) + ", " + sizeOf(1229588); got != "900 bytes, 64 KiB, 1.2 MiB" {
		t.Errorf("sizeOf: %s", got)
	}
}

// fakeRunner queues nothing: it records the specs, refusing those refuse names.
type fakeRunner struct {
	mu     sync.Mutex
	queued []string
	refuse func(spec bus.TurnSpec) error
}

func (r *fakeRunner) Check(bus.TurnSpec) error { return nil }

func (r *fakeRunner) Queue(_ context.Context, spec bus.TurnSpec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse != nil {
		if err := r.refuse(spec); err != nil {
			return err
		}
	}
	r.queued = append(r.queued, spec.ID)
	return nil
}

func (r *fakeRunner) Abort(string, string) error { return nil }

// newTestEngine is an engine on an embedded server, with run as its runner.
func newTestEngine(t *testing.T, run Runner) *Engine {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	js := bustest.JetStream(t, bustest.Server(t, nil), "test")
	return NewEngine(js, 1, run, quiet)
}

// TestUnqueueableTurnFailsTask: a turn the intake refuses for its size (as durable's
// Submit words it) fails its attempt and its task at once; the workflow moves on (here:
// ends, its other task done) and Settle succeeds, so the ended turn's intake message is
// acknowledged rather than settled again and again. Settling it again changes nothing.
func TestUnqueueableTurnFailsTask(t *testing.T) {
	t.Parallel()
	run := &fakeRunner{refuse: func(spec bus.TurnSpec) error {
		if spec.Task == "b" {
			return fmt.Errorf("start turn %s: %w", spec.ID, durable.SpecTooLarge(1229588, 1048576))
		}
		return nil
	}}
	e := newTestEngine(t, run)
	ctx := t.Context()
	wf, err := e.Start(ctx, "x", "", Definition{Title: "refused", Tasks: []TaskDef{
		{ID: "a", Instructions: "A", ResultSchema: json.RawMessage(textSchema), Script: json.RawMessage(`{}`)},
		{ID: "b", Instructions: "B after {{tasks.a.result.text}}", ResultSchema: json.RawMessage(textSchema), DependsOn: []string{"a"},
			MaxAttempts: 3, Script: json.RawMessage(`{}`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	end := bus.TurnRecord{Spec: taskTurn(wf, wf.Task("a"), wf.Task("a").Attempts[0]), State: bus.TurnTerminated,
		Submitted: json.RawMessage(`{"result":{"text":"found"}}`)}
	if err := e.Settle(ctx, end); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	got, _, err := e.Get(ctx, "x", wf.ID)
	if err != nil {
		t.Fatal(err)
	}
	b := got.Task("b")
	if got.State != bus.WorkflowFailed || b.State != bus.TaskFailed || len(b.Attempts) != 1 || b.Attempts[0].Outcome != bus.AttemptFailed ||
		!strings.HasPrefix(b.Error, "attempt 1 of 3 failed: its turn could not be queued: start turn "+b.Attempts[0].Turn+": the turn spec is 1229588 bytes") {
		t.Fatalf("after the refusal:\n%s", View(got))
	}
	if err := e.Settle(ctx, end); err != nil {
		t.Fatalf("Settle again: %v", err)
	}
	if again, _, _ := e.Get(ctx, "x", wf.ID); !again.Updated.Equal(got.Updated) {
		t.Errorf("settling again wrote the workflow:\n%s", View(again))
	}
	if want := []string{bus.AttemptTurn(wf.ID, "a", 1)}; !slices.Equal(run.queued, want) {
		t.Errorf("queued %v, want %v", run.queued, want)
	}
}

// TestWorkflowListPages: workflow_list pages through many workflows, some of them with
// documents of hundreds of KiB, with limit and after: every page's result stays far
// under the bus's 1 MiB, holds summaries only (no instructions or results), and the
// pages walk every workflow once, newest first; a state filter pages the same way.
func TestWorkflowListPages(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, &fakeRunner{})
	ctx := t.Context()
	var ids []string // oldest first
	for i := range 45 {
		instructions := fmt.Sprintf("Task %d.", i)
		if i%10 == 3 {
			instructions = strings.Repeat("Read it all. ", 250<<10/13) // a document of 250 KB
		}
		wf, err := e.Start(ctx, "x", "", Definition{Title: fmt.Sprintf("workflow %d", i), Tasks: []TaskDef{
			{ID: "a", Instructions: instructions, ResultSchema: json.RawMessage(textSchema), Script: json.RawMessage(`{}`)},
			{ID: "b", Instructions: "then", ResultSchema: json.RawMessage(textSchema), DependsOn: []string{"a"}, Script: json.RawMessage(`{}`)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			if _, err := e.Cancel(ctx, "x", wf.ID, "not needed"); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, wf.ID)
	}
	newestFirst := slices.Clone(ids)
	slices.Reverse(newestFirst)
	list := toolOf(t, e, "workflow_list")

	walk := func(args map[string]any) (seen []string, pages int) {
		t.Helper()
		after := ""
		for pages = 1; ; pages++ {
			if after != "" {
				args["after"] = after
			}
			res := execute(t, list, args)
			if n := encodedSize(t, res); n > maxListBytes+16<<10 {
				t.Fatalf("page %d is %d bytes encoded", pages, n)
			}
			var page []map[string]any
			if err := json.Unmarshal(res.Details, &page); err != nil {
				t.Fatal(err)
			}
			text := res.Content[0].Text
			for _, s := range page {
				for _, tk := range s["tasks"].([]any) {
					if len(tk.(map[string]any)) != 2 {
						t.Fatalf("a task in a listing has more than its id and state: %v", tk)
					}
				}
				id := s["workflow_id"].(string)
				if !strings.Contains(text, id) {
					t.Errorf("page %d's text lacks %s:\n%s", pages, id, text)
				}
				seen = append(seen, id)
			}
			if !strings.Contains(text, "lists the next") {
				return seen, pages
			}
			after = page[len(page)-1]["workflow_id"].(string)
			if !strings.Contains(text, fmt.Sprintf(`workflow_list with "after": %q lists the next.`, after)) {
				t.Fatalf("page %d does not say how to go on:\n%s", pages, text)
			}
		}
	}
	if seen, pages := walk(map[string]any{}); !slices.Equal(seen, newestFirst) || pages != 3 {
		t.Errorf("the default pages (%d) walked %d workflows, want all %d newest first", pages, len(seen), len(ids))
	}
	if seen, pages := walk(map[string]any{"limit": 7}); !slices.Equal(seen, newestFirst) || pages != 7 {
		t.Errorf("pages of 7 (%d) walked %d workflows, want all %d newest first", pages, len(seen), len(ids))
	}
	var cancelled []string
	for i, id := range newestFirst {
		if (len(ids)-1-i)%4 == 0 {
			cancelled = append(cancelled, id)
		}
	}
	if seen, _ := walk(map[string]any{"limit": 5, "state": "cancelled"}); !slices.Equal(seen, cancelled) {
		t.Errorf("the cancelled ones: %v, want %v", seen, cancelled)
	}
	// A listing of whole documents, as it was, would not fit in a bus message: the five
	// big ones are 250 KB each.
	whole := 0
	for _, id := range ids {
		wf, _, err := e.Get(ctx, "x", id)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(wf)
		whole += len(b)
	}
	if whole < 1<<20 {
		t.Fatalf("the documents are %d bytes in all; the test wants more than a bus message", whole)
	}
	if _, err := e.List(ctx, "x", ListQuery{After: "nope"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("after an unknown workflow: %v", err)
	}
	if _, err := e.List(ctx, "x", ListQuery{Limit: MaxListLimit + 1}); err == nil || !strings.Contains(err.Error(), "limit 101 is out of range: 1 to 100") {
		t.Errorf("limit over the most: %v", err)
	}
	if res := execute(t, list, map[string]any{"after": newestFirst[len(newestFirst)-1]}); res.Content[0].Text != "No more workflows after "+ids[0]+"." {
		t.Errorf("after the last: %s", res.Content[0].Text)
	}
}

// TestViewLeavesOutResultsPastItsSize: workflow_view's text holds results while they fit
// in its size and says how to read those it leaves out; with task_id, one task's whole
// result.
func TestViewLeavesOutResultsPastItsSize(t *testing.T) {
	t.Parallel()
	wf := &bus.Workflow{ID: "w", Title: "big results", State: bus.WorkflowCompleted}
	for i := range 5 {
		wf.Tasks = append(wf.Tasks, bus.Task{ID: fmt.Sprintf("t%d", i), State: bus.TaskDone, MaxAttempts: 1, Result: textResult(60 << 10)})
	}
	text := view(wf, "", maxViewBytes)
	if len(text) > maxViewBytes {
		t.Errorf("the view is %d bytes", len(text))
	}
	for _, want := range []string{
		`- t1: done`, `- t4: done`,
		`  result: 60 KiB, left out here; workflow_view with "task_id": "t4" shows it`,
		`(3 results left out: the view holds 128 KiB at most.)`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the view lacks %q", want)
		}
	}
	if strings.Count(text, `"text":"findings`) != 2 {
		t.Errorf("the view shows %d results whole, want 2", strings.Count(text, `"text":"findings`))
	}
	one := view(wf, "t4", maxViewBytes)
	if !strings.Contains(one, "  result: "+string(wf.Tasks[4].Result)) || strings.Contains(one, "- t0") {
		t.Errorf("the view of t4 (%d bytes) lacks its whole result, or has other tasks", len(one))
	}
	if full := View(wf); strings.Count(full, `"text":"findings`) != 5 {
		t.Errorf("View leaves results out")
	}
}

func toolOf(t *testing.T, e *Engine, name string) *toolbus.Tool {
	t.Helper()
	for _, tool := range Tools(e) {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

func execute(t *testing.T, tool *toolbus.Tool, args any) toolbus.Result {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tool.Execute(t.Context(), toolbus.Call{Turn: "caller", ID: "c1", Tool: tool.Name, Agent: "x", Args: b, Progress: func(string) {}})
	if err != nil {
		t.Fatalf("%s %s: %v", tool.Name, b, err)
	}
	return res
}

// encodedSize is the size of a result as a reply carries it.
func encodedSize(t *testing.T, res toolbus.Result) int {
	t.Helper()
	b, err := json.Marshal(bus.ToolReply{Content: []bus.ContentPart{{Type: "text", Text: res.Content[0].Text}}, Details: res.Details})
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// TestCancelSaysWhyOnce: a cancelled workflow's error is the reason alone, as its state
// already says cancelled; the view reads "cancelled (…) — interrupted", not
// "cancelled: cancelled: interrupted". Its record has an end time from then on.
func TestCancelSaysWhyOnce(t *testing.T) {
	e := newTestEngine(t, &fakeRunner{})
	ctx := t.Context()
	wf, err := e.Start(ctx, "x", "", Definition{Title: "t", Tasks: []TaskDef{
		{ID: "a", Instructions: "Do it.", ResultSchema: json.RawMessage(textSchema), Script: json.RawMessage(`{}`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !wf.Ended.IsZero() {
		t.Errorf("a running workflow has an end: %v", wf.Ended)
	}
	if wf, err = e.Cancel(ctx, "x", wf.ID, "interrupted"); err != nil {
		t.Fatal(err)
	}
	if wf.Ended.IsZero() || wf.Ended.Before(wf.Created) || !wf.Ended.Equal(wf.Updated) {
		t.Errorf("ended %v, created %v, updated %v: want the end stamped at the cancel", wf.Ended, wf.Created, wf.Updated)
	}
	if wf.Error != "interrupted" || wf.Tasks[0].Error != "interrupted" {
		t.Errorf("errors %q and %q, want the reason alone", wf.Error, wf.Tasks[0].Error)
	}
	if v := View(wf); !strings.Contains(v, "cancelled (0 of 1 tasks done) — interrupted\n") || strings.Contains(v, "cancelled: cancelled") {
		t.Errorf("view:\n%s", v)
	}
}
