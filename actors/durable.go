package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets"
)

// A durable turn keeps its record (bus.TurnRecord) in the turns bucket and its
// transcript in the transcript stream, so that another node can resume it:
//   - after every model response, the response and the record (step, batch) are stored
//     before any call goes out;
//   - every finished call's output is stored as it arrives;
//   - after every batch, the record again;
//   - every write of the record carries the revision the turn last wrote, so a node that
//     lost the turn to another (its lease ran out while it was alive) stops at its next
//     write instead of driving the turn beside the new owner.

// durable links a turn to its record.
type durable struct {
	kv  jetstream.KeyValue
	rev uint64
	rec bus.TurnRecord
	// resume, when set, is the transcript read back to resume the turn from.
	resume []gateway.Item
	// lost names the node the turn was taken from, for the messages of abandoned calls.
	lost string
	// lease is the intake's lease, told to clients with the started status.
	lease time.Duration

	busy     bool                  // a checkpoint is being written
	inflight chan checkpointResult // its result, read by the actor or by drain
	queue    []*checkpoint         // checkpoints waiting for it
	handBack bool                  // the node asked for the turn back
}

type checkpointResult struct {
	rev   uint64
	err   error
	after func()
}

// checkpoint is one write of the record, after the transcript messages it depends on.
type checkpoint struct {
	rec   bus.TurnRecord
	msgs  []*nats.Msg
	after func()
}

// fencedError reports a record written by another node since this turn last wrote it.
type fencedError struct{ err error }

func (e *fencedError) Error() string {
	return "the turn's record changed under it (another node took the turn over): " + e.err.Error()
}
func (e *fencedError) Unwrap() error { return e.err }

// errWrongRevision is JetStream's answer to a write with a stale revision.
const errWrongRevision jetstream.ErrorCode = 10071

func isWrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errWrongRevision
}

// batchStates is where the calls of the current batch stand.
func (t *turn) batchStates() []bus.CallState {
	if len(t.batch) == 0 {
		return nil
	}
	out := make([]bus.CallState, len(t.batch))
	for i, pc := range t.batch {
		out[i] = bus.CallState{Call: pc.item.CallID, Tool: pc.item.Name, Namespace: pc.item.Namespace, State: bus.CallPending}
		if pc.state == callDone {
			out[i].State, out[i].Outcome = bus.CallDone, pc.record.Outcome
		}
	}
	return out
}

// checkpoint stores what the transcript still lacks (synchronously) and the record,
// off the mailbox; after runs on the actor once both are stored. Checkpoints are
// written one at a time, in order.
func (t *turn) checkpoint(after func()) {
	d := t.cfg.dur
	c := &checkpoint{after: after}
	if len(t.unsaved) > 0 {
		b, err := json.Marshal(t.unsaved)
		if err != nil {
			t.fail(fmt.Errorf("%w: encode transcript: %w", ErrRuntime, err))
			return
		}
		t.unsaved = reuse(t.unsaved)
		m := t.transcriptMsg(b)
		c.msgs = append(c.msgs, m)
		// Stored by the checkpoint: waitTranscript has nothing to wait for.
		t.appends = append(t.appends, &transcriptAppend{msg: m})
	}
	d.rec.Step, d.rec.Stored, d.rec.Batch, d.rec.Updated = t.step, t.seq, t.batchStates(), time.Now()
	c.rec = d.rec
	if d.busy {
		d.queue = append(d.queue, c)
		return
	}
	t.writeCheckpoint(c)
}

func (t *turn) writeCheckpoint(c *checkpoint) {
	d := t.cfg.dur
	d.busy = true
	if d.inflight == nil {
		d.inflight = make(chan checkpointResult, 1)
	}
	inflight := d.inflight
	js, kv, rev, id, log := t.cfg.JS, d.kv, d.rev, t.cfg.Spec.ID, t.log
	sys, self := t.sys, t.self
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
		defer cancel()
		var err error
		for _, m := range c.msgs {
			if err = bus.Retry(ctx, "store transcript", log, func(ctx context.Context) error {
				_, err := js.PublishMsg(ctx, m)
				return err
			}); err != nil {
				break
			}
		}
		var newRev uint64
		if err == nil {
			newRev, err = updateRecord(ctx, kv, id, c.rec, rev, log)
		}
		inflight <- checkpointResult{rev: newRev, err: err, after: c.after}
		sys.Root.Send(self, &checkpointed{})
	}()
}

// updateRecord writes a record at the revision its writer last saw.
func updateRecord(ctx context.Context, kv jetstream.KeyValue, id string, rec bus.TurnRecord, rev uint64, log interface {
	Info(string, ...any)
}) (uint64, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	var newRev uint64
	err = bus.Retry(ctx, "store turn record", nil, func(ctx context.Context) error {
		var err error
		newRev, err = kv.Update(ctx, id, b, rev)
		return err
	})
	if isWrongRevision(err) {
		return 0, &fencedError{err: err}
	}
	return newRev, err
}

func (t *turn) onCheckpointed() {
	d := t.cfg.dur
	var m checkpointResult
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
		var fenced *fencedError
		if errors.As(m.err, &fenced) {
			t.fenced(m.err)
			return
		}
		t.fail(fmt.Errorf("%w: checkpoint: %w", ErrRuntime, m.err))
		return
	}
	d.rev = m.rev
	if m.after != nil {
		m.after()
	}
	if len(d.queue) > 0 && !d.busy && !t.finished {
		next := d.queue[0]
		d.queue = d.queue[1:]
		t.writeCheckpoint(next)
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

// storeOutputs appends finished calls' outputs to the transcript at once.
func (t *turn) storeOutputs(pcs ...*pendingCall) {
	for _, pc := range pcs {
		if !pc.stored {
			t.appendTranscript([]gateway.Item{pc.outputItem()})
			pc.stored = true
		}
	}
	t.flushTranscript()
}

// drain settles the checkpoints of a turn that is ending here: it waits for the one in
// flight and stores the transcript messages of those queued (the record they would
// write is superseded by the caller's).
func (t *turn) drain(ctx context.Context) error {
	d := t.cfg.dur
	if d.busy {
		m := <-d.inflight
		d.busy = false
		if m.err != nil {
			return m.err
		}
		d.rev = m.rev
	}
	for _, c := range d.queue {
		for _, msg := range c.msgs {
			if err := bus.Retry(ctx, "store transcript", t.log, func(ctx context.Context) error {
				_, err := t.cfg.JS.PublishMsg(ctx, msg)
				return err
			}); err != nil {
				return err
			}
		}
	}
	d.queue = nil
	return nil
}

// saveEnd writes the turn's end into its record, after every checkpoint before it.
func (t *turn) saveEnd(state bus.TurnState, msg string) error {
	d := t.cfg.dur
	ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
	defer cancel()
	if err := t.drain(ctx); err != nil {
		return err
	}
	d.rec.State, d.rec.Error, d.rec.Step, d.rec.Stored, d.rec.Batch, d.rec.Updated = state, msg, t.step, t.seq, nil, time.Now()
	d.rec.Submitted = t.submitted
	rev, err := updateRecord(ctx, d.kv, t.cfg.Spec.ID, d.rec, d.rev, t.log)
	if err == nil {
		d.rev = rev
	}
	return err
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
	t.flushTranscript()
	ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
	defer cancel()
	err := t.waitTranscript()
	if err == nil {
		err = t.drain(ctx)
	}
	if err == nil {
		d.rec.State, d.rec.Owner, d.rec.Step, d.rec.Stored, d.rec.Updated = bus.TurnQueued, "", t.step, t.seq, time.Now()
		d.rec.Batch = nil
		_, err = updateRecord(ctx, d.kv, t.cfg.Spec.ID, d.rec, d.rev, t.log)
	}
	t.finished = true
	t.modelCancel()
	if err != nil {
		t.log.Warn("hand the turn back", "err", err)
	} else {
		t.log.Info("turn handed back to the intake", "step", t.step)
	}
	if t.cfg.Done != nil {
		t.cfg.Done(TurnResult{Turn: t.cfg.Spec.ID, State: bus.TurnQueued, HandedBack: true, Steps: t.step, Transcript: t.transcript})
	}
}

// resumeNote is the transcript item that says a node took the turn over. Gateways skip
// it (another provider's item); people and tools reading the transcript see it.
func resumeNote(r bus.Resume) gateway.Item {
	raw, _ := json.Marshal(map[string]any{"type": "toolbus.resume", "node": r.Node, "from": r.From, "at": r.At, "why": r.Why})
	return gateway.Item{Kind: gateway.KindOpaque, Provider: "toolbus", Raw: raw}
}

// resume starts a turn from the transcript another node stored: the batch the model
// asked for last is finished (calls with a recorded output are not run again), then the
// turn goes on as usual.
func (t *turn) resume() {
	d := t.cfg.dur
	items := d.resume
	t.seq = d.rec.Stored
	t.step = d.rec.Step
	t.transcript = append(t.transcript[:0], items...)
	for _, it := range items {
		// The repair instruction is given once per turn, wherever the turn runs.
		if p := t.cfg.Kit.Policy; p.Text == toolsets.TextRepairOnce && it.Kind == gateway.KindMessage && it.Role == gateway.RoleDeveloper && it.Text == p.RepairInstruction {
			t.repaired = true
		}
	}
	var r bus.Resume
	if n := len(d.rec.Resumes); n > 0 {
		r = d.rec.Resumes[n-1]
	}
	note := resumeNote(r)
	t.transcript = append(t.transcript, note)
	t.appendTranscript([]gateway.Item{note})
	t.status(bus.StatusStarted, bus.TurnStatus{State: bus.TurnRunning, Notes: t.cfg.Kit.Notes, Resumed: &r, Lease: d.lease})

	calls, open := lastBatch(items)
	if !open {
		// A task whose result was accepted before its node was lost ends here: the
		// accepted call is in the transcript, only the turn's end was not stored.
		for _, it := range calls {
			if args, ok := t.finalArgs(it); ok && outputOK(items, it.CallID) {
				t.submitted = args
				t.finish(bus.TurnTerminated, nil)
				return
			}
		}
		t.checkpoint(t.callModel)
		return
	}
	outputs := make(map[string]gateway.Item)
	for _, it := range items {
		if it.Kind == gateway.KindCallOutput {
			outputs[it.CallID] = it
		}
	}
	t.prepare(calls, false)
	// A call without a recorded output may have gone out before the node was lost
	// unless the execution modes held it back: a sequential call waits for every call
	// before it, and every call after a sequential one waits for that one.
	anyOpen, blocked := false, false
	for _, pc := range t.batch {
		out, done := outputs[pc.item.CallID]
		seq := pc.tool != nil && pc.tool.Mode == toolbus.Sequential
		switch {
		case done:
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
			continue
		case pc.state == callDone:
			// Refused again by prepare (unknown tool, invalid arguments): it never
			// ran and held nothing back.
			continue
		case blocked || (seq && anyOpen):
			// Held back by the modes: it never went out, and goes out now.
		case pc.tool.ReadOnly:
			// It may have run; reading again is harmless, so it runs again.
		default:
			pc.resolve(bus.OutcomeAbandoned, fmt.Sprintf(
				"call abandoned: the node running the turn (%s) was lost while this call was in flight; it may have run. Check its effect before you call it again.",
				d.lost))
		}
		anyOpen = true
		if seq {
			blocked = true
		}
	}
	t.checkpoint(t.schedule)
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

// outputOK reports whether the transcript holds an output of the call that is not an error.
func outputOK(items []gateway.Item, callID string) bool {
	for _, it := range items {
		if it.Kind == gateway.KindCallOutput && it.CallID == callID && !it.IsError {
			return true
		}
	}
	return false
}

// lastBatch returns the function calls of the transcript's last model response, and
// whether any of them has no output yet.
func lastBatch(items []gateway.Item) ([]gateway.Item, bool) {
	done := make(map[string]bool)
	for _, it := range items {
		if it.Kind == gateway.KindCallOutput {
			done[it.CallID] = true
		}
	}
	// The last response is the run of items before its outputs (which come in any
	// order after it) and after the input or the outputs of the batch before.
	end := len(items)
	for end > 0 && (items[end-1].Kind == gateway.KindCallOutput || isNote(items[end-1])) {
		end--
	}
	start := end
	for start > 0 {
		it := items[start-1]
		if it.Kind == gateway.KindCallOutput || isNote(it) || (it.Kind == gateway.KindMessage && it.Role != gateway.RoleAssistant) {
			break
		}
		start--
	}
	var calls []gateway.Item
	open := false
	for _, it := range items[start:end] {
		if it.Kind == gateway.KindFunctionCall {
			calls = append(calls, it)
			open = open || !done[it.CallID]
		}
	}
	return calls, open
}

// usageNote is the transcript item that holds one step's tokens.
func usageNote(step int, u bus.Usage) gateway.Item {
	raw, _ := json.Marshal(map[string]any{"type": "toolbus.usage", "step": step, "input_tokens": u.InputTokens, "output_tokens": u.OutputTokens})
	return gateway.Item{Kind: gateway.KindOpaque, Provider: "toolbus", Raw: raw}
}

func isNote(it gateway.Item) bool { return it.Kind == gateway.KindOpaque && it.Provider == "toolbus" }
