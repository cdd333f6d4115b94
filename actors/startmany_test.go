package actors

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

// TestStartNotHeldBehindASlowOne: a node answers start requests at once, each on a
// worker: a start whose queueing is slow (JetStream electing a leader, a loaded
// machine) holds up no start after it, which a subscription's one-at-a-time handler did.
func TestStartNotHeldBehindASlowOne(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	n, err := StartNode(ctx, NodeConfig{
		Name:    "n1",
		Connect: func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Turns:   true,
		Logger:  DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before n.Close, which waits for the starts being answered
	held := make(chan struct{})
	hook := func(spec bus.TurnSpec) {
		if spec.ID == "slow" {
			close(held)
			<-release
		}
	}
	n.beforeStart.Store(&hook)
	caller := bustest.Conn(t, srv, "caller")
	start := func(id string) (*nats.Msg, error) {
		b, _ := json.Marshal(bus.TurnSpec{ID: id, Kind: bus.TurnMain, Agent: "ann", Input: "hi",
			Script: json.RawMessage(`{"responses":[{"text":"hello"}]}`)})
		return caller.Request(bus.NodeStartTurnSubject("n1"), b, 15*time.Second)
	}
	slow := make(chan error, 1)
	go func() {
		_, err := start("slow")
		slow <- err
	}()
	<-held
	m, err := start("fast")
	if err != nil {
		free()
		t.Fatalf("the start after a slow one: %v", err)
	}
	var reply bus.StartTurnReply
	if err := json.Unmarshal(m.Data, &reply); err != nil || reply.Error != "" || reply.Turn != "fast" {
		t.Fatalf("the start after a slow one: %s (%v)", m.Data, err)
	}
	select {
	case err := <-slow:
		t.Fatalf("the slow start was answered while held: %v", err)
	default:
	}
	free()
	if err := <-slow; err != nil {
		t.Fatalf("the slow start, released: %v", err)
	}
}
