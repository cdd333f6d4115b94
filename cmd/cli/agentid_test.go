package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/toolsets/todo"
)

// TestOneAgentRule checks that every place an agent id enters accepts and
// refuses the same ids: the rule itself, the CLI's -agent flag, a category
// host's Toolbus-Agent header, the todo store and a node's StartTurn (whose
// turn then calls a tool as that agent).
func TestOneAgentRule(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	nc, err := rb.srv.Connect("agent-rule")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := bus.KeyValue(ctx, js, bus.BucketTodos, 1)
	if err != nil {
		t.Fatal(err)
	}

	callers := []struct {
		name  string
		check func(t *testing.T, id string) error
	}{
		{"bus.CheckAgent", func(_ *testing.T, id string) error { return bus.CheckAgent(id) }},
		{"toolbus tools -agent", func(t *testing.T, id string) error {
			code, _, stderr := cli(ctx, "tools", "-agent", id)
			if code != exitOK && code != exitUsage {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if code == exitUsage {
				return errors.New(stderr)
			}
			return nil
		}},
		{"host", func(t *testing.T, id string) error {
			m := nats.NewMsg(bus.ToolSubject(todo.Category, "todo_read"))
			m.Header.Set(bus.HeaderAgent, id)
			reply := requestTool(ctx, t, nc, m)
			switch {
			case reply.Outcome == bus.OutcomeOK:
				return nil
			case reply.Outcome == bus.OutcomeInvalid && strings.HasPrefix(reply.Error, "bad Toolbus-Agent header "):
				return errors.New(reply.Error)
			}
			t.Fatalf("reply %+v", reply)
			return nil
		}},
		{"todo store", func(t *testing.T, id string) error {
			_, _, err := todo.Load(ctx, kv, id)
			if err != nil && !errors.Is(err, bus.ErrBadAgent) {
				t.Fatal(err)
			}
			return err
		}},
		{"StartTurn", func(t *testing.T, id string) error {
			return startTurnAs(ctx, t, rb, nc, id)
		}},
	}

	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"alice", true},
		{"agent-1", true},
		{"A_b-9", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"team.agent_2", false}, // the todo store took dots, slashes and '=' before
		{"a/b=c", false},
		{"../a1", false},
		{"a b", false},
		{"agént", false},
		{"a*", false},
		{"a>", false},
	} {
		for _, c := range callers {
			t.Run(fmt.Sprintf("%s/%.12s", c.name, tc.id), func(t *testing.T) {
				err := c.check(t, tc.id)
				if (err == nil) != tc.ok {
					t.Errorf("agent %q: %v; want accepted=%v", tc.id, err, tc.ok)
				}
			})
		}
	}
}

func requestTool(ctx context.Context, t *testing.T, nc *nats.Conn, m *nats.Msg) bus.ToolReply {
	t.Helper()
	res, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	var reply bus.ToolReply
	if err := json.Unmarshal(res.Data, &reply); err != nil {
		t.Fatalf("reply %q: %v", res.Data, err)
	}
	return reply
}

// startTurnAs starts a turn of agent id that reads its todo list; when the
// node takes it, it waits for the turn to end and fails the test unless the
// call went through.
func startTurnAs(ctx context.Context, t *testing.T, rb *remoteBus, nc *nats.Conn, id string) error {
	t.Helper()
	turn := bus.NewID()
	done, err := nc.SubscribeSync(bus.TurnStatusSubject(turn, bus.StatusDone))
	if err != nil {
		t.Fatal(err)
	}
	defer done.Unsubscribe()
	if err := nc.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	script := `{"responses":[{"calls":[{"id":"r","name":"todo_read","arguments":"{}"}]},{"text":"done"}]}`
	if _, err := rb.node.Start(ctx, bus.TurnSpec{ID: turn, Agent: id, Input: "read", Script: json.RawMessage(script)}); err != nil {
		if !errors.Is(err, bus.ErrBadAgent) {
			t.Fatal(err)
		}
		return err
	}
	m, err := done.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var st bus.TurnStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	if st.State != bus.TurnCompleted || len(st.Calls) != 1 || st.Calls[0].Outcome != bus.OutcomeOK {
		t.Errorf("turn of %q ended %s: %+v", id, st.State, st.Calls)
	}
	return nil
}
