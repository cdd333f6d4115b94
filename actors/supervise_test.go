package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/gateway"
)

// TestHostRestartsAfterItsConnectionCloses closes a host's connection from outside: the
// host fails to the node, which logs it and restarts it on a new connection, and calls
// reach it again.
func TestHostRestartsAfterItsConnectionCloses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{StoreDir: t.TempDir(), Logger: DiscardLogger()})
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

// TestTurnPanicFails: a turn whose handler panics (a fault of toolbus's own) ends failed,
// with the panic in its error and an honest outcome for the call it had in flight; its
// caller is not left waiting for an end that never comes.
func TestTurnPanicFails(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	block := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "block", Category: "test", ReadOnly: true, Timeout: time.Minute},
		Execute: func(ctx context.Context, _ toolbus.Call, _ struct{}) (toolbus.Result, error) {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return toolbus.TextResult("released"), nil
		},
	})
	h := newHarness(t, block)
	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{{ID: "c1", Name: "block", Arguments: "{}"}}},
		{Text: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan TurnResult, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := h.node.Spawn(ctx, TurnConfig{
		Spec: bus.TurnSpec{Agent: "tester", Input: "go"}, Model: model, Kit: kitOf(t, block),
		Done: func(r TurnResult) { done <- r },
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the call did not start")
	}
	// A handler of the turn's mailbox that panics, as a bug would.
	pid := actor.NewPID(h.node.pid.Address, h.node.pid.Id+"/turn-"+id)
	h.node.sys.Root.Send(pid, &onActor{f: func() { panic("boom") }})
	var res TurnResult
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("a turn that panicked never ended")
	}
	if res.State != bus.TurnFailed || !errors.Is(res.Err, ErrRuntime) || !strings.Contains(res.ErrorText(), "internal error: boom") {
		t.Errorf("turn ended %s: %v; want failed with the panic", res.State, res.Err)
	}
	if len(res.Calls) != 1 || res.Calls[0].Outcome != bus.OutcomeAbandoned {
		t.Errorf("calls %+v; want c1 abandoned", res.Calls)
	}
}
