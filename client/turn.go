package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// Turn is a handle on one turn of the bus: one this client started (Client.Start) or
// one found by its id (Client.Turn). Its methods act on the turn wherever it runs, and
// on its record and transcript once it has ended.
type Turn struct {
	// ID is the turn's id. Node is the node that took it, when Start heard which ("" for
	// a turn found by id).
	ID   string
	Node string
	// GiveUp is how long Events and Wait wait without a word of the turn's node (at
	// least three of its leases) before they give up with ErrNodeLost; zero is three
	// leases.
	GiveUp time.Duration

	c  *Client
	mu sync.Mutex
	w  *Watch // made before the start, for the first Events or Wait; nil once taken
}

// ErrTurnExists refuses a turn id that is already queued, running or ended.
var ErrTurnExists = durable.ErrTurnExists

// Start queues the turn spec describes, on the node named node or on any node that
// runs turns when node is empty, and returns its handle. It subscribes to the turn
// before it asks, so that Events and Wait hear all of it: the handle keeps what the
// turn sends until one of them has read it to the turn's end, or Close. spec.ID is
// picked when empty.
//
// A spec too large for a message is durable.ErrSpecTooLarge, the intake's own refusal; a
// user whose role may not start turns (a watcher) gets ErrRefused. An id a turn has
// already is ErrTurnExists, with the handle of that turn.
//
// Should the connection to the bus go down before a node answers, Start asks again
// once it is back, with the same id, for StartTimeout in all or until ctx ends; a
// start still not answered then is ErrStartUnanswered, with the handle of the turn,
// which may run.
func (c *Client) Start(ctx context.Context, spec bus.TurnSpec, node string) (*Turn, error) {
	if spec.ID == "" {
		spec.ID = bus.NewID()
	}
	w, err := c.Watch(spec.ID)
	if err != nil {
		return nil, fmt.Errorf("start turn: %w", err)
	}
	reply, err := c.start(ctx, spec, node)
	if err != nil && !errors.Is(err, durable.ErrTurnExists) && !errors.Is(err, ErrStartUnanswered) {
		w.Stop()
		return nil, err
	}
	return &Turn{ID: spec.ID, Node: reply.Node, c: c, w: w}, err
}

// Turn returns the handle of the turn with this id, which may run anywhere on the bus or
// have ended. Nothing is asked of the bus until a method is called.
func (c *Client) Turn(id string) (*Turn, error) {
	if !bus.ValidToken(id) {
		return nil, fmt.Errorf("turn: invalid turn id %q", id)
	}
	return &Turn{ID: id, c: c}, nil
}

// Close drops what the handle kept of the turn for Events and Wait. The turn goes on.
func (t *Turn) Close() {
	if w := t.take(); w != nil {
		w.Stop()
	}
}

// take hands over the watch Start made, once.
func (t *Turn) take() *Watch {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.w
	t.w = nil
	return w
}

// Events yields the turn's messages as they come, each typed by its kind (statuses,
// call events, results, approval requests and decisions, aborts, the model's text as it
// streams; bus.TurnMessage), and ends after the turn's done status. A turn that ended
// before Events subscribed yields that status alone, read from its record, and so does
// one whose done status this connection missed (it moved to another server meanwhile).
// A turn whose node went silent for GiveUp, and that no node resumed, ends it with
// ErrNodeLost; ctx's end, with its cause. Stop early by breaking out of the loop.
//
// A host publishes a call's completed event after its reply (protocol.md §10): the
// event may come after the turn's done status, and is then not yielded. The reply,
// which always comes before, carries its label (ToolReply.Label).
func (t *Turn) Events(ctx context.Context) iter.Seq2[bus.TurnMessage, error] {
	return func(yield func(bus.TurnMessage, error) bool) {
		w := t.take()
		if w == nil {
			var err error
			if w, err = t.c.Watch(t.ID); err != nil {
				yield(bus.TurnMessage{}, fmt.Errorf("turn %s: %w", t.ID, err))
				return
			}
			// Subscribed after the start: a turn that ended before is heard of no more.
			if st, ok := w.Ended(ctx, t.ID); ok {
				w.Stop()
				yield(doneMessage(st), nil)
				return
			}
		}
		defer w.Stop()
		stopped := false
		st, err := follow(ctx, w, t.ID, t.GiveUp, func(m bus.TurnMessage) bool {
			if !yield(m, nil) {
				stopped = true
			}
			return !stopped
		})
		switch {
		case stopped:
		case err != nil:
			yield(bus.TurnMessage{}, err)
		case st.heard:
		default:
			yield(doneMessage(st.TurnStatus), nil) // read from the record
		}
	}
}

// doneMessage is a done status read from a turn's record, as a message of the turn.
func doneMessage(st bus.TurnStatus) bus.TurnMessage {
	return bus.TurnMessage{Subject: bus.TurnSubject{Turn: st.Turn, Kind: bus.KindStatus, Status: bus.StatusDone}, Status: &st}
}

// Wait waits for the turn's end and returns its final status: its state, its text, its
// calls' records. It is Events, read to the end.
func (t *Turn) Wait(ctx context.Context) (bus.TurnStatus, error) {
	for m, err := range t.Events(ctx) {
		if err != nil {
			return bus.TurnStatus{}, err
		}
		if m.Status != nil && m.Subject.Status == bus.StatusDone {
			return *m.Status, nil
		}
	}
	return bus.TurnStatus{}, fmt.Errorf("turn %s: no end heard", t.ID)
}

// Abort asks the turn to stop (Client.Abort); Wait says how it ended.
func (t *Turn) Abort(ctx context.Context, reason string) error { return t.c.Abort(ctx, t.ID, reason) }

// CancelCall cancels one call of the turn while the turn goes on (Client.CancelCall).
func (t *Turn) CancelCall(ctx context.Context, call, reason string) error {
	return t.c.CancelCall(ctx, t.ID, call, reason)
}

// Approve lets a call the turn holds for approval run: it asks the turn for the call's
// request, then approves those exact arguments (their hash), as `toolbus approve` does.
// The decision is signed with the connection's name.
func (t *Turn) Approve(ctx context.Context, call string) error {
	return t.decide(ctx, call, bus.ApprovalGrant, "")
}

// Refuse refuses a call the turn holds for approval, with the reason the model reads;
// the call never runs.
func (t *Turn) Refuse(ctx context.Context, call, reason string) error {
	return t.decide(ctx, call, bus.ApprovalRefuse, reason)
}

func (t *Turn) decide(ctx context.Context, call, decision, reason string) error {
	return t.c.Decide(ctx, t.ID, call, bus.Approval{Decision: decision, By: t.c.nc.Opts.Name, Reason: reason})
}

// Record reads the turn's record (Client.Record): nil for a turn the bus keeps none of.
func (t *Turn) Record(ctx context.Context) (*bus.TurnRecord, error) { return t.c.Record(ctx, t.ID) }

// Transcript reads the turn's transcript (Client.Transcript), as far as it is stored.
func (t *Turn) Transcript(ctx context.Context) ([]toolbus.Item, error) {
	return t.c.Transcript(ctx, t.ID)
}
