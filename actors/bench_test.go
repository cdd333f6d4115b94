package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets"
)

// callsModel answers each step with one call of a tool, for steps steps, then with text.
type callsModel struct {
	tool  string
	steps int
}

func (m *callsModel) Respond(_ context.Context, req *gateway.Request) (*gateway.Response, error) {
	if req.Step >= m.steps {
		return &gateway.Response{Items: []gateway.Item{{Kind: gateway.KindMessage, Role: gateway.RoleAssistant, Text: "done"}}}, nil
	}
	return &gateway.Response{Items: []gateway.Item{{Kind: gateway.KindFunctionCall,
		CallID: fmt.Sprintf("c%d", req.Step), Name: m.tool, Arguments: `{"path":"notes.txt","line":3}`}}}, nil
}

type benchArgs struct {
	Path string `json:"path"`
	Line int    `json:"line,omitempty"`
}

// BenchmarkTurnStep is one step of a turn that calls one tool that does nothing, through
// a real embedded server and a host of the same node: what the runtime adds to a call.
// Allocations (-benchmem) count the server's too; they are steadier than time on a
// shared machine.
func BenchmarkTurnStep(b *testing.B) {
	ctx := context.Background()
	srv, err := bus.Start(ctx, bus.Config{StoreDir: b.TempDir(), Logger: DiscardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	n, err := StartNode(ctx, NodeConfig{Name: "bench", Logger: DiscardLogger(),
		Connect: func(name string) (*nats.Conn, error) { return srv.Connect(name) }})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	noop := toolbus.MustDefine(toolbus.Def[benchArgs]{
		Spec: toolbus.Spec{Name: "noop", Category: "bench", ReadOnly: true},
		Execute: func(context.Context, toolbus.Call, benchArgs) (toolbus.Result, error) {
			return toolbus.TextResult("ok"), nil
		},
	})
	if err := n.Host(ctx, "bench", []*toolbus.Tool{noop}); err != nil {
		b.Fatal(err)
	}
	set, err := toolbus.NewSet(&noop.Spec)
	if err != nil {
		b.Fatal(err)
	}
	const steps = 100 // a turn's transcript stays realistic
	run := func() {
		res, err := n.Run(ctx, TurnConfig{Model: &callsModel{tool: "noop", steps: steps}, Kit: toolsets.NewKit(set),
			Spec: bus.TurnSpec{Input: "bench", Limits: bus.TurnLimits{MaxSteps: steps + 1}}, CallTimeout: time.Minute})
		if err != nil || res.State != bus.TurnCompleted {
			b.Fatalf("turn: %v %s %s", err, res.State, res.Error)
		}
	}
	run() // warm up
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += steps {
		run()
	}
}
