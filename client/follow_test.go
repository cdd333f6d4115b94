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
