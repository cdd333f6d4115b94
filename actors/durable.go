package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets"
)

// A durable turn holds a lease (durable.Lease) on its record and its transcript, so
// that another node can resume it:
//   - the claim stored the turn's input (or, resumed, a resume note) before the turn
//     started, fencing every earlier holder out of the transcript;
//   - every model response is stored before any of its calls goes out;
//   - every finished call's output is stored as it arrives (outputs that finish while
//     an append is in flight go together in the next one);
//   - the end, or the hand-back, is stored in the record at the claim's revision.
// Each of those writes is refused by the server once another node has claimed the
// turn (durable.ErrFenced): the turn then stops and writes nothing more.

// durableTurn links a turn to its lease.
type durableTurn struct {
	lease *durable.Lease
	// leaseTime is the intake's lease, told to clients with the started status.
	leaseTime time.Duration

	busy     bool             // an append is being written
	inflight chan writeResult // its result, read by the actor or by drain
	afters   []func()         // run once what is queued now is stored
	handBack bool             // the node asked for the turn back
}

type writeResult struct {
	err    error
	afters []func()
}

// checkpoint stores what the transcript still lacks, off the mailbox; after runs on
// the actor once it is stored. Appends are written one at a time, in order.
func (t *turn) checkpoint(after func()) {
	d := t.cfg.dur
	if after != nil {
		d.afters = append(d.afters, after)
	}
	if d.busy {
		return // written after the append in flight
	}
	t.startWrite()
}

func (t *turn) startWrite() {
	d := t.cfg.dur
	afters := d.afters
	d.afters = nil
	if len(t.unsaved) == 0 {
		for _, f := range afters {
			f()
		}
		return
	}
	items := slices.Clone(t.unsaved)
	t.unsaved = reuse(t.unsaved)
	d.busy = true
	if d.inflight == nil {
		d.inflight = make(chan writeResult, 1)
	}
	inflight, lease, step := d.inflight, d.lease, t.step
	sys, self := t.sys, t.self
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
		defer cancel()
		inflight <- writeResult{err: lease.Append(ctx, step, items), afters: afters}
		sys.Root.Send(self, &checkpointed{})
	}()
}

func (t *turn) onCheckpointed() {
	d := t.cfg.dur
	var m writeResult
	select {
	case m = <-d.inflight:
	default:
		return // drain took it
	}
	d.busy = false
	if t.finished {
		return
	}
	if m.err != nil {
		if errors.Is(m.err, durable.ErrFenced) {
			t.fenced(m.err)
			return
		}
		t.fail(fmt.Errorf("%w: checkpoint: %w", ErrRuntime, m.err))
		return
	}
	for _, f := range m.afters {
		if t.finished {
			return
		}
		f()
	}
	if !d.busy && !t.finished && (len(t.unsaved) > 0 || len(d.afters) > 0) {
		t.startWrite()
	}
}

// fenced stops a turn another node took over: it writes nothing more.
func (t *turn) fenced(err error) {
	t.log.Warn("turn taken over by another node; stopping without ending it", "err", err)
	t.finished = true
	t.modelCancel()
	if t.cfg.Done != nil {
		t.cfg.Done(TurnResult{Turn: t.cfg.Spec.ID, State: bus.TurnRunning, Fenced: true, Steps: t.step})
	}
}

// leaseLost reports, and stops, a durable turn whose node no longer holds it: a node
// woken after a pause longer than its lease asks its record before it calls the model,
// settles expired calls or speaks for the turn (durable.Lease.Confirm).
func (t *turn) leaseLost() bool {
	d := t.cfg.dur
	if d == nil || t.finished {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), confirmPatience)
	defer cancel()
	switch err := d.lease.Confirm(ctx); {
	case errors.Is(err, durable.ErrFenced):
		t.fenced(err)
		return true
	case err != nil:
		t.log.Warn("could not confirm the turn is still this node's; going on (its writes are fenced)", "err", err)
	}
	return false
}

// leaseUnsure reports a durable turn that should not speak for its turn now: lost, or
// woken past its lease without its record confirming it yet.
func (t *turn) leaseUnsure() bool {
	d := t.cfg.dur
	if d == nil || t.finished {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), confirmPatience)
	defer cancel()
	err := d.lease.Confirm(ctx)
	if errors.Is(err, durable.ErrFenced) {
		t.fenced(err)
	}
	return err != nil
}

// confirmPatience bounds the record read of a turn woken past its lease.
const confirmPatience = 3 * time.Second

// storeOutputs appends finished calls' outputs to the transcript at once.
func (t *turn) storeOutputs(pcs ...*pendingCall) {
	for _, pc := range pcs {
		if !pc.stored {
			t.appendTranscript([]gateway.Item{pc.outputItem()})
			pc.stored = true
		}
	}
	t.checkpoint(nil)
}

// drain settles the appends of a turn that is ending here: it waits for the one in
// flight and stores what is still queued (the afters are superseded by the caller).
func (t *turn) drain(ctx context.Context) error {
	d := t.cfg.dur
	d.afters = nil
	if d.busy {
		m := <-d.inflight
		d.busy = false
		if m.err != nil {
			return m.err
		}
	}
	if len(t.unsaved) > 0 {
		items := slices.Clone(t.unsaved)
		t.unsaved = reuse(t.unsaved)
		return d.lease.Append(ctx, t.step, items)
	}
	return nil
}

// saveEnd stores the turn's end, after every append before it.
func (t *turn) saveEnd(state bus.TurnState, msg string) error {
	ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
	defer cancel()
	if err := t.drain(ctx); err != nil {
		return err
	}
	return t.cfg.dur.lease.End(ctx, state, msg, t.step, t.submitted)
}

// handingBack reports a turn its node wants back.
func (t *turn) handingBack() bool { return t.cfg.dur != nil && t.cfg.dur.handBack }

// onHandBack asks the turn to stop at its next checkpoint and go back to the intake: at
// once while it waits for the model (the next node asks again), after the batch while
// calls run.
func (t *turn) onHandBack() {
	if t.finished || t.cfg.dur == nil || t.aborted {
		return
	}
	t.cfg.dur.handBack = true
	switch {
	case t.waiting:
		t.modelCancel() // onModelReply hands over
	case t.running == 0 && t.next >= len(t.batch):
		t.handOver()
	}
}

// handOver stores the turn as queued for the next node and ends this node's part.
func (t *turn) handOver() {
	if t.finished {
		return
	}
	d := t.cfg.dur
	ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
	defer cancel()
	err := t.drain(ctx)
	if err == nil {
		err = d.lease.HandBack(ctx, t.step)
	}
	t.finished = true
	t.modelCancel()
	if err != nil {
		t.log.Warn("hand the turn back", "err", err)
	} else {
		t.log.Info("turn handed back to the intake", "step", t.step)
	}
	if t.cfg.Done != nil {
		t.cfg.Done(TurnResult{Turn: t.cfg.Spec.ID, State: bus.TurnQueued, HandedBack: err == nil, Fenced: errors.Is(err, durable.ErrFenced),
			Steps: t.step, Transcript: t.transcript})
	}
}

// resume starts a turn from the transcript the claim read back (it ends with the
// claim's resume note): the batch the model asked for last is finished as
// durable.PlanBatch says (calls with a recorded output are not run again), then the
// turn goes on as usual.
func (t *turn) resume() {
	d := t.cfg.dur
	items := d.lease.Items
	t.step = durable.Steps(items)
	t.transcript = append(t.transcript[:0], items...)
	for _, it := range items {
		// The repair instruction is given once per turn, wherever the turn runs.
		if p := t.cfg.Kit.Policy; p.Text == toolsets.TextRepairOnce && it.Kind == gateway.KindMessage && it.Role == gateway.RoleDeveloper && it.Text == p.RepairInstruction {
			t.repaired = true
		}
	}
	var r bus.Resume
	if n := len(d.lease.Rec.Resumes); n > 0 {
		r = d.lease.Rec.Resumes[n-1]
	}
	t.status(bus.StatusStarted, bus.TurnStatus{State: bus.TurnRunning, Notes: t.cfg.Kit.Notes, Resumed: &r, Lease: d.leaseTime})

	calls := durable.LastCalls(items)
	t.prepare(calls, false)
	plan := durable.PlanBatch(items, func(i int, _ gateway.Item) durable.CallInfo {
		pc := t.batch[i]
		return durable.CallInfo{
			Refused:    pc.state == callDone,
			Sequential: pc.tool != nil && pc.tool.Mode == toolbus.Sequential,
			ReadOnly:   pc.tool != nil && pc.tool.ReadOnly,
		}
	})
	if !plan.Open {
		// A task whose result was accepted before its node was lost ends here: the
		// accepted call is in the transcript, only the turn's end was not stored.
		for _, it := range plan.Calls {
			if args, ok := t.finalArgs(it); ok && outputOK(plan.Outputs, it.CallID) {
				t.batch = t.batch[:0]
				t.submitted = args
				t.finish(bus.TurnTerminated, nil)
				return
			}
		}
		t.batch = t.batch[:0]
		if plan.Answered {
			// The answer was stored, the end was not: the turn ends with it.
			t.text = plan.Text
			t.answeredWithText()
			return
		}
		t.callModel()
		return
	}
	var said []string
	for i, pc := range t.batch {
		said = append(said, pc.item.CallID+":"+plan.Actions[i].String())
		if plan.Actions[i] == durable.Refused {
			said[len(said)-1] += " (" + pc.record.Error + ")"
		}
	}
	t.log.Info("resuming the turn's batch", "step", t.step, "from", d.lease.Lost, "calls", strings.Join(said, ", "))
	for i, pc := range t.batch {
		switch plan.Actions[i] {
		case durable.Recorded:
			out := plan.Outputs[pc.item.CallID]
			pc.state, pc.stored, pc.resumed = callDone, true, true
			pc.output = toolbus.Result{Content: out.Output, IsError: out.IsError}
			pc.record.Outcome = bus.OutcomeOK
			if out.IsError {
				pc.record.Outcome = bus.OutcomeError
			}
			pc.record.Label = "recorded before the turn was resumed"
			if pc.local != nil && pc.local.Final && !out.IsError && t.submitted == nil {
				// The task's result was accepted: the turn ends after this batch.
				pc.output.Terminate = true
				t.submitted = pc.args
			}
		case durable.Abandon:
			pc.resolve(bus.OutcomeAbandoned, fmt.Sprintf(
				"call abandoned: the node running the turn (%s) was lost while this call was in flight; it may have run. Check its effect before you call it again.",
				d.lease.Lost))
		}
	}
	t.schedule()
}

// finalArgs reads the arguments of a call of a final local tool (a task's submit_result)
// as the turn accepted them; false for any other call, or arguments that do not pass.
func (t *turn) finalArgs(it gateway.Item) (json.RawMessage, bool) {
	local, ok := t.cfg.Kit.Local[it.Name]
	if it.Kind != gateway.KindFunctionCall || !ok || !local.Final {
		return nil, false
	}
	p := local.Spec.Params
	args, err := p.Parse(it.Arguments, schema.ParseOptions{Strict: local.Spec.Strict && p.Strict().Err == nil})
	if err != nil {
		return nil, false
	}
	return args.JSON, true
}

// outputOK reports whether the call has a recorded output that is not an error.
func outputOK(outputs map[string]gateway.Item, callID string) bool {
	o, ok := outputs[callID]
	return ok && !o.IsError
}
