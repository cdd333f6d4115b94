package durable

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

// lostAcks stands between a store's appends and JetStream: the attempts it is told to
// lose are published for real, and their acknowledgement is dropped, as when the
// stream's leader paused after storing the message, or the answer was lost on its way.
type lostAcks struct {
	js jetstream.JetStream

	mu     sync.Mutex
	lose   int      // attempts still to lose
	unsent bool     // lose them before they are sent, instead
	ids    []string // the message id of every attempt
	dups   []bool   // whether each acknowledged attempt was a duplicate
}

func (f *lostAcks) publish(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	// The options set the headers of m (a message id, an expected last sequence).
	f.mu.Lock()
	lose, unsent := f.lose > 0, f.unsent
	if lose {
		f.lose--
	}
	f.mu.Unlock()
	if lose && unsent {
		f.note(m, nil)
		<-ctx.Done() // no answer comes: the attempt runs out (its bound, bus.Retry)
		return nil, ctx.Err()
	}
	ack, err := f.js.PublishMsg(ctx, m, opts...)
	f.note(m, ack)
	if lose && err == nil {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return ack, err
}

func (f *lostAcks) note(m *nats.Msg, ack *jetstream.PubAck) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = append(f.ids, m.Header.Get(jetstream.MsgIDHeader))
	if ack != nil {
		f.dups = append(f.dups, ack.Duplicate)
	}
}

// TestAppendTimeoutRetriesWithSameID: an append whose acknowledgement is lost (the
// message landed) is retried with the same Nats-Msg-Id and stored once; one lost before
// it was sent is stored by the retry; either way the lease counts it once, on the
// stream's acknowledgement, and the appends after it go on at the right sequence.
func TestAppendTimeoutRetriesWithSameID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		unsent  bool
		lose    int
		cluster bool
	}{
		{"landed, answer lost", false, 1, false},
		{"landed, two answers lost, three replicas", false, 2, true},
		{"lost before it was sent", true, 1, false},
		{"landed, answer lost, three replicas", false, 1, true},
		{"lost before it was sent, three replicas", true, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := bustest.Context(t)
			var (
				js jetstream.JetStream
				s  *Store
			)
			if tc.cluster {
				nodes := bustest.Cluster(t, 3, nil)
				js = bustest.JetStream(t, nodes[0], "a")
				s = openStore(t, js, "n1", 3)
			} else {
				js = bustest.JetStream(t, bustest.Server(t, nil), "a")
				s = openStore(t, js, "n1", 1)
			}
			faults := &lostAcks{js: js}
			s.publish = faults.publish
			msg := queued(t, s, 1)[0]
			spec := specOf(t, msg)
			l, err := claim(t, ctx, s, msg, spec)
			if err != nil {
				t.Fatal(err)
			}
			faults.mu.Lock()
			faults.lose, faults.unsent, faults.ids, faults.dups = tc.lose, tc.unsent, nil, nil
			faults.mu.Unlock()
			if err := l.Append(ctx, 1, words("a1")); err != nil {
				t.Fatal(err)
			}
			if err := l.Append(ctx, 2, words("a2")); err != nil {
				t.Fatal(err)
			}
			faults.mu.Lock()
			ids, dups := faults.ids, faults.dups
			faults.mu.Unlock()
			// Every attempt of the first append carried its id; the second append, its own.
			want := tc.lose + 2
			if len(ids) != want {
				t.Fatalf("%d attempts (%q), want %d", len(ids), ids, want)
			}
			first := l.msgID(2)
			for i, id := range ids[:tc.lose+1] {
				if id != first {
					t.Fatalf("attempt %d of the first append has id %q, want %q", i+1, id, first)
				}
			}
			if ids[len(ids)-1] != l.msgID(3) {
				t.Fatalf("the second append has id %q, want %q", ids[len(ids)-1], l.msgID(3))
			}
			// A replicated stream acknowledges the retry of a message that landed as a
			// duplicate (it deduplicates before it checks the expected sequence); a lone
			// server refuses it (wrong last sequence), and the lease finds its message
			// as the leader's last.
			if tc.cluster {
				wantDup := !tc.unsent
				if len(dups) < 2 || dups[len(dups)-2] != wantDup {
					t.Fatalf("the retry's ack: duplicates %v, want %v for the first append's", dups, wantDup)
				}
			}
			stored, err := s.StoredTranscript(ctx, spec.ID)
			if err != nil {
				t.Fatal(err)
			}
			var pos []int
			for _, m := range stored {
				p, _ := strconv.Atoi(m.Header.Get(bus.HeaderSeq))
				pos = append(pos, p)
			}
			if len(stored) != 3 || pos[0] != 1 || pos[1] != 2 || pos[2] != 3 || l.Pos() != 3 {
				t.Fatalf("stored positions %v, the lease counts %d: want [1 2 3] and 3", pos, l.Pos())
			}
			if err := l.End(ctx, bus.TurnCompleted, "", 2, nil); err != nil {
				t.Fatal(err)
			}
			rec, _, err := s.Record(ctx, spec.ID)
			if err != nil || rec.Stored != 3 || rec.State != bus.TurnCompleted {
				t.Fatalf("record %+v, %v: want completed with 3 stored", rec, err)
			}
		})
	}
}

// TestEndRecordNeverAheadOfStream: a lease whose stream lost a message it acknowledged
// (gone from the leader: deleted here behind the lease's back) writes no end and no
// hand-back that counts it: End and HandBack fail with ErrTranscriptBehind, and the
// record still says what the claim wrote. A lease whose messages are all there ends as
// usual, its record counting them.
func TestEndRecordNeverAheadOfStream(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := bustest.JetStream(t, srv, "a")
	s := openStore(t, js, "n1", 1)
	msgs := queued(t, s, 2)
	stream, err := js.Stream(ctx, bus.StreamTranscripts)
	if err != nil {
		t.Fatal(err)
	}

	spec := specOf(t, msgs[0])
	l, err := claim(t, ctx, s, msgs[0], spec)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []string{"a1", "a2"} {
		if err := l.Append(ctx, i+1, words(w)); err != nil {
			t.Fatal(err)
		}
	}
	last, err := stream.GetLastMsgForSubject(ctx, bus.TranscriptSubject(spec.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, last.Sequence); err != nil {
		t.Fatal(err)
	}
	if err := l.End(ctx, bus.TurnCompleted, "", 2, nil); !errors.Is(err, ErrTranscriptBehind) {
		t.Fatalf("end of a transcript the stream lost a message of: %v, want ErrTranscriptBehind", err)
	}
	if err := l.HandBack(ctx, 2); !errors.Is(err, ErrTranscriptBehind) {
		t.Fatalf("hand-back of a transcript the stream lost a message of: %v, want ErrTranscriptBehind", err)
	}
	rec, _, err := s.Record(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != bus.TurnRunning || rec.Stored != 0 || rec.Owner != "n1" {
		t.Fatalf("record after the refused end: %s, owner %q, %d stored; want running on n1 as claimed, 0 stored", rec.State, rec.Owner, rec.Stored)
	}
	if err := l.Ack(); err == nil {
		t.Fatal("the intake message of a turn whose end was refused was acknowledged")
	}

	spec = specOf(t, msgs[1])
	l, err = claim(t, ctx, s, msgs[1], spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, 1, words("b1")); err != nil {
		t.Fatal(err)
	}
	if err := l.End(ctx, bus.TurnCompleted, "", 1, nil); err != nil {
		t.Fatal(err)
	}
	rec, _, err = s.Record(ctx, spec.ID)
	if err != nil || rec.State != bus.TurnCompleted || rec.Stored != 2 {
		t.Fatalf("record %+v, %v: want completed with 2 stored", rec, err)
	}
	// A reader never takes less than the record counts for the whole history: one
	// that finds less (a stale copy; here, a message lost after the end) reads again
	// until it gives up.
	if _, err := s.ReadTranscript(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	last, err = stream.GetLastMsgForSubject(ctx, bus.TranscriptSubject(spec.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, last.Sequence); err != nil {
		t.Fatal(err)
	}
	// 3 s: on a machine loaded past CI's (go test -race -p 4, twice at once) a first
	// attempt of a second ended before the read did, and said nothing.
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if items, err := s.ReadTranscript(rctx, spec.ID); !errors.Is(err, bus.ErrReadAgain) {
		t.Fatalf("read of a transcript shorter than its record: %d items, %v; want bus.ErrReadAgain", len(items), err)
	}
}
