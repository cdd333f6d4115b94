package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
)

// Session is the record and transcript of a turn that a client of the bus drives
// itself, outside the intake: the session of an MCP client with `toolbus mcp`
// (bus.TurnMCP), whose calls the client's model makes. It is written as a node writes
// a turn it claimed, through a Lease (the record at its revision, each transcript
// message at the turn's last sequence), so `toolbus turns`, the console and the
// transcript readers see it as any turn. Nothing queues it, so no node claims it: the
// process beats for it on the turn's status subject while it lives, and a record that a
// process killed without ending it left running is ended by EndLostSession.
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
	l := s.sessionLease(rec, rev)
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

// ErrSessionAlive reports a session EndLostSession leaves alone: the process that holds
// it wrote to its transcript or its record meanwhile.
var ErrSessionAlive = errors.New("the session's process is at work")

// EndLostSession ends, as failed with why, the running session of id whose process
// (owner, as its record names it) is gone without ending it: killed, or its machine
// lost. The caller has made sure that owner no longer beats. It fences the process out
// as a node fences a turn's earlier holder: a note at the transcript's last message
// (so an append of the process, woken from a pause, is refused), then the end in the
// record at the revision it read, under the next epoch (so is the process's end). What
// the process wrote meanwhile is ErrSessionAlive, and the record stays as it was.
func (s *Store) EndLostSession(ctx context.Context, id, owner, why string) (bus.TurnRecord, error) {
	rec, rev, err := s.Record(ctx, id)
	switch {
	case err != nil:
		return rec, err
	case rec.Spec.Kind != bus.TurnMCP:
		return rec, fmt.Errorf("turn %s is not the session of an MCP client (kind %s)", id, rec.Spec.Kind)
	case rec.State.Ended():
		return rec, fmt.Errorf("turn %s has ended (%s): %w", id, rec.State, ErrTurnOver)
	case rec.Owner != owner:
		return rec, fmt.Errorf("turn %s is held by %s now, not %s: %w", id, rec.Owner, owner, ErrSessionAlive)
	}
	// The transcript's last message, as its stream's leader holds it: where the note goes
	// (its stream sequence and position) and the session's step.
	var last *jetstream.RawStreamMsg
	err = bus.Retry(ctx, "read the last transcript message of "+id, s.log, func(ctx context.Context) (err error) {
		last, err = bus.LeaderLastMsg(ctx, s.js.Conn(), bus.StreamTranscripts, bus.TranscriptSubject(id))
		return err
	})
	if err != nil {
		return rec, fmt.Errorf("end session %s: %w", id, err)
	}
	next := rec
	next.Epoch++
	l := s.sessionLease(next, rev)
	steps := rec.Step
	if last != nil {
		l.last = last.Sequence
		l.pos, _ = strconv.Atoi(last.Header.Get(bus.HeaderSeq))
		steps = laterStep(last.Header, steps)
	}
	note, _ := json.Marshal(map[string]any{"type": "toolbus.session_lost", "owner": owner, "at": time.Now(), "why": why})
	if err := l.Append(ctx, steps, []toolbus.Item{toolbus.Note(note)}); err != nil {
		if errors.Is(err, ErrFenced) {
			return rec, fmt.Errorf("turn %s: %s appended to its transcript meanwhile: %w", id, owner, ErrSessionAlive)
		}
		return rec, fmt.Errorf("end session %s: %w", id, err)
	}
	if err := l.End(ctx, bus.TurnFailed, why, steps, nil); err != nil {
		if errors.Is(err, ErrFenced) {
			return rec, fmt.Errorf("turn %s: %s wrote its record meanwhile: %w", id, owner, ErrSessionAlive)
		}
		return rec, fmt.Errorf("end session %s: %w", id, err)
	}
	return l.Rec, nil
}

// sessionLease is a lease of a session's turn, whose record is rec at revision rev: a
// lease with no intake message, of which only the record and transcript writes are used.
func (s *Store) sessionLease(rec bus.TurnRecord, rev uint64) *Lease {
	return &Lease{s: s, Spec: rec.Spec, Rec: rec, rev: rev, stopProgress: func() {}}
}
