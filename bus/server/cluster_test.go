package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/jstest"
)

// startCluster starts n nodes concurrently (each Start waits for a
// JetStream meta leader, which needs a quorum).
func startCluster(t *testing.T, n int) []*Server {
	t.Helper()
	return startClusterWith(t, n, nil)
}

// startClusterWith is startCluster with each node's Config changed by edit.
func startClusterWith(t *testing.T, n int, edit func(*Config)) []*Server {
	t.Helper()
	// A free port can be taken by another process (the tests of another package) before
	// a node listens on it: then the cluster starts again, on other ports.
	for attempt := 1; ; attempt++ {
		nodes, err := tryCluster(t, n, edit)
		if err == nil {
			for _, s := range nodes {
				t.Cleanup(s.Close)
			}
			return nodes
		}
		for _, s := range nodes {
			if s != nil {
				s.Close()
			}
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("starting the cluster again on other ports: %v", err)
	}
}

func tryCluster(t *testing.T, n int, edit func(*Config)) ([]*Server, error) {
	ctx := testContext(t)
	ports := jstest.FreePorts(t, n)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	nodes := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cfg := Config{
				Name:   fmt.Sprintf("n%d", i+1),
				Logger: slog.New(&logRecorder{}),
				Cluster: &ClusterConfig{
					Name:     "toolbus-test",
					Listen:   fmt.Sprintf("127.0.0.1:%d", ports[i]),
					Routes:   routes,
					Username: "route",
					Password: "route-secret",
				},
			}
			if edit != nil {
				edit(&cfg)
			}
			nodes[i], errs[i] = Start(ctx, cfg)
		})
	}
	wg.Wait()
	return nodes, errors.Join(errs...)
}

func eventually(ctx context.Context, t *testing.T, what string, ok func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		}
	}
}

func TestClusterOfThree(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := testContext(t)

	for _, s := range nodes {
		eventually(ctx, t, s.Name()+" routes to both others", func() bool { return s.NATS().NumRemotes() == 2 })
		if s.ClientURL() != "" {
			t.Errorf("%s: ClientURL() = %q without Config.Listen, want empty", s.Name(), s.ClientURL())
		}
	}

	// The meta leader places replicas only on peers it has current stats
	// from; right after the start a peer can still count as offline.
	eventually(ctx, t, "the meta leader sees three JetStream peers", func() bool {
		for _, s := range nodes {
			if len(s.NATS().JetStreamClusterPeers()) == 3 {
				return true
			}
		}
		return false
	})

	t.Run("replicated key-value", func(t *testing.T) {
		js1 := jstest.JetStream(t, nodes[0], "kv-n1")
		js3 := jstest.JetStream(t, nodes[2], "kv-n3")
		// Five replicas asked of three servers: capped to three. Each attempt has its
		// own deadline (bus.Retry): on a loaded machine one request went unanswered
		// for the test's whole minute.
		var kv1 jetstream.KeyValue
		err := bus.Retry(ctx, "create bucket cluster_todos", nil, func(ctx context.Context) error {
			var err error
			kv1, err = bus.KeyValue(ctx, js1, "cluster_todos", 5)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if r := jstest.StreamReplicas(ctx, t, js1, "KV_cluster_todos"); r != 3 {
			t.Errorf("replicas = %d, want 3", r)
		}
		if _, err := kv1.Put(ctx, "agent1.list", []byte("replicated")); err != nil {
			t.Fatal(err)
		}
		kv3, err := bus.KeyValue(ctx, js3, "cluster_todos", 3)
		if err != nil {
			t.Fatal(err)
		}
		// Reads may be served by a replica that has not applied the put yet.
		eventually(ctx, t, "value visible on n3", func() bool {
			e, err := kv3.Get(ctx, "agent1.list")
			return err == nil && string(e.Value()) == "replicated"
		})
	})

	t.Run("request across nodes through a queue group", func(t *testing.T) {
		subject, queue := bus.ToolSubject("fs", "read"), bus.CategoryQueue("fs")
		for _, s := range nodes[1:] {
			nc, err := s.Connect("fs@" + s.Name())
			if err != nil {
				t.Fatal(err)
			}
			name := s.Name()
			if _, err := nc.QueueSubscribe(subject, queue, func(m *nats.Msg) { _ = m.Respond([]byte(name)) }); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		caller, err := nodes[0].Connect("turn@n1")
		if err != nil {
			t.Fatal(err)
		}
		// Interest crosses routes asynchronously: until it arrives, n1 has
		// no responders.
		eventually(ctx, t, "responders visible on n1", func() bool {
			_, err := caller.RequestWithContext(ctx, subject, nil)
			return !errors.Is(err, nats.ErrNoResponders)
		})
		answered := map[string]int{}
		for range 20 {
			m, err := caller.RequestWithContext(ctx, subject, []byte("{}"))
			if err != nil {
				t.Fatal(err)
			}
			answered[string(m.Data)]++
		}
		for name := range answered {
			if name != "n2" && name != "n3" {
				t.Errorf("answered by %q, want n2 or n3", name)
			}
		}
		if answered["n2"]+answered["n3"] != 20 {
			t.Errorf("answers %v, want 20", answered)
		}
	})

	t.Run("routes require credentials", func(t *testing.T) {
		addr := nodes[0].NATS().ClusterAddr().String()
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if deadline, ok := ctx.Deadline(); ok {
			_ = conn.SetDeadline(deadline)
		}
		r := bufio.NewReader(conn)
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
			t.Fatalf("route greeting %q, %v", line, err)
		}
		connect := `CONNECT {"user":"route","pass":"wrong","verbose":false,"pedantic":false,"name":"intruder","cluster":"toolbus-test"}` + "\r\nPING\r\n"
		if _, err := conn.Write([]byte(connect)); err != nil {
			t.Fatal(err)
		}
		for {
			line, err := r.ReadString('\n')
			if strings.Contains(line, "Authorization Violation") {
				return
			}
			if err != nil {
				t.Fatalf("route with a wrong password not refused: last line %q, %v", line, err)
			}
		}
	})
}

// TestClusterNodeStartHonoursContext starts one node of a three-node
// cluster alone: it can never elect a meta leader, so Start must give up
// when ctx ends, and clean up.
func TestClusterNodeStartHonoursContext(t *testing.T) {
	t.Parallel()
	ports := jstest.FreePorts(t, 3)
	ctx, cancel := context.WithCancel(testContext(t))
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	done := make(chan error, 1)
	go func() {
		s, err := Start(ctx, Config{
			Name:    "alone",
			Logger:  slog.New(&logRecorder{}),
			Cluster: &ClusterConfig{Name: "toolbus-test", Listen: fmt.Sprintf("127.0.0.1:%d", ports[0]), Routes: routes},
		})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	// Once the route listener accepts, the server is up and Start is
	// waiting for it to be ready (a few milliseconds) or, for ever, for a
	// meta leader.
	routeAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	eventually(ctx, t, "route listener up", func() bool {
		c, err := net.Dial("tcp", routeAddr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Start: %v, want context.Canceled", err)
	}
}

// TestInterestFollowsSubscriptions: Interest is true exactly while someone, on this
// server or across a route, has a matching subscription, wildcards included.
func TestInterestFollowsSubscriptions(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 2)
	ctx := testContext(t)
	for _, s := range nodes {
		eventually(ctx, t, s.Name()+" routes to the other", func() bool { return s.NATS().NumRemotes() == 1 })
	}
	subject := bus.EventSubject("t1", "c1", bus.EventStarted)
	for _, s := range nodes {
		if s.Interest(subject) {
			t.Fatalf("%s: interest in %s before anyone subscribed", s.Name(), subject)
		}
	}
	nc, err := nodes[1].Connect("watcher")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(bus.TurnSubjects("t1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if !nodes[1].Interest(subject) {
		t.Errorf("%s: no interest in %s with a local subscriber to %s", nodes[1].Name(), subject, sub.Subject)
	}
	eventually(ctx, t, nodes[0].Name()+" learns of the subscription on "+nodes[1].Name(), func() bool { return nodes[0].Interest(subject) })
	if other := bus.EventSubject("t2", "c1", bus.EventStarted); nodes[0].Interest(other) || nodes[1].Interest(other) {
		t.Errorf("interest in %s, another turn's event", other)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, s := range nodes {
		eventually(ctx, t, s.Name()+" forgets the subscription", func() bool { return !s.Interest(subject) })
	}
}
