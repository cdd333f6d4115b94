package actors

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/redact"
)

// A journal keeps a turn's history. The turn tells it what happened at each point of
// its loop (a response, a call, a batch, the end, a hand-back) and goes on when it says
// so: ephemeral and durable turns differ in their journal and nowhere else.
//
//   - streamJournal (turns run in the node's own process, and by a client's Run) sends
//     the transcript to its stream when it can; the turn ends with its node.
//   - durableJournal (turns taken from the intake) stores each step under the turn's
//     lease before the turn acts on it, so that another node can resume the turn.
type journal interface {
	// begin links the journal to its turn and says where the turn starts: from its
	// input, which the journal records, or from a stored history to resume.
	begin(t *turn) beginning
	// afterResponse records a model response (its usage note first), or the part of a
	// streaming one up to a complete call (the usage note then follows the last part), or
	// the repair instruction the turn gives about one; then runs on the actor once the
	// turn may act on it (a durable journal has stored it: a node that resumes the turn knows every
	// call the model made, and that it was told once).
	afterResponse(items []toolbus.Item, then func())
	// afterCall is told of one call's output as it finishes; it reports whether it
	// recorded it (false: it goes with the batch).
	afterCall(output toolbus.Item) (recorded bool)
	// afterBatch records the outputs of the batch not recorded yet, in the model's order.
	afterBatch(outputs []toolbus.Item)
	// atEnd records the turn's end, after everything before it. durable.ErrFenced: the
	// turn is another node's now, and nothing was written.
	atEnd(state bus.TurnState, msg string, submitted json.RawMessage) error
	// handBack records what is queued and gives the turn back to the intake for the
	// next node (kept journals only).
	handBack() error
	// confirm reports whether the turn is still this node's to run: nil, or
	// durable.ErrFenced, or the error that kept it from finding out.
	confirm() error
	// kept reports whether the history outlives this node: a turn whose journal is kept
	// is not ended when its node stops, and its node may hand it back; another node
	// resumes it.
	kept() bool
}

// errNotKept is a hand-back asked of a turn whose history does not outlive its node.
var errNotKept = errors.New("the turn's history is not kept: it cannot be handed back")

// beginning is where a turn starts.
type beginning struct {
	lease time.Duration // the intake's lease, told to watchers with the started status
	// resume, when set, is the stored history the turn goes on from.
	resume *resumePoint
}

// resumePoint is a stored history to go on from: the transcript read back by the claim
// (ending with its resume note), why the turn is resumed, and the node that was lost.
type resumePoint struct {
	items []toolbus.Item
	from  bus.Resume
	lost  string
}

// streamJournal is the journal of a turn that cannot be resumed: it appends the
// transcript to its stream without waiting (nothing without a JetStream), its steps
// together at most transcriptBatch apart, and all of them when the turn ends.
//
// What it appends is read from the turn's transcript (t.transcript[saved:]), to which
// the turn appends each item it records, just before it tells the journal: a copy of
// them kept here until the next append was a second transcript, grown as the first
// (a tenth of the bytes a step allocated, BenchmarkTurnStep).
type streamJournal struct {
	t       *turn
	js      jetstream.JetStream
	saved   int       // the items of t.transcript appended to the stream
	flushed time.Time // when items last went to the stream
	appends []*transcriptAppend
	seq     int // the last transcript message's position (HeaderSeq)
	// payloads stores the bodies too large for a message (TurnConfig.payloads).
	payloads *bus.Payloads
}

// transcriptBatch is how long the steps of a turn that cannot be resumed may wait to be
// appended to its transcript together: one message and one acknowledgement per batch
// instead of per step (two of a step's seven messages).
const transcriptBatch = 100 * time.Millisecond

func (j *streamJournal) begin(t *turn) beginning {
	// The input, which the turn puts in its transcript next, goes with the first append.
	j.t, j.js, j.payloads = t, t.cfg.JS, t.cfg.payloads
	return beginning{}
}

func (j *streamJournal) afterResponse(_ []toolbus.Item, then func()) { then() }

func (j *streamJournal) afterCall(toolbus.Item) bool { return false }

func (j *streamJournal) afterBatch([]toolbus.Item) {
	if time.Since(j.flushed) >= transcriptBatch {
		j.flush()
	}
}

func (j *streamJournal) atEnd(bus.TurnState, string, json.RawMessage) error {
	j.flush()
	return j.wait()
}

func (j *streamJournal) handBack() error { return errNotKept }
func (j *streamJournal) confirm() error  { return nil }
func (j *streamJournal) kept() bool      { return false }

// flush appends the items of the transcript not appended yet to the stream without waiting. Each message carries
// its position in the turn (HeaderSeq), so a message retried after a failure is read
// back in order, and once, even if both attempts were stored. (The reader deduplicates;
// a Nats-Msg-Id would make the stream do it on every append, retried or not.)
func (j *streamJournal) flush() {
	items := j.t.transcript[j.saved:]
	if j.js == nil || len(items) == 0 {
		return
	}
	j.flushed = time.Now()
	j.saved = len(j.t.transcript)
	b, err := json.Marshal(items)
	if err != nil {
		j.t.log.Warn("encode transcript", "err", err)
		return
	}
	m := j.msg(b)
	a := &transcriptAppend{msg: m}
	if len(m.Data) > bus.InlineLimit(j.js.Conn().MaxPayload()) {
		// Too large for a message: the body goes to the object store first, off the
		// mailbox, and the message names it.
		a.large = make(chan error, 1)
		a.object = bus.PayloadName(j.t.cfg.Spec.ID, "transcript")
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
			defer cancel()
			a.large <- j.publishLarge(ctx, a)
		}()
	} else {
		a.ack, a.err = j.js.PublishMsgAsync(m)
	}
	j.appends = append(j.appends, a)
}

// publishLarge stores the body of a transcript message too large for a message in
// bus.ObjectTranscripts, as the append's object (bus.Payloads.OffloadRetried: once, a
// retry finds it there), then publishes the message that names it, until ctx ends.
func (j *streamJournal) publishLarge(ctx context.Context, a *transcriptAppend) error {
	p := j.payloads
	if p == nil {
		p = bus.NewPayloads(j.js, 1)
	}
	if _, err := p.OffloadRetried(ctx, a.msg, bus.ObjectTranscripts, a.object, j.t.log); err != nil {
		return err
	}
	return j.publishRetried(ctx, a.msg)
}

// publishRetried publishes m until JetStream acknowledges it or ctx ends (bus.Retry).
func (j *streamJournal) publishRetried(ctx context.Context, m *nats.Msg) error {
	return bus.Retry(ctx, "store transcript", j.t.log, func(ctx context.Context) error {
		_, err := j.js.PublishMsg(ctx, m)
		return err
	})
}

// msg is the next message of the turn's transcript, every secret the process knows
// redacted (redact.AddSecrets): a tool's output or the model's text may quote a key,
// and the stream keeps it for anyone who may read transcripts.
func (j *streamJournal) msg(data []byte) *nats.Msg {
	j.seq++
	m := nats.NewMsg(bus.TranscriptSubject(j.t.cfg.Spec.ID))
	m.Data = redact.Secrets(data)
	m.Header.Set(bus.HeaderSeq, strconv.Itoa(j.seq))
	return m
}

// wait waits until every message of the transcript is stored, publishing again those
// that failed (a stream without a leader answers "no response from stream" until it
// elects one).
func (j *streamJournal) wait() error {
	ctx, cancel := context.WithTimeout(context.Background(), transcriptPatience)
	defer cancel()
	for _, a := range j.appends {
		err := a.err
		if a.large != nil {
			// Not bounded by ctx: the goroutine still holds the message until it answers,
			// within its own transcriptPatience.
			err = <-a.large
			a.large = nil
			if err == nil {
				continue
			}
		} else if err == nil {
			select {
			case <-a.ack.Ok():
				continue
			case err = <-a.ack.Err():
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if err == nil {
			continue
		}
		j.t.log.Info("transcript append failed; retrying", "err", err)
		if a.object != "" {
			err = j.publishLarge(ctx, a)
		} else {
			err = j.publishRetried(ctx, a.msg)
		}
		if err != nil {
			return err
		}
	}
	j.appends = j.appends[:0]
	return nil
}

// reuse empties a slice of items that was encoded, keeping its array for the next
// ones: a turn's queue would otherwise grow again from nothing after every append.
func reuse(items []toolbus.Item) []toolbus.Item {
	clear(items)
	return items[:0]
}

// transcriptAppend is one message of the transcript on its way to the stream.
type transcriptAppend struct {
	msg *nats.Msg
	ack jetstream.PubAckFuture
	err error // publishing failed before any acknowledgement was awaited
	// large, for a body stored in the object store, answers once the message is stored.
	large chan error
	// object names the body's object, the same for every attempt (bus.Payloads.Offload).
	object string
}

// transcriptPatience bounds how long a finishing turn keeps trying to store
// its transcript: long enough for a stream to elect a new leader after it
// lost one (seconds), short enough not to hold a node's shutdown.
const transcriptPatience = 30 * time.Second
