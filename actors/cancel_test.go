package actors

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets"
)

// cancelWorld is a harness whose tools wait to be released: "slow" (parallel), "after"
// (sequential: it waits for slow) and "drop" (destructive, held for approval when the
// kit says so). Each records its runs and how they ended.
type cancelWorld struct {
	h       *harness
	tools   []*toolbus.Tool
	release chan struct{}
	mu      sync.Mutex
	ran     map[string]string // tool → "ok" or the cause it was stopped with
	started chan string
	logs    *logBuffer
	once    sync.Once
}

// releaseAll lets every waiting tool finish.
func (w *cancelWorld) releaseAll() { w.once.Do(func() { close(w.release) }) }

func newCancelWorld(t *testing.T) *cancelWorld {
	w := &cancelWorld{release: make(chan struct{}), ran: map[string]string{}, started: make(chan string, 8), logs: &logBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", w.logs)
		}
	})
	t.Cleanup(w.releaseAll)
	tool := func(name string, mode toolbus.Mode, destructive bool) *toolbus.Tool {
		return toolbus.MustDefine(toolbus.Def[noArgs]{
			Spec: toolbus.Spec{Name: name, Category: "cancel", Mode: mode, Destructive: destructive, Timeout: 30 * time.Second},
			Execute: func(ctx context.Context, _ toolbus.Call, _ noArgs) (toolbus.Result, error) {
				w.started <- name
				select {
				case <-w.release:
					w.mu.Lock()
					w.ran[name] = "ok"
					w.mu.Unlock()
					return toolbus.TextResult(name + " done"), nil
				case <-ctx.Done():
					w.mu.Lock()
					w.ran[name] = context.Cause(ctx).Error()
					w.mu.Unlock()
					return toolbus.Result{}, ctx.Err()
				}
			},
		})
	}
	w.tools = []*toolbus.Tool{tool("slow", toolbus.Parallel, false), tool("after", toolbus.Sequential, false), tool("drop", toolbus.Parallel, true)}
	w.h = newHarnessWith(t, func(c *NodeConfig) { c.AbortGrace, c.Logger = 5*time.Second, w.logs.logger() }, w.tools...)
	return w
}

// run starts a turn that calls the given tools in one response, then answers "done"; it
// returns the turn's id and a channel for its result.
func (w *cancelWorld) run(t *testing.T, approvals string, tools ...string) (string, <-chan TurnResult) {
	t.Helper()
	var calls []gateway.ScriptCall
	for _, name := range tools {
		calls = append(calls, gateway.ScriptCall{ID: "c_" + name, Name: name, Arguments: `{}`})
	}
	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{{Calls: calls}, {Text: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	kit := kitOf(t, w.tools...)
	kit.Approvals = approvals
	id := bus.NewID()
	done := make(chan TurnResult, 1)
	go func() {
		res, err := w.h.node.Run(context.Background(), TurnConfig{Spec: bus.TurnSpec{ID: id, Agent: "ann", Input: "go"}, Model: model, Kit: kit})
		if err != nil {
			res = TurnResult{State: bus.TurnFailed, Err: err}
		}
		done <- res
	}()
	return id, done
}

func (w *cancelWorld) waitStarted(t *testing.T, name string) {
	t.Helper()
	select {
	case got := <-w.started:
		if got != name {
			t.Fatalf("%s started, want %s", got, name)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never started", name)
	}
}

// cancel publishes an abort that names one call, as client.CancelCall does.
func cancel(t *testing.T, nc *nats.Conn, turn, call, reason string) {
	t.Helper()
	b, _ := json.Marshal(bus.Abort{Turn: turn, Call: call, Reason: reason, By: "ops"})
	if err := nc.Publish(bus.AbortSubject(turn), b); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func wait(t *testing.T, done <-chan TurnResult) TurnResult {
	t.Helper()
	select {
	case res := <-done:
		return res
	case <-time.After(30 * time.Second):
		t.Fatal("the turn did not end")
	}
	return TurnResult{}
}

// record is the call record of a call id.
func record(res TurnResult, id string) bus.CallRecord {
	for _, c := range res.Calls {
		if c.Call == id {
			return c
		}
	}
	return bus.CallRecord{}
}

// TestCancelOneCall cancels one call of a running batch (an abort that names it) and the
// turn goes on: a running call is stopped by its host (stopped, the reason in what the
// model reads) while the sequential call after it then runs; a call waiting behind
// another never starts (not started) and the others finish; a call held for approval
// does not start either. Each time the turn completes, with every other call ok.
func TestCancelOneCall(t *testing.T) {
	t.Parallel()
	t.Run("running", func(t *testing.T) {
		t.Parallel()
		w := newCancelWorld(t)
		nc := bustest.Conn(t, w.h.srv, "ops")
		id, done := w.run(t, toolsets.ApproveNever, "slow", "after")
		w.waitStarted(t, "slow")
		cancel(t, nc, id, "c_slow", "taking too long")
		w.waitStarted(t, "after")
		w.releaseAll()
		res := wait(t, done)
		if res.State != bus.TurnCompleted || res.Text != "done" {
			t.Fatalf("turn %s (%s), want completed", res.State, res.ErrorText())
		}
		if c := record(res, "c_slow"); c.Outcome != bus.OutcomeStopped || !strings.Contains(c.Error, "taking too long") {
			t.Errorf("the cancelled call: %s %q", c.Outcome, c.Error)
		}
		if out := outputText(outputs(res)["c_slow"]); !strings.Contains(out, "taking too long") {
			t.Errorf("the model reads %q for the cancelled call", out)
		}
		if c := record(res, "c_after"); c.Outcome != bus.OutcomeOK {
			t.Errorf("the call after it: %s %q", c.Outcome, c.Error)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !strings.Contains(w.ran["slow"], "taking too long") || w.ran["after"] != "ok" {
			t.Errorf("runs: %v", w.ran)
		}
	})
	t.Run("waiting", func(t *testing.T) {
		t.Parallel()
		w := newCancelWorld(t)
		nc := bustest.Conn(t, w.h.srv, "ops")
		id, done := w.run(t, toolsets.ApproveNever, "slow", "after")
		w.waitStarted(t, "slow")
		cancel(t, nc, id, "c_after", "not needed")
		// Its cancel is in the turn's mailbox before the release reaches the host.
		bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if !strings.Contains(w.logs.String(), "call cancelled") {
				return errors.New("the turn has not taken the cancel yet")
			}
			return nil
		})
		w.releaseAll()
		res := wait(t, done)
		if res.State != bus.TurnCompleted {
			t.Fatalf("turn %s (%s), want completed", res.State, res.ErrorText())
		}
		if c := record(res, "c_after"); c.Outcome != bus.OutcomeNotStarted || !strings.Contains(c.Error, "cancelled by ops: not needed") {
			t.Errorf("the cancelled call: %s %q", c.Outcome, c.Error)
		}
		if c := record(res, "c_slow"); c.Outcome != bus.OutcomeOK {
			t.Errorf("the call before it: %s %q", c.Outcome, c.Error)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ran := w.ran["after"]; ran {
			t.Errorf("the cancelled call ran: %v", w.ran)
		}
	})
	t.Run("held", func(t *testing.T) {
		t.Parallel()
		w := newCancelWorld(t)
		nc := bustest.Conn(t, w.h.srv, "ops")
		approvals, err := nc.SubscribeSync(bus.AllApprovals)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		id, done := w.run(t, toolsets.ApproveDestructive, "slow", "drop")
		w.waitStarted(t, "slow")
		if _, err := approvals.NextMsg(20 * time.Second); err != nil {
			t.Fatalf("no approval request: %v", err)
		}
		cancel(t, nc, id, "c_drop", "")
		w.releaseAll()
		res := wait(t, done)
		if res.State != bus.TurnCompleted {
			t.Fatalf("turn %s (%s), want completed", res.State, res.ErrorText())
		}
		if c := record(res, "c_drop"); c.Outcome != bus.OutcomeNotStarted || !strings.Contains(c.Error, "waited for approval") {
			t.Errorf("the cancelled held call: %s %q", c.Outcome, c.Error)
		}
		if c := record(res, "c_slow"); c.Outcome != bus.OutcomeOK {
			t.Errorf("the other call: %s %q", c.Outcome, c.Error)
		}
	})
}

// TestCancelOneCallDurable cancels the running call of a durable turn (one the intake
// gave a node, its transcript in the stream): the host stops it, the call after it runs,
// and the turn completes; the stream holds each call's output once, the cancelled one's
// saying why, so a node that resumed the turn would neither run it again nor lose it.
func TestCancelOneCallDurable(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})
	n, err := StartNode(ctx, NodeConfig{
		Name: "n1", Connect: func(c string) (*nats.Conn, error) { return srv.Connect(c) },
		Turns: true, Categories: []string{}, AbortGrace: 5 * time.Second, Logger: logs.logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	release, started := make(chan struct{}), make(chan string, 4)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	var runs sync.Map
	tool := func(name string, mode toolbus.Mode) *toolbus.Tool {
		return toolbus.MustDefine(toolbus.Def[noArgs]{
			Spec: toolbus.Spec{Name: name, Description: "Waits.", Category: "cx", Namespace: "cx", Mode: mode, Timeout: 30 * time.Second},
			Execute: func(ctx context.Context, _ toolbus.Call, _ noArgs) (toolbus.Result, error) {
				prev, _ := runs.LoadOrStore(name, 0)
				runs.Store(name, prev.(int)+1)
				started <- name
				select {
				case <-release:
					return toolbus.TextResult(name + " done"), nil
				case <-ctx.Done():
					return toolbus.Result{}, ctx.Err()
				}
			},
		})
	}
	if err := n.Host(ctx, "cx", []*toolbus.Tool{tool("slow", toolbus.Parallel), tool("after", toolbus.Sequential)}); err != nil {
		t.Fatal(err)
	}
	profiles, err := n.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.Put(ctx, []byte(`{"version":1,"agent":"ann","namespaces":[{"name":"cx","load":"upfront"}]}`)); err != nil {
		t.Fatal(err)
	}
	script, err := json.Marshal(gateway.Script{Responses: []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{{ID: "c_slow", Name: "slow", Arguments: `{}`}, {ID: "c_after", Name: "after", Arguments: `{}`}}},
		{Text: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	nc := bustest.Conn(t, srv, "ops")
	id := bus.NewID()
	done, err := nc.SubscribeSync(bus.TurnStatusSubject(id, bus.StatusDone))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.submit(ctx, bus.TurnSpec{ID: id, Agent: "ann", Input: "go", Script: script}, ""); err != nil {
		t.Fatal(err)
	}
	next := func(want string) {
		t.Helper()
		select {
		case got := <-started:
			if got != want {
				t.Fatalf("%s started, want %s", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("%s never started", want)
		}
	}
	next("slow")
	cancel(t, nc, id, "c_slow", "taking too long")
	next("after")
	once.Do(func() { close(release) })

	m, err := done.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the turn did not end: %v", err)
	}
	var st bus.TurnStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	if st.State != bus.TurnCompleted || st.Text != "done" {
		t.Fatalf("turn %s (%s), want completed", st.State, st.Error)
	}
	outcomes := map[string]bus.Outcome{}
	for _, c := range st.Calls {
		outcomes[c.Call] = c.Outcome
	}
	if outcomes["c_slow"] != bus.OutcomeStopped || outcomes["c_after"] != bus.OutcomeOK {
		t.Errorf("outcomes %v, want c_slow stopped and c_after ok", outcomes)
	}
	items, err := durable.ReadTranscript(ctx, bustest.JetStream(t, srv, "reader"), id)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, it := range items {
		if it.Kind != toolbus.KindCallOutput {
			continue
		}
		seen[it.CallID]++
		if it.CallID == "c_slow" && (!it.IsError || !strings.Contains(outputText(it), "taking too long")) {
			t.Errorf("the stored output of the cancelled call: %q (error %v)", outputText(it), it.IsError)
		}
	}
	if seen["c_slow"] != 1 || seen["c_after"] != 1 {
		t.Errorf("outputs in the stream: %v, want one of each call", seen)
	}
	for _, name := range []string{"slow", "after"} {
		if r, _ := runs.Load(name); r != 1 {
			t.Errorf("%s ran %v times, want once", name, r)
		}
	}
}
