package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

// TestHostRestartsAfterItsConnectionCloses closes a host's connection from outside: the
// host fails to the node, which logs it and restarts it on a new connection, and calls
// reach it again.
func TestHostRestartsAfterItsConnectionCloses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := bus.Start(ctx, bus.Config{StoreDir: t.TempDir(), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var logs logBuffer
	n, err := StartNode(ctx, NodeConfig{
		Name:    "n1",
		Connect: func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Logger:  logs.logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	echo := toolbus.MustDefine(toolbus.Def[idArgs]{
		Spec: toolbus.Spec{Name: "echo", Category: "sup"},
		Execute: func(_ context.Context, _ toolbus.Call, a idArgs) (toolbus.Result, error) {
			return toolbus.TextResult("echo " + a.ID), nil
		},
	})
	if err := n.Host(ctx, "sup", []*toolbus.Tool{echo}); err != nil {
		t.Fatal(err)
	}
	client, err := srv.Connect("client")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	call := func() error {
		m, err := client.Request(bus.ToolSubject("sup", "echo"), []byte(`{"id":"x"}`), time.Second)
		if err != nil {
			return err
		}
		var r bus.ToolReply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return err
		}
		if r.Outcome != bus.OutcomeOK {
			return fmt.Errorf("outcome %s: %s", r.Outcome, r.Error)
		}
		return nil
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}

	hostConn := n.connByName(t, "toolbus-host-sup@n1")
	hostConn.Close()
	bustest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(logs.String(), "category host restarted") {
			return errors.New("the host was not restarted; log:\n" + logs.String())
		}
		return call()
	})
	for _, want := range []string{"category host failed", "its connection closed", "restarting it"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	// The closed connection also stopped the micro service: that second report of the
	// same failure must not fail the new incarnation.
	for range 5 {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "restarting it"); n != 1 {
		t.Errorf("the host was restarted %d times, want 1:\n%s", n, logs.String())
	}
}

// connByName finds one of the node's connections by its name.
func (n *Node) connByName(t *testing.T, name string) *nats.Conn {
	t.Helper()
	n.connMu.Lock()
	defer n.connMu.Unlock()
	for _, nc := range n.conns {
		if nc.Opts.Name == name && !nc.IsClosed() {
			return nc
		}
	}
	t.Fatalf("the node has no open connection named %s", name)
	return nil
}
