package client

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

func TestFollow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := bustest.Server(t, nil)
	c := New(bustest.Conn(t, srv, "follow"))
	pub := bustest.Conn(t, srv, "turn")
	publish := func(turn, kind string, st bus.TurnStatus) {
		b, _ := json.Marshal(st)
		if err := pub.Publish(bus.TurnStatusSubject(turn, kind), b); err != nil {
			t.Fatal(err)
		}
		_ = pub.Flush()
	}

	// A turn that ends: its final status.
	heard := make(chan bus.TurnStatus, 8)
	done := make(chan error, 1)
	var final bus.TurnStatus
	go func() {
		var err error
		final, err = c.Follow(ctx, "t1", time.Second, func(m bus.TurnMessage) { heard <- *m.Status })
		done <- err
	}()
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		publish("t1", bus.StatusStarted, bus.TurnStatus{Turn: "t1", Node: "n1", Lease: time.Minute})
		select {
		case <-heard:
			return nil
		default:
			return errors.New("Follow heard nothing yet")
		}
	})
	publish("t1", bus.StatusDone, bus.TurnStatus{Turn: "t1", State: bus.TurnCompleted, Text: "ok"})
	if err := <-done; err != nil || final.State != bus.TurnCompleted || final.Text != "ok" {
		t.Fatalf("Follow: %+v, %v", final, err)
	}

	// A turn whose node goes silent: ErrNodeLost after three leases, no sooner than
	// the give-up time.
	heard2 := make(chan bus.TurnStatus, 8)
	go func() {
		_, err := c.Follow(ctx, "t2", 300*time.Millisecond, func(m bus.TurnMessage) { heard2 <- *m.Status })
		done <- err
	}()
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		publish("t2", bus.StatusBeat, bus.TurnStatus{Turn: "t2", Node: "n1", Lease: 50 * time.Millisecond})
		select {
		case <-heard2:
			return nil
		default:
			return errors.New("Follow heard nothing yet")
		}
	})
	began := time.Now()
	if err := <-done; !errors.Is(err, ErrNodeLost) {
		t.Fatalf("a silent node: %v", err)
	}
	if waited := time.Since(began); waited < 250*time.Millisecond {
		t.Errorf("gave up after %s, before the give-up time", waited)
	}
}

// Before any lease is heard, a follower checks every third of its wait, and gives up
// only once its own connection has been down for the whole wait; a lease heard, or the
// connection back, starts the count again.
func TestLivenessOffline(t *testing.T) {
	t.Parallel()
	var l Liveness
	if got := l.Next(3 * time.Second); got != time.Second {
		t.Errorf("Next without a lease: %v, want 1s", got)
	}
	if got := l.Next(0); got != 100*time.Millisecond {
		t.Errorf("Next of no wait: %v, want 100ms", got)
	}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		up   bool
		at   time.Duration
		want time.Duration
		gone bool
	}{
		{true, 0, 0, false},
		{false, time.Second, 0, false},
		{false, 2 * time.Second, time.Second, false},
		{true, 3 * time.Second, 0, false}, // back: the count starts again
		{false, 4 * time.Second, 0, false},
		{false, 7 * time.Second, 3 * time.Second, true},
	} {
		d, gone := l.Offline(tc.up, t0.Add(tc.at), 3*time.Second)
		if d != tc.want || gone != tc.gone {
			t.Errorf("at %v, up %v: down %v gone %v; want %v %v", tc.at, tc.up, d, gone, tc.want, tc.gone)
		}
	}
	l.Lease = time.Second
	if d, gone := l.Offline(false, t0.Add(time.Hour), 3*time.Second); d != 0 || gone {
		t.Errorf("with a lease heard: down %v gone %v; the lease's count decides", d, gone)
	}
	if got := l.Next(3 * time.Second); got != time.Second {
		t.Errorf("Next with a lease: %v", got)
	}
}

// A follower that heard nothing of the turn gives up with ErrBusLost once its connection
// has been down for its wait (the bus's only server gone before the turn's first
// status); with the connection up, it waits for a turn still queued.
func TestFollowWithoutTheBus(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	c := New(bustest.Conn(t, srv, "follow"))
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := c.Follow(ctx, "queued", 300*time.Millisecond, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a turn not yet taken, the bus up: %v; want to wait until ctx ends", err)
	}
	w, err := c.Watch("lost")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	done := make(chan error, 1)
	go func() {
		_, err := FollowWatch(context.Background(), w, "lost", 300*time.Millisecond, nil)
		done <- err
	}()
	srv.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrBusLost) {
			t.Errorf("the bus gone: %v, want ErrBusLost", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Follow did not give up with the bus gone")
	}
}
