package server

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MoveClients has a cluster server's clients from the network reconnect to another server
// and keeps the connections made by Connect; a request then reaches a moved client's
// subscription through its new server. A server with no routes moves nobody.
func TestMoveClients(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	nodes := startClusterWith(t, 2, func(c *Config) {
		c.Listen = "127.0.0.1:-1"
		c.Users = []User{{Name: "host", Password: "pw"}}
	})
	for _, s := range nodes {
		eventually(ctx, t, s.Name()+" routes to the other", func() bool { return s.NATS().NumRemotes() == 1 })
	}
	from, to := nodes[0], nodes[1]
	var reconnected atomic.Int32
	// The other server only as the cluster advertises it: the client is given this one.
	host, err := nats.Connect(from.ClientURL(), nats.UserInfo("host", "pw"), nats.Name("host"),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	eventually(ctx, t, "the client learns of the other server", func() bool { return len(host.DiscoveredServers()) > 0 })
	if _, err := host.Subscribe("tool.noop", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := host.Flush(); err != nil {
		t.Fatal(err)
	}
	own, err := from.Connect("own")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()

	moved, err := from.MoveClients()
	if err != nil || moved != 1 {
		t.Fatalf("MoveClients: %d moved, %v; want the one client from the network", moved, err)
	}
	eventually(ctx, t, "the moved client reconnects to "+to.Name(), func() bool {
		return reconnected.Load() == 1 && host.IsConnected() && host.ConnectedServerName() == to.Name()
	})
	if !own.IsConnected() || own.ConnectedServerName() != from.Name() || own.Stats().Reconnects != 0 {
		t.Errorf("the connection made by Connect: connected %v to %s after %d reconnects; want it left on %s",
			own.IsConnected(), own.ConnectedServerName(), own.Stats().Reconnects, from.Name())
	}
	caller, err := to.Connect("caller")
	if err != nil {
		t.Fatal(err)
	}
	defer caller.Close()
	var reply *nats.Msg
	eventually(ctx, t, "a request reaches the moved client", func() bool {
		reply, err = caller.Request("tool.noop", nil, time.Second)
		return err == nil
	})
	if string(reply.Data) != "ok" {
		t.Errorf("reply %q", reply.Data)
	}

	alone, _ := startServer(t, Config{Listen: "127.0.0.1:-1", Users: []User{{Name: "host", Password: "pw"}}})
	nc, err := nats.Connect(alone.ClientURL(), nats.UserInfo("host", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if moved, err := alone.MoveClients(); moved != 0 || err != nil {
		t.Errorf("a server with no routes moved %d clients (%v), want none", moved, err)
	}
	if err := nc.Flush(); err != nil || nc.Stats().Reconnects != 0 {
		t.Errorf("the client of a server with no routes: %v, %d reconnects", err, nc.Stats().Reconnects)
	}
}

// StepDownLeaders hands every group a server leads to another: the meta group and a
// replicated stream and its consumer, each with a leader elsewhere, and the stream
// still written; a server with no routes has nothing to hand over.
func TestStepDownLeaders(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	nodes := startCluster(t, 3)
	nc, err := nodes[0].Connect("steps")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Each poll's own bound: a request to a JetStream API that is electing its leader
	// goes unanswered, and with the test's whole minute one poll took all of it (seen
	// under heavy load: "every group led elsewhere: context deadline exceeded").
	poll := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }
	var stream jetstream.Stream
	eventually(ctx, t, "an R3 stream", func() bool {
		pctx, cancel := poll()
		defer cancel()
		stream, err = js.CreateOrUpdateStream(pctx, jetstream.StreamConfig{Name: "STEPS", Subjects: []string{"steps.>"}, Replicas: 3})
		return err == nil
	})
	var cons jetstream.Consumer
	eventually(ctx, t, "an R3 consumer", func() bool {
		pctx, cancel := poll()
		defer cancel()
		cons, err = stream.CreateOrUpdateConsumer(pctx, jetstream.ConsumerConfig{Durable: "c", Replicas: 3})
		return err == nil
	})
	leaders := func() (meta, st, co string) {
		ictx, cancel := poll()
		defer cancel()
		if i, err := stream.Info(ictx); err == nil && i.Cluster != nil {
			st = i.Cluster.Leader
			meta = metaLeader(nodes)
		}
		if i, err := cons.Info(ictx); err == nil && i.Cluster != nil {
			co = i.Cluster.Leader
		}
		return meta, st, co
	}
	// The stream's leader steps down from everything it leads.
	var leader *Server
	eventually(ctx, t, "the stream's leader known", func() bool {
		_, st, _ := leaders()
		for _, s := range nodes {
			if s.Name() == st {
				leader = s
			}
		}
		return leader != nil
	})
	if !leader.StepDownLeaders() {
		t.Fatalf("%s led the stream and handed over nothing", leader.Name())
	}
	eventually(ctx, t, "every group led elsewhere", func() bool {
		// A group whose followers were not current kept its leader (a loaded machine):
		// asked again, it moves.
		leader.StepDownLeaders()
		meta, st, co := leaders()
		return meta != "" && st != "" && co != "" && meta != leader.Name() && st != leader.Name() && co != leader.Name()
	})
	eventually(ctx, t, "the stream written", func() bool {
		pctx, cancel := poll()
		defer cancel()
		_, err := js.Publish(pctx, "steps.a", nil)
		return err == nil
	})

	alone, _ := startServer(t, Config{})
	if alone.StepDownLeaders() {
		t.Error("a server with no routes handed leadership over")
	}
}

// metaLeader is the JetStream meta leader's name, as the servers know it.
func metaLeader(nodes []*Server) string {
	for _, s := range nodes {
		if s.NATS().JetStreamIsLeader() {
			return s.Name()
		}
	}
	return ""
}
