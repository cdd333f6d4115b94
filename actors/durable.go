package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// A durable turn's journal holds a lease (durable.Lease) on its record and its
// transcript, so that another node can resume it:
//   - the claim stored the turn's input (or, resumed, a resume note) before the turn
//     started, fencing every earlier holder out of the transcript;
//   - every model response is stored before any of its calls goes out (a streamed one in
//     parts: each call with what came before it, as soon as it is complete);
//   - every finished call's output is stored as it arrives (outputs that finish while
//     an append is in flight go together in the next one);
//   - the end, or the hand-back, is stored in the record at the claim's revision.
// Each of those writes is refused by the server once another node has claimed the
// turn (durable.ErrFenced): the turn then stops and writes nothing more.

// durableJournal is the journal of a turn taken from the intake.
type durableJournal struct {
	t     *turn
	lease *durable.Lease
	// leaseTime is the intake's lease, told to clients with the started status.
	leaseTime time.Duration

	unsaved  []toolbus.Item   // items not yet appended
	busy     bool             // an append is being written
	inflight chan writeResult // its result, read by the actor or by drain
	afters   []func()         // run once what is queued now is stored
}

type writeResult struct {
	err    error
	afters []func()
}

func newDurableJournal(lease *durable.Lease, leaseTime time.Duration) *durableJournal {
	return &durableJournal{lease: lease, leaseTime: leaseTime, inflight: make(chan writeResult, 1)}
}

func (j *durableJournal) begin(t *turn) beginning {
	j.t = t
	b := beginning{lease: j.leaseTime}
	if l := j.lease; l.Resumed {
		b.resume = &resumePoint{items: l.Items, lost: l.Lost}
		if n := len(l.Rec.Resumes); n > 0 {
			b.resume.from = l.Rec.Resumes[n-1]
		}
	}
	// Not resumed: the claim stored the input, which fenced the turn's transcript.
	return b
}

func (j *durableJournal) afterResponse(items []toolbus.Item, then func()) {
	j.unsaved = append(j.unsaved, items...)
	j.checkpoint(then)
}

// afterCall stores a call's output at once: a node that resumes the turn runs no call
// again whose result was recorded.
func (j *durableJournal) afterCall(output toolbus.Item) bool {
	j.unsaved = append(j.unsaved, output)
	j.checkpoint(nil)
	return true
}

func (j *durableJournal) afterBatch(outputs []toolbus.Item) {
	j.unsaved = append(j.unsaved, outputs...)
	j.checkpoint(nil)
}

// atEnd stores the turn's end, after every append before it.
func (j *durableJournal) atEnd(state bus.TurnState, msg string, submitted json.RawMessage) error {
	ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
	defer cancel()
	if err := j.drain(ctx); err != nil {
		return err
	}
	return j.lease.End(ctx, state, msg, j.t.step, submitted)
}

// handBack stores what is queued and the turn as queued for the next node.
func (j *durableJournal) handBack() error {
	ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
	defer cancel()
	if err := j.drain(ctx); err != nil {
		return err
	}
	return j.lease.HandBack(ctx, j.t.step)
}

// confirm asks the record, when the lease may have run out (a node woken after a pause
// longer than its lease, or cut off from the quorum), whether the turn is still this
// node's (durable.Lease.Confirm: within a lease of its last confirmation, at once).
func (j *durableJournal) confirm() error { return j.confirmFor(0) }

// confirmFor makes sure the turn is this node's, and will be for d as far as its lease
// can tell (d is how long the caller relies on it: a stopping node's grace): a write of
// the record, unless the lease of its last confirmation outlasts d; within a third of a
// lease either way.
func (j *durableJournal) confirmFor(d time.Duration) error {
	ctx := context.Background()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	return j.lease.Confirm(ctx)
}

func (j *durableJournal) kept() bool { return true }

// checkpoint stores what the transcript still lacks, off the mailbox; after runs on
// the actor once it is stored. Appends are written one at a time, in order.
func (j *durableJournal) checkpoint(after func()) {
	if after != nil {
		j.afters = append(j.afters, after)
	}
	if j.busy {
		return // written after the append in flight
	}
	j.startWrite()
}

func (j *durableJournal) startWrite() {
	afters := j.afters
	j.afters = nil
	if len(j.unsaved) == 0 {
		for _, f := range afters {
			f()
		}
		return
	}
	items := slices.Clone(j.unsaved)
	j.unsaved = reuse(j.unsaved)
	j.busy = true
	inflight, lease, step := j.inflight, j.lease, j.t.stepStored()
	sys, self := j.t.sys, j.t.self
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
		defer cancel()
		inflight <- writeResult{err: lease.Append(ctx, step, items), afters: afters}
		sys.Root.Send(self, &onActor{j.onStored})
	}()
}

// onStored runs on the actor when an append was written.
func (j *durableJournal) onStored() {
	t := j.t
	var m writeResult
	select {
	case m = <-j.inflight:
	default:
		return // drain took it
	}
	j.busy = false
	if t.over() {
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
		if t.over() {
			return
		}
		f()
	}
	if !j.busy && !t.over() && (len(j.unsaved) > 0 || len(j.afters) > 0) {
		j.startWrite()
	}
}

// drain settles the appends of a turn that is ending here: it waits for the one in
// flight and stores what is still queued (the afters are superseded by the caller).
func (j *durableJournal) drain(ctx context.Context) error {
	j.afters = nil
	if j.busy {
		m := <-j.inflight
		j.busy = false
		if m.err != nil {
			return m.err
		}
	}
	if len(j.unsaved) > 0 {
		items := slices.Clone(j.unsaved)
		j.unsaved = reuse(j.unsaved)
		return j.lease.Append(ctx, j.t.stepStored(), items)
	}
	return nil
}
