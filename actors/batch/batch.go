// Package batch schedules the tool calls of one model response: which go out now, which
// wait at a barrier, which are held for a person's approval, what a resume skips and what
// an abort ends. It does no I/O and keeps no time: the turn tells it what happened (a
// call was stored, settled, approved; the response ended; the turn was aborted) and it
// answers what to do, so the rules of a batch live in one place and are tested alone.
//
// The rules. Calls are taken in the model's order. A call goes out only once the turn's
// journal holds it (Stored). A run of parallel calls goes out together; a sequential call
// waits until nothing is in flight and holds every call after it until it is settled. A
// call whose tool needs approval goes out as Held: it counts as in flight (a sequential
// one holds the calls after it) until a person decides. While the response still streams
// (Open), calls are added as they complete and may go out at once; a call settled then is
// Deferred, its output stored after the response's items. The batch is complete when the
// response has ended and every call is settled.
package batch

import (
	"fmt"

	"github.com/toolbus/toolbus"
)

// State is where one call of the batch stands. Each call has exactly one.
type State uint8

const (
	// Unstored: added, not in the journal yet, so it may not go out.
	Unstored State = iota
	// Ready: in the journal; it goes out when the batch's rules allow.
	Ready
	// Held: out for a person's approval. In flight, against its deadline.
	Held
	// Running: its request is out (or the turn answers it itself).
	Running
	// Done: settled (it ran, was refused, or never started); its output is not in the
	// journal yet (it goes there with the batch).
	Done
	// Deferred: settled while its response still streamed; its output is stored once the
	// response's items are, so that they stay together.
	Deferred
	// Stored: settled, its output in the journal.
	Stored
	// Recorded: settled before the turn was resumed: its output was read back with the
	// transcript the turn resumed from, so it is neither run nor stored again.
	Recorded
)

var stateNames = [...]string{"unstored", "ready", "held", "running", "done", "deferred", "stored", "recorded"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", s)
}

// InFlight reports a call that went out and is not settled: Held or Running.
func (s State) InFlight() bool { return s == Held || s == Running }

// Settled reports a call with an outcome: Done, Deferred, Stored or Recorded.
func (s State) Settled() bool { return s >= Done }

// Waiting reports a call that has not gone out and is not settled: Unstored or Ready.
func (s State) Waiting() bool { return s <= Ready }

// Caps bound the calls of a batch in flight at once (held or running); zero is no bound.
// A call a cap stops waits, and so do the calls after it: they go out in the model's
// order.
type Caps struct {
	Total    int // calls in flight
	PerGroup int // calls of one group (a category) in flight
}

// Dispatch is a call to start now: send its request, or hold it for approval.
type Dispatch struct {
	Call int  // its index in the batch (the model's order)
	Hold bool // ask for approval instead of sending it (its state is Held)
}

type call struct {
	sequential bool
	approval   bool
	group      string
	state      State
	run        int // from 1; 0: refused as it was added, in no run
}

// Batch is the scheduler of one response's calls. The zero value is an empty batch
// whose response has ended; Reset starts the next.
type Batch struct {
	calls   []call
	next    int  // the first call neither gone out nor settled
	flying  int  // calls in flight (Held or Running)
	seq     bool // the call last gone out is sequential and in flight
	open    bool // the response streams: more calls may come, outputs wait (Deferred)
	aborted bool
	caps    Caps
	groups  map[string]int // calls in flight by group, with caps.PerGroup
	runs    int            // the run of the last call placed in one
	lastSeq bool           // that call is sequential: the next call starts a run
}

// SetCaps sets the bounds on calls in flight, for this batch and the next.
func (b *Batch) SetCaps(c Caps) { b.caps = c }

// Reset empties the batch for a new response; open says it streams (more calls come
// with Add until ResponseEnded).
func (b *Batch) Reset(open bool) {
	b.calls = b.calls[:0]
	b.next, b.flying, b.seq, b.open, b.aborted = 0, 0, false, open, false
	b.runs, b.lastSeq = 0, false
	clear(b.groups)
}

// Add appends a call in the model's order, Unstored; approval says its tool needs a
// person's approval before it runs; group is what Caps.PerGroup counts it in (its
// category). It returns the call's index.
func (b *Batch) Add(mode toolbus.Mode, approval bool, group string) int {
	seq := mode == toolbus.Sequential
	if b.runs == 0 || seq || b.lastSeq {
		b.runs++
	}
	b.lastSeq = seq
	b.calls = append(b.calls, call{sequential: seq, approval: approval, group: group, run: b.runs})
	return len(b.calls) - 1
}

// AddRefused appends a call refused as it was taken (an unknown tool, invalid
// arguments): settled at once (Done), in no run, holding nothing back. It returns the
// call's index.
func (b *Batch) AddRefused() int {
	b.calls = append(b.calls, call{state: Done})
	return len(b.calls) - 1
}

// Run is the run of call i, from 1: the calls of one run go out together, once every
// call of the runs before it has settled (consecutive parallel calls share a run, a
// sequential call has one of its own); 0 for a call refused as it was added. Caps and
// approvals may hold a call of a run back; they do not move it to another.
func (b *Batch) Run(i int) int { return b.calls[i].run }

// Len is the number of calls in the batch.
func (b *Batch) Len() int { return len(b.calls) }

// State is the state of call i.
func (b *Batch) State(i int) State { return b.calls[i].state }

// Open reports a response that still streams.
func (b *Batch) Open() bool { return b.open }

// Aborted reports a batch that Abort ended.
func (b *Batch) Aborted() bool { return b.aborted }

// InFlight is the number of calls in flight.
func (b *Batch) InFlight() int { return b.flying }

// Stored says the journal holds call i: it may go out. A call settled meanwhile (refused
// before it was stored) stays as it is.
func (b *Batch) Stored(i int) {
	if c := &b.calls[i]; c.state == Unstored {
		c.state = Ready
	}
}

// Refuse settles a call that never went out (refused as it was added, or as it was to
// go out): Done. It reports false for a call that went out or was settled.
func (b *Batch) Refuse(i int) bool {
	c := &b.calls[i]
	if !c.state.Waiting() {
		return false
	}
	c.state = Done
	return true
}

// Recorded settles a call whose output the transcript of a resumed turn holds already.
func (b *Batch) Recorded(i int) { b.calls[i].state = Recorded }

// Next is what goes out now, in the model's order, by the batch's rules; each call
// returned is Held or Running from here. Nothing goes out of an aborted batch.
func (b *Batch) Next() []Dispatch {
	var out []Dispatch
	for !b.aborted && b.next < len(b.calls) && !b.seq {
		c := &b.calls[b.next]
		if c.state.Settled() {
			b.next++
			continue
		}
		if c.state != Ready || c.sequential && b.flying > 0 {
			break // a barrier: not stored yet, or a sequential call waits for the run before it
		}
		if b.caps.Total > 0 && b.flying >= b.caps.Total || b.caps.PerGroup > 0 && b.groups[c.group] >= b.caps.PerGroup {
			break // at a cap: it waits, and the calls after it too, for a call to settle
		}
		c.state = Running
		if c.approval {
			c.state = Held
		}
		b.flying++
		if b.caps.PerGroup > 0 {
			if b.groups == nil {
				b.groups = make(map[string]int)
			}
			b.groups[c.group]++
		}
		b.seq = c.sequential
		out = append(out, Dispatch{Call: b.next, Hold: c.approval})
		b.next++
	}
	return out
}

// Approved sends a held call: Running. It reports false for a call that is not Held.
func (b *Batch) Approved(i int) bool {
	c := &b.calls[i]
	if c.state != Held {
		return false
	}
	c.state = Running
	return true
}

// Settle gives a call in flight its outcome: Deferred while the response streams, Done
// otherwise (StoredOutput once the journal holds its output). It reports false for a
// call that is not in flight (a late or duplicate answer).
func (b *Batch) Settle(i int) bool {
	c := &b.calls[i]
	if !c.state.InFlight() {
		return false
	}
	c.state = Done
	if b.open {
		c.state = Deferred
	}
	b.flying--
	if b.caps.PerGroup > 0 {
		b.groups[c.group]--
	}
	if c.sequential {
		b.seq = false
	}
	return true
}

// OutputStored says the journal holds the output of settled call i.
func (b *Batch) OutputStored(i int) {
	if c := &b.calls[i]; c.state == Done || c.state == Deferred {
		c.state = Stored
	}
}

// ResponseEnded says the response is whole: no call comes after. It returns the calls
// whose outputs waited for it (Deferred), in the model's order, now Done: store them.
func (b *Batch) ResponseEnded() []int {
	b.open = false
	var out []int
	for i := range b.calls {
		if b.calls[i].state == Deferred {
			b.calls[i].state = Done
			out = append(out, i)
		}
	}
	return out
}

// Abort ends the batch: nothing more goes out. The calls that had not gone out are
// settled, Done (they did not start), and returned as notStarted; the held ones are
// returned as held, still Held, for the turn to settle (they did not start either); the
// running ones run on, until they are settled or given up on.
func (b *Batch) Abort() (notStarted, held []int) {
	if b.aborted {
		return nil, nil
	}
	b.aborted = true
	for i := range b.calls {
		switch c := &b.calls[i]; c.state {
		case Unstored, Ready:
			c.state = Done
			notStarted = append(notStarted, i)
		case Held:
			held = append(held, i)
		}
	}
	b.next = len(b.calls)
	return notStarted, held
}

// Complete reports a batch with nothing left to wait for: its response has ended, nothing
// is in flight, and every call went out and was settled, or the batch was aborted.
func (b *Batch) Complete() bool {
	return b.flying == 0 && !b.open && (b.aborted || b.next == len(b.calls))
}

// Calls lists the calls in state s, in the model's order.
func (b *Batch) Calls(s State) []int {
	var out []int
	for i := range b.calls {
		if b.calls[i].state == s {
			out = append(out, i)
		}
	}
	return out
}
