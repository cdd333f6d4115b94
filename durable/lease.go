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
	// ErrUnconfirmed reports a lease Confirm could not check: its write of the record
	// neither landed nor was refused in time (no quorum, a leaderless stream). Within a
	// lease of the last confirmation the turn goes on; past it, the node stops the turn
	// without a word (another node may hold it by then).
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
	msgMu sync.Mutex
	msg   jetstream.Msg // the intake delivery the lease answers (Adopt may replace it)
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
	claiming     atomic.Bool  // Claim has not returned yet
	progress     atomic.Int64 // when progress was last signalled to the intake (UnixNano)
	beat         atomic.Int64 // when the hold was last confirmed: the claim, or a write of Confirm (UnixNano)

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
	// Until the claim has ended, its progress is signalled whatever the time: its own
	// writes are the confirmation, and a claim slowed by an election (measured: 2 s on a
	// loaded machine, with a lease of 1 s) must not have the intake give the turn to
	// another node, or to this one again, meanwhile.
	l.claiming.Store(true)
	defer l.claiming.Store(false)
	l.stopProgress = l.keepInProgress(lease)
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
	// The fence's append needed the quorum and found the turn this claim's.
	l.beat.Store(time.Now().UnixNano())
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
//
// The message counts (Pos, and the record's Stored at the end) only once JetStream
// acknowledged it; until then Append tries again, with the same message id, for as long
// as ctx lasts.
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
	// Every attempt carries the same message id: an attempt whose answer was lost (it
	// timed out, its leader paused or replaced) and that landed all the same is found by
	// the stream's deduplication, and the next attempt is told so (a duplicate's ack,
	// with the first one's sequence), never stored twice.
	id := l.msgID(pos)
	m.Header.Set(jetstream.MsgIDHeader, id)
	// A body too large for a message is stored first, in attempts sized to it
	// (bus.Payloads.OffloadRetried), under one name for every attempt as the message has
	// one id: an attempt whose answer was lost may have stored it all the same (the
	// object store's description is published last), and the next attempt then replaces
	// that object instead of leaving it beside another one that no message names.
	var ref bus.PayloadRef
	if len(m.Data) > bus.InlineLimit(l.s.js.Conn().MaxPayload()) {
		name := bus.PayloadName(l.Spec.ID, "transcript")
		if ref, err = l.s.payloadStore().OffloadRetried(ctx, m, bus.ObjectTranscripts, name, l.s.log); err != nil {
			l.deleteBody(ctx, bus.PayloadRef{Bucket: bus.ObjectTranscripts, Name: name})
			return l.s.cfg.StoreFull(err)
		}
	}
	err = bus.Retry(ctx, "store transcript", l.s.log, func(ctx context.Context) error {
		return l.publish(ctx, m, id)
	})
	if err != nil {
		if errors.Is(err, ErrFenced) {
			l.state.set(gone)
			if !ref.IsZero() {
				// Refused for certain: nothing names the object. (After another error
				// the message may have landed, and it stays.)
				l.deleteBody(ctx, ref)
			}
		}
		return l.s.cfg.StoreFull(err)
	}
	l.pos = pos
	return nil
}

// deleteBody deletes the object of a transcript message that no message names, within
// claimPatience of ctx's values (ctx itself may be over).
func (l *Lease) deleteBody(ctx context.Context, ref bus.PayloadRef) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimPatience)
	defer cancel()
	if err := l.s.payloadStore().Delete(dctx, ref); err != nil {
		l.s.log.Warn("delete the body of a transcript message that was not stored", "turn", l.Spec.ID, "object", ref.Name, "err", err)
	}
}

// msgID is the message id (Nats-Msg-Id) of the transcript message at pos of this claim.
func (l *Lease) msgID(pos int) string {
	return l.Spec.ID + "." + strconv.Itoa(l.Rec.Epoch) + "." + strconv.Itoa(pos)
}

// Answers of JetStream that publish reads (nats-server's errors.json).
const (
	// errCodeDupInProcess: an attempt with the message's id is being proposed (ours,
	// whose answer was lost); its outcome is known once it is applied.
	errCodeDupInProcess jetstream.ErrorCode = 10158
	// inFlightWaits bounds the waits for a proposal under way, 5 ms growing by 10 ms
	// (about 2 s in all): a replicated stream applies one within milliseconds, and a
	// server woken from a pause learns of the next leader within that.
	inFlightWaits = 20
)

// publish appends m, with message id id, at the last sequence this lease stored; l.mu
// is held. It succeeds only on the stream's acknowledgement: of this attempt, or of an
// earlier one with the same id (a duplicate), or once the stream's leader shows the
// message as the turn's last. A refusal because the turn's last message is another
// writer's is ErrFenced. A refusal the leader does not bear out (a server woken from a
// pause answered from before it, or a proposal was under way) is waited out, then left
// to bus.Retry as bus.ErrReadAgain; a timeout likewise: the next attempt has the same id.
func (l *Lease) publish(ctx context.Context, m *nats.Msg, id string) error {
	for attempt := 0; ; attempt++ {
		ack, err := l.s.publishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(l.last))
		if err == nil {
			l.last = ack.Sequence
			return nil
		}
		var apiErr *jetstream.APIError
		inProcess := errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeDupInProcess
		if !bus.IsConflict(err) && !inProcess {
			return err
		}
		if !inProcess {
			last, gerr := bus.LeaderLastMsg(ctx, l.s.js.Conn(), bus.StreamTranscripts, bus.TranscriptSubject(l.Spec.ID))
			switch {
			case gerr != nil:
				return gerr
			case last != nil && last.Header.Get(jetstream.MsgIDHeader) == id:
				l.last = last.Sequence
				return nil
			case last != nil && last.Sequence > l.last:
				return fmt.Errorf("%w: %w", ErrFenced, err)
			}
		}
		if attempt >= inFlightWaits {
			return fmt.Errorf("the stream refused the append (%w) and its leader holds nothing newer of the turn: %w", err, bus.ErrReadAgain)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(5+10*attempt) * time.Millisecond):
		}
	}
}

// End stores the turn's end in its record, at the revision of the claim: a node that
// lost the turn gets ErrFenced. After it, Ack settles the intake message.
//
// The record counts the transcript messages the lease stored (TurnRecord.Stored), and
// never more than the stream holds: the stream's leader must hold the last one first,
// or the end is not written and the error is ErrTranscriptBehind.
func (l *Lease) End(ctx context.Context, state bus.TurnState, msg string, steps int, submitted json.RawMessage) error {
	if err := l.checkStored(ctx); err != nil {
		return err
	}
	return l.write(ctx, ended, func(r *bus.TurnRecord) {
		r.State, r.Error, r.Step, r.Stored, r.Batch, r.Submitted = state, msg, steps, l.pos, nil, submitted
	})
}

// HandBack stores the turn as queued for the next node (this one is stopping) and has
// the intake give its message to another node at once.
func (l *Lease) HandBack(ctx context.Context, steps int) error {
	err := l.checkStored(ctx)
	if err == nil {
		err = l.write(ctx, gone, func(r *bus.TurnRecord) {
			r.State, r.Owner, r.Step, r.Stored, r.Batch = bus.TurnQueued, "", steps, l.pos, nil
		})
	}
	l.stop()
	if err == nil {
		_ = l.delivery().Nak()
	}
	return err
}

// ErrTranscriptBehind reports a transcript whose stream holds less of the turn than the
// lease stored: a message JetStream acknowledged is not in the stream's leader. The end
// is not written, so that no record claims more than the log holds; the turn is the
// intake's to give to a node again, which resumes it from what the stream holds.
var ErrTranscriptBehind = errors.New("the transcript stream holds less of the turn than was stored")

// behindPatience bounds how long a stream leader that answers with less than the lease
// stored is asked again before it is believed: a server woken from a pause that still
// takes itself for the leader hears of the next one within a heartbeat (1 s).
const behindPatience = 3 * time.Second

// checkStored makes sure the stream's leader holds the last transcript message this
// lease stored: ErrTranscriptBehind if it holds an older one for longer than
// behindPatience. A newer one is another writer's, which the record's revision fences.
func (l *Lease) checkStored(ctx context.Context) error {
	l.mu.Lock()
	last, pos := l.last, l.pos
	l.mu.Unlock()
	if last == 0 {
		return nil
	}
	subject := bus.TranscriptSubject(l.Spec.ID)
	var first time.Time
	return bus.Retry(ctx, "check the stored transcript", l.s.log, func(ctx context.Context) error {
		lead, err := bus.LeaderLastSeq(ctx, l.s.js.Conn(), bus.StreamTranscripts, subject)
		switch {
		case err != nil:
			return err
		case lead >= last:
			return nil
		case first.IsZero():
			first = time.Now()
		case time.Since(first) >= behindPatience:
			return fmt.Errorf("turn %s: %w: its last message is at stream sequence %d, this node stored %d messages, the last at %d",
				l.Spec.ID, ErrTranscriptBehind, lead, pos, last)
		}
		return fmt.Errorf("the leader of %s holds the turn up to sequence %d of %d: %w", bus.StreamTranscripts, lead, last, bus.ErrReadAgain)
	})
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
	rev, err := l.store(ctx, kv, rec)
	switch {
	case errors.Is(err, ErrFenced):
		return err
	case err != nil:
		return fmt.Errorf("store turn record: %w", l.s.cfg.StoreFull(err))
	}
	l.Rec, l.rev = rec, rev
	l.state.set(next)
	return nil
}

// store writes rec at the revision the lease holds; l.mu is held. A conflict is this
// lease's own doing when the record is still its claim's: a write of this lease whose
// answer was lost (it timed out) and that landed all the same, found by its time, is
// this write; a confirmation that landed late (Confirm) is written over, once. Any other
// conflict is another node's claim: the lease is fenced (ErrFenced).
func (l *Lease) store(ctx context.Context, kv jetstream.KeyValue, rec bus.TurnRecord) (uint64, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	for retried := false; ; retried = true {
		rev, err := bus.UpdateAt(ctx, kv, l.Spec.ID, b, l.rev)
		if err == nil || !bus.IsConflict(err) {
			return rev, err
		}
		cur, crev, gerr := l.s.Record(ctx, l.Spec.ID)
		switch {
		case gerr == nil && crev > l.rev && cur.Epoch == l.Rec.Epoch && cur.Updated.Equal(rec.Updated):
			return crev, nil
		case gerr == nil && crev > l.rev && cur.Epoch == l.Rec.Epoch && !retried && cur.Owner == l.s.cfg.Node && cur.State == l.Rec.State:
			l.rev = crev
			continue
		}
		l.state.set(gone)
		return 0, fmt.Errorf("store turn record: %w: %w", ErrFenced, err)
	}
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
	return l.delivery().Ack()
}

// Retry has the intake message of the turn delivered again later: for a node to settle
// what this one could not (a task's workflow), or to resume a turn whose end this one
// could not store.
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
	_ = l.delivery().Nak()
}

func (l *Lease) stop() {
	if l.stopProgress != nil {
		l.stopProgress()
	}
}

func (l *Lease) nakLater() { _ = l.delivery().NakWithDelay(time.Second) }

func (l *Lease) delivery() jetstream.Msg {
	l.msgMu.Lock()
	defer l.msgMu.Unlock()
	return l.msg
}

// Adopt makes msg, a later delivery of the lease's intake message, the one the lease
// answers, when the lease is held and confirmed within a lease: the intake delivered
// the turn again while this node runs it (its stream or consumer changed leaders and
// lost the progress signals, measured when a node stopping led the consumer), and a
// claim would fence this node's own running turn. It signals progress on msg at once.
// false: the lease is not the node's to keep, and msg is left to a claim.
func (l *Lease) Adopt(msg jetstream.Msg) bool {
	if l.state.get() != holding || !l.Confirmed() {
		return false
	}
	l.msgMu.Lock()
	l.msg = msg
	l.msgMu.Unlock()
	_ = msg.InProgress()
	l.progress.Store(time.Now().UnixNano())
	return true
}

// Fenced reports a lease that lost its turn to another node.
func (l *Lease) Fenced() bool { return l.state.get() == gone }

// keepInProgress tells the intake every third of the lease that the message's turn is
// in hand, until the returned stop is called (once or more), while the turn was
// confirmed this node's within a lease: by the claim, or by a write of Confirm, which
// the lease's holder has made every third of a lease (the intake's beat). A node that
// cannot confirm the turn (cut off from the quorum, or paused past the lease) thus stops
// signalling a lease after it last could, when the intake may give the turn to another
// node: a progress signal is a plain publish that no answer vouches for, and one of a
// delivery that may be another's now would extend the new holder's lease. An ended turn
// is signalled until its message is settled.
func (l *Lease) keepInProgress(lease time.Duration) func() {
	done := make(chan struct{})
	var once sync.Once
	l.lease = lease
	l.beat.Store(time.Now().UnixNano())
	l.progress.Store(time.Now().UnixNano())
	go func() {
		t := time.NewTicker(max(lease/3, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-t.C:
				switch l.state.get() {
				case gone:
					return
				case holding:
					if !l.claiming.Load() && time.Since(time.Unix(0, l.beat.Load())) >= lease {
						continue // not confirmed for a lease: the delivery may be another's
					}
				}
				_ = l.delivery().InProgress()
				l.progress.Store(time.Now().UnixNano())
			case <-done:
				return
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// Confirmed reports whether the lease's last confirmation (the claim, or a write of
// Confirm) is less than a lease old: no other node can have claimed the turn yet.
func (l *Lease) Confirmed() bool {
	return l.state.get() != gone && time.Now().Before(l.heldUntil())
}

// heldUntil is when the intake may give the turn to another node at the earliest: a
// lease after the last progress signal (a plain publish, which the intake gets after it
// was sent), or after the last confirmation, whichever is older. Measured: a node woken
// 4.8 s into a 5 s lease, its last confirmation younger than its last progress signal,
// took the turn for its own and published a beat for it, when another node had resumed
// it already.
func (l *Lease) heldUntil() time.Time {
	return time.Unix(0, min(l.beat.Load(), l.progress.Load())).Add(l.lease)
}

// Confirm tells whether this node holds the turn, and will for as long as ctx lasts (now,
// for a ctx without a deadline). While the lease of its last confirmation (the claim, or
// a write of Confirm) outlasts that, it does at once. Otherwise it writes the record at
// the revision it holds: a write that lands confirms the turn for a lease more (and
// keepInProgress signals progress on); one refused because another node claimed the turn
// is ErrFenced, from then on. A read would not do: a server woken from a pause, or cut
// off from its cluster, may still take itself for the stream's leader and answer from
// before, while a write needs the quorum. A write that neither lands nor is refused
// within a third of the lease (or ctx) is ErrUnconfirmed: the node cannot tell that the
// turn is still its own, and past the lease another node may hold it; its writes are
// fenced all the same. With ctx ended, Confirm writes nothing: past the lease it is
// ErrUnconfirmed.
//
// The holder confirms the lease every third of a lease, with a ctx a lease long (each
// time a write, so that a node cut off from the quorum knows it within a third of a
// lease); a ctx as long as its stop's grace tells a stopping node whether to wait for the
// turn's next checkpoint.
func (l *Lease) Confirm(ctx context.Context) error {
	st := l.state.get()
	if st == gone {
		return ErrFenced
	}
	if st != holding || l.lease <= 0 {
		return nil
	}
	last := time.Unix(0, l.beat.Load())
	horizon := time.Now()
	if d, ok := ctx.Deadline(); ok && d.After(horizon) && ctx.Err() == nil {
		horizon = d
	}
	if l.heldUntil().After(horizon) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: last confirmed %s ago", ErrUnconfirmed, time.Since(last).Round(time.Millisecond))
	}
	wctx, cancel := context.WithTimeout(ctx, max(l.lease/3, 10*time.Millisecond))
	defer cancel()
	kv, err := l.s.records()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnconfirmed, err)
	}
	// Off the caller: an append in flight holds the lease's lock for as long as its own
	// patience, and the caller waits a third of a lease at most. A write that gets the
	// lock after the caller gave up writes nothing (its ctx has ended).
	answer := make(chan error, 1)
	go func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		switch l.state.get() {
		case ended:
			answer <- nil // ended meanwhile: its end is stored
			return
		case gone:
			answer <- fmt.Errorf("store turn record: %w", ErrFenced)
			return
		}
		if err := wctx.Err(); err != nil {
			answer <- err
			return
		}
		// The record as the lease holds it, but for the time: l.Rec is left as it is
		// (the turn reads it, unlocked, as it runs), and the next write sets the time.
		rec := l.Rec
		rec.Updated = time.Now()
		rev, err := l.store(wctx, kv, rec)
		if err == nil {
			l.rev = rev
		}
		answer <- err
	}()
	select {
	case err = <-answer:
	case <-wctx.Done():
		select {
		case err = <-answer:
		default:
			err = fmt.Errorf("no answer within %s: %w", max(l.lease/3, 10*time.Millisecond), wctx.Err())
		}
	}
	switch {
	case err == nil:
		l.beat.Store(time.Now().UnixNano())
		if l.state.get() == holding {
			// Signalled at once: the intake's lease runs from its last progress signal.
			_ = l.delivery().InProgress()
			l.progress.Store(time.Now().UnixNano())
		}
		return nil
	case errors.Is(err, ErrFenced):
		return fmt.Errorf("%w (this node's lease ran out: it was paused, starved or cut off)", err)
	default:
		return fmt.Errorf("%w (last confirmed %s ago): %w", ErrUnconfirmed, time.Since(last).Round(time.Millisecond), err)
	}
}
