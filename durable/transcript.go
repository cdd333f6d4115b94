package durable

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
)

// ErrNoTranscript reports a turn the transcript stream holds nothing of.
var ErrNoTranscript = errors.New("no transcript of the turn")

// Transcript is a turn's transcript as read back.
type Transcript struct {
	// Items in the turn's order, each run of call outputs in the order of its calls.
	Items []toolbus.Item
	// Last is the stream sequence of the turn's last message (0: none), the expected
	// last subject sequence of the next append; Pos is its position (Toolbus-Seq).
	Last uint64
	Pos  int
}

// ReadTranscript reads a turn's transcript back, in the turn's order, waiting out a
// stream that elects a leader (bus.Retry) until ctx ends. A turn with no message is
// ErrNoTranscript.
func (s *Store) ReadTranscript(ctx context.Context, turn string) ([]toolbus.Item, error) {
	t, err := s.readTranscript(ctx, turn)
	if err != nil {
		return nil, err
	}
	if len(t.Items) == 0 && t.Last == 0 {
		return nil, fmt.Errorf("turn %s: %w in %s", turn, ErrNoTranscript, bus.StreamTranscripts)
	}
	return t.Items, nil
}

// ReadTranscript reads a turn's transcript from js, as [Store.ReadTranscript] does, for
// a caller with a connection and no store.
func ReadTranscript(ctx context.Context, js jetstream.JetStream, turn string) ([]toolbus.Item, error) {
	return (&Store{js: js}).ReadTranscript(ctx, turn)
}

func (s *Store) readTranscript(ctx context.Context, turn string) (Transcript, error) {
	if !bus.ValidToken(turn) {
		return Transcript{}, fmt.Errorf("read transcript: invalid turn id %q", turn)
	}
	var (
		t    Transcript
		kept []transcriptPart
	)
	err := bus.Retry(ctx, "read transcript "+turn, s.log, func(ctx context.Context) error {
		var err error
		if t, kept, err = s.readOnce(ctx, turn); err != nil {
			return err
		}
		return s.holdsRecorded(ctx, turn, t)
	})
	if err != nil {
		return Transcript{}, err
	}
	if err := s.readBodies(ctx, turn, kept); err != nil {
		return Transcript{}, err
	}
	t.Items = joined(kept)
	return t, nil
}

// readBodies reads the bodies of parts stored as objects, once the messages are read,
// each in attempts sized to it (bus.RetryPayload): Retry's attempts, for a request's
// answer, also held the reads of every object, and cut a large one short on a loaded
// machine.
func (s *Store) readBodies(ctx context.Context, turn string, parts []transcriptPart) error {
	for i := range parts {
		if ref := parts[i].ref; !ref.IsZero() {
			var err error
			if parts[i].items, err = s.readBody(ctx, ref); err != nil {
				return fmt.Errorf("read transcript %s: message at position %d: %w", turn, parts[i].pos, err)
			}
		}
	}
	return nil
}

// readBody reads the items of a transcript message whose body is the object ref.
func (s *Store) readBody(ctx context.Context, ref bus.PayloadRef) ([]toolbus.Item, error) {
	var body []byte
	err := bus.RetryPayload(ctx, "read transcript body", s.log, ref.Size, func(ctx context.Context) error {
		var err error
		body, err = s.payloadStore().Get(ctx, ref)
		return err
	})
	if err != nil {
		return nil, err
	}
	var items []toolbus.Item
	if err := json.Unmarshal(body, &items); err != nil {
		return nil, fmt.Errorf("object %s: %w", ref.Name, err)
	}
	return items, nil
}

// holdsRecorded makes sure a transcript read holds every message the turn's record
// counts as stored (TurnRecord.Stored, written at an end or a hand-back only once the
// stream's leader held them): a read answered from a stale copy is bus.ErrReadAgain. (A
// server woken from a pause can take itself for the stream's leader for a moment and
// answer the leader's check of a read from before its pause.) Transcripts of builds
// that wrote no positions are read as they are.
func (s *Store) holdsRecorded(ctx context.Context, turn string, t Transcript) error {
	if s.kv == nil || t.Pos == 0 {
		return nil
	}
	rec, _, err := s.Record(ctx, turn)
	switch {
	case errors.Is(err, ErrNoRecord):
		return nil
	case err != nil:
		return err
	case rec.Stored > t.Pos:
		return fmt.Errorf("transcript of %s read up to position %d, its record counts %d stored: %w", turn, t.Pos, rec.Stored, bus.ErrReadAgain)
	}
	return nil
}

type transcriptPart struct {
	pos, epoch int
	items      []toolbus.Item
	// ref, when set, names the object that holds the message's body, not read yet
	// (items is then empty).
	ref bus.PayloadRef
}

// readOnce reads a turn's transcript messages and keeps those assemble keeps: t has
// their position and the last message's sequence, and kept their items, or the object
// that holds a body too large for a message, to be read after (readBodies).
func (s *Store) readOnce(ctx context.Context, turn string) (t Transcript, kept []transcriptPart, err error) {
	parts, last, err := readParts(ctx, s.js, s.transcripts, turn)
	if err != nil {
		return Transcript{}, nil, err
	}
	kept, t.Pos = keep(parts)
	t.Last = last
	return t, kept, nil
}

// readParts reads a turn's transcript messages, in stream order: each one's position,
// claim and items, or the object that holds a body too large for a message (read after,
// readBodies); last is the stream sequence of the last. stream may be nil.
func readParts(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, turn string) (parts []transcriptPart, last uint64, err error) {
	err = eachStored(ctx, js, stream, turn, func(m jetstream.Msg) error {
		var p transcriptPart
		// Messages written before positions had none; they keep their stream order.
		p.pos, _ = strconv.Atoi(m.Headers().Get(bus.HeaderSeq))
		p.epoch, _ = strconv.Atoi(m.Headers().Get(bus.HeaderEpoch))
		if ref, ok, err := bus.PayloadOf(m.Headers()); ok {
			if err == nil {
				err = ref.Check(bus.ObjectTranscripts, math.MaxInt64)
			}
			if err != nil {
				return fmt.Errorf("message %d: %w", len(parts)+1, err)
			}
			p.ref = ref
		} else if err := json.Unmarshal(m.Data(), &p.items); err != nil {
			return fmt.Errorf("message %d: %w", len(parts)+1, err)
		}
		parts = append(parts, p)
		if md, err := m.Metadata(); err == nil {
			last = max(last, md.Sequence.Stream)
		}
		return nil
	})
	return parts, last, err
}

// assemble reads a transcript's messages, in stream order, as the turn's items and the
// position of the last one kept.
//
// Every append since the fence expects the subject's last sequence, so positions rise
// with the stream order, none repeats, and no claim writes after a newer one. The reader
// holds to that whatever got past the server: a clustered stream checks the expectation
// on its leader before it replicates, and the leader's view of what is in flight does not
// survive a change of leader (nats-server issue 8469). So a claim's messages are read as
// the claim saw the transcript: a message of an older claim stored after a newer claim's
// first message is skipped (its writer had lost the turn), and so is one of an older
// claim at or after the position where the newer claim began (written while the newer
// claim read, unseen by it). Transcripts of earlier builds (no claim, or no position)
// could hold a retried message twice, or after a later one: they are read as they were.
func assemble(parts []transcriptPart) ([]toolbus.Item, int) {
	kept, pos := keep(parts)
	return joined(kept), pos
}

// keep is assemble's choice: the messages it keeps, in the turn's order, and the
// position of the last one.
func keep(parts []transcriptPart) ([]transcriptPart, int) {
	kept := make([]transcriptPart, 0, len(parts))
	top := 0
	for _, p := range parts {
		switch {
		case p.epoch < top:
			continue
		case p.epoch > top:
			top = p.epoch
			if p.pos != 0 {
				kept = slices.DeleteFunc(kept, func(q transcriptPart) bool { return q.pos >= p.pos })
			}
		}
		kept = append(kept, p)
	}
	slices.SortStableFunc(kept, func(a, b transcriptPart) int { return cmp.Compare(a.pos, b.pos) })
	pos := 0
	kept = slices.DeleteFunc(kept, func(p transcriptPart) bool {
		repeated := p.pos != 0 && p.pos == pos
		pos = max(pos, p.pos)
		return repeated
	})
	return kept, pos
}

// joined is the items of kept messages, each run of call outputs in the order of its
// calls.
func joined(kept []transcriptPart) []toolbus.Item {
	var items []toolbus.Item
	for _, p := range kept {
		items = append(items, p.items...)
	}
	return inModelOrder(items)
}

// payloadStore is the store of the bodies of large transcript messages.
func (s *Store) payloadStore() *bus.Payloads {
	s.payloadsOnce.Do(func() { s.payloads = bus.NewPayloads(s.js, s.cfg.Replicas) })
	return s.payloads
}

// eachStored calls f with every message of a turn's transcript, as stored, in stream
// order, undecoded; an error of f ends the reading with it. A missing stream is an empty
// transcript. stream may be nil.
func eachStored(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, turn string, f func(jetstream.Msg) error) error {
	if stream == nil {
		st, err := js.Stream(ctx, bus.StreamTranscripts)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		stream = st
	}
	// What the leader has now, the reading must hold: a consumer may be served by a
	// replica that is still catching up (bus.ErrReadAgain).
	lead, err := bus.LeaderLastSeq(ctx, js.Conn(), bus.StreamTranscripts, bus.TranscriptSubject(turn))
	if err != nil {
		return err
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.TranscriptSubject(turn)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		// nats.go recreates a stalled ordered consumer for ever by default, blind to
		// the fetch's context: a claim read a transcript for over a minute while a
		// paused server held the stream's old leader. One reset, then bus.Retry's
		// bounded attempts.
		MaxResetAttempts: 1,
	})
	if err != nil {
		return readAgain(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return readAgain(err)
	}
	var last uint64
	for pending := info.NumPending; pending > 0; {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchContext(ctx))
		if err != nil {
			return readAgain(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if md, err := m.Metadata(); err == nil {
				last = max(last, md.Sequence.Stream)
			}
			if err := f(m); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil {
			return readAgain(err)
		}
		if n == 0 {
			// The consumer's replica counted messages it could not deliver yet: it is
			// catching up (seen through a server just woken from a pause, in
			// TestPausedNodeIsFenced).
			return fmt.Errorf("fetch: %d messages pending but none delivered: %w", pending, bus.ErrReadAgain)
		}
		pending -= uint64(n)
	}
	if last < lead {
		return fmt.Errorf("transcript of %s read up to message %d, the leader has %d: %w", turn, last, lead, bus.ErrReadAgain)
	}
	return nil
}

// readAgain marks the errors of an ordered consumer whose server was lost or paused
// under the read (its consumer gone, reset, or silent) as bus.ErrReadAgain: the next
// attempt's consumer may be placed on another replica. Measured: a client's read of a
// turn's transcript failed with "consumer not found" while a node of the cluster was
// paused (TestPausedNodeIsFenced).
func readAgain(err error) error {
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrConsumerDeleted),
		errors.Is(err, jetstream.ErrOrderedConsumerReset), errors.Is(err, jetstream.ErrNoHeartbeat):
		return fmt.Errorf("%w: %w", bus.ErrReadAgain, err)
	}
	return err
}

// inModelOrder puts each run of call outputs in the order of their calls (a durable turn
// stores each output as its call finishes) and keeps one output per call.
func inModelOrder(items []toolbus.Item) []toolbus.Item {
	order := make(map[string]int)
	seen := make(map[string]bool)
	out := items[:0]
	for i := 0; i < len(items); {
		it := items[i]
		if it.Kind == toolbus.KindFunctionCall {
			order[it.CallID] = len(order)
		}
		if it.Kind != toolbus.KindCallOutput {
			out = append(out, it)
			i++
			continue
		}
		j := i
		for j < len(items) && items[j].Kind == toolbus.KindCallOutput {
			j++
		}
		run := slices.Clone(items[i:j])
		slices.SortStableFunc(run, func(a, b toolbus.Item) int { return cmp.Compare(order[a.CallID], order[b.CallID]) })
		for _, o := range run {
			if !seen[o.CallID] {
				seen[o.CallID] = true
				out = append(out, o)
			}
		}
		i = j
	}
	return out
}

// Audit is what a turn's transcript messages, as stored, say of how they were written:
// the fences make RepeatedPos and StaleAfterFence 0, and every call has one output.
type Audit struct {
	Messages int
	// Epochs is the claim (Toolbus-Epoch) of each message, in stream order; 0 for a
	// message without one (an earlier build's).
	Epochs []int
	// RepeatedPos counts messages whose position (Toolbus-Seq) an earlier one had.
	RepeatedPos int
	// StaleAfterFence counts messages of a claim older than one stored before them:
	// writes of a node that had lost the turn.
	StaleAfterFence int
	// Calls counts the function calls; Outputs the outputs of each call id.
	Calls   int
	Outputs map[string]int
}

// AuditTranscript reads a turn's transcript messages as stored, without ordering or
// deduplicating anything, and says what they hold ([Audit]).
func AuditTranscript(ctx context.Context, js jetstream.JetStream, turn string) (Audit, error) {
	a := Audit{Outputs: make(map[string]int)}
	if !bus.ValidToken(turn) {
		return a, fmt.Errorf("audit transcript: invalid turn id %q", turn)
	}
	var parts []transcriptPart
	err := bus.Retry(ctx, "audit transcript "+turn, nil, func(ctx context.Context) error {
		var err error
		parts, _, err = readParts(ctx, js, nil, turn)
		return err
	})
	if err == nil {
		err = (&Store{js: js}).readBodies(ctx, turn, parts)
	}
	if err != nil {
		return a, err
	}
	seen := make(map[int]bool)
	top := 0
	for _, p := range parts {
		a.Messages++
		a.Epochs = append(a.Epochs, p.epoch)
		if p.pos != 0 && seen[p.pos] {
			a.RepeatedPos++
		}
		seen[p.pos] = true
		if p.epoch < top {
			a.StaleAfterFence++
		}
		top = max(top, p.epoch)
		for _, it := range p.items {
			switch it.Kind {
			case toolbus.KindFunctionCall:
				a.Calls++
			case toolbus.KindCallOutput:
				a.Outputs[it.CallID]++
			}
		}
	}
	return a, nil
}

// StoredMessage is one message of a turn's transcript exactly as the stream holds it. A
// body too large for a message is in the object store: Header names it
// (bus.HeaderPayload) and Data is bus.PayloadNote.
type StoredMessage struct {
	Seq    uint64 // its stream sequence
	Header nats.Header
	Data   []byte // its body, undecoded
}

// StoredTranscript returns the messages of a turn's transcript as stored, in stream
// order, neither decoded nor ordered nor deduplicated: what reached the disk, for an
// operator's dump of a turn and for checks of what a turn wrote (a test checks that no
// secret a tool printed was stored in any form). A turn with no message is
// ErrNoTranscript.
func (s *Store) StoredTranscript(ctx context.Context, turn string) ([]StoredMessage, error) {
	if !bus.ValidToken(turn) {
		return nil, fmt.Errorf("read stored transcript: invalid turn id %q", turn)
	}
	var out []StoredMessage
	err := bus.Retry(ctx, "read stored transcript "+turn, nil, func(ctx context.Context) error {
		out = nil
		return eachStored(ctx, s.js, s.transcripts, turn, func(m jetstream.Msg) error {
			sm := StoredMessage{Header: m.Headers(), Data: m.Data()}
			if md, err := m.Metadata(); err == nil {
				sm.Seq = md.Sequence.Stream
			}
			out = append(out, sm)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("turn %s: %w in %s", turn, ErrNoTranscript, bus.StreamTranscripts)
	}
	return out, nil
}

// DeleteTranscript removes every message of a turn's transcript, and the bodies of its
// large messages from the object store: for an operator freeing space on a full store or
// erasing what a turn stored (a test frees the space it filled so). It refuses a turn whose record says it has not ended: its node appends to
// the transcript, each append expecting the last message it wrote. A turn without a
// record (run outside the intake, or its record deleted) has its transcript deleted; a
// transcript already gone is no error.
func (s *Store) DeleteTranscript(ctx context.Context, turn string) error {
	if !bus.ValidToken(turn) {
		return fmt.Errorf("delete transcript: invalid turn id %q", turn)
	}
	rec, _, err := s.Record(ctx, turn)
	switch {
	case err == nil && !rec.State.Ended():
		return fmt.Errorf("delete transcript: turn %s is %s%s: only an ended turn's transcript can be deleted", turn, rec.State, OwnerNote(rec.Owner))
	case err != nil && !errors.Is(err, ErrNoRecord):
		return fmt.Errorf("delete transcript: %w", err)
	}
	return bus.Retry(ctx, "delete transcript "+turn, s.log, func(ctx context.Context) error {
		stream := s.transcripts
		if stream == nil {
			st, err := s.js.Stream(ctx, bus.StreamTranscripts)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			stream = st
		}
		// The objects first: a purged message no longer says which are the turn's.
		var refs []bus.PayloadRef
		if err := eachStored(ctx, s.js, stream, turn, func(m jetstream.Msg) error {
			if ref, ok, err := bus.PayloadOf(m.Headers()); ok && err == nil && ref.Bucket == bus.ObjectTranscripts {
				refs = append(refs, ref)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, ref := range refs {
			if err := s.payloadStore().Delete(ctx, ref); err != nil {
				return err
			}
		}
		return stream.Purge(ctx, jetstream.WithPurgeSubject(bus.TranscriptSubject(turn)))
	})
}
