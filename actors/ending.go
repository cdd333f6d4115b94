package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors/batch"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// How a turn ends, or stops without ending: abort, failure, its end stored, a lease lost
// or unconfirmed, a hand-back to the intake.

func abandonedMsg(grace time.Duration) string {
	return fmt.Sprintf("call abandoned: the turn was aborted and the call did not stop within %s; it may still be running", grace)
}

// abort stops the turn: no new model call, no new tool call; calls in flight
// were cancelled by their hosts, which listen on the same subject, and get
// the grace period to say so. a is nil for an abort that gave no reason (or a
// malformed one: it aborts all the same).
func (t *turn) abort(a *bus.Abort) {
	if t.phase == phaseAborting || t.over() {
		return
	}
	modelOut := t.modelOut
	t.phase = phaseAborting
	t.modelCancel()
	reason := "aborted"
	t.abortErr = ErrAborted
	if a != nil && a.Reason != "" {
		reason = "aborted: " + a.Reason
		t.abortErr = fmt.Errorf("%w: %s", ErrAborted, a.Reason)
	}
	t.tel.Aborted(reason)
	notStarted, held := t.b.Abort()
	for _, i := range notStarted {
		pc := t.batch[i]
		pc.record.Outcome, pc.record.Error = bus.OutcomeNotStarted, "call not started: the turn was "+reason
		pc.output = toolbus.ErrorResult(pc.record.Error)
	}
	// A call held for approval never went out: it did not start.
	for _, i := range held {
		t.settled(t.batch[i], bus.OutcomeNotStarted, "call not started (it waited for approval): the turn was "+reason, toolbus.Result{})
	}
	if t.over() {
		return
	}
	switch {
	case t.b.InFlight() > 0:
		sys, self := t.sys, t.self
		t.abortTimer = time.AfterFunc(t.cfg.AbortGrace, func() { sys.Root.Send(self, &abortGraceOver{}) })
	case modelOut:
		// The model call returns with ctx's error; onModelReply finishes.
	default:
		t.completeBatch()
	}
}

// abandonRunning gives up on calls that did not stop within the grace.
func (t *turn) abandonRunning() {
	for _, pc := range t.batch {
		if t.state(pc) == batch.Running {
			t.settle(pc, bus.OutcomeAbandoned, abandonedMsg(t.cfg.AbortGrace), toolbus.Result{})
		}
	}
}

func (t *turn) fail(err error) {
	t.log.Warn("turn failed", "err", err)
	// Every call of the batch gets an output, so the transcript stays valid
	// for the provider: a call that never went out did not start; one in
	// flight may still be running on its host.
	for _, pc := range t.batch {
		switch st := t.state(pc); {
		case st.Waiting():
			t.resolve(pc, bus.OutcomeNotStarted, "call not started: the turn failed: "+err.Error())
		case st.InFlight():
			if pc.timer != nil {
				pc.timer.Stop()
			}
			if st == batch.Held {
				t.resolve(pc, bus.OutcomeNotStarted, "call not started (it waited for approval): the turn failed: "+err.Error())
				continue
			}
			t.resolve(pc, bus.OutcomeAbandoned, "call abandoned: the turn failed ("+err.Error()+"); it may still be running")
		}
	}
	if len(t.batch) > 0 {
		t.closeBatch()
	}
	t.finish(bus.TurnFailed, err)
}

func (t *turn) finish(state bus.TurnState, err error) {
	if t.over() {
		return
	}
	t.phase = phaseDone
	t.modelCancel()
	res := TurnResult{
		Turn: t.cfg.Spec.ID, State: state, Text: t.text, Err: err, Steps: t.step,
		Calls: t.records, Transcript: t.transcript, Usage: t.usage, Submitted: t.submitted,
	}
	switch werr := t.j.atEnd(state, res.ErrorText(), t.submitted); {
	case errors.Is(werr, durable.ErrFenced):
		res.Fenced = true
		t.log.Warn("turn taken over by another node; stopping without ending it", "err", werr)
		if t.cfg.Done != nil {
			t.cfg.Done(res)
		}
		return
	case werr != nil && t.j.kept():
		// Not over: a done status would claim an end that no node can read back (a
		// turn completed with a cut history). Another node resumes it after the intake
		// gives it again.
		res.Unended = true
		res.Err = fmt.Errorf("%w: the turn's %s end could not be stored: %w", ErrRuntime, state, werr)
		t.log.Warn("could not store the turn's end; the intake gives it to a node again", "state", state, "err", werr)
		if t.cfg.Done != nil {
			t.cfg.Done(res)
		}
		return
	case werr != nil:
		// A turn whose history was not stored did not complete.
		t.log.Warn("store the turn's end", "err", werr)
		if res.Err == nil {
			res.Err = fmt.Errorf("%w: %w", ErrRuntime, werr)
		}
		if state == bus.TurnCompleted {
			state, res.State = bus.TurnFailed, bus.TurnFailed
		}
	}
	t.status(bus.StatusDone, bus.TurnStatus{State: state, Text: t.text, Calls: t.records, Error: res.ErrorText()})
	if t.cfg.Done != nil {
		t.cfg.Done(res)
	}
}

// leaseLost reports, and stops, a turn whose node no longer holds it, or cannot confirm
// that it does: a node woken after a pause longer than its lease, or cut off from the
// quorum for a lease, asks before it calls the model, settles expired calls or speaks
// for the turn (journal.confirm).
func (t *turn) leaseLost() bool { return t.leaseLostFor(0) }

// leaseLostFor is leaseLost for a caller that relies on the lease for d (a stopping
// node's grace): unless the lease of the turn's last confirmation outlasts d, the record
// is written to confirm it (durableJournal.confirmFor), within a third of a lease.
func (t *turn) leaseLostFor(d time.Duration) bool {
	if t.over() {
		return false
	}
	confirm := t.j.confirm
	if dj, ok := t.j.(*durableJournal); ok && d > 0 {
		confirm = func() error { return dj.confirmFor(d) }
	}
	switch err := confirm(); {
	case errors.Is(err, durable.ErrFenced):
		t.fenced(err)
		return true
	case err != nil && d > 0:
		t.unconfirmed(fmt.Errorf("as its node stops (grace %s): %w", d, err))
		return true
	case err != nil:
		t.unconfirmed(err)
		return true
	}
	return false
}

// leaseUnsure reports a turn that should not speak for itself now: lost, or past its
// lease without confirming it (which stops it).
func (t *turn) leaseUnsure() bool { return t.leaseLost() }

// fenced stops a turn another node took over: it writes nothing more.
func (t *turn) fenced(err error) {
	t.log.Warn("turn taken over by another node; stopping without ending it", "err", err)
	t.phase = phaseDone
	t.modelCancel()
	if t.cfg.Done != nil {
		t.cfg.Done(TurnResult{Turn: t.cfg.Spec.ID, State: bus.TurnRunning, Fenced: true, Steps: t.step})
	}
}

// unconfirmed stops a turn whose node could not confirm that it still holds it
// (durable.ErrUnconfirmed: the node is cut off from the quorum, or was paused past the
// lease): another node may hold it now, or once the lease runs out, so this one says and
// writes nothing more for it. The intake gives it to a node again after the lease; its
// result is Fenced, as a turn taken over.
func (t *turn) unconfirmed(err error) {
	if t.over() {
		return
	}
	t.log.Warn("could not confirm that this node still holds the turn (cut off from the quorum?); stopping without ending it", "err", err)
	t.phase = phaseDone
	t.modelCancel()
	if t.cfg.Done != nil {
		t.cfg.Done(TurnResult{Turn: t.cfg.Spec.ID, State: bus.TurnRunning, Fenced: true, Steps: t.step})
	}
}

// onHandBack asks a turn whose history is kept to stop at its next checkpoint and go
// back to the intake, within its node's grace: at once while it waits for the model (the
// next node asks again), after the batch while calls run. An aborted turn ends as it is;
// a turn another node has taken stops at once, with no checkpoint to wait for (a node
// woken from a pause waited out its stop's grace for the calls of turns it had lost), and
// so does one whose lease its node cannot confirm for the grace (cut off from the
// quorum, it could store no hand-back either, and waited out its grace).
func (t *turn) onHandBack(grace time.Duration) {
	if t.over() || t.phase == phaseAborting || t.phase == phaseHandingBack || !t.j.kept() || t.leaseLostFor(grace) {
		return
	}
	modelOut := t.modelOut
	t.phase = phaseHandingBack
	switch {
	case modelOut:
		t.modelCancel() // onModelReply hands over
	case t.b.Complete():
		t.handOver()
	}
}

// handOver gives the turn back for the next node and ends this node's part.
func (t *turn) handOver() {
	if t.over() {
		return
	}
	err := t.j.handBack()
	t.phase = phaseDone
	t.modelCancel()
	if err != nil {
		t.log.Warn("hand the turn back", "err", err)
	} else {
		t.log.Info("turn handed back to the intake", "step", t.step)
	}
	if t.cfg.Done != nil {
		// A hand-back that was not stored (nor fenced) leaves the turn unended: the intake
		// gives it to a node again (it is not over: no word of an end).
		res := TurnResult{Turn: t.cfg.Spec.ID, State: bus.TurnQueued, HandedBack: err == nil, Fenced: errors.Is(err, durable.ErrFenced),
			Steps: t.step, Transcript: t.transcript}
		if err != nil && !res.Fenced {
			res.Unended, res.Err = true, fmt.Errorf("%w: the turn's hand-back could not be stored: %w", ErrRuntime, err)
		}
		t.cfg.Done(res)
	}
}

// cancelCall ends one call of the turn, as an abort that names it asks (bus.Abort.Call,
// its id on the bus or the model's), while the turn goes on: a call that has not gone out
// does not start; a held one does not either; a running one is stopped by its host, which
// heard the same abort, and answers stopped (the model reads why), or is given up on
// after the abort grace. A call that ended already, or one the turn does not have, is
// left as it is.
func (t *turn) cancelCall(a *bus.Abort) {
	if t.over() || t.phase == phaseAborting {
		return
	}
	pc := t.byWire[a.Call]
	if pc == nil {
		for _, c := range t.batch {
			if c.item.CallID == a.Call {
				pc = c
				break
			}
		}
	}
	if pc == nil {
		t.log.Info("cancel of a call the turn does not run now", "call", a.Call)
		return
	}
	why := "cancelled"
	if a.By != "" {
		why += " by " + a.By
	}
	if a.Reason != "" {
		why += ": " + a.Reason
	}
	t.log.Info("call cancelled", "call", pc.item.CallID, "tool", pc.item.Name, "state", t.state(pc), "reason", a.Reason)
	switch st := t.state(pc); {
	case st.Waiting():
		t.resolve(pc, bus.OutcomeNotStarted, "call not started: it was "+why)
		t.schedule()
	case st == batch.Held:
		t.settle(pc, bus.OutcomeNotStarted, "call not started (it waited for approval): it was "+why, toolbus.Result{})
	case st == batch.Running && pc.local != nil:
		// The turn answers it itself: nothing to wait for.
		t.settle(pc, bus.OutcomeStopped, "call stopped: it was "+why, toolbus.Result{})
	case st == batch.Running:
		pc.cancelled = why
		if at := time.Now().Add(t.cfg.AbortGrace); pc.expires.IsZero() || at.Before(pc.expires) {
			pc.expires = at
			t.armExpiry(at)
		}
	}
}
