package durable

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

func openStore(t testing.TB, js jetstream.JetStream, node string, replicas int) *Store {
	t.Helper()
	s, err := Open(bustest.Context(t), js, Config{Node: node, Replicas: replicas, Create: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// queued submits n turns and returns their intake messages, as a node pulls them.
func queued(t testing.TB, s *Store, n int) []jetstream.Msg {
	t.Helper()
	ctx := bustest.Context(t)
	for i := range n {
		spec := bus.TurnSpec{ID: bus.NewID(), Agent: "ann", Input: fmt.Sprintf("turn %d", i)}
		spec.Normalize()
		if err := s.Submit(ctx, spec, ""); err != nil {
			t.Fatalf("submit %s: %v", spec.ID, err)
		}
	}
	cons, err := s.RunnerConsumers(ctx, time.Minute)
	if err != nil {
		t.Fatalf("runner consumers: %v", err)
	}
	var msgs []jetstream.Msg
	// A fetch can find no responders while the consumer's leader moves (in a cluster
	// of three on a loaded machine: TestReplicatedConflictFences): fetch again.
	bustest.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
		batch, err := cons[0].Fetch(n-len(msgs), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats_timeout) {
			return fmt.Errorf("fetch: %w", err)
		}
		if len(msgs) < n {
			return fmt.Errorf("%d of the %d queued turns fetched", len(msgs), n)
		}
		return nil
	})
	return msgs
}

var nats_timeout = jetstream.ErrNoMessages

func specOf(t testing.TB, m jetstream.Msg) bus.TurnSpec {
	t.Helper()
	var spec bus.TurnSpec
	if err := jsonUnmarshal(m.Data(), &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// claim claims spec's message for a minute's lease, stopped (its progress signals
// ended) when the test ends.
func claim(t testing.TB, ctx context.Context, s *Store, msg jetstream.Msg, spec bus.TurnSpec) (*Lease, error) {
	l, err := s.Claim(ctx, msg, spec, time.Minute, input(spec))
	if l != nil {
		t.Cleanup(l.Stop)
	}
	return l, err
}

func input(spec bus.TurnSpec) func(bus.TurnRecord, bool) []toolbus.Item {
	return func(rec bus.TurnRecord, resumed bool) []toolbus.Item {
		if resumed {
			return []toolbus.Item{ResumeNote(rec.Resumes[len(rec.Resumes)-1])}
		}
		return []toolbus.Item{toolbus.UserMessage(spec.Input)}
	}
}

func words(s ...string) []toolbus.Item {
	var out []toolbus.Item
	for _, w := range s {
		out = append(out, toolbus.Item{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: w})
	}
	return out
}

// TestStaleLeaseIsFenced: a node whose turn another node claimed can append nothing,
// end nothing and ack nothing; the new owner's history is whole.
func TestStaleLeaseIsFenced(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	a := openStore(t, bustest.JetStream(t, srv, "a"), "n1", 1)
	b := openStore(t, bustest.JetStream(t, srv, "b"), "n2", 1)
	msg := queued(t, a, 1)[0]
	spec := specOf(t, msg)
	la, err := claim(t, ctx, a, msg, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Append(ctx, 1, words("a1")); err != nil {
		t.Fatal(err)
	}
	// n1 pauses; its lease runs out and n2 takes the turn over.
	lb, err := claim(t, ctx, b, msg, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !lb.Resumed || lb.Lost != "n1" || lb.Rec.Epoch != 2 {
		t.Fatalf("claim of n2: resumed %v lost %q epoch %d", lb.Resumed, lb.Lost, lb.Rec.Epoch)
	}
	if err := la.Append(ctx, 2, words("a2 after the takeover")); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale append: %v, want ErrFenced", err)
	}
	if err := la.End(ctx, bus.TurnCompleted, "", 2, nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale end: %v, want ErrFenced", err)
	}
	if err := la.Ack(); err == nil {
		t.Fatal("a fenced lease acked the intake message")
	}
	if err := lb.Append(ctx, 2, words("b2")); err != nil {
		t.Fatal(err)
	}
	if err := lb.End(ctx, bus.TurnCompleted, "", 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := lb.Ack(); err != nil {
		t.Fatal(err)
	}
	tr, err := b.readTranscript(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range tr.Items {
		if it.Text != "" {
			got = append(got, it.Text)
		}
	}
	if fmt.Sprint(got) != "[turn 0 a1 b2]" || tr.Pos != 4 {
		t.Fatalf("transcript %v (pos %d), want [turn 0 a1 b2] and the resume note, 4 messages", got, tr.Pos)
	}
	audit, err := AuditTranscript(ctx, b.js, spec.ID)
	if err != nil || audit.Messages != 4 || audit.RepeatedPos != 0 || audit.StaleAfterFence != 0 || fmt.Sprint(audit.Epochs) != "[1 1 2 2]" {
		t.Fatalf("audit %+v %v", audit, err)
	}
	rec, _, err := b.Record(ctx, spec.ID)
	if err != nil || rec.State != bus.TurnCompleted || rec.Owner != "n2" {
		t.Fatalf("record %+v %v", rec, err)
	}
}

// TestReplicatedConflictFences provokes JetStream's replicated conflict (10164: another
// write of the key is being proposed) on an R3 bucket and shows that the stale writer is
// fenced, never failed: of writers at one revision exactly one wins and every other is a
// conflict; a stale node's end racing a new owner's claim is fenced or lands whole.
func TestReplicatedConflictFences(t *testing.T) {
	t.Parallel()
	nodes := bustest.Cluster(t, 3, nil)
	ctx := bustest.Context(t)
	stores := make([]*Store, 3)
	for i, n := range nodes {
		stores[i] = openStore(t, bustest.JetStream(t, n, "writer"), n.Name(), 3)
	}
	kv := stores[0].kv
	if r := stores[0].kvReplicas(ctx); r != 3 {
		t.Fatalf("turn records have %d replicas, want 3", r)
	}

	// Raw compare-and-set races until the server has answered 10164 at least once.
	var seen10164, seen10071 int
	for round := 0; round < 200 && seen10164 == 0; round++ {
		key := "race-" + strconv.Itoa(round)
		rev, err := bus.UpdateAt(ctx, kv, key, []byte("v0"), 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 12)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = stores[i%3].kv.Update(ctx, key, []byte("v"+strconv.Itoa(i)), rev)
			})
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			var apiErr *jetstream.APIError
			switch {
			case err == nil:
				wins++
			case !bus.IsConflict(err):
				t.Fatalf("a losing writer failed instead of conflicting: %v", err)
			case errors.As(err, &apiErr) && apiErr.ErrorCode == 10164:
				seen10164++
			default:
				seen10071++
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d writers won at one revision", round, wins)
		}
	}
	t.Logf("losing writers: %d answered 10164, %d answered 10071", seen10164, seen10071)
	if seen10164 == 0 {
		t.Fatal("no race provoked 10164")
	}

	// The stale node's end against the new owner's claim, many times: the stale
	// node is fenced (or ended first, and the claim finds the turn over), never failed.
	const turns = 12
	msgs := queued(t, stores[0], turns)
	fenced, over := 0, 0
	for _, msg := range msgs {
		spec := specOf(t, msg)
		stale, err := claim(t, ctx, stores[0], msg, spec)
		if err != nil {
			t.Fatal(err)
		}
		var (
			wg      sync.WaitGroup
			endErr  error
			owner   *Lease
			claimEr error
		)
		wg.Go(func() { endErr = stale.End(ctx, bus.TurnCompleted, "", 1, nil) })
		wg.Go(func() { owner, claimEr = claim(t, ctx, stores[1+len(spec.ID)%2], msg, spec) })
		wg.Wait()
		switch {
		case endErr == nil && errors.Is(claimEr, ErrTurnOver):
			over++
		case errors.Is(endErr, ErrFenced) && claimEr == nil:
			fenced++
			if err := stale.Ack(); err == nil {
				t.Fatal("a fenced node acked the new owner's message")
			}
			if err := owner.End(ctx, bus.TurnCompleted, "", 1, nil); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("stale end: %v; new claim: %v", endErr, claimEr)
		}
	}
	t.Logf("of %d races, %d stale ends were fenced, %d landed first", turns, fenced, over)
}

// TestClaimTimeoutGivesTurnBack: a claim whose write landed while its answer was lost
// gives the turn back, so that the record does not name a node that is not running it,
// and the intake gives the turn to the next node.
func TestClaimTimeoutGivesTurnBack(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	s := openStore(t, bustest.JetStream(t, srv, "n1"), "n1", 1)
	msg := queued(t, s, 1)[0]
	spec := specOf(t, msg)
	real := s.kv
	s.kv = &lostAnswers{KeyValue: real, lose: 1}
	_, err := claim(t, ctx, s, msg, spec)
	if err == nil || errors.Is(err, ErrClaimLost) {
		t.Fatalf("claim with its answer lost: %v", err)
	}
	rec, _, err := s.Record(ctx, spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != bus.TurnQueued || rec.Owner != "" || rec.Epoch != 1 {
		t.Fatalf("record after the failed claim: state %s owner %q epoch %d, want queued, no owner, epoch 1", rec.State, rec.Owner, rec.Epoch)
	}
	// The message comes back (a second later) and the next claim reads a hand-back.
	cons, err := s.RunnerConsumers(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons[0].Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("the intake did not give the turn again: %v", err)
	}
	s.kv = real
	l, err := claim(t, ctx, s, m, spec)
	if err != nil {
		t.Fatal(err)
	}
	if l.Rec.Epoch != 2 || l.Rec.Owner != "n1" {
		t.Fatalf("second claim: %+v", l.Rec)
	}
}

// lostAnswers is a bucket whose first lose updates are written and then answered with
// a timeout, as when the reply of a landed write is lost.
type lostAnswers struct {
	jetstream.KeyValue
	mu   sync.Mutex
	lose int
}

func (k *lostAnswers) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	n, err := k.KeyValue.Update(ctx, key, value, rev)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil && k.lose > 0 {
		k.lose--
		return 0, context.DeadlineExceeded
	}
	return n, err
}
