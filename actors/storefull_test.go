package actors

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
)

// TestStoreFullIsReported: with the JetStream store limit used up, starting a turn is
// refused at once with a message that names the node and its full store; once space is
// freed the node serves again, without a restart.
func TestStoreFullIsReported(t *testing.T) {
	t.Parallel()
	const limit = 8 << 20
	srv := bustest.Server(t, func(c *server.Config) { c.MaxStore = limit })
	ctx := bustest.Context(t)
	n, err := StartNode(ctx, NodeConfig{
		Name:      "n1",
		Connect:   func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		StoreFull: srv.StoreFullError,
		Turns:     true,
		Logger:    DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	js := bustest.JetStream(t, srv, "filler")

	// Another turn's transcript fills the store.
	junk := make([]byte, 512<<10)
	var full error
	for i := 0; i < 64 && full == nil; i++ {
		if _, err := js.Publish(ctx, bus.TranscriptSubject("filler"), junk); err != nil {
			full = err
		}
	}
	if !bus.IsStoreFull(full) {
		t.Fatalf("filling the store: %v", full)
	}
	script, _ := json.Marshal(gateway.Script{Responses: []gateway.ScriptStep{{Text: "done"}}})
	start := time.Now()
	_, err = n.submit(ctx, bus.TurnSpec{Agent: "ann", Input: "go", Script: script}, "")
	took := time.Since(start)
	if !bus.IsStoreFull(err) || !strings.Contains(err.Error(), "node n1's store is full") || !strings.Contains(err.Error(), "8 MiB") {
		t.Fatalf("start on a full store: %v", err)
	}
	if took > 5*time.Second {
		t.Errorf("the refusal took %s", took)
	}
	t.Logf("refused in %s: %v", took.Round(time.Millisecond), err)

	// Space returns: the same node runs a turn to its end.
	turns, err := durable.Open(ctx, js, durable.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := turns.DeleteTranscript(ctx, "filler"); err != nil {
		t.Fatal(err)
	}
	nc := bustest.Conn(t, srv, "watch")
	id := bus.NewID()
	done, err := nc.SubscribeSync(bus.TurnStatusSubject(id, bus.StatusDone))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.submit(ctx, bus.TurnSpec{ID: id, Agent: "ann", Input: "go", Script: script}, ""); err != nil {
		t.Fatalf("start after space was freed: %v", err)
	}
	m, err := done.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the turn did not end: %v", err)
	}
	var st bus.TurnStatus
	if err := json.Unmarshal(m.Data, &st); err != nil || st.State != bus.TurnCompleted {
		t.Fatalf("turn after the store recovered: %+v %v", st, errors.Join(err))
	}
}
