package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
)

// TestUnhostThenHostAnew: Unhost stops a category's host (its calls find no host, its
// catalogs hear it go) and closes its connection; Host then serves the category anew
// with other tools. Unhosting a category the node does not host is no error.
func TestUnhostThenHostAnew(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{StoreDir: t.TempDir(), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	n, err := StartNode(ctx, NodeConfig{
		Name:    "n1",
		Connect: func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Logger:  DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	tool := func(name string) *toolbus.Tool {
		return toolbus.MustDefine(toolbus.Def[idArgs]{
			Spec: toolbus.Spec{Name: name, Category: "shifty"},
			Execute: func(_ context.Context, _ toolbus.Call, a idArgs) (toolbus.Result, error) {
				return toolbus.TextResult(name + " " + a.ID), nil
			},
		})
	}
	client, err := srv.Connect("client")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	changes, err := client.SubscribeSync(bus.CatalogChanged)
	if err != nil {
		t.Fatal(err)
	}
	call := func(name string) error {
		m, err := client.Request(bus.ToolSubject("shifty", name), []byte(`{"id":"x"}`), 5*time.Second)
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
	if err := n.Host(ctx, "shifty", []*toolbus.Tool{tool("first")}); err != nil {
		t.Fatal(err)
	}
	if err := call("first"); err != nil {
		t.Fatal(err)
	}
	old := n.connByName(t, "toolbus-host-shifty@n1")

	if err := n.Unhost(ctx, "shifty"); err != nil {
		t.Fatal(err)
	}
	if err := call("first"); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("a call after Unhost: %v", err)
	}
	if !old.IsClosed() {
		t.Error("the host's connection is still open")
	}
	down := false
	for !down {
		m, err := changes.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no announcement that the host stopped: %v", err)
		}
		var c bus.CatalogChange
		if err := json.Unmarshal(m.Data, &c); err != nil {
			t.Fatal(err)
		}
		down = c.Category == "shifty" && c.State == bus.CatalogDown
	}

	if err := n.Host(ctx, "shifty", []*toolbus.Tool{tool("second")}); err != nil {
		t.Fatalf("host anew: %v", err)
	}
	if err := call("second"); err != nil {
		t.Error(err)
	}
	if err := n.Unhost(ctx, "nothing-here"); err != nil {
		t.Errorf("unhost a category not hosted: %v", err)
	}
}
