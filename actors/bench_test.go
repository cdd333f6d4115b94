package actors

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
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
		return &gateway.Response{Items: []toolbus.Item{{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: "done"}}}, nil
	}
	return &gateway.Response{Items: []toolbus.Item{{Kind: toolbus.KindFunctionCall,
		CallID: fmt.Sprintf("c%d", req.Step), Name: m.tool, Arguments: `{"path":"notes.txt","line":3}`}}}, nil
}

type benchArgs struct {
	Path string `json:"path"`
	Line int    `json:"line,omitempty"`
}

// benchNode is a node on a real embedded server (as `toolbus node` runs one: what nobody
// watches is not sent) hosting one tool that does nothing.
func benchNode(b *testing.B) (*server.Server, *Node, *toolbus.Set) {
	ctx := context.Background()
	srv, err := server.Start(ctx, server.Config{StoreDir: b.TempDir(), Logger: DiscardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	n, err := StartNode(ctx, NodeConfig{Name: "bench", Logger: DiscardLogger(), Interest: srv.Interest,
		Connect: func(name string) (*nats.Conn, error) { return srv.Connect(name) }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(n.Close)
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
	return srv, n, set
}

// runSteps runs a turn of steps steps of one no-op call each.
func runSteps(b *testing.B, n *Node, set *toolbus.Set, steps int) {
	res, err := n.Run(context.Background(), TurnConfig{Model: &callsModel{tool: "noop", steps: steps}, Kit: toolsets.NewKit(set),
		Spec: bus.TurnSpec{Input: "bench", Limits: bus.TurnLimits{MaxSteps: steps + 1}}, CallTimeout: time.Minute})
	if err != nil || res.State != bus.TurnCompleted {
		b.Errorf("turn: %v %s %s", err, res.State, res.ErrorText())
	}
}

// BenchmarkTurnStep is one step of a turn that calls one tool that does nothing, through
// a real embedded server and a host of the same node: what the runtime adds to a call.
// Allocations (-benchmem) count the server's too; they are steadier than time on a
// shared machine, and so is the processor time a step costs (cpu-ns/op, the process's).
func BenchmarkTurnStep(b *testing.B) {
	_, n, set := benchNode(b)
	const steps = 100          // a turn's transcript stays realistic
	runSteps(b, n, set, steps) // warm up
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i += steps {
		runSteps(b, n, set, steps)
	}
	b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkConcurrentTurns is 64 turns at once, each calling the no-op tool once a step,
// against its baseline in the same run: 64 goroutines making core NATS requests of an
// echo responder on the same server. Compare calls/s, and the processor time a call
// costs (cpu-µs/call, the whole process's: the server's, the hosts' and the turns').
func BenchmarkConcurrentTurns(b *testing.B) {
	const turns, steps = 64, 50
	srv, n, set := benchNode(b)
	b.Run("raw", func(b *testing.B) {
		resp, err := srv.Connect("bench-echo")
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Close()
		if _, err := resp.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
			b.Fatal(err)
		}
		// The server has the subscription once it answers the flush: a request before
		// that finds no responders (seen in CI).
		if err := resp.Flush(); err != nil {
			b.Fatal(err)
		}
		req, err := srv.Connect("bench-requester")
		if err != nil {
			b.Fatal(err)
		}
		defer req.Close()
		start, cpu := time.Now(), processCPU()
		for b.Loop() {
			var wg sync.WaitGroup
			for range turns {
				wg.Go(func() {
					for range steps {
						if _, err := req.Request("bench.echo", []byte(`{}`), 5*time.Second); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		}
		b.ReportMetric(float64(b.N*turns*steps)/time.Since(start).Seconds(), "calls/s")
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N*turns*steps), "cpu-µs/call")
	})
	b.Run("turns", func(b *testing.B) {
		start, cpu := time.Now(), processCPU()
		for b.Loop() {
			var wg sync.WaitGroup
			for range turns {
				wg.Go(func() { runSteps(b, n, set, steps) })
			}
			wg.Wait()
		}
		b.ReportMetric(float64(b.N*turns*steps)/time.Since(start).Seconds(), "calls/s")
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N*turns*steps), "cpu-µs/call")
	})
}

// processCPU is the processor time the process has used (user and system): per call, it
// tells a change in what a call costs from a change in how busy a shared machine is,
// which calls/s alone does not.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
