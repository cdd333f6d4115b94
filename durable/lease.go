package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/redact"
)

// Errors of claiming and of a lease.
var (
	// ErrTurnOver reports an intake message of a turn that has ended already.
	ErrTurnOver = errors.New("the turn has ended")
	// ErrFenced reports a write of a node that no longer holds the turn: another node
	// claimed it (this node's lease ran out while it was paused, slow or cut off). The
	// server refused the write; the node must write nothing more for the turn.
	ErrFenced = errors.New("another node holds the turn now")
	// ErrUnconfirmed reports a lease Confirm could not check (the record could not be
	// read): it is asked again next time.
	ErrUnconfirmed = errors.New("could not confirm that this node still holds the turn")
	// ErrClaimLost reports a claim that another writer of the record beat.
	ErrClaimLost = errors.New("another node claimed the turn first")
)

// claimPatience bounds giving back a turn whose claim failed half-way.
const claimPatience = 10 * time.Second

// Lease is a node's hold of one turn, from its claim to its end or hand-back. Its
// methods are safe for concurrent use; appends are written one at a time, in order.
type Lease struct {
	s     *Store
	msg   jetstream.Msg
	Spec  bus.TurnSpec
	Rec   bus.TurnRecord // the record as this node claimed (or, for ErrTurnOver, found) it
	Items []toolbus.Item // the transcript as read at the claim, with the claim's message
	// Resumed reports a turn another node (or this one, before a restart) had started:
	// Items holds its transcript, which ends with this claim's resume note.
	Resumed bool
	// Lost names the node the turn was taken from, for the messages of abandoned calls.
	Lost string

	stopProgress func()
	lease        time.Duration
	beat         atomic.Int64 // when progress was last signalled (UnixNano)

	mu    sync.Mutex
	rev   uint64      // the record's revision as this node last wrote it
	last  uint64      // the stream sequence of the turn's last transcript message
	pos   int         // its position (Toolbus-Seq)
	state atomicState // read without mu: progress goes on while an append or a write is under way
}

type leaseState uint32

type atomicState struct{ v atomic.Uint32 }

func (a *atomicState) get() leaseState  { return leaseState(a.v.Load()) }
func (a *atomicState) set(s leaseState) { a.v.Store(uint32(s)) }

const (
	holding leaseState = iota
	ended              // the end is stored: the intake message may be acknowledged
	gone               // handed back, released or fenced: nothing more is written
)

// Claim makes this node the owner of the turn of an intake message: at the record's
// revision, so that of two nodes given the same turn one wins; then it reads the
// transcript back and appends the claim's first message (first: the turn's input for a
// turn with no transcript, or the resume note), which fences every earlier holder out
// of the transcript. From the call on, the message's lease is kept (in progress) until
// the lease ends.
//
// A turn that has ended is ErrTurnOver, with a lease whose Ack settles the message. A
// claim beaten by another is ErrClaimLost and leaves the message alone (its delivery
// may be stale). Any other failure gives the turn back (a claim whose write landed while
// its answer was lost is found and undone) and has the message redelivered.
func (s *Store) Claim(ctx context.Context, msg jetstream.Msg, spec bus.TurnSpec, lease time.Duration,
	first func(rec bus.TurnRecord, resumed bool) []toolbus.Item) (*Lease, error) {
	kv, err := s.records()
	if err != nil {
		return nil, err
	}
	l := &Lease{s: s, msg: msg, Spec: spec}
	l.stopProgress = l.keepInProgress(msg, lease)
	rec, rev, err := s.Record(ctx, spec.ID)
	switch {
	case errors.Is(err, ErrNoRecord):
		// Published without a record (by hand, or the record was lost): make one.
		now := time.Now()
		rec, rev = bus.TurnRecord{Spec: spec, State: bus.TurnQueued, Created: now, Updated: now}, 0
	case err != nil:
		l.stop()
		l.nakLater()
		return nil, err
	}
	if rec.State.Ended() {
		l.Rec, l.rev = rec, rev
		l.state.set(ended)
		l.stopProgress()
		return l, ErrTurnOver
	}
	prev := rec.Owner
	if prev != "" || rec.Epoch > 0 {
		why := "the turn's node stopped signalling progress (lost, paused or killed)"
		if prev == "" {
			why = "the turn was handed back by its node (stopping)"
		}
		l.Lost = prev
		if l.Lost == "" && len(rec.Resumes) > 0 {
			l.Lost = rec.Resumes[len(rec.Resumes)-1].Node
		}
		if l.Lost == "" {
			l.Lost = "unknown"
		}
		rec.Resumes = append(rec.Resumes, bus.Resume{Node: s.cfg.Node, From: prev, At: time.Now(), Why: why})
	}
	rec.Spec, rec.State, rec.Owner, rec.Updated = spec, bus.TurnRunning, s.cfg.Node, time.Now()
	rec.Epoch++
	b, err := json.Marshal(rec)
	if err != nil {
		l.stop()
		return nil, err
	}
	newRev, err := bus.UpdateAt(ctx, kv, spec.ID, b, rev)
	if err != nil && bus.IsConflict(err) {
		// A follower's read can lag the write it answers about, and the writer that
		// came first may have ended the turn: look once more.
		cur, crev, gerr := s.Record(ctx, spec.ID)
		switch {
		case gerr != nil:
		case cur.Owner == s.cfg.Node && cur.Epoch == rec.Epoch && cur.Updated.Equal(rec.Updated):
			newRev, err = crev, nil
		case cur.State.Ended():
			l.Rec, l.rev = cur, crev
			l.state.set(ended)
			l.stopProgress()
			return l, ErrTurnOver
		}
	}
	switch {
	case err != nil && bus.IsConflict(err):
		l.stop()
		return nil, fmt.Errorf("claim: %w: %w", ErrClaimLost, err)
	case err != nil:
		// The write may have landed with its answer lost: give the turn back.
		l.Rec = rec // what the claim may have written, for giveBack
		l.giveBack()
		l.stop()
		l.nakLater()
		return nil, fmt.Errorf("claim: %w", err)
	}
	l.Rec, l.rev = rec, newRev
	if err := l.fence(ctx, first); err != nil {
		if !errors.Is(err, ErrFenced) {
			l.release(ctx)
			l.nakLater()
		}
		l.stop()
		return nil, err
	}
	return l, nil
}

// fence reads the transcript and appends the claim's first message at its last
// sequence, reading again when a writer that held the turn before appended meanwhile.
func (l *Lease) fence(ctx context.Context, first func(rec bus.TurnRecord, resumed bool) []toolbus.Item) error {
	for attempt := 0; ; attempt++ {
		t, err := l.s.readTranscript(ctx, l.Spec.ID)
		if err != nil {
			return fmt.Errorf("read the transcript to resume: %w", err)
		}
		l.Items, l.Resumed = t.Items, len(t.Items) > 0
		l.mu.Lock()
		l.last, l.pos = t.Last, t.Pos
		l.mu.Unlock()
		items := first(l.Rec, l.Resumed)
		err = l.Append(ctx, l.Rec.Step, items)
		if err == nil {
			l.Items = append(l.Items, items...)
			return nil
		}
		if !errors.Is(err, ErrFenced) || attempt >= 8 {
			return err
		}
		// An earlier holder appended between the read and this append, or a newer
		// claim fenced this one: the record says which.
		cur, _, gerr := l.s.Record(ctx, l.Spec.ID)
		if gerr != nil {
			return gerr
		}
		if cur.Owner != l.s.cfg.Node || cur.Epoch != l.Rec.Epoch {
			l.mu.Lock()
			l.state.set(gone)
			l.mu.Unlock()
			return err
		}
		l.mu.Lock()
		l.state.set(holding)
		l.mu.Unlock()
	}
}

// Epoch is the claim's number (TurnRecord.Epoch).
func (l *Lease) Epoch() int { return l.Rec.Epoch }

// Pos is the position of the turn's last stored transcript message.
func (l *Lease) Pos() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pos
}

// Append stores items as the turn's next transcript message, fenced: the server takes
// it only if the turn's last message is still the one this lease wrote or read, so a
// node that lost the turn gets ErrFenced and nothing is stored. Every secret the
// process knows is redacted first (redact.AddSecrets). A message too large for the bus
// has its body stored in bus.ObjectTranscripts first, unfenced (a unique object no
// reader finds but through a message), and the fenced message names it
// (bus.HeaderPayload); an object whose message is refused is deleted again.
func (l *Lease) Append(ctx context.Context, step int, items []toolbus.Item) error {
	if len(items) == 0 {
		return nil
	}
	b, err := json.Marshal(items)
	if err != nil {
		return fmt.Errorf("encode transcript: %w", err)
	}
	b = redact.Secrets(b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.get() != holding {
		return fmt.Errorf("store transcript: %w", ErrFenced)
	}
	pos := l.pos + 1
	m := nats.NewMsg(bus.TranscriptSubject(l.Spec.ID))
	m.Data = b
	m.Header.Set(bus.HeaderSeq, strconv.Itoa(pos))
	m.Header.Set(bus.HeaderEpoch, strconv.Itoa(l.Rec.Epoch))
	m.Header.Set(bus.HeaderStep, strconv.Itoa(step))
	var ref bus.PayloadRef
	err = bus.Retry(ctx, "store transcript", l.s.log, func(ctx context.Context) error {
		if len(m.Data) > bus.InlineLimit(l.s.js.Conn().MaxPayload()) {
			var err error
			if ref, err = l.s.payloadStore().Offload(ctx, m, bus.ObjectTranscripts, bus.PayloadName(l.Spec.ID, "transcript"), -1); err != nil {
				return err
			}
		}
		for attempt := 0; ; attempt++ {
			ack, err := l.s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(l.last))
			if err == nil {
				l.last = ack.Sequence
				return nil
			}
			if !bus.IsConflict(err) {
				return err
			}
			// A retried append refused because the first attempt landed is this
			// lease's own message: find it.
			last, gerr := l.lastMsg(ctx)
			switch {
			case gerr != nil:
				return gerr
			case last != nil && last.Header.Get(bus.HeaderEpoch) == m.Header.Get(bus.HeaderEpoch) && last.Header.Get(bus.HeaderSeq) == m.Header.Get(bus.HeaderSeq):
				l.last = last.Sequence
				return nil
			case (last == nil || last.Sequence == l.last) && attempt < 20:
				// 10164: a proposal of the subject is under way (perhaps ours); wait for
				// it to land, then the answer is exact.
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Duration(5+10*attempt) * time.Millisecond):
				}
			default:
				return fmt.Errorf("%w: %w", ErrFenced, err)
			}
		}
	})
	if err != nil {
		if errors.Is(err, ErrFenced) {
			l.state.set(gone)
		}
		if !ref.IsZero() && errors.Is(err, ErrFenced) {
			// Refused for certain: nothing names the object. (After another error the
			// message may have landed, and it stays.)
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimPatience)
			_ = l.s.payloadStore().Delete(dctx, ref)
			cancel()
		}
		return l.s.cfg.StoreFull(err)
	}
	l.pos = pos
	return nil
}

// lastMsg is the turn's last transcript message; nil when it has none.
func (l *Lease) lastMsg(ctx context.Context) (*jetstream.RawStreamMsg, error) {
	stream := l.s.transcripts
	if stream == nil {
		st, err := l.s.js.Stream(ctx, bus.StreamTranscripts)
		if err != nil {
			return nil, err
		}
		stream = st
	}
	m, err := stream.GetLastMsgForSubject(ctx, bus.TranscriptSubject(l.Spec.ID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	return m, err
}

// End stores the turn's end in its record, at the revision of the claim: a node that
// lost the turn gets ErrFenced. After it, Ack settles the intake message.
func (l *Lease) End(ctx context.Context, state bus.TurnState, msg string, steps int, submitted json.RawMessage) error {
	return l.write(ctx, ended, func(r *bus.TurnRecord) {
		r.State, r.Error, r.Step, r.Stored, r.Batch, r.Submitted = state, msg, steps, l.pos, nil, submitted
	})
}

// HandBack stores the turn as queued for the next node (this one is stopping) and has
// the intake give its message to another node at once.
func (l *Lease) HandBack(ctx context.Context, steps int) error {
	err := l.write(ctx, gone, func(r *bus.TurnRecord) {
		r.State, r.Owner, r.Step, r.Stored, r.Batch = bus.TurnQueued, "", steps, l.pos, nil
	})
	l.stop()
	if err == nil {
		_ = l.msg.Nak()
	}
	return err
}

// Release gives back a turn this node claimed but could not start, so that the next
// node to take it reads a hand-back, not a lost node; its message is redelivered.
func (l *Lease) Release(ctx context.Context) {
	l.release(ctx)
	l.stop()
	l.nakLater()
}

func (l *Lease) release(ctx context.Context) {
	if err := l.write(ctx, gone, func(r *bus.TurnRecord) { r.State, r.Owner = bus.TurnQueued, "" }); err != nil {
		l.s.log.Warn("give the turn back", "turn", l.Spec.ID, "err", err)
	}
}

// giveBack undoes a claim whose outcome is unknown: if the record names this node at
// the claim's epoch, it is written back to queued.
func (l *Lease) giveBack() {
	ctx, cancel := context.WithTimeout(context.Background(), claimPatience)
	defer cancel()
	cur, rev, err := l.s.Record(ctx, l.Spec.ID)
	if err != nil || cur.Owner != l.s.cfg.Node || cur.Epoch != l.Rec.Epoch {
		return // the claim did not land, or another node has the turn since
	}
	l.mu.Lock()
	l.Rec, l.rev = cur, rev
	l.state.set(holding)
	l.mu.Unlock()
	l.release(ctx)
}

// write changes the record at the revision this lease holds.
func (l *Lease) write(ctx context.Context, next leaseState, change func(*bus.TurnRecord)) error {
	kv, err := l.s.records()
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.get() != holding {
		return fmt.Errorf("store turn record: %w", ErrFenced)
	}
	rec := l.Rec
	change(&rec)
	rec.Updated = time.Now()
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	rev, err := bus.UpdateAt(ctx, kv, l.Spec.ID, b, l.rev)
	if err != nil {
		if bus.IsConflict(err) {
			l.state.set(gone)
			return fmt.Errorf("store turn record: %w: %w", ErrFenced, err)
		}
		return fmt.Errorf("store turn record: %w", l.s.cfg.StoreFull(err))
	}
	l.Rec, l.rev = rec, rev
	l.state.set(next)
	return nil
}

// Ack settles the intake message of a turn whose end is stored (End, or ErrTurnOver).
// A lease without a stored end is refused: the message stays for the node that holds
// the turn.
func (l *Lease) Ack() error {
	st := l.state.get()
	if st != ended {
		return fmt.Errorf("ack turn %s: its end is not stored by this node", l.Spec.ID)
	}
	l.stop()
	return l.msg.Ack()
}

// Retry has the intake message of a turn whose end is stored delivered again later,
// for a node to settle what this one could not (a task's workflow).
func (l *Lease) Retry() {
	l.stop()
	l.nakLater()
}

// Stop ends the lease without a word to the intake: the turn was fenced, or stopped
// where it stands (its node is going); the intake redelivers it after the lease.
func (l *Lease) Stop() { l.stop() }

// Nak has the intake give the message to another node at once, for a turn this node
// stops driving without having stored a hand-back.
func (l *Lease) Nak() {
	l.stop()
	_ = l.msg.Nak()
}

func (l *Lease) stop() {
	if l.stopProgress != nil {
		l.stopProgress()
	}
}

func (l *Lease) nakLater() { _ = l.msg.NakWithDelay(time.Second) }

// Fenced reports a lease that lost its turn to another node.
func (l *Lease) Fenced() bool { return l.state.get() == gone }

// keepInProgress tells the intake every third of the lease that the message's turn is
// in hand, until the returned stop is called (once or more). A tick that comes more than
// a lease after the one before (the process was paused, or starved) does not signal
// progress until Confirm has found the turn still this node's: the intake may have given
// it to another node meanwhile, and a progress signal of the old delivery would extend
// the new holder's lease.
func (l *Lease) keepInProgress(msg jetstream.Msg, lease time.Duration) func() {
	done := make(chan struct{})
	var once sync.Once
	l.lease = lease
	l.beat.Store(time.Now().UnixNano())
	go func() {
		t := time.NewTicker(max(lease/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), lease)
				err := l.Confirm(ctx)
				cancel()
				if errors.Is(err, ErrFenced) {
					return
				}
				if err != nil {
					continue // no progress signal for a delivery that may be another's
				}
				_ = msg.InProgress()
				l.beat.Store(time.Now().UnixNano())
			case <-done:
				return
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// Confirm tells whether this node still holds the turn. Within a lease of the last
// progress signal it does at once; past it (the process was paused or starved for
// longer than the lease) it writes the record at the revision it holds, and a turn
// claimed by another node since is ErrFenced from then on. A read would not do: a
// server woken from a pause may still take itself for the stream's leader and answer
// from before the pause, while a write needs the quorum. A write that neither lands nor
// is refused within ctx is ErrUnconfirmed: the node should not speak for the turn yet,
// and its other writes are fenced all the same.
func (l *Lease) Confirm(ctx context.Context) error {
	st := l.state.get()
	if st == gone {
		return ErrFenced
	}
	if st != holding || l.lease <= 0 || time.Since(time.Unix(0, l.beat.Load())) < l.lease {
		return nil
	}
	err := l.write(ctx, holding, func(*bus.TurnRecord) {})
	switch {
	case err == nil:
		l.beat.Store(time.Now().UnixNano())
		return nil
	case errors.Is(err, ErrFenced):
		return fmt.Errorf("%w (this node's lease ran out while it was paused or starved)", err)
	default:
		return fmt.Errorf("%w: %w", ErrUnconfirmed, err)
	}
}
