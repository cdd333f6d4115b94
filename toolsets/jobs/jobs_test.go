package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/internal/testmain"
)

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{})
}

func TestSummary(t *testing.T) {
	t.Parallel()
	j := Job{Calls: CountCalls([]bus.CallRecord{
		{Tool: "read_file", Outcome: bus.OutcomeOK},
		{Tool: "lookup", Namespace: "crm", Outcome: bus.OutcomeOK},
		{Tool: "read_file", Outcome: bus.OutcomeOK},
		{Tool: "read_file", Outcome: bus.OutcomeError},
	})}
	if got, want := j.Summary(), "4 calls: read_file ok ×2, crm.lookup ok, read_file error"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if got := (&Job{}).Summary(); got != "no tool calls" {
		t.Errorf("summary of none %q", got)
	}
}

func TestLedgerLastHour(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 4, 10, 30, 0, 0, time.UTC)
	var l ledger
	l.addStart(now.Add(-61 * time.Minute))
	l.addStart(now.Add(-59 * time.Minute))
	l.addStart(now.Add(-time.Second))
	l.addStart(now)
	n, oldest := l.lastHour(now)
	if n != 3 || !oldest.Equal(now.Add(-59*time.Minute)) || len(l.Starts) != 3 {
		t.Errorf("last hour: %d since %s, minutes %+v", n, oldest, l.Starts)
	}
}

// TestLedgerFreesLostPlaces: a place whose job has had no record for a while (its node
// died between the two writes) is freed; one taken a moment ago is not, or two jobs
// starting at once would pass the limit together.
func TestLedgerFreesLostPlaces(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := bustest.Server(t, nil)
	nc := bustest.Conn(t, srv, "jobs")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	b, _ := json.Marshal(ledger{Running: []held{{ID: "lost", At: now.Add(-2 * recordGrace)}, {ID: "starting", At: now.Add(-time.Second)}}})
	if _, err := s.kv.Put(ctx, ledgerKey("ann"), b); err != nil {
		t.Fatal(err)
	}
	p := Policy{Spawn: true, MaxRunning: 2}.WithDefaults()
	if err := s.reserve(ctx, "ann", "new", p, now); err != nil {
		t.Fatalf("reserve beside a lost place: %v", err)
	}
	l, _, err := s.ledger(ctx, "ann")
	if err != nil || len(l.Running) != 2 || l.Running[0].ID != "starting" || l.Running[1].ID != "new" {
		t.Fatalf("ledger %+v %v", l, err)
	}
	err = s.reserve(ctx, "ann", "more", p, now)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "agent ann has 2 jobs running") {
		t.Errorf("reserve past the limit: %v", err)
	}
	if err := s.release(ctx, "ann", "new"); err != nil {
		t.Fatal(err)
	}
	if l, _, _ := s.ledger(ctx, "ann"); l.holds("new") >= 0 || l.holds("starting") < 0 {
		t.Errorf("after release: %+v", l)
	}
}

// A job's start whose answer is lost (the attempt ran out of time) is asked again with
// the same id; the node that queued it the first time says the turn exists, and the job
// is queued, not failed while its turn runs.
func TestQueueTakesExistsOfAnEarlierAttempt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := bustest.Server(t, nil)
	js, err := jetstream.New(bustest.Conn(t, srv, "jobs"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	node := bustest.Conn(t, srv, "node")
	asks := make(chan string, 4)
	if _, err := node.Subscribe(bus.AnyNodeStartTurn, func(m *nats.Msg) {
		var spec bus.TurnSpec
		_ = json.Unmarshal(m.Data, &spec)
		asks <- spec.ID
		if len(asks) == 1 {
			return // queued; the answer lost
		}
		b, _ := json.Marshal(bus.StartTurnReply{Turn: spec.ID, Node: "node",
			Error: "start turn " + spec.ID + ": turn id already used", Code: bus.StartTurnExists})
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
	spec := bus.TurnSpec{ID: bus.NewID(), Kind: bus.TurnJob, Agent: "ann", Input: "go"}
	if err := s.queue(ctx, spec); err != nil {
		t.Fatalf("queue, its first answer lost: %v", err)
	}
	if first, second := <-asks, <-asks; first != spec.ID || second != spec.ID {
		t.Errorf("asked for %s then %s, want %s twice", first, second, spec.ID)
	}
}
