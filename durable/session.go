package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
)

// Session is the record and transcript of a turn that a client of the bus drives
// itself, outside the intake: the session of an MCP client with `toolbus mcp`
// (bus.TurnMCP), whose calls the client's model makes. It is written as a node writes
// a turn it claimed, through a Lease (the record at its revision, each transcript
// message at the turn's last sequence), so `toolbus turns`, the console and the
// transcript readers see it as any turn. Nothing queues it, so no node claims it; a
// record left running by a process that died stays so (no node beats for it).
type Session struct {
	l *Lease
}

// OpenSession creates the record of the turn spec describes, running and held by
// owner (what the record names as its node), and stores first as its transcript's
// first message. An id already used is ErrTurnExists; a bus without turn records is
// ErrNoTurns.
func (s *Store) OpenSession(ctx context.Context, spec bus.TurnSpec, owner string, first []toolbus.Item) (*Session, error) {
	kv, err := s.records()
	if err != nil {
		return nil, err
	}
	if !bus.ValidID(spec.ID) {
		return nil, fmt.Errorf("open session: invalid turn id %q", spec.ID)
	}
	now := time.Now()
	rec := bus.TurnRecord{Spec: spec, State: bus.TurnRunning, Owner: owner, Epoch: 1, Created: now, Updated: now}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	// A create retried after a lost answer finds its own value (UpdateAt).
	rev, err := bus.UpdateAt(ctx, kv, spec.ID, b, 0)
	switch {
	case bus.IsConflict(err):
		return nil, fmt.Errorf("open session %s: %w", spec.ID, ErrTurnExists)
	case err != nil:
		return nil, fmt.Errorf("open session %s: create the turn record: %w", spec.ID, s.cfg.StoreFull(err))
	}
	// A lease with no intake message: only its record and transcript writes are used.
	l := &Lease{s: s, Spec: spec, Rec: rec, rev: rev, stopProgress: func() {}}
	if err := l.Append(ctx, 0, first); err != nil {
		x := &Session{l: l}
		if eerr := x.End(context.WithoutCancel(ctx), bus.TurnFailed, "the session's first transcript message could not be stored: "+err.Error(), 0); eerr != nil {
			err = errors.Join(err, eerr)
		}
		return nil, fmt.Errorf("open session %s: %w", spec.ID, err)
	}
	return &Session{l: l}, nil
}

// ID is the session's turn id.
func (x *Session) ID() string { return x.l.Spec.ID }

// Append stores items as the turn's next transcript message, step being the turn's
// step so far (Lease.Append).
func (x *Session) Append(ctx context.Context, step int, items ...toolbus.Item) error {
	return x.l.Append(ctx, step, items)
}

// End stores the turn's end in its record: state, why (for an end other than
// completed), and its steps (Lease.End).
func (x *Session) End(ctx context.Context, state bus.TurnState, why string, steps int) error {
	return x.l.End(ctx, state, why, steps, nil)
}
