package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/durable"
)

// TestDecided reads what an earlier delivery of a firing decided from the schedule's
// record alone.
func TestDecided(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sch  Schedule
		seq  uint64
		want Verdict
		why  string
	}{
		{"never decided", Schedule{}, 1, 0, ""},
		{"after the last turn", Schedule{LastTurn: "s-7"}, 8, 0, ""},
		{"the firing that started the last turn, again", Schedule{LastTurn: "s-7"}, 7, Run, ""},
		{"a run before a later skip", Schedule{LastTurn: "s-7", SkipSeq: 12}, 7, Run, ""},
		{"a skipped firing, again", Schedule{LastTurn: "s-7", SkipSeq: 9}, 9, Skip, "skipped already"},
		{"older than a skipped one", Schedule{LastTurn: "s-7", SkipSeq: 9}, 8, Skip, "(intake sequence 9) was decided already"},
		{"older than the last turn too", Schedule{LastTurn: "s-7", SkipSeq: 9}, 3, Skip, "(intake sequence 9) was decided already"},
		{"after the last skip", Schedule{LastTurn: "s-7", SkipSeq: 9}, 10, 0, ""},
		// A node decides several firings at once: one decided after a later one is
		// skipped, and counted, unless the record cannot tell it from one decided before.
		{"a remembered skip, again", Schedule{LastTurn: "s-7", SkipSeq: 12, Skips: []uint64{9, 12}}, 9, Skip, "skipped already"},
		{"older than a skip, never decided", Schedule{LastTurn: "s-7", SkipSeq: 12, Skips: []uint64{9, 12}}, 10, 0, "(intake sequence 12) was decided already"},
		{"older than the remembered skips", Schedule{LastTurn: "s-7", SkipSeq: 40, Skips: seqs(9, skipWindow)}, 8, Skip, "(intake sequence 40) was decided already"},
		{"within the remembered skips", Schedule{LastTurn: "s-7", SkipSeq: 40, Skips: seqs(9, skipWindow)}, 30, Skip, "skipped already"},
		{"older than the last turn's firing", Schedule{LastTurn: "s-7", SkipSeq: 12, Skips: []uint64{12}}, 6, Skip, "(intake sequence 12) was decided already"},
	} {
		v, why := decided(&tc.sch, TurnID("s", tc.seq), tc.seq)
		if v != tc.want || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, v, why, tc.want, tc.why)
		}
	}
}

// seqs is n consecutive sequences from first.
func seqs(first uint64, n int) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = first + uint64(i)
	}
	return s
}

// fireStore is a schedule store on a server of its own, whose firings this test decides
// by calling Fire as a node does.
type fireStore struct {
	t    *testing.T
	ctx  context.Context
	js   jetstream.JetStream
	s    *Store
	body []byte
}

func newFireStore(t *testing.T) *fireStore {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	srv := bustest.Server(t, nil)
	nc := bustest.Conn(t, srv, "fire")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js, 1, Config{MinInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(bus.TurnSpec{Kind: bus.TurnMain, Agent: "sam", Input: "Tick."})
	return &fireStore{t: t, ctx: ctx, js: js, s: s, body: body}
}

// schedule stores schedule id whose last turn, at seq, was fired (and its record
// written, queued) at fired.
func (h *fireStore) schedule(id string, seq uint64, fired time.Time) string {
	h.t.Helper()
	last := TurnID(id, seq)
	if err := h.s.turns.CreateQueued(h.ctx, bus.TurnSpec{ID: last, Kind: bus.TurnMain, Agent: "sam", Input: "Tick."}, fired); err != nil {
		h.t.Fatal(err)
	}
	rec, _ := json.Marshal(Schedule{ID: id, Agent: "sam", Kind: KindEvery, Every: "1s", Pattern: "@every 1s", Prompt: "Tick.",
		Created: fired, First: fired, Fired: 1, LastTurn: last, LastFired: fired})
	if err := bus.CreateOnce(h.ctx, h.s.kv, key("sam", id), rec); err != nil {
		h.t.Fatal(err)
	}
	return last
}

func (h *fireStore) fire(id string, seq uint64) Firing {
	h.t.Helper()
	f, err := h.s.Fire(h.ctx, id, seq, h.body, func(string) (Policy, error) { return Policy{Enabled: true}, nil })
	if err != nil {
		h.t.Fatal(err)
	}
	return f
}

func (h *fireStore) record(turn string) (bus.TurnRecord, error) {
	rec, _, err := h.s.turns.Record(h.ctx, turn)
	return rec, err
}

// TestFireDecidesOnce delivers one firing twice, as the intake does when the node deciding
// it takes longer than the lease: the first delivery skips it (the turn before it is
// still queued), the turn before ends, and the second delivery must skip it too. Were it
// to run it, the first delivery's acknowledgement would take the firing out of the
// intake under the turn the second one queued, and a node that failed to claim that
// turn would leave it queued for good, every later firing skipped behind it.
func TestFireDecidesOnce(t *testing.T) {
	t.Parallel()
	h := newFireStore(t)
	const id = "sch1"
	prev := h.schedule(id, 1, time.Now().UTC())

	if f := h.fire(id, 7); f.Verdict != Skip || !strings.Contains(f.Why, "turn "+prev+" of the schedule was still queued") {
		t.Fatalf("the firing while the turn before is queued: %+v", f)
	}
	if _, ended, err := h.s.turns.EndQueued(h.ctx, prev, bus.TurnCompleted, ""); err != nil || !ended {
		t.Fatalf("end the turn before: %v %v", ended, err)
	}
	if f := h.fire(id, 7); f.Verdict != Skip || !strings.Contains(f.Why, "skipped already") {
		t.Errorf("the skipped firing delivered again: %+v", f)
	}
	if f := h.fire(id, 5); f.Verdict != Skip || !strings.Contains(f.Why, "was decided already") {
		t.Errorf("a firing older than the skipped one: %+v", f)
	}
	if f := h.fire(id, 5); f.Verdict != Skip || !strings.Contains(f.Why, "skipped already") {
		t.Errorf("the older firing delivered again: %+v", f)
	}
	for _, seq := range []uint64{5, 7} {
		if rec, err := h.record(TurnID(id, seq)); !errors.Is(err, durable.ErrNoRecord) {
			t.Errorf("the skipped firing at %d has a turn record: %+v %v", seq, rec, err)
		}
	}
	// The next firing runs, and delivered again it is the same turn.
	for range 2 {
		if f := h.fire(id, 8); f.Verdict != Run || f.Spec.ID != TurnID(id, 8) {
			t.Errorf("the next firing: %+v", f)
		}
	}
	if rec, err := h.record(TurnID(id, 8)); err != nil || rec.State != bus.TurnQueued {
		t.Errorf("its turn: %+v %v", rec, err)
	}
	sch, _, err := h.s.Get(h.ctx, "sam", id)
	if err != nil || sch.Fired != 2 || sch.Skipped != 2 || sch.SkipSeq != 7 || !slices.Equal(sch.Skips, []uint64{7, 5}) || sch.LastTurn != TurnID(id, 8) {
		t.Errorf("the schedule: %+v %v", sch, err)
	}
}

// TestFireEndsAStrandedTurn: a schedule's last turn queued, no node holding it, longer
// than recordGrace, with its firing no longer in the intake (as a build without
// TestFireDecidesOnce's fix could leave it) is ended by the next firing, which runs; one
// whose firing is still in the intake holds the next firing back.
func TestFireEndsAStrandedTurn(t *testing.T) {
	t.Parallel()
	h := newFireStore(t)
	long := time.Now().UTC().Add(-2 * recordGrace)

	stranded := h.schedule("gone", 3, long) // the intake holds nothing at 3
	if f := h.fire("gone", 9); f.Verdict != Run || f.Spec.ID != TurnID("gone", 9) {
		t.Errorf("the firing after a stranded turn: %+v", f)
	}
	if rec, err := h.record(stranded); err != nil || rec.State != bus.TurnFailed || !strings.Contains(rec.Error, "left the intake before a node took the turn") {
		t.Errorf("the stranded turn: %+v %v", rec, err)
	}

	ack, err := h.js.Publish(h.ctx, bus.IntakeFired("held"), h.body)
	if err != nil {
		t.Fatal(err)
	}
	waiting := h.schedule("held", ack.Sequence, long)
	if f := h.fire("held", ack.Sequence+1); f.Verdict != Skip || !strings.Contains(f.Why, "turn "+waiting+" of the schedule was still queued") {
		t.Errorf("the firing after a queued turn whose firing waits in the intake: %+v", f)
	}
	if rec, err := h.record(waiting); err != nil || rec.State != bus.TurnQueued {
		t.Errorf("the queued turn: %+v %v", rec, err)
	}
}
