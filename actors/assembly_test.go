package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets"
)

// profileKV is the agent profile bucket with Get replaced: what a turn's assembly reads
// first.
type profileKV struct {
	jetstream.KeyValue
	get func(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
}

func (kv profileKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return kv.get(ctx, key)
}

// assemblyNode is a node that runs turns from the intake, its profile store's reads
// replaced by get (kv is the real bucket), and a connection that watches the turns' ends.
func assemblyNode(t *testing.T, logs *logBuffer, get func(ctx context.Context, kv jetstream.KeyValue, key string) (jetstream.KeyValueEntry, error)) (*Node, *nats.Conn) {
	t.Helper()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	n, err := StartNode(ctx, NodeConfig{
		Name:    "n1",
		Connect: func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Turns:   true,
		Logger:  logs.logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	kv, err := bus.KeyValue(ctx, bustest.JetStream(t, srv, "profiles"), bus.BucketAgents, 1)
	if err != nil {
		t.Fatal(err)
	}
	n.assemblyMu.Lock()
	n.profiles = toolsets.NewProfiles(profileKV{KeyValue: kv, get: func(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
		return get(ctx, kv, key)
	}})
	n.assemblyMu.Unlock()
	return n, bustest.Conn(t, srv, "watch")
}

// runQueued submits a turn of agent ann through the intake and returns how it ended.
func runQueued(t *testing.T, n *Node, watch *nats.Conn) bus.TurnStatus {
	t.Helper()
	id := bus.NewID()
	done, err := watch.SubscribeSync(bus.TurnStatusSubject(id, bus.StatusDone))
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	script, _ := json.Marshal(gateway.Script{Responses: []gateway.ScriptStep{{Text: "done"}}})
	if _, err := n.submit(bustest.Context(t), bus.TurnSpec{ID: id, Agent: "ann", Input: "go", Script: script}, ""); err != nil {
		t.Fatal(err)
	}
	m, err := done.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the turn did not end: %v", err)
	}
	var st bus.TurnStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestAssemblyPanicFailsTurn: a panic while a turn's tools are assembled fails that turn,
// with the reason in its end and the stack in the log, and the node runs the next turn.
func TestAssemblyPanicFailsTurn(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	var panics atomic.Bool
	panics.Store(true)
	n, watch := assemblyNode(t, logs, func(ctx context.Context, kv jetstream.KeyValue, key string) (jetstream.KeyValueEntry, error) {
		if panics.Load() {
			panic("creator bug")
		}
		return kv.Get(ctx, key)
	})
	st := runQueued(t, n, watch)
	if st.State != bus.TurnFailed || !strings.Contains(st.Error, "assemble tools: panic: creator bug") {
		t.Fatalf("the turn ended %s: %q", st.State, st.Error)
	}
	if l := logs.String(); !strings.Contains(l, "assemble tools: panic") || !strings.Contains(l, "runtime/debug.Stack") {
		t.Errorf("the log lacks the panic and its stack:\n%.3000s", l)
	}
	panics.Store(false)
	if st := runQueued(t, n, watch); st.State != bus.TurnCompleted {
		t.Fatalf("the next turn ended %s: %q", st.State, st.Error)
	}
}

// TestProfileReadRetried: a profile read that nobody answers for a while (no responders,
// a stream without a leader) is tried again within the turn, which then runs.
func TestProfileReadRetried(t *testing.T) {
	t.Parallel()
	var failures atomic.Int32
	n, watch := assemblyNode(t, &logBuffer{}, func(ctx context.Context, kv jetstream.KeyValue, key string) (jetstream.KeyValueEntry, error) {
		switch failures.Add(1) {
		case 1:
			return nil, fmt.Errorf("read: %w", nats.ErrNoResponders)
		case 2:
			<-ctx.Done() // an attempt nobody answers in time
			return nil, ctx.Err()
		}
		return kv.Get(ctx, key)
	})
	if st := runQueued(t, n, watch); st.State != bus.TurnCompleted {
		t.Fatalf("the turn ended %s: %q", st.State, st.Error)
	}
	if got := failures.Load(); got < 3 {
		t.Errorf("%d reads, want 3", got)
	}
}
