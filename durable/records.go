package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// ErrTurnExists refuses a turn id that is already queued, running or ended.
var ErrTurnExists = errors.New("turn id already used")

// ErrSpecTooLarge refuses a turn spec larger than the bus carries in one message: it
// cannot be queued, now or later.
var ErrSpecTooLarge = errors.New("turn spec too large for the bus")

// specTooLarge is ErrSpecTooLarge with the sizes and what to do.
type specTooLarge struct {
	size  int
	limit int64
}

func (e specTooLarge) Error() string {
	return fmt.Sprintf("the turn spec is %d bytes, more than the bus carries in one message (%d, the server's max_payload): "+
		"shorten the input, instructions or script, or raise max_payload on the servers", e.size, e.limit)
}

func (e specTooLarge) Is(target error) bool { return target == ErrSpecTooLarge }

// ErrNoRecord reports a turn the records bucket does not hold.
var ErrNoRecord = errors.New("no record of the turn")

// Record reads a turn's record and its revision. A turn without one is ErrNoRecord
// (and so is any turn on a bus without durable turns).
func (s *Store) Record(ctx context.Context, id string) (bus.TurnRecord, uint64, error) {
	kv, err := s.records()
	if errors.Is(err, ErrNoTurns) {
		return bus.TurnRecord{}, 0, fmt.Errorf("turn %s: %w", id, ErrNoRecord)
	}
	if !bus.ValidID(id) {
		return bus.TurnRecord{}, 0, fmt.Errorf("turn %q: %w", id, ErrNoRecord)
	}
	rec, rev, err := bus.GetRecord[bus.TurnRecord](ctx, kv, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec, 0, fmt.Errorf("turn %s: %w", id, ErrNoRecord)
	}
	if err != nil {
		return rec, 0, fmt.Errorf("turn %s: %w", id, err)
	}
	return rec, rev, nil
}

// Live reads a turn's record as Record does, with the step of a running turn taken
// from its last transcript message (the record is written at the claim and the end
// only: a step costs no write of it).
func (s *Store) Live(ctx context.Context, id string) (bus.TurnRecord, error) {
	rec, _, err := s.Record(ctx, id)
	if err != nil || rec.State != bus.TurnRunning {
		return rec, err
	}
	rec.Step = s.lastStep(ctx, id, rec.Step)
	return rec, nil
}

// lastStep is the step of a turn's last transcript message, or step if it is later
// (or the message cannot be read).
func (s *Store) lastStep(ctx context.Context, id string, step int) int {
	stream := s.transcripts
	if stream == nil {
		var err error
		if stream, err = s.js.Stream(ctx, bus.StreamTranscripts); err != nil {
			return step
		}
	}
	m, err := stream.GetLastMsgForSubject(ctx, bus.TranscriptSubject(id))
	if err != nil {
		return step
	}
	return laterStep(m.Header, step)
}

// laterStep is the step a transcript message's headers give, or step if it is later
// (or they give none).
func laterStep(h nats.Header, step int) int {
	if n, err := strconv.Atoi(h.Get(bus.HeaderStep)); err == nil {
		return max(step, n)
	}
	return step
}

// List returns every turn record, newest first.
func (s *Store) List(ctx context.Context) ([]bus.TurnRecord, error) {
	kv, err := s.records()
	if err != nil {
		return nil, err
	}
	keys, err := bus.ListKeys(ctx, kv)
	if err != nil {
		return nil, err
	}
	recs := make([]bus.TurnRecord, 0, len(keys))
	for _, k := range keys {
		r, _, err := bus.GetRecord[bus.TurnRecord](ctx, kv, k)
		if err != nil {
			continue // ended and purged meanwhile, or unreadable
		}
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b bus.TurnRecord) int { return b.Created.Compare(a.Created) })
	return recs, nil
}

// MainTurnSpec reads the spec of a turn that starts others (a background job, or a
// schedule's turns): it must be a durable main turn, and the turns it starts use its
// model.
func (s *Store) MainTurnSpec(ctx context.Context, turn string) (bus.TurnSpec, error) {
	if turn == "" {
		return bus.TurnSpec{}, errors.New("this call comes from no turn: only a main turn can start others")
	}
	rec, _, err := s.Record(ctx, turn)
	if errors.Is(err, ErrNoRecord) {
		return bus.TurnSpec{}, fmt.Errorf("turn %s has no record: only turns queued in the intake (durable turns) can start others", turn)
	}
	if err != nil {
		return bus.TurnSpec{}, err
	}
	if rec.Spec.Kind != bus.TurnMain && rec.Spec.Kind != "" {
		return bus.TurnSpec{}, fmt.Errorf("turn %s is a %s turn: only main turns start others", turn, rec.Spec.Kind)
	}
	return rec.Spec, nil
}

// Submit queues a durable turn: its record is created (which refuses an id already
// used) and its spec published into the intake, where a node that runs turns takes it
// (node, when set, names the one that must). The spec must be checked and normalised,
// with its id set.
func (s *Store) Submit(ctx context.Context, spec bus.TurnSpec, node string) error {
	kv, err := s.records()
	if err != nil {
		return err
	}
	if node != "" && !bus.ValidToken(node) {
		return fmt.Errorf("invalid node name %q", node)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if nc := s.js.Conn(); nc != nil {
		if limit := nc.MaxPayload(); int64(len(b)) > limit {
			return specTooLarge{size: len(b), limit: limit}
		}
	}
	now := time.Now()
	rec, err := json.Marshal(bus.TurnRecord{Spec: spec, State: bus.TurnQueued, Created: now, Updated: now})
	if err != nil {
		return err
	}
	// A create retried after a lost answer finds its own value (UpdateAt).
	if _, err := bus.UpdateAt(ctx, kv, spec.ID, rec, 0); err != nil {
		if !bus.IsConflict(err) {
			return fmt.Errorf("create the turn record: %w", s.cfg.StoreFull(err))
		}
		old, _, gerr := s.Record(ctx, spec.ID)
		if gerr != nil {
			return fmt.Errorf("create the turn record: %w (its record is unreadable)", ErrTurnExists)
		}
		return fmt.Errorf("create the turn record: %w: it is %s%s since %s", ErrTurnExists, old.State, OwnerNote(old.Owner), old.Updated.Format(time.RFC3339))
	}
	subject := bus.IntakeAny(spec.ID)
	if node != "" {
		subject = bus.IntakeNode(node, spec.ID)
	}
	if err := s.publishIntake(ctx, subject, spec.ID, b); err != nil {
		// Nothing would ever take the turn: remove its record, so the id can be used.
		if derr := kv.Delete(context.WithoutCancel(ctx), spec.ID); derr != nil {
			s.log.Warn("remove the record of a turn that could not be queued", "turn", spec.ID, "err", derr)
		}
		return fmt.Errorf("intake: %w", s.cfg.StoreFull(err))
	}
	return nil
}

// Requeue publishes the spec of a turn that has not ended into the intake again (its
// node was lost while no node could take it over). The caller makes sure no node
// drives it.
func (s *Store) Requeue(ctx context.Context, id string) (bus.TurnRecord, error) {
	rec, _, err := s.Record(ctx, id)
	if err != nil {
		return rec, err
	}
	if rec.State.Ended() {
		return rec, fmt.Errorf("turn %s has ended (%s): nothing to resume", id, rec.State)
	}
	b, err := json.Marshal(rec.Spec)
	if err != nil {
		return rec, err
	}
	return rec, s.publishIntake(ctx, bus.IntakeAny(id), id, b)
}

// RestoreRecord writes a turn's record as given, under rec.Spec.ID, where the bucket
// holds none (an id with another record is ErrTurnExists; the same record again, as a
// retry writes it, is no error), and returns its revision: for an operator restoring
// records from a backup or moving a turn from another bus, and for tests that stage what
// a lost node left behind. It queues nothing (Requeue does), and, creating only, it
// never overwrites a record that a node may hold.
func (s *Store) RestoreRecord(ctx context.Context, rec bus.TurnRecord) (uint64, error) {
	kv, err := s.records()
	if err != nil {
		return 0, err
	}
	id := rec.Spec.ID
	if !bus.ValidID(id) {
		return 0, fmt.Errorf("restore record: invalid turn id %q", id)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	rev, err := bus.UpdateAt(ctx, kv, id, b, 0)
	switch {
	case bus.IsConflict(err):
		return 0, fmt.Errorf("restore the record of turn %s: %w", id, ErrTurnExists)
	case err != nil:
		return 0, fmt.Errorf("restore the record of turn %s: %w", id, s.cfg.StoreFull(err))
	}
	return rev, nil
}

// publishIntake is the one way a turn's spec enters the intake. The message id is the
// publication's: a retry of it is stored once, and the same turn queued again later
// (resumed by hand, or an id used again after its record was deleted) is a new message,
// not a duplicate.
func (s *Store) publishIntake(ctx context.Context, subject, id string, spec []byte) error {
	msgID := fmt.Sprintf("%s@%d", id, time.Now().UnixNano())
	return bus.Retry(ctx, "queue the turn", s.log, func(ctx context.Context) error {
		_, err := s.js.Publish(ctx, subject, spec, jetstream.WithMsgID(msgID))
		return err
	})
}

// CreateQueued writes the record of a turn that a schedule's firing queues (its spec
// is already in the intake, as the firing); a record already there is this firing's.
func (s *Store) CreateQueued(ctx context.Context, spec bus.TurnSpec, now time.Time) error {
	kv, err := s.records()
	if err != nil {
		return err
	}
	b, err := json.Marshal(bus.TurnRecord{Spec: spec, State: bus.TurnQueued, Created: now, Updated: now})
	if err != nil {
		return err
	}
	if _, err := bus.UpdateAt(ctx, kv, spec.ID, b, 0); err != nil && !bus.IsConflict(err) {
		return err
	}
	return nil
}

// EndQueued ends a turn that no node holds (queued, no owner) without running it, as
// state with reason; the node that later takes its intake message finds it ended. It
// reports false, with the record as it stands, when a node holds the turn (the caller
// aborts it instead) or it has ended already.
func (s *Store) EndQueued(ctx context.Context, id string, state bus.TurnState, reason string) (bus.TurnRecord, bool, error) {
	kv, err := s.records()
	if err != nil {
		return bus.TurnRecord{}, false, err
	}
	ended := false
	rec, _, err := bus.Change(ctx, kv, id, decodeRecord, encodeRecord, func(r *bus.TurnRecord, found bool) error {
		ended = false
		if !found {
			return fmt.Errorf("turn %s: %w", id, ErrNoRecord)
		}
		if r.State.Ended() || r.State != bus.TurnQueued || r.Owner != "" {
			return bus.ErrUnchanged
		}
		r.State, r.Error, r.Updated = state, reason, time.Now()
		ended = true
		return nil
	})
	return rec, ended, err
}

func decodeRecord(b []byte) (bus.TurnRecord, error) {
	var r bus.TurnRecord
	err := json.Unmarshal(b, &r)
	return r, err
}

func encodeRecord(r bus.TurnRecord) ([]byte, error) { return json.Marshal(r) }

// OwnerNote is " on node N" for a record's owner, "" for none.
func OwnerNote(owner string) string {
	if owner == "" {
		return ""
	}
	return " on node " + owner
}

// PutSchedule stores a schedule's message in the intake (m.Subject must be
// bus.IntakeSchedule of it): JetStream fires it into the intake as the schedule says.
func (s *Store) PutSchedule(ctx context.Context, m *nats.Msg) error {
	if id, ok := strings.CutPrefix(m.Subject, bus.IntakeSchedule("")); !ok || !bus.ValidToken(id) {
		return fmt.Errorf("put schedule: %q is not a schedule's subject", m.Subject)
	}
	return bus.Retry(ctx, "queue schedule", s.log, func(ctx context.Context) error {
		_, err := s.js.PublishMsg(ctx, m)
		return s.cfg.StoreFull(err)
	})
}

// FireScheduleNow publishes a firing of schedule id into the intake now, as JetStream
// does when the schedule is due: the body and headers of the schedule's message (without
// the scheduling headers) on its target, bus.IntakeFired(id), where the runners take it
// as any other firing; the node's path from there on is the same. A one-shot schedule
// ("@at") is purged by its firing, as the server's own does (HeaderScheduleNext
// "purge"), so it fires no more. A repeating one keeps its times: the server sets
// HeaderScheduler and HeaderScheduleNext (the next time) on its firings, which a client
// may not, so this firing has neither. For tests, and for an operator's "fire now".
func (s *Store) FireScheduleNow(ctx context.Context, id string) error {
	if !bus.ValidToken(id) {
		return fmt.Errorf("fire schedule: invalid schedule id %q", id)
	}
	return bus.Retry(ctx, "fire schedule "+id, s.log, func(ctx context.Context) error {
		st, err := s.intake(ctx)
		if err != nil {
			return err
		}
		sm, err := st.GetLastMsgForSubject(ctx, bus.IntakeSchedule(id))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("fire schedule %s: it has no message in the intake (it fires no more)", id)
		}
		if err != nil {
			return err
		}
		m := nats.NewMsg(sm.Header.Get(bus.HeaderScheduleTarget))
		if m.Subject != bus.IntakeFired(id) {
			return fmt.Errorf("fire schedule %s: its message targets %q, not %q", id, m.Subject, bus.IntakeFired(id))
		}
		m.Data = sm.Data
		for k, v := range sm.Header {
			if !strings.HasPrefix(k, "Nats-Schedule") && !strings.HasPrefix(k, "Nats-Expected-") && k != nats.MsgIdHdr && k != nats.MsgRollup {
				m.Header[k] = v
			}
		}
		if strings.HasPrefix(sm.Header.Get(bus.HeaderSchedule), "@at ") {
			m.Header.Set(bus.HeaderScheduler, bus.IntakeSchedule(id))
			m.Header.Set(bus.HeaderScheduleNext, "purge")
		}
		_, err = s.js.PublishMsg(ctx, m)
		return s.cfg.StoreFull(err)
	})
}

// RemoveSchedule removes a schedule's message from the intake: it fires no more.
func (s *Store) RemoveSchedule(ctx context.Context, id string) error {
	return bus.Retry(ctx, "remove schedule "+id, s.log, func(ctx context.Context) error {
		stream, err := s.js.Stream(ctx, bus.StreamIntake)
		if err != nil {
			return err
		}
		return stream.Purge(ctx, jetstream.WithPurgeSubject(bus.IntakeSchedule(id)))
	})
}

// SpecTooLarge is the error Submit returns for a spec of size bytes on a bus that
// carries limit (errors.Is ErrSpecTooLarge), for callers that check a spec's size
// themselves and for their tests.
func SpecTooLarge(size int, limit int64) error { return specTooLarge{size: size, limit: limit} }
