package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// How the workflow moves on, once, whichever node does it:
//
//   - Its state is one document per workflow in the KV bucket bus.BucketWorkflows, and
//     every change is one compare-and-set write of it at the revision read: of two
//     nodes that move one workflow at the same time, one writes and the other reads
//     again and finds the work done.
//   - A task runs as attempts; attempt n of task T of workflow W is the durable turn
//     "W-T-n" (bus.AttemptTurn). The attempt is written into the document first, then
//     its turn is queued in the intake; queueing it again is harmless (the intake
//     refuses an id already used), so whoever finds an attempt without its turn queues
//     it.
//   - What is queued is decided from the document as stored at the revision just
//     written (or read), never from a copy made before. That document may be overtaken
//     while its attempts are queued: another step (the Settle of a turn that ended
//     meanwhile) may have queued an attempt and seen it end. An attempt the intake
//     refuses is therefore looked up in the document as stored now; one that has ended
//     there (or whose workflow has) is not queued, and that is no failure.
//   - When a task turn ends, the node that ran it calls Settle with the turn's record
//     before it acknowledges the turn's intake message: Settle records the attempt's
//     outcome (validating an accepted submission again against the schema persisted
//     here), retries or fails the task, starts the tasks that were waiting for it,
//     ends the workflow when every task has ended, and queues the turns of the
//     attempts it started. A node that dies before the acknowledgement leaves the
//     message to another node, which finds the turn ended and calls Settle again: an
//     attempt that has its outcome already is not recorded twice, and its dependents'
//     turns are queued again, harmlessly.
//   - Nothing is retried that cannot succeed (limits.go): a task whose instructions
//     expand past MaxInstructionsBytes, or whose turn is more than the bus carries, fails
//     in the write that would have started it, with the sizes, and no turn is queued; a
//     turn the intake refuses for its size fails its attempt and task in a write of its
//     own. Either way the workflow moves on as after any task failure, and Settle
//     succeeds: a Settle that failed every time would leave its turn's intake message to
//     be settled again, and fail again, for ever.

// Runner is what the engine needs from the node it runs on.
type Runner interface {
	// Check reports whether a task turn's spec could be queued: a model the node can
	// open, a script it can play.
	Check(spec bus.TurnSpec) error
	// Queue queues a task turn into the intake. A turn whose id is already used is not
	// an error: the turn was queued before.
	Queue(ctx context.Context, spec bus.TurnSpec) error
	// Abort asks a turn to stop.
	Abort(turn, reason string) error
}

// Errors of the engine, matched with errors.Is.
var (
	// ErrNotFound reports a workflow the agent does not have.
	ErrNotFound = errors.New("no such workflow")
	// ErrNotLive refuses a task turn that is not its task's current attempt of a running
	// workflow (a workflow cancelled, a task retried or ended meanwhile).
	ErrNotLive = errors.New("not a live attempt")
	// ErrNoAgent refuses a workflow call without an agent id.
	ErrNoAgent = errors.New("this call carries no agent id, so it has no workflows")
)

// Engine starts, moves on, cancels and reads workflows. It is safe for concurrent use.
type Engine struct {
	js       jetstream.JetStream
	replicas int
	run      Runner
	log      *slog.Logger

	mu sync.Mutex
	kv jetstream.KeyValue
}

// NewEngine returns an engine on js; the workflow bucket is created (with replicas) when
// first needed.
func NewEngine(js jetstream.JetStream, replicas int, run Runner, log *slog.Logger) *Engine {
	if log == nil {
		log = slog.Default()
	}
	return &Engine{js: js, replicas: replicas, run: run, log: log}
}

func (e *Engine) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kv != nil {
		return e.kv, nil
	}
	kv, err := bus.EnsureKeyValue(ctx, e.js, bus.WorkflowsBucketConfig(e.replicas))
	if err != nil {
		return nil, err
	}
	e.kv = kv
	return kv, nil
}

// Start checks a definition and starts the workflow for agent: the document is stored,
// then the turns of the tasks that depend on nothing are queued. parent is the turn
// that starts it ("" for a direct call); a definition without a model takes the
// parent's.
func (e *Engine) Start(ctx context.Context, agent, parent string, def Definition) (*bus.Workflow, error) {
	if agent == "" {
		return nil, ErrNoAgent
	}
	if err := bus.CheckAgent(agent); err != nil {
		return nil, err
	}
	if err := def.Check(); err != nil {
		return nil, err
	}
	// The caller is a turn when it has a record (a direct call has none): the
	// workflow's parent, whose model runs the tasks unless the definition names one.
	caller, err := e.callerTurn(ctx, parent)
	if err != nil {
		return nil, err
	}
	if caller == nil {
		parent = ""
	}
	model := def.Model
	if model == "" && slices.ContainsFunc(def.Tasks, func(t TaskDef) bool { return len(t.Script) == 0 }) {
		switch {
		case caller == nil:
			return nil, errors.New("no model for the tasks: give the workflow a model (openai:MODEL or chat:MODEL), or every task a script")
		case caller.Spec.Kind == bus.TurnMCP:
			return nil, errors.New("no model for the tasks: the calling turn is an MCP client's session (toolbus mcp), whose model the bus does not know; give the workflow a model (openai:MODEL or chat:MODEL), or every task a script")
		case caller.Spec.Model == "":
			return nil, errors.New("no model for the tasks: the calling turn plays a script, which cannot run them; give the workflow a model (openai:MODEL or chat:MODEL), or every task a script")
		}
		model = caller.Spec.Model
	}
	now := time.Now().UTC()
	wf := &bus.Workflow{ID: bus.NewID(), Agent: agent, Title: def.Title, State: bus.WorkflowRunning, Parent: parent,
		Model: model, Created: now, Updated: now}
	for _, t := range def.Tasks {
		wf.Tasks = append(wf.Tasks, bus.Task{
			ID: t.ID, Instructions: t.Instructions, ResultSchema: []byte(compactJSON(t.ResultSchema)),
			DependsOn: t.DependsOn, MaxAttempts: cmp.Or(t.MaxAttempts, DefaultAttempts), Script: t.Script,
			State: bus.TaskPending,
		})
	}
	// Every task's turn must be one a node can run (its model or its script) and the
	// bus can carry (before its instructions are expanded: advance checks them again).
	lim := e.limits()
	var problems []string
	for i := range wf.Tasks {
		spec := taskTurn(wf, &wf.Tasks[i], bus.Attempt{N: 1, Turn: bus.AttemptTurn(wf.ID, wf.Tasks[i].ID, 1)})
		if err := e.run.Check(spec); err != nil {
			problems = append(problems, fmt.Sprintf("task %s: %v", wf.Tasks[i].ID, err))
		}
		if n := specSize(spec); lim.spec > 0 && n > lim.spec {
			problems = append(problems, fmt.Sprintf("task %s: %s", wf.Tasks[i].ID, lim.specTooLarge(wf.Tasks[i].ID, n)))
		}
	}
	if len(problems) > 0 {
		return nil, &DefinitionError{Problems: problems}
	}
	if b, err := json.Marshal(wf); err == nil && len(b) > lim.doc {
		return nil, &DefinitionError{Problems: []string{fmt.Sprintf("the workflow's document would be %s (%d bytes) before any result, "+
			"over the %s a workflow's document may hold: shorten the instructions, result schemas or scripts", sizeOf(len(b)), len(b), sizeOf(lim.doc))}}
	}
	advance(wf, now, lim)
	markEnded(wf, now)
	kv, err := e.bucket(ctx)
	if err != nil {
		return nil, fmt.Errorf("start workflow: %w", err)
	}
	doc, err := e.encode(wf)
	if err != nil {
		return nil, fmt.Errorf("start workflow: %w", err)
	}
	// The document as stored at its first revision is wf: its attempts are queued from
	// it, and an attempt the stored document has ended meanwhile is left (queueLive).
	if _, err := bus.UpdateAt(ctx, kv, bus.WorkflowKey(agent, wf.ID), doc, 0); err != nil {
		return nil, fmt.Errorf("start workflow: store it: %w", err)
	}
	if err := e.queueLive(ctx, wf); err != nil {
		// Nothing may run half a workflow nobody can see move: end it, saying why.
		reason := "its tasks could not be queued: " + err.Error()
		if _, cerr := e.Cancel(context.WithoutCancel(ctx), agent, wf.ID, reason); cerr != nil {
			e.log.Warn("end a workflow whose tasks could not be queued", "workflow", wf.ID, "err", cerr)
		}
		return nil, fmt.Errorf("start workflow %s: %s", wf.ID, reason)
	}
	return wf, nil
}

// callerTurn reads the record of the turn that calls workflow_start; nil when it has
// none (a direct call, or a turn not run through the intake).
func (e *Engine) callerTurn(ctx context.Context, turn string) (*bus.TurnRecord, error) {
	if turn == "" {
		return nil, nil
	}
	turns, err := durable.Open(ctx, e.js, durable.Config{})
	if err != nil {
		return nil, fmt.Errorf("read the calling turn %s: %w", turn, err)
	}
	rec, _, err := turns.Record(ctx, turn)
	if errors.Is(err, durable.ErrNoRecord) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the calling turn %s: %w", turn, err)
	}
	return &rec, nil
}

// encode is a workflow's document, refused when the bus could not carry it.
func (e *Engine) encode(wf *bus.Workflow) ([]byte, error) {
	b, err := json.Marshal(wf)
	if err != nil {
		return nil, err
	}
	if nc := e.js.Conn(); nc != nil {
		if limit := nc.MaxPayload(); limit > 0 && int64(len(b)) > limit {
			return nil, fmt.Errorf("the workflow's document would be %d bytes, more than the bus carries in one message (%d)", len(b), limit)
		}
	}
	return b, nil
}

// Get reads one of agent's workflows with its revision.
func (e *Engine) Get(ctx context.Context, agent, id string) (*bus.Workflow, uint64, error) {
	if agent == "" {
		return nil, 0, ErrNoAgent
	}
	if !bus.ValidToken(id) {
		return nil, 0, fmt.Errorf("workflow %q: %w", id, ErrNotFound)
	}
	kv, err := e.bucket(ctx)
	if err != nil {
		return nil, 0, err
	}
	entry, err := kv.Get(ctx, bus.WorkflowKey(agent, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("workflow %s of agent %s: %w", id, agent, ErrNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read workflow %s: %w", id, err)
	}
	var wf bus.Workflow
	if err := json.Unmarshal(entry.Value(), &wf); err != nil {
		return nil, 0, fmt.Errorf("read workflow %s: %w", id, err)
	}
	return &wf, entry.Revision(), nil
}

// ListQuery selects one page of an agent's workflows.
type ListQuery struct {
	// State, when set, keeps the workflows in it.
	State bus.WorkflowState
	// Limit is the most workflows on the page: 1 to MaxListLimit; 0 means
	// DefaultListLimit.
	Limit int
	// After is the workflow_id of the last workflow of the page before; the page holds
	// the workflows that come after it, newest first. Empty: the first page.
	After string
}

// ListPage is one page of a listing: Summary entries, newest first (the latest created
// first; of two created at once, the lesser id first).
type ListPage struct {
	Workflows []Summary
	// More is how many workflows (in the state asked for) come after this page, and
	// Next the After that lists them: the id of the page's last workflow.
	More int
	Next string
}

// Summary is a workflow in a listing: its fields of the same names in bus.Workflow,
// each task's id and state only (no instructions, schemas, scripts, results or attempts),
// and the count of its tasks in each state, so that a page stays small however large a
// workflow's document is. Its error is clipped to a few hundred bytes.
type Summary struct {
	ID      string            `json:"workflow_id"`
	Agent   string            `json:"agent"`
	Title   string            `json:"title"`
	State   bus.WorkflowState `json:"state"`
	Parent  string            `json:"parent_turn_id,omitempty"`
	Model   string            `json:"model,omitempty"`
	Tasks   []TaskSummary     `json:"tasks"`
	Counts  TaskCounts        `json:"task_counts"`
	Error   string            `json:"error,omitempty"`
	Created time.Time         `json:"created"`
	Updated time.Time         `json:"updated"`
}

// TaskSummary is a task in a listing.
type TaskSummary struct {
	ID    string        `json:"task_id"`
	State bus.TaskState `json:"state"`
}

// TaskCounts counts a workflow's tasks by state.
type TaskCounts struct {
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Done      int `json:"done"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

// Summarize is wf's Summary.
func Summarize(wf *bus.Workflow) Summary {
	s := Summary{ID: wf.ID, Agent: wf.Agent, Title: wf.Title, State: wf.State, Parent: wf.Parent, Model: wf.Model,
		Tasks: make([]TaskSummary, 0, len(wf.Tasks)), Error: clip(wf.Error, maxSummaryError), Created: wf.Created, Updated: wf.Updated}
	for _, t := range wf.Tasks {
		s.Tasks = append(s.Tasks, TaskSummary{ID: t.ID, State: t.State})
		switch t.State {
		case bus.TaskPending:
			s.Counts.Pending++
		case bus.TaskRunning:
			s.Counts.Running++
		case bus.TaskDone:
			s.Counts.Done++
		case bus.TaskFailed:
			s.Counts.Failed++
		case bus.TaskCancelled:
			s.Counts.Cancelled++
		}
	}
	return s
}

// List returns one page of agent's workflows (see ListQuery), newest first. A page
// holds q.Limit workflows at most, and fewer when their summaries would pass a few
// hundred KiB (one at least): a page fits in a bus message with room to spare.
func (e *Engine) List(ctx context.Context, agent string, q ListQuery) (ListPage, error) {
	if agent == "" {
		return ListPage{}, ErrNoAgent
	}
	switch {
	case q.Limit == 0:
		q.Limit = DefaultListLimit
	case q.Limit < 0 || q.Limit > MaxListLimit:
		return ListPage{}, fmt.Errorf("limit %d is out of range: 1 to %d (left out, %d)", q.Limit, MaxListLimit, DefaultListLimit)
	}
	if q.State != "" && !q.State.Valid() {
		return ListPage{}, fmt.Errorf("state %q: want running, completed, failed or cancelled", q.State)
	}
	kv, err := e.bucket(ctx)
	if err != nil {
		return ListPage{}, err
	}
	keys, err := bus.ListKeys(ctx, kv, bus.AgentWorkflows(agent))
	if err != nil {
		return ListPage{}, fmt.Errorf("list workflows: %w", err)
	}
	var all []Summary
	for _, key := range keys {
		_, id, _ := strings.Cut(key, ".")
		wf, _, err := e.Get(ctx, agent, id)
		if errors.Is(err, ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return ListPage{}, err
		}
		all = append(all, Summarize(wf))
	}
	newestFirst := func(a, b Summary) int {
		return cmp.Or(b.Created.Compare(a.Created), strings.Compare(a.ID, b.ID))
	}
	slices.SortFunc(all, newestFirst)
	start := 0
	if q.After != "" {
		i := slices.IndexFunc(all, func(s Summary) bool { return s.ID == q.After })
		if i < 0 {
			return ListPage{}, fmt.Errorf("after %q: %w: give the workflow_id of the last workflow of the page before", q.After, ErrNotFound)
		}
		start = i + 1
	}
	var page ListPage
	budget := maxListBytes
	for _, s := range all[start:] {
		if q.State != "" && s.State != q.State {
			continue
		}
		if len(page.Workflows) < q.Limit {
			cost := 2 * len(summaryLine(s))
			if b, err := json.Marshal(s); err == nil {
				cost += len(b)
			}
			if len(page.Workflows) == 0 || cost <= budget {
				budget -= cost
				page.Workflows = append(page.Workflows, s)
				continue
			}
			q.Limit = len(page.Workflows) // full: the rest are counted
		}
		page.More++
	}
	if page.More > 0 {
		page.Next = page.Workflows[len(page.Workflows)-1].ID
	}
	return page, nil
}

// update changes a workflow as stored ([bus.Change]): it reads the document, lets
// change change it, and writes it at the revision read, reading again (and calling
// change again, on what the other writer stored) when another writer came first. change
// reports whether it changed anything. update returns the document as stored at the
// revision it wrote, or read when change changed nothing: what happens next (the turns
// to queue, to abort) is decided from that, never from a copy made before.
func (e *Engine) update(ctx context.Context, agent, id string, change func(wf *bus.Workflow) (bool, error)) (*bus.Workflow, error) {
	if agent == "" {
		return nil, ErrNoAgent
	}
	if !bus.ValidToken(id) {
		return nil, fmt.Errorf("workflow %q: %w", id, ErrNotFound)
	}
	kv, err := e.bucket(ctx)
	if err != nil {
		return nil, err
	}
	wf, _, err := bus.Change(ctx, kv, bus.WorkflowKey(agent, id), decodeWorkflow, func(wf bus.Workflow) ([]byte, error) {
		return e.encode(&wf)
	}, func(wf *bus.Workflow, found bool) error {
		if !found {
			return fmt.Errorf("workflow %s of agent %s: %w", id, agent, ErrNotFound)
		}
		changed, err := change(wf)
		if err != nil {
			return err
		}
		if !changed {
			return bus.ErrUnchanged
		}
		wf.Updated = time.Now().UTC()
		markEnded(wf, wf.Updated)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &wf, nil
}

func decodeWorkflow(b []byte) (bus.Workflow, error) {
	var wf bus.Workflow
	err := json.Unmarshal(b, &wf)
	return wf, err
}

// markEnded stamps the time a workflow ended, once: the span of its record is
// Created to Ended.
func markEnded(wf *bus.Workflow, now time.Time) {
	if wf.State.Ended() && wf.Ended.IsZero() {
		wf.Ended = now
	}
}

// Cancel ends a running workflow: its tasks that have not ended are cancelled, and so are
// their attempts, whose turns are then aborted.
func (e *Engine) Cancel(ctx context.Context, agent, id, reason string) (*bus.Workflow, error) {
	reason = clip(cmp.Or(reason, "no reason given"), MaxReasonBytes)
	var abort []string
	wf, err := e.update(ctx, agent, id, func(wf *bus.Workflow) (bool, error) {
		abort = abort[:0]
		if wf.State.Ended() {
			return false, fmt.Errorf("workflow %s has ended already (%s)", wf.ID, wf.State)
		}
		now := time.Now().UTC()
		// The state says cancelled; the error is why, or a view would say it twice.
		wf.State, wf.Error = bus.WorkflowCancelled, reason
		for i := range wf.Tasks {
			t := &wf.Tasks[i]
			if t.State.Ended() {
				continue
			}
			t.State, t.Error = bus.TaskCancelled, reason
			if a := t.Current(); a != nil && a.Outcome == "" {
				a.Outcome, a.Reason, a.Ended = bus.AttemptCancelled, "the workflow was cancelled: "+reason, now
				abort = append(abort, a.Turn)
			}
		}
		return true, nil
	})
	if err != nil {
		return wf, err
	}
	for _, turn := range abort {
		if err := e.run.Abort(turn, "workflow "+id+" cancelled: "+reason); err != nil {
			e.log.Warn("abort a cancelled task's turn", "turn", turn, "err", err)
		}
	}
	return wf, nil
}

// Admit reports whether a task turn is its task's current attempt in a running
// workflow, and so may run. Anything else is ErrNotLive, with the reason.
func (e *Engine) Admit(ctx context.Context, spec bus.TurnSpec) error {
	wf, _, err := e.Get(ctx, spec.Agent, spec.Workflow)
	if err != nil {
		return err
	}
	t := wf.Task(spec.Task)
	if t == nil {
		return fmt.Errorf("%w: workflow %s has no task %s", ErrNotLive, wf.ID, spec.Task)
	}
	a := t.Attempt(spec.ID)
	switch {
	case a == nil:
		return fmt.Errorf("%w: turn %s is not an attempt of task %s of workflow %s; task turns are started by their workflow", ErrNotLive, spec.ID, t.ID, wf.ID)
	case a.Outcome != "":
		return fmt.Errorf("%w: attempt %d of task %s has ended (%s)", ErrNotLive, a.N, t.ID, a.Outcome)
	case wf.State.Ended():
		return fmt.Errorf("%w: workflow %s has ended (%s)", ErrNotLive, wf.ID, wf.State)
	}
	return nil
}

// Settle records how a task turn ended and moves its workflow on (see the top of this
// file); rec is the turn's record, ended. It is safe to call more than once for one
// turn, from any node: what is recorded already is not recorded again.
func (e *Engine) Settle(ctx context.Context, rec bus.TurnRecord) error {
	spec := rec.Spec
	lim := e.limits()
	wf, err := e.update(ctx, spec.Agent, spec.Workflow, func(wf *bus.Workflow) (bool, error) {
		changed := false
		if t := wf.Task(spec.Task); t != nil {
			if a := t.Attempt(spec.ID); a != nil && a.Outcome == "" {
				recordAttempt(wf, t, a, rec, lim)
				changed = true
			}
		}
		return advance(wf, time.Now().UTC(), lim) || changed, nil
	})
	if errors.Is(err, ErrNotFound) {
		e.log.Warn("a task turn ended whose workflow is gone", "turn", spec.ID, "workflow", spec.Workflow)
		return nil
	}
	if err != nil {
		return fmt.Errorf("settle task turn %s: %w", spec.ID, err)
	}
	return e.queueLive(ctx, wf)
}

// recordAttempt writes an ended turn's outcome into its attempt and its task. A result is
// written only while the document stays within lim.doc with it.
func recordAttempt(wf *bus.Workflow, t *bus.Task, a *bus.Attempt, rec bus.TurnRecord, lim limits) {
	a.TurnState, a.Ended = rec.State, time.Now().UTC()
	defer func() { a.Reason = clip(a.Reason, MaxReasonBytes) }()
	switch {
	case wf.State.Ended() || t.State.Ended():
		a.Outcome, a.Reason = bus.AttemptCancelled, fmt.Sprintf("the workflow had ended (%s) when the turn ended", wf.State)
		return
	case rec.State == bus.TurnTerminated && len(rec.Submitted) > 0:
		if err := Validate(t.ResultSchema, rec.Submitted); err != nil {
			a.Outcome, a.Reason = bus.AttemptFailed, "the result failed the task's result schema as stored with the workflow, so it was not written: "+err.Error()
			break
		}
		value, err := Value(rec.Submitted)
		switch {
		case err != nil:
			a.Outcome, a.Reason = bus.AttemptFailed, err.Error()
		case len(value) > MaxResultBytes:
			a.Outcome, a.Reason = bus.AttemptFailed, fmt.Sprintf("the result is %d bytes, more than a task's result may hold (%d)", len(value), MaxResultBytes)
		default:
			result := []byte(compactJSON(value))
			if doc := documentWith(wf, len(result)); doc > lim.doc {
				a.Outcome, a.Reason = bus.AttemptFailed, fmt.Sprintf("the result is %s; with it the workflow's document would be %s, "+
					"over the %s a workflow's document may hold, so it was not written: submit a shorter result "+
					"(the results of the other tasks take room too)", sizeOf(len(result)), sizeOf(doc), sizeOf(lim.doc))
				break
			}
			a.Outcome = bus.AttemptAccepted
			t.State, t.Result, t.Error = bus.TaskDone, result, ""
			return
		}
	default:
		a.Outcome, a.Reason = bus.AttemptFailed, turnEnding(rec)
	}
	// A failed attempt: another, if the task has attempts left.
	if len(t.Attempts) < t.MaxAttempts {
		t.Attempts = append(t.Attempts, bus.Attempt{N: len(t.Attempts) + 1,
			Turn: bus.AttemptTurn(wf.ID, t.ID, len(t.Attempts)+1), Started: time.Now().UTC()})
		return
	}
	t.State = bus.TaskFailed
	t.Error = fmt.Sprintf("attempt %d of %d failed: %s", a.N, t.MaxAttempts, clip(a.Reason, MaxReasonBytes))
}

// documentWith is the size wf's document would have with a result of n more bytes, and
// room for the first attempts of every task still waiting (which the result may start).
func documentWith(wf *bus.Workflow, n int) int {
	b, err := json.Marshal(wf)
	if err != nil {
		return 0
	}
	waiting := 0
	for _, t := range wf.Tasks {
		if t.State == bus.TaskPending {
			waiting++
		}
	}
	return len(b) + n + len(`,"result":`) + waiting*attemptRoom
}

// attemptRoom is more than one attempt, started, takes in a document.
const attemptRoom = 256

// turnEnding says why a task turn ended without a result.
func turnEnding(rec bus.TurnRecord) string {
	switch rec.State {
	case bus.TurnCompleted, bus.TurnTerminated:
		return fmt.Sprintf("the turn ended (%s) without submitting a result", rec.State)
	case bus.TurnAborted:
		return "the turn was aborted: " + cmp.Or(rec.Error, "no reason given")
	}
	return fmt.Sprintf("the turn ended %s: %s", rec.State, cmp.Or(rec.Error, "no reason given"))
}

// advance starts the pending tasks whose dependencies are done (attempt 1 each), fails
// those a failed or cancelled dependency can never let start and those lim says cannot
// start (limits.unstartable), and ends the workflow once every task has ended. It reports
// whether it changed anything.
func advance(wf *bus.Workflow, now time.Time, lim limits) bool {
	if wf.State.Ended() {
		return false
	}
	changed := false
	for again := true; again; {
		again = false
		for i := range wf.Tasks {
			t := &wf.Tasks[i]
			if t.State != bus.TaskPending {
				continue
			}
			ready := true
			for _, dep := range t.DependsOn {
				d := wf.Task(dep)
				switch {
				case d == nil:
					ready = false
				case d.State == bus.TaskFailed || d.State == bus.TaskCancelled:
					t.State, t.Error = bus.TaskFailed, fmt.Sprintf("task %s, which it depends on, %s", dep, d.State)
					ready, again = false, true
				case d.State != bus.TaskDone:
					ready = false
				}
				if t.State != bus.TaskPending {
					break
				}
			}
			if t.State != bus.TaskPending {
				changed = true
				continue
			}
			if ready {
				if why := lim.unstartable(wf, t); why != "" {
					t.State, t.Error = bus.TaskFailed, why
					changed, again = true, true
					continue
				}
				t.State = bus.TaskRunning
				t.Attempts = append(t.Attempts, bus.Attempt{N: 1, Turn: bus.AttemptTurn(wf.ID, t.ID, 1), Started: now})
				changed = true
			}
		}
	}
	failed := 0
	for _, t := range wf.Tasks {
		if !t.State.Ended() {
			return changed
		}
		if t.State != bus.TaskDone {
			failed++
		}
	}
	if failed == 0 {
		wf.State = bus.WorkflowCompleted
	} else {
		wf.State = bus.WorkflowFailed
		var names []string
		for _, t := range wf.Tasks {
			if t.State != bus.TaskDone {
				names = append(names, t.ID)
			}
		}
		wf.Error = fmt.Sprintf("%d of %d tasks did not finish: %s", failed, len(wf.Tasks), strings.Join(names, ", "))
	}
	return true
}

// queueLive queues the turn of every attempt that runs in wf, the document as stored
// at the revision the caller wrote or read: attempts just started, and any whose turn
// a node that died did not queue. A turn queued before is left as it is. The stored
// document may move on while this queues (see the top of this file): an attempt the
// intake refuses is left when the document as stored now has ended it.
//
// A turn the bus cannot carry (checked here, or refused so by the intake) is refused the
// same every time: its attempt fails, and its task with it, in a write of its own; then
// the turns of what that write started (or nothing, when it ended the workflow) are
// queued from the document it stored.
func (e *Engine) queueLive(ctx context.Context, wf *bus.Workflow) error {
	// Each round fails one task or more for good, so there are at most as many rounds
	// as tasks.
	for round := 0; !wf.State.Ended() && round <= len(wf.Tasks); round++ {
		unqueueable, err := e.queueAttempts(ctx, wf)
		if err != nil || len(unqueueable) == 0 {
			return err
		}
		for turn, why := range unqueueable {
			e.log.Warn("a task turn cannot be queued; its task fails", "turn", turn, "why", why)
		}
		wf, err = e.update(ctx, wf.Agent, wf.ID, func(wf *bus.Workflow) (bool, error) {
			changed := false
			for i := range wf.Tasks {
				t := &wf.Tasks[i]
				a := t.Current()
				if a == nil || a.Outcome != "" || t.State != bus.TaskRunning || wf.State.Ended() {
					continue
				}
				why, ok := unqueueable[a.Turn]
				if !ok {
					continue
				}
				a.Outcome, a.Reason, a.Ended = bus.AttemptFailed, clip("its turn could not be queued: "+why, MaxReasonBytes), time.Now().UTC()
				t.State = bus.TaskFailed
				t.Error = fmt.Sprintf("attempt %d of %d failed: %s", a.N, t.MaxAttempts, a.Reason)
				changed = true
			}
			return advance(wf, time.Now().UTC(), e.limits()) || changed, nil
		})
		if err != nil {
			return fmt.Errorf("fail the tasks whose turns cannot be queued: %w", err)
		}
	}
	return nil
}

// queueAttempts queues the turn of every attempt that runs in wf (see queueLive). It
// returns the turns that can never be queued, each with the reason, and queues the rest.
func (e *Engine) queueAttempts(ctx context.Context, wf *bus.Workflow) (map[string]string, error) {
	lim := e.limits()
	var unqueueable map[string]string
	for i := range wf.Tasks {
		t := &wf.Tasks[i]
		a := t.Current()
		if t.State != bus.TaskRunning || a == nil || a.Outcome != "" {
			continue
		}
		spec := taskTurn(wf, t, *a)
		var err error
		if n := specSize(spec); lim.spec > 0 && n > lim.spec {
			err = errors.New(lim.specTooLarge(t.ID, n))
		} else {
			err = e.run.Queue(ctx, spec)
		}
		if err == nil {
			continue
		}
		switch aerr := e.Admit(ctx, spec); {
		case errors.Is(aerr, ErrNotLive), errors.Is(aerr, ErrNotFound):
			// Moved on meanwhile: the attempt (or its workflow) has ended as stored, so
			// it wants no turn.
			e.log.Debug("an attempt ended before its turn was queued here", "turn", spec.ID, "why", aerr)
		case tooLarge(err):
			if unqueueable == nil {
				unqueueable = map[string]string{}
			}
			unqueueable[spec.ID] = err.Error()
		default:
			return nil, fmt.Errorf("queue attempt %d of task %s: %w", a.N, t.ID, err)
		}
	}
	return unqueueable, nil
}

// taskTurn is the turn spec of one attempt of a task: its own fixed catalog (the kind
// task), its instructions with the results of its dependencies filled in, and its copy
// of the result schema.
func taskTurn(wf *bus.Workflow, t *bus.Task, a bus.Attempt) bus.TurnSpec {
	spec := bus.TurnSpec{
		ID: a.Turn, Kind: bus.TurnTask, Parent: wf.Parent, Agent: wf.Agent, Workflow: wf.ID, Task: t.ID,
		Instructions: fmt.Sprintf("You work on task %q of the workflow %q (attempt %d of %d).", t.ID, wf.Title, a.N, t.MaxAttempts),
		Input:        renderInput(wf, t),
		ResultSchema: t.ResultSchema,
	}
	if len(t.Script) > 0 {
		spec.Script = t.Script
	} else {
		spec.Model = wf.Model
	}
	return spec
}

// renderInput is a task's instructions with the results of its dependencies filled in.
func renderInput(wf *bus.Workflow, t *bus.Task) string {
	return Render(t.Instructions, dependencyResults(wf, t))
}

// dependencyResults are the results of the tasks t depends on that have one.
func dependencyResults(wf *bus.Workflow, t *bus.Task) map[string]json.RawMessage {
	results := make(map[string]json.RawMessage, len(t.DependsOn))
	for _, dep := range t.DependsOn {
		if d := wf.Task(dep); d != nil && d.Result != nil {
			results[dep] = d.Result
		}
	}
	return results
}
