package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/jstest"
)

// createR3 creates a stream asking for three replicas as the nodes do, retrying
// while JetStream is not ready, and returns its replicas.
func createR3(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) int {
	t.Helper()
	cfg := jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage, Replicas: 3}
	var st jetstream.Stream
	err := bus.Retry(ctx, "create stream "+name, nil, func(ctx context.Context) error {
		var err error
		st, err = bus.Stream(ctx, js, cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config.Replicas
}

// TestReplicasAtClusterStart creates an R3 stream on a fresh three-node cluster the
// moment the first node's Start returns, as a node does. A fresh meta group elects its
// first leader once every server its routes name has voted, but the leader then adds
// the others to the group one by one: until it has, it refuses R3 with a bare "no
// suitable peers for placement", which was taken for a cluster of two (the stream made
// R2 in 2 starts of 30). The routes name three servers: the refusal is waited out.
func TestReplicasAtClusterStart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	began := time.Now()
	nodes := make(chan *Server, 3)
	for _, cfg := range clusterConfigs(t, 3) {
		go func() {
			s, err := Start(ctx, cfg)
			if err != nil {
				t.Error(err)
			} else {
				t.Cleanup(s.Close)
			}
			nodes <- s
		}()
	}
	defer func() {
		for range 2 {
			<-nodes // Start returned: no t.Cleanup after the test ends
		}
	}()
	first := <-nodes
	if first == nil {
		t.FailNow()
	}
	ready := time.Since(began)
	js := jstest.JetStream(t, first, "replicas-at-start")
	if n := clusterServers(js); n != 3 {
		t.Errorf("clusterServers = %d, want the 3 the routes name", n)
	}
	r := createR3(ctx, t, js, "AT_START")
	t.Logf("%s ready in %v, R3 stream placed %v later", first.Name(), ready.Round(time.Millisecond), (time.Since(began) - ready).Round(time.Millisecond))
	if r != 3 {
		t.Errorf("replicas = %d, want 3", r)
	}
}

// TestReplicasCappedOnTwoNodes: a cluster that is too small for good (its routes
// name two servers) caps R3 to R2 at once, even at its start.
func TestReplicasCappedOnTwoNodes(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 2)
	ctx := testContext(t)
	js := jstest.JetStream(t, nodes[1], "two-nodes")
	if r := createR3(ctx, t, js, "TWO_NODES"); r != 2 {
		t.Errorf("replicas = %d, want 2", r)
	}
	// Retried as createR3 retries: a placement refused while a peer looks offline (the
	// meta leader's view of a cluster just formed) is not capped away, and a node's own
	// creations wait it out the same way (bus.Retry).
	var kv jetstream.KeyValue
	err := bus.Retry(ctx, "create bucket two_nodes", nil, func(ctx context.Context) error {
		var err error
		kv, err = bus.KeyValue(ctx, js, "two_nodes", 3)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := jstest.StreamReplicas(ctx, t, js, "KV_"+kv.Bucket()); r != 2 {
		t.Errorf("bucket replicas = %d, want 2", r)
	}
}

// TestClusterServersUnknown: a server that is not clustered, and a connection that
// is not in-process, name no cluster size.
func TestClusterServersUnknown(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, Config{})
	if n := clusterServers(jstest.JetStream(t, s, "single")); n != 0 {
		t.Errorf("clusterServers of a single server = %d, want 0", n)
	}
	if n := clusterServers(nil); n != 0 {
		t.Errorf("clusterServers(nil) = %d, want 0", n)
	}
}

// clusterConfigs are the configurations of n nodes routed to each other on loopback,
// every route list naming all n, as startCluster makes them.
func clusterConfigs(t *testing.T, n int) []Config {
	t.Helper()
	ports := jstest.FreePorts(t, n)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	cfgs := make([]Config, n)
	for i := range cfgs {
		cfgs[i] = Config{
			Name:   fmt.Sprintf("n%d", i+1),
			Logger: slog.New(&logRecorder{}),
			Cluster: &ClusterConfig{
				Name: "toolbus-test", Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Routes: routes,
				Username: "route", Password: "route-secret",
			},
		}
	}
	return cfgs
}

// startNodes starts the nodes of cfgs concurrently, closed when the test ends.
func startNodes(ctx context.Context, t *testing.T, cfgs []Config) []*Server {
	t.Helper()
	nodes := make([]*Server, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() { nodes[i], errs[i] = Start(ctx, cfgs[i]) })
	}
	wg.Wait()
	for _, s := range nodes {
		if s != nil {
			t.Cleanup(s.Close)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return nodes
}
