package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
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
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/schedule"
)

// The background harness: a real embedded server (with a store directory, so it can be
// restarted), a node that runs turns and hosts the jobs and schedule categories, and a
// "gate" namespace whose one tool blocks while the gate is shut, so a job or a scheduled
// turn can be caught running.

type bgConfig struct {
	dir         string // store directory; a new one when empty
	maxTurns    int
	minInterval time.Duration
}

type bgHarness struct {
	t    *testing.T
	cfg  bgConfig
	srv  *server.Server
	node *Node
	nc   *nats.Conn
	js   jetstream.JetStream
	gate *gate
}

// gate is the "gate" namespace's tool wait: it returns when the gate opens, or its call
// is cancelled.
type gate struct {
	mu      sync.Mutex
	open    chan struct{}
	entered int
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gate) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.entered
}

func (g *gate) tool() *toolbus.Tool {
	return toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "wait", Description: "Waits for the gate.", Category: "gate", Namespace: "gate", ReadOnly: true},
		Execute: func(ctx context.Context, _ toolbus.Call, _ struct{}) (toolbus.Result, error) {
			g.mu.Lock()
			g.entered++
			open := g.open
			g.mu.Unlock()
			defer func() {
				g.mu.Lock()
				g.entered--
				g.mu.Unlock()
			}()
			select {
			case <-open:
				return toolbus.TextResult("the gate opened"), nil
			case <-ctx.Done():
				return toolbus.Result{}, context.Cause(ctx)
			}
		},
	})
}

func startBackground(t *testing.T, cfg bgConfig) *bgHarness {
	t.Helper()
	if cfg.dir == "" {
		cfg.dir = t.TempDir()
	}
	h := &bgHarness{t: t, cfg: cfg, gate: newGate()}
	h.start()
	t.Cleanup(h.stop)
	return h
}

func (h *bgHarness) start() {
	t := h.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{StoreDir: h.cfg.dir, Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	h.node, err = StartNode(ctx, NodeConfig{
		Name:          "n1",
		Connect:       func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Categories:    []string{jobs.Category, schedule.Category},
		Turns:         true,
		MaxTurns:      h.cfg.maxTurns,
		Tools:         toolsets.Settings{ScheduleMinInterval: h.cfg.minInterval},
		Logger:        DiscardLogger(),
		AbortGrace:    300 * time.Millisecond,
		HandBackGrace: 2 * time.Second,
		// A turn a stop could not hand back (still in its claim) moves after this, not
		// the default 15 s: TestScheduleSurvivesRestart took 18 s under load once.
		TurnLease: 5 * time.Second,
	})
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	if err := h.node.Host(ctx, "gate", []*toolbus.Tool{h.gate.tool()}); err != nil {
		t.Fatal(err)
	}
	if h.nc, err = srv.Connect("test"); err != nil {
		t.Fatal(err)
	}
	if h.js, err = jetstream.New(h.nc); err != nil {
		t.Fatal(err)
	}
}

// stop stops the node and the server; start brings them back on the same store.
func (h *bgHarness) stop() {
	h.gate.release() // a blocked call would hold the node's stop
	if h.node != nil {
		h.node.Close()
		h.node = nil
	}
	if h.nc != nil {
		h.nc.Close()
		h.nc = nil
	}
	if h.srv != nil {
		h.srv.Close()
		h.srv = nil
	}
}

func (h *bgHarness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

// profile stores an agent's profile document.
func (h *bgHarness) profile(doc string) {
	h.t.Helper()
	p, err := h.node.Profiles(h.ctx())
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := p.Put(h.ctx(), []byte(doc)); err != nil {
		h.t.Fatal(err)
	}
}

// runMain runs a durable main turn of agent with a script, and returns its final status.
func (h *bgHarness) runMain(agent string, s gateway.Script) bus.TurnStatus {
	h.t.Helper()
	script, err := json.Marshal(s)
	if err != nil {
		h.t.Fatal(err)
	}
	id := bus.NewID()
	done, err := h.nc.SubscribeSync(bus.TurnStatusSubject(id, bus.StatusDone))
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = done.Unsubscribe() }()
	if err := h.nc.Flush(); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.node.submit(h.ctx(), bus.TurnSpec{ID: id, Agent: agent, Input: "go", Script: script}, ""); err != nil {
		h.t.Fatal(err)
	}
	m, err := done.NextMsg(30 * time.Second)
	if err != nil {
		h.t.Fatalf("turn %s did not end: %v", id, err)
	}
	var st bus.TurnStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

// call sends one tool request as a turn of agent would, and returns the reply.
func (h *bgHarness) call(category, tool, agent, turn, args string) bus.ToolReply {
	h.t.Helper()
	msg := nats.NewMsg(bus.ToolSubject(category, tool))
	msg.Data = []byte(args)
	bus.ToolRequest{Turn: turn, Call: bus.NewID(), Agent: agent, Deadline: time.Now().Add(30 * time.Second)}.SetHeaders(msg.Header)
	m, err := h.nc.RequestMsg(msg, 35*time.Second)
	if err != nil {
		h.t.Fatalf("%s %s: %v", tool, args, err)
	}
	var r bus.ToolReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		h.t.Fatal(err)
	}
	return r
}

func replyText(r bus.ToolReply) string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	if r.Error != "" {
		b.WriteString(r.Error)
	}
	return b.String()
}

// job reads a job's record by its id.
func (h *bgHarness) job(id string) (jobs.Job, error) {
	kv, err := h.js.KeyValue(h.ctx(), bus.BucketJobs)
	if err != nil {
		return jobs.Job{}, err
	}
	return jobs.Find(h.ctx(), kv, id)
}

// waitJob waits until a job's record is in state.
func (h *bgHarness) waitJob(id string, state bus.TurnState) jobs.Job {
	h.t.Helper()
	var j jobs.Job
	bustest.CheckFor(h.t, 30*time.Second, 20*time.Millisecond, func() error {
		var err error
		if j, err = h.job(id); err != nil {
			return err
		}
		if j.State != state {
			return fmt.Errorf("job %s is %s, want %s", id, j.State, state)
		}
		return nil
	})
	return j
}

// turns opens the durable state of turns as a client does.
func (h *bgHarness) turns() (*durable.Store, error) {
	return durable.Open(h.ctx(), h.js, durable.Config{})
}

// turn reads a turn's record.
func (h *bgHarness) turn(id string) (bus.TurnRecord, error) {
	store, err := h.turns()
	if err != nil {
		return bus.TurnRecord{}, err
	}
	rec, _, err := store.Record(h.ctx(), id)
	return rec, err
}

// schedule reads an agent's schedule.
func (h *bgHarness) schedule(id string) (schedule.Schedule, error) {
	kv, err := h.js.KeyValue(h.ctx(), bus.BucketSchedules)
	if err != nil {
		return schedule.Schedule{}, err
	}
	return schedule.Find(h.ctx(), kv, id)
}

// detailsOf decodes the details of a turn's call of tool.
func detailsOf[T any](t *testing.T, st bus.TurnStatus, tool string) T {
	t.Helper()
	var v T
	for _, c := range st.Calls {
		if c.Tool == tool {
			if c.Outcome != bus.OutcomeOK {
				t.Fatalf("%s: %s: %s", tool, c.Outcome, c.Error)
			}
			if err := json.Unmarshal(c.Details, &v); err != nil {
				t.Fatalf("%s details: %v", tool, err)
			}
			return v
		}
	}
	t.Fatalf("the turn made no %s call: %+v", tool, st.Calls)
	return v
}

func step(calls ...gateway.ScriptCall) gateway.ScriptStep { return gateway.ScriptStep{Calls: calls} }

func say(text string) gateway.ScriptStep { return gateway.ScriptStep{Text: text} }

// gateStep calls the gate's tool.
func gateStep() gateway.ScriptStep {
	return gateway.ScriptStep{Calls: []gateway.ScriptCall{{Name: "wait", Namespace: "gate", Arguments: "{}"}}}
}

const gateNS = `"namespaces":[{"name":"gate","load":"upfront"}]`

func TestJobToolsOnlyWhereSpawnAllowed(t *testing.T) {
	t.Parallel()
	h := startBackground(t, bgConfig{})
	h.profile(`{"version":3,"agent":"spawner","jobs":{"spawn":true}}`)
	h.profile(`{"version":3,"agent":"nospawn","jobs":{"spawn":false},"schedules":{"enabled":true}}`)
	h.profile(`{"version":3,"agent":"plain"}`)

	has := func(spec bus.TurnSpec, name string) bool {
		if spec.Kind == bus.TurnTask {
			spec.Workflow, spec.Task, spec.ResultSchema = "w1", "t1", []byte(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
		}
		kit, err := h.node.Assemble(h.ctx(), spec)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := kit.Tools.Lookup("", name)
		return ok
	}
	for _, tc := range []struct {
		spec bus.TurnSpec
		want bool
	}{
		{bus.TurnSpec{Kind: bus.TurnMain, Agent: "spawner"}, true},
		{bus.TurnSpec{Kind: bus.TurnMain, Agent: "nospawn"}, false},
		{bus.TurnSpec{Kind: bus.TurnMain, Agent: "plain"}, false},
		{bus.TurnSpec{Kind: bus.TurnMain, Agent: "noprofile"}, false},
		{bus.TurnSpec{Kind: bus.TurnMain}, false},
		{bus.TurnSpec{Kind: bus.TurnJob, Agent: "spawner", Parent: "p1"}, false},
		{bus.TurnSpec{Kind: bus.TurnTask, Agent: "spawner", Task: "t1"}, false},
	} {
		for _, name := range []string{"job_start", "job_status", "job_result", "job_cancel"} {
			if got := has(tc.spec, name); got != tc.want {
				t.Errorf("%s turn of agent %q: has %s = %v, want %v", tc.spec.Kind, tc.spec.Agent, name, got, tc.want)
			}
		}
	}
	// Schedules follow their own switch, in main turns only.
	if !has(bus.TurnSpec{Kind: bus.TurnMain, Agent: "nospawn"}, "schedule_create") || has(bus.TurnSpec{Kind: bus.TurnJob, Agent: "nospawn", Parent: "p"}, "schedule_create") {
		t.Error("schedule_create: want it in a main turn whose profile enables schedules, and not in a job turn")
	}

	// A job turn that tries job_start anyway gets an unknown-tool error, and a request
	// sent straight to the host on its behalf is refused: jobs start only from main
	// turns.
	main := h.runMain("spawner", gateway.Script{
		Responses: []gateway.ScriptStep{step(call("job_start", `{"prompt":"dig"}`)), say("started")},
		Child:     &gateway.Script{Responses: []gateway.ScriptStep{step(call("job_start", `{"prompt":"deeper"}`)), say("done")}},
	})
	if main.State != bus.TurnCompleted {
		t.Fatalf("main turn: %s %s", main.State, main.Error)
	}
	started := detailsOf[jobs.Job](t, main, "job_start")
	j := h.waitJob(started.ID, bus.TurnCompleted)
	if len(j.Calls) != 1 || j.Calls[0].Tool != "job_start" || j.Calls[0].Outcome != bus.OutcomeInvalid {
		t.Errorf("the job's own job_start: %+v, want one refused call", j.Calls)
	}
	rec, err := h.turn(started.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Spec.Kind != bus.TurnJob || rec.Spec.Parent != main.Turn || rec.Spec.Agent != "spawner" || rec.Spec.Input != "dig" {
		t.Errorf("job turn spec %+v", rec.Spec)
	}
	r := h.call(jobs.Category, "job_start", "spawner", started.ID, `{"prompt":"deeper"}`)
	if r.Outcome != bus.OutcomeError || !strings.Contains(r.Error, "is a job turn: only main turns start others") {
		t.Errorf("job_start from a job turn: %s %q", r.Outcome, r.Error)
	}
	// An agent whose profile does not allow jobs is refused by the host too.
	nospawn := h.runMain("nospawn", gateway.Script{Responses: []gateway.ScriptStep{say("ready")}})
	r = h.call(jobs.Category, "job_start", "nospawn", nospawn.Turn, `{"prompt":"dig"}`)
	if r.Outcome != bus.OutcomeError || !strings.Contains(r.Error, "agent nospawn may not start background jobs: its profile does not allow it (jobs.spawn)") {
		t.Errorf("job_start of an agent without spawn: %s %q", r.Outcome, r.Error)
	}
}

func TestJobLifecycle(t *testing.T) {
	t.Parallel()
	// One turn at a time: a job queued behind a running one stays queued.
	h := startBackground(t, bgConfig{maxTurns: 1})
	h.profile(`{"version":3,"agent":"ann","jobs":{"spawn":true,"keep":"2h"},` + gateNS + `}`)

	// Start: a main turn starts a job, which waits at the gate.
	main := h.runMain("ann", gateway.Script{
		Responses: []gateway.ScriptStep{step(call("job_start", `{"prompt":"find the answer","instructions":"Be brief."}`)), say("started it")},
		Child:     &gateway.Script{Responses: []gateway.ScriptStep{gateStep(), say("The answer is 42.")}},
	})
	if main.State != bus.TurnCompleted || main.Text != "started it" {
		t.Fatalf("main turn: %s %q %s", main.State, main.Text, main.Error)
	}
	first := detailsOf[jobs.Job](t, main, "job_start")
	if first.State != bus.TurnQueued || first.Agent != "ann" || first.Parent != main.Turn {
		t.Errorf("started job %+v", first)
	}

	// Status while it runs.
	j := h.waitJob(first.ID, bus.TurnRunning)
	if j.Node != "n1" || j.Started.IsZero() {
		t.Errorf("running job %+v", j)
	}
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if h.gate.waiting() != 1 {
			return errors.New("the job has not reached the gate")
		}
		return nil
	})
	r := h.call(jobs.Category, "job_status", "ann", main.Turn, `{"job_id":"`+first.ID+`"}`)
	if r.Outcome != bus.OutcomeOK || !strings.Contains(replyText(r), "running for") || !strings.Contains(replyText(r), "at step 1 on node n1") {
		t.Errorf("job_status while running: %s %q", r.Outcome, replyText(r))
	}
	r = h.call(jobs.Category, "job_result", "ann", main.Turn, `{"job_id":"`+first.ID+`"}`)
	if r.Outcome != bus.OutcomeOK || !strings.Contains(replyText(r), "has not ended yet") {
		t.Errorf("job_result while running: %s %q", r.Outcome, replyText(r))
	}
	// Another agent sees none of it.
	// (On a turn of its own: a call of ann's turn that claims to be bob's is refused
	// before any tool runs, TestHostTakesAgentFromStoredTurn.)
	r = h.call(jobs.Category, "job_status", "bob", "t-bob", `{"job_id":"`+first.ID+`"}`)
	if r.Outcome != bus.OutcomeError || !strings.Contains(r.Error, "you have no job "+first.ID) {
		t.Errorf("another agent's job_status: %s %q", r.Outcome, replyText(r))
	}

	// A second job waits behind the first (one turn at a time), and is cancelled there:
	// it ends at once, and never runs.
	r = h.call(jobs.Category, "job_start", "ann", main.Turn, `{"prompt":"second"}`)
	if r.Outcome != bus.OutcomeOK {
		t.Fatalf("second job_start: %s %q", r.Outcome, replyText(r))
	}
	var second jobs.Job
	if err := json.Unmarshal(r.Details, &second); err != nil {
		t.Fatal(err)
	}
	r = h.call(jobs.Category, "job_status", "ann", main.Turn, `{}`)
	if text := replyText(r); !strings.Contains(text, "Your jobs (2, newest first)") || !strings.Contains(text, second.ID+": queued for") {
		t.Errorf("job_status listing: %q", text)
	}
	r = h.call(jobs.Category, "job_cancel", "ann", main.Turn, `{"job_id":"`+second.ID+`","reason":"changed my mind"}`)
	if r.Outcome != bus.OutcomeOK || !strings.Contains(replyText(r), "Job "+second.ID+" is cancelled (aborted)") {
		t.Errorf("cancel a queued job: %s %q", r.Outcome, replyText(r))
	}
	if j, err := h.job(second.ID); err != nil || j.State != bus.TurnAborted || !strings.Contains(j.Error, "changed my mind") {
		t.Errorf("cancelled queued job: %+v %v", j, err)
	}

	// Cancel the running one: its call is stopped, and it ends aborted.
	r = h.call(jobs.Category, "job_cancel", "ann", main.Turn, `{"job_id":"`+first.ID+`"}`)
	if r.Outcome != bus.OutcomeOK || !strings.Contains(replyText(r), "Job "+first.ID+" is cancelled (aborted)") {
		t.Errorf("cancel a running job: %s %q", r.Outcome, replyText(r))
	}
	j = h.waitJob(first.ID, bus.TurnAborted)
	if len(j.Calls) != 1 || j.Calls[0].Tool != "gate.wait" || j.Calls[0].Outcome != bus.OutcomeStopped {
		t.Errorf("aborted job's calls: %+v", j.Calls)
	}
	r = h.call(jobs.Category, "job_cancel", "ann", main.Turn, `{"job_id":"`+first.ID+`"}`)
	if r.Outcome != bus.OutcomeError || !strings.Contains(r.Error, "has already ended (aborted)") {
		t.Errorf("cancel an ended job: %s %q", r.Outcome, replyText(r))
	}
	// The cancelled queued job's turn was taken from the intake by now, and found ended.
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		store, err := h.turns()
		if err != nil {
			return err
		}
		n, err := store.IntakeMessages(h.ctx())
		if err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("the intake holds %d messages", n)
		}
		return nil
	})
	if rec, err := h.turn(second.ID); err != nil || rec.State != bus.TurnAborted || rec.Owner != "" || rec.Step != 0 {
		t.Errorf("the cancelled queued job's turn ran: %+v %v", rec, err)
	}

	// Result: a job that completes.
	h.gate.release()
	r = h.call(jobs.Category, "job_start", "ann", main.Turn, `{"prompt":"third"}`)
	if r.Outcome != bus.OutcomeOK {
		t.Fatalf("third job_start: %s %q", r.Outcome, replyText(r))
	}
	var third jobs.Job
	_ = json.Unmarshal(r.Details, &third)
	j = h.waitJob(third.ID, bus.TurnCompleted)
	if j.Text != "The answer is 42." || j.Steps != 2 || j.Ended.IsZero() || j.Expires.Sub(j.Ended) != 2*time.Hour {
		t.Errorf("completed job %+v", j)
	}
	r = h.call(jobs.Category, "job_result", "ann", main.Turn, `{"job_id":"`+third.ID+`"}`)
	want := "Job " + third.ID + " completed after 2 steps (1 call: gate.wait ok).\nIts final text:\n\nThe answer is 42."
	if r.Outcome != bus.OutcomeOK || replyText(r) != want {
		t.Errorf("job_result:\n%s\nwant:\n%s", replyText(r), want)
	}
	rec, err := h.turn(third.ID)
	if err != nil || rec.Spec.Kind != bus.TurnJob || rec.Spec.Parent != main.Turn || rec.Spec.Input != "third" {
		t.Errorf("job turn record %+v %v", rec.Spec, err)
	}
}

func TestJobLimits(t *testing.T) {
	t.Parallel()
	h := startBackground(t, bgConfig{})
	h.profile(`{"version":3,"agent":"ann","jobs":{"spawn":true,"max_running":1,"max_per_hour":2},` + gateNS + `}`)
	main := h.runMain("ann", gateway.Script{
		Responses: []gateway.ScriptStep{say("ready")},
		Child:     &gateway.Script{Responses: []gateway.ScriptStep{gateStep(), say("done")}},
	})

	// Five at once, with room for one: exactly one starts, whichever node or request
	// wins, and the others say why not.
	results := make(chan bus.ToolReply, 5)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			results <- h.call(jobs.Category, "job_start", "ann", main.Turn, fmt.Sprintf(`{"prompt":"job %d"}`, i))
		})
	}
	wg.Wait()
	close(results)
	var started []jobs.Job
	for r := range results {
		switch {
		case r.Outcome == bus.OutcomeOK:
			var j jobs.Job
			_ = json.Unmarshal(r.Details, &j)
			started = append(started, j)
		case !strings.Contains(r.Error, "job limit reached: agent ann has 1 jobs running, its limit (jobs.max_running 1): wait for one to end (job_status), or cancel one (job_cancel)"):
			t.Errorf("a refusal: %s %q", r.Outcome, r.Error)
		}
	}
	if len(started) != 1 {
		t.Fatalf("%d jobs started at once, want 1", len(started))
	}

	// When it ends, the next may start: the second of the hour.
	if r := h.call(jobs.Category, "job_cancel", "ann", main.Turn, `{"job_id":"`+started[0].ID+`"}`); r.Outcome != bus.OutcomeOK {
		t.Fatalf("cancel: %q", replyText(r))
	}
	h.waitJob(started[0].ID, bus.TurnAborted)
	r := h.call(jobs.Category, "job_start", "ann", main.Turn, `{"prompt":"second"}`)
	if r.Outcome != bus.OutcomeOK {
		t.Fatalf("second job of the hour: %q", replyText(r))
	}
	var second jobs.Job
	_ = json.Unmarshal(r.Details, &second)
	h.gate.release()
	h.waitJob(second.ID, bus.TurnCompleted)

	// The third of the hour is refused, though none runs.
	r = h.call(jobs.Category, "job_start", "ann", main.Turn, `{"prompt":"third"}`)
	if r.Outcome != bus.OutcomeError || !strings.Contains(r.Error, "job limit reached: agent ann started 2 jobs in the last hour, its limit (jobs.max_per_hour 2); the next may start after ") {
		t.Errorf("third job of the hour: %s %q", r.Outcome, r.Error)
	}
	all, err := jobs.List(h.ctx(), mustKV(t, h.js, bus.BucketJobs), "ann")
	if err != nil || len(all) != 2 {
		t.Errorf("jobs of ann: %d, %v; want 2", len(all), err)
	}
}

func mustKV(t *testing.T, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
