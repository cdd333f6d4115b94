package node

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/internal/jstest"
)

// A node of a cluster that closes moves its embedded server's clients from the network
// to another server before it stops its actors, and says so: a host connected there has
// its subscription on the other server while the node hands its turns back.
func TestCloseMovesClients(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	var addrs []string
	for _, p := range jstest.FreePorts(t, 4) {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", p))
	}
	routes := []string{"nats://" + addrs[0], "nats://" + addrs[1]}
	listen := addrs[2:]
	logs := []*bustest.Buffer{{}, {}}
	nodes := make([]*Node, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			log := slog.New(slog.NewTextHandler(logs[i], nil))
			nodes[i], errs[i] = Start(ctx, Config{
				Bus: server.Config{StoreDir: t.TempDir(), Name: fmt.Sprintf("m%d", i+1), Logger: log,
					Listen: listen[i], Users: []server.User{{Name: "host", Password: "pw"}},
					Cluster: &server.ClusterConfig{Name: "move", Listen: strings.TrimPrefix(routes[i], "nats://"), Routes: routes}},
				Node: NodeConfig{Name: fmt.Sprintf("m%d", i+1), Logger: log, Categories: []string{}},
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nodes[i].Close)
	}
	host, err := nats.Connect("nats://"+listen[0], nats.UserInfo("host", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if _, err := host.Subscribe("tool.noop", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if len(host.DiscoveredServers()) == 0 {
			return fmt.Errorf("the client has not learnt of the other server")
		}
		return nil
	})

	nodes[0].Close()
	if !strings.Contains(logs[0].String(), `msg="moved the embedded server's clients to the cluster's other servers before stopping" clients=1`) {
		t.Errorf("the closed node does not say it moved its client:\n%s", logs[0].String())
	}
	caller, err := nodes[1].Connect("caller")
	if err != nil {
		t.Fatal(err)
	}
	defer caller.Close()
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		_, err := caller.Request("tool.noop", nil, time.Second)
		return err
	})
	if got := host.ConnectedServerName(); got != "m2" {
		t.Errorf("the client is on %q, want m2", got)
	}
}
