package actors

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
)

// TestRequestsAvoidSilentHost: a host of a category whose network goes silent (cut
// without a word: nothing it sends arrives, nothing sent to it either, no connection
// closes) gives its connection up and connects again; the server, with its default
// client liveness (server.DefaultClientPingInterval), closes the old connection, and
// with it that member of the category's queue group, within about 15 s. Until then it
// hands the dead connection some of the category's requests, which are lost: with
// nats-server's own default (2 minutes) that went on for minutes, each lost request's
// turn waiting out its call's deadline. Here every request is answered again soon
// after, by the other host or by the first on its new connection.
func TestRequestsAvoidSilentHost(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	perms, err := server.RolePermissions(server.RoleTool, "tools", []string{"echo"})
	if err != nil {
		t.Fatal(err)
	}
	srv := bustest.Server(t, func(c *server.Config) {
		c.Listen = "127.0.0.1:-1"
		c.Users = []server.User{{Name: "tools", Password: "tools-pw", Role: server.RoleTool, Permissions: perms}}
	})
	say := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "say", Category: "echo", ReadOnly: true},
		Execute: func(context.Context, toolbus.Call, struct{}) (toolbus.Result, error) {
			return toolbus.TextResult("said"), nil
		},
	})
	p := startProxy(t, srv.ClientURL())
	far, err := StartNode(ctx, NodeConfig{Name: "far", Logger: DiscardLogger(),
		Connect: func(c string) (*nats.Conn, error) {
			return bus.Dial(ctx, p.url, c, bus.Credentials{User: "tools", Password: "tools-pw"})
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(far.Close)
	near, err := StartNode(ctx, NodeConfig{Name: "near", Logger: DiscardLogger(),
		Connect: func(c string) (*nats.Conn, error) { return srv.Connect(c) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(near.Close)
	for _, n := range []*Node{far, near} {
		if err := n.Host(ctx, "echo", []*toolbus.Tool{say}); err != nil {
			t.Fatal(err)
		}
	}
	nc, err := srv.Connect("caller")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subject := bus.ToolSubject("echo", "say")
	// answered makes n requests in a row; it fails at the first one not answered within
	// patience (a loaded machine's -race run took over 300 ms for one).
	answered := func(n int, patience time.Duration) error {
		for i := range n {
			m, err := nc.Request(subject, []byte(`{}`), patience)
			if err != nil {
				return fmt.Errorf("request %d of %d: %w", i+1, n, err)
			}
			if !strings.Contains(string(m.Data), "said") {
				return fmt.Errorf("reply %s", m.Data)
			}
		}
		return nil
	}
	bustest.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error { return answered(10, 2*time.Second) })

	p.partition()
	// Lost to the silent connection while the server still counts it in the group.
	bustest.CheckFor(t, 10*time.Second, 0, func() error {
		if answered(20, 2*time.Second) == nil {
			return fmt.Errorf("every request answered: none reached the silent connection yet")
		}
		return nil
	})
	// The server closes it within about 15 s (the far host has connected again since).
	start := time.Now()
	bustest.CheckFor(t, 45*time.Second, 100*time.Millisecond, func() error { return answered(30, 2*time.Second) })
	t.Logf("requests answered again %s after the first lost one", time.Since(start).Round(time.Second))
}
