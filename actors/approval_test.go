package actors

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets"
)

type valueArgs struct {
	V string `json:"v"`
}

// approvalTurn runs a turn whose kit holds destructive calls, with operator answering
// each approval request it sees.
func approvalTurn(t *testing.T, h *harness, tools []*toolbus.Tool, operator func(nc *nats.Conn, req bus.ApprovalRequest), steps ...gateway.ScriptStep) TurnResult {
	t.Helper()
	nc, err := h.srv.Connect("operator")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The operator's goroutines end before the subtest does: they report through t.
	var operators sync.WaitGroup
	defer operators.Wait()
	sub, err := nc.Subscribe(bus.AllApprovals, func(m *nats.Msg) {
		var req bus.ApprovalRequest
		if json.Unmarshal(m.Data, &req) == nil {
			operators.Go(func() { operator(nc, req) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	kit := kitOf(t, tools...)
	kit.Approvals = toolsets.ApproveDestructive
	model, err := gateway.NewScripted(gateway.Script{Responses: steps})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := h.node.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Agent: "ann", Input: "go"}, Model: model, Kit: kit})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// decide sends an approval decision and returns the turn's reply.
func decide(t *testing.T, nc *nats.Conn, turn, call string, a bus.Approval) bus.ApprovalReply {
	b, _ := json.Marshal(a)
	m, err := nc.Request(bus.ApproveSubject(turn, call), b, 5*time.Second)
	if err != nil {
		t.Error(err)
		return bus.ApprovalReply{}
	}
	var r bus.ApprovalReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Error(err)
	}
	return r
}

func TestApprovals(t *testing.T) {
	t.Parallel()
	var reads, writes atomic.Int32
	var written atomic.Value
	read := toolbus.MustDefine(toolbus.Def[valueArgs]{
		Spec: toolbus.Spec{Name: "read", Category: "ap", ReadOnly: true},
		Execute: func(_ context.Context, _ toolbus.Call, a valueArgs) (toolbus.Result, error) {
			reads.Add(1)
			return toolbus.TextResult("read " + a.V), nil
		},
	})
	// writeTool is the destructive tool, held for an approval until its timeout.
	writeTool := func(name string, timeout time.Duration) *toolbus.Tool {
		return toolbus.MustDefine(toolbus.Def[valueArgs]{
			Spec:             toolbus.Spec{Name: name, Category: "ap", Destructive: true, Timeout: timeout},
			DescribeActivity: func(a valueArgs) string { return "Overwriting " + a.V },
			Execute: func(_ context.Context, _ toolbus.Call, a valueArgs) (toolbus.Result, error) {
				writes.Add(1)
				written.Store(a.V)
				return toolbus.TextResult("wrote " + a.V), nil
			},
		})
	}
	// Long enough for a decision on a loaded machine.
	write := writeTool("write", 5*time.Second)
	// For the subtest without a decision, which waits its timeout out.
	writeSoon := writeTool("write_soon", 500*time.Millisecond)
	h := newHarness(t, read, write, writeSoon)
	tools := []*toolbus.Tool{read, write}
	batch := gateway.ScriptStep{Calls: []gateway.ScriptCall{
		{ID: "r", Name: "read", Arguments: `{"v":"x"}`},
		{ID: "w", Name: "write", Arguments: `{"v": "a",}`},
	}}
	final := gateway.ScriptStep{Text: "done"}

	t.Run("granted for the exact arguments", func(t *testing.T) {
		res := approvalTurn(t, h, tools, func(nc *nats.Conn, req bus.ApprovalRequest) {
			// The host's label comes with the request, for the person deciding.
			if string(req.Args) != `{"v":"a"}` || !req.Destructive || req.Tool != "write" || req.Agent != "ann" || req.Label != "Overwriting a" {
				t.Errorf("request %+v", req)
			}
			// A decision for other arguments is turned down, and the call stays held.
			r := decide(t, nc, req.Turn, req.Call, bus.Approval{Decision: bus.ApprovalGrant, ArgsHash: strings.Repeat("0", 64)})
			if !strings.Contains(r.Error, "for other arguments") {
				t.Errorf("an approval of other arguments: %+v", r)
			}
			// Asking shows the request; approving its hash lets the call run.
			r = decide(t, nc, req.Turn, req.Call, bus.Approval{})
			if r.Request == nil || r.Request.ArgsHash != req.ArgsHash || r.Request.Label != "Overwriting a" {
				t.Errorf("asked: %+v", r)
				return
			}
			if r := decide(t, nc, req.Turn, req.Call, bus.Approval{Decision: bus.ApprovalGrant, ArgsHash: r.Request.ArgsHash, By: "ops"}); r.Error != "" {
				t.Errorf("approve: %s", r.Error)
			}
		}, batch, final)
		if got := outcomes(res); strings.Join(got, " ") != "read:ok write:ok" || written.Load() != "a" {
			t.Errorf("outcomes %v, written %v", got, written.Load())
		}
	})

	t.Run("refused", func(t *testing.T) {
		before := writes.Load()
		res := approvalTurn(t, h, tools, func(nc *nats.Conn, req bus.ApprovalRequest) {
			decide(t, nc, req.Turn, req.Call, bus.Approval{Decision: bus.ApprovalRefuse, ArgsHash: req.ArgsHash, By: "ops", Reason: "not today"})
		}, batch, final)
		if got := outcomes(res); strings.Join(got, " ") != "read:ok write:refused" || writes.Load() != before {
			t.Errorf("outcomes %v, writes %d→%d", got, before, writes.Load())
		}
		if got := outputText(outputs(res)["w"]); got != "call refused by ops before it ran: not today" {
			t.Errorf("the model reads %q", got)
		}
	})

	t.Run("no decision before the deadline", func(t *testing.T) {
		before := writes.Load()
		soon := gateway.ScriptStep{Calls: []gateway.ScriptCall{
			{ID: "r", Name: "read", Arguments: `{"v":"x"}`},
			{ID: "w", Name: "write_soon", Arguments: `{"v": "a",}`},
		}}
		res := approvalTurn(t, h, []*toolbus.Tool{read, writeSoon}, func(*nats.Conn, bus.ApprovalRequest) {}, soon, final)
		if got := outcomes(res); strings.Join(got, " ") != "read:ok write_soon:timeout" || writes.Load() != before {
			t.Errorf("outcomes %v, writes %d→%d", got, before, writes.Load())
		}
		if got := outputText(outputs(res)["w"]); !strings.Contains(got, "waited for an approval that did not come before its deadline; it did not run") {
			t.Errorf("the model reads %q", got)
		}
	})
}
