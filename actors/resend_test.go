package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/gateway"
)

// TestHostReplyAfterReconnect runs a call on a host that is a client of the bus under the
// tool role (it may answer only the requests delivered to its connection) through a TCP
// proxy the test controls, and re-establishes the host's connection around the reply:
//   - during: the connection is cut while the tool runs; the reply goes out on the new
//     connection, which the server refuses (the grant to answer was the old one's);
//   - dead: the connection stops carrying anything while the tool answers (a server
//     paused, a network gone), so the reply is lost without an error; then it is cut.
//
// Either way the turn gets the tool's own output at once, not a timeout at the call's
// deadline (a minute here), and the tool ran once: the host kept the reply, said it may
// be lost, and sent it again when the turn asked.
func TestHostReplyAfterReconnect(t *testing.T) {
	t.Parallel()
	for _, dead := range []bool{false, true} {
		name := "during"
		if dead {
			name = "dead"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			replyAfterReconnect(t, dead)
		})
	}
}

func replyAfterReconnect(t *testing.T, dead bool) {
	ctx := bustest.Context(t)
	perms, err := server.RolePermissions(server.RoleTool, "tools", []string{"slow"})
	if err != nil {
		t.Fatal(err)
	}
	srv := bustest.Server(t, func(c *server.Config) {
		c.Listen = "127.0.0.1:-1"
		c.Users = []server.User{{Name: "tools", Password: "tools-pw", Role: server.RoleTool, Permissions: perms}}
	})
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})
	turns, err := StartNode(ctx, NodeConfig{
		Name: "n1", Connect: func(c string) (*nats.Conn, error) { return srv.Connect(c) },
		Logger: logs.logger(), AbortGrace: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(turns.Close)

	p := startProxy(t, srv.ClientURL())
	tools, err := StartNode(ctx, NodeConfig{
		Name: "w1", Logger: logs.logger(),
		Connect: func(c string) (*nats.Conn, error) {
			return bus.Dial(ctx, p.url, c, bus.Credentials{User: "tools", Password: "tools-pw"})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tools.Close)

	started, release := make(chan struct{}, 4), make(chan struct{})
	var runs sync.WaitGroup
	slow := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "wait", Category: "slow", Mode: toolbus.Sequential, Destructive: true, Timeout: time.Minute},
		Execute: func(ctx context.Context, c toolbus.Call, _ struct{}) (toolbus.Result, error) {
			runs.Add(1)
			defer runs.Done()
			started <- struct{}{}
			select {
			case <-release:
				return toolbus.TextResult("real-output"), nil
			case <-ctx.Done():
				return toolbus.Result{}, ctx.Err()
			}
		},
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	if err := tools.Host(ctx, "slow", []*toolbus.Tool{slow}); err != nil {
		t.Fatal(err)
	}

	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{call("wait", `{}`)}}, {Text: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan TurnResult, 1)
	go func() {
		res, err := turns.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Agent: "tester", Input: "go"}, Model: model, Kit: kitOf(t, slow)})
		if err != nil {
			res = TurnResult{State: bus.TurnFailed, Err: err}
		}
		done <- res
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the call never started")
	}
	if dead {
		// Nothing the host writes reaches the server from here: its reply is lost.
		p.blackHole()
		close(release)
		bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if !p.swallowed("real-output") {
				return errors.New("the host has not written its reply yet")
			}
			return nil
		})
		p.cut()
	} else {
		p.cut()
		bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if n := p.connections(); n < 2 {
				return errors.New("the host has not connected again")
			}
			return nil
		})
		close(release)
	}

	var res TurnResult
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("the turn did not end: it waits for the reply the server refused")
	}
	if res.State != bus.TurnCompleted || len(res.Calls) != 1 {
		t.Fatalf("turn %s, %d calls, err %q", res.State, len(res.Calls), res.ErrorText())
	}
	if c := res.Calls[0]; c.Outcome != bus.OutcomeOK {
		t.Fatalf("the call: %s %s", c.Outcome, c.Error)
	}
	if got := outputText(outputs(res)[res.Calls[0].Call]); !strings.Contains(got, "real-output") {
		t.Fatalf("the call's output: %q", got)
	}
	runs.Wait()
	if len(started) != 0 {
		t.Errorf("the tool ran %d more times", len(started))
	}
	// The host logs its resend after the reply went out, which the turn may overtake.
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, want := range []string{replyResentMessage, "sent a reply again"} {
			if !strings.Contains(logs.String(), want) {
				return fmt.Errorf("no %q in the logs", want)
			}
		}
		return nil
	})
}
