package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/telemetry"
)

// suite holds the embedded server and node the suite runs against, and the bench
// category's three tools that node hosts.
type suite struct {
	cfg      Config
	progress func(string)
	node     *node.Node
	noop     *toolbus.Tool
	wait     *toolbus.Tool
	block    *toolbus.Tool
	blockCh  atomic.Pointer[blockRound]
}

// blockRound collects, for one abort measurement, the moments the blocked
// calls saw their contexts end.
type blockRound struct {
	started   sync.WaitGroup
	mu        sync.Mutex
	cancelled []time.Time
	done      sync.WaitGroup
}

type noArgs struct{}

// startSuite starts the bench node on an embedded server, hosting the bench category
// (noop, wait20ms, block) and no built-in one.
func startSuite(ctx context.Context, cfg Config, progress func(string)) (*suite, error) {
	s := &suite{cfg: cfg, progress: progress}
	s.noop = toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{
			Name:        "noop",
			Description: "Does nothing.",
			Category:    "bench",
		},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			return toolbus.TextResult("ok"), nil
		},
	})
	s.wait = toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{
			Name:        "wait20ms",
			Description: "Waits 20 ms.",
			Category:    "bench",
		},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			t := time.NewTimer(20 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				return toolbus.TextResult("waited"), nil
			case <-ctx.Done():
				return toolbus.Result{}, ctx.Err()
			}
		},
	})
	s.block = toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{
			Name:        "block",
			Description: "Blocks until cancelled.",
			Category:    "bench",
		},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			r := s.blockCh.Load()
			r.started.Done()
			<-ctx.Done()
			now := time.Now()
			r.mu.Lock()
			r.cancelled = append(r.cancelled, now)
			r.mu.Unlock()
			r.done.Done()
			return toolbus.Result{}, ctx.Err()
		},
	})
	// No exporter, whatever the environment says: the rows measure the untraced runtime
	// (the traced group measures the other).
	quiet, err := telemetry.Open(ctx, telemetry.Config{Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		return nil, err
	}
	n, err := node.Start(ctx, node.Config{
		Bus: server.Config{Name: "bench", Logger: actors.DiscardLogger()},
		Node: actors.NodeConfig{
			Name: "bench",
			// None of the built-in categories: the bench category alone.
			Categories: []string{},
			Logger:     actors.DiscardLogger(),
			AbortGrace: 2 * time.Second,
			// The abort measurement holds 100 calls in flight at once.
			MaxConcurrent: 256,
			// Durable turns, for the checkpoint measurement.
			Turns:     true,
			Telemetry: quiet,
		},
	})
	if err != nil {
		return nil, err
	}
	s.node = n
	if err := s.node.Host(ctx, "bench", []*toolbus.Tool{s.noop, s.wait, s.block}); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *suite) close() { s.node.Close() }

func (s *suite) say(format string, args ...any) { s.progress(fmt.Sprintf(format, args...)) }

func (s *suite) runAll(ctx context.Context) ([]Row, error) {
	var out []Row
	want := s.cfg.want

	s.say("direct call…")
	direct := s.direct()
	out = append(out, direct)

	s.say("raw NATS request-reply, a tool's host, and calls through turns, taking turns…")
	lat, err := s.latencies(ctx, want("one call through a turn"))
	if err != nil {
		return nil, err
	}
	raw := lat[0]
	out = append(out, raw)
	if len(lat) > 1 {
		// Targets of the issue "The turn, carved": a call ≤ 2.0× raw, a step ≤ 2.5×.
		out = append(out, compare(lat[1], raw, 0, false), compare(lat[2], raw, 2.0, true), compare(lat[3], raw, 2.5, true),
			compare(lat[4], raw, 0, false), compare(lat[5], raw, 0, false), compare(lat[6], raw, 0, false))
	}

	if want("parallel") {
		s.say("8 parallel 20 ms calls against one…")
		steps := max(s.cfg.Samples/40, 20)
		single, _, err := s.turnSteps(ctx, "20 ms", &s.wait.Spec, 1, steps)
		if err != nil {
			return nil, err
		}
		eight, _, err := s.turnSteps(ctx, "parallel 20 ms", &s.wait.Spec, 8, steps)
		if err != nil {
			return nil, err
		}
		out = append(out, single, compare(eight, single, 1.3, true))
	}

	if want("traced") {
		s.say("no-op calls through a turn, traced to an OTLP/HTTP receiver and not, taking turns…")
		rows, err := s.traced(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}

	if want("throughput") {
		s.say("concurrent throughput: raw request-reply and %d turns, taking turns…", s.cfg.Turns)
		rawT, wireT, skelT, turnsT, err := s.throughputs(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range []*Row{&wireT, &skelT} {
			r.Baseline = rawT.Name
			if rawT.Value > 0 {
				r.Ratio = r.Value / rawT.Value
			}
		}
		out = append(out, rawT, wireT, skelT, compareThroughput(turnsT, rawT, 0.55))
	}

	if want("messages") {
		s.say("messages on the bus per call through a turn…")
		rows, err := s.messagesPerCall(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}

	if want("abort") {
		s.say("abort latency with 100 calls in flight…")
		ab, err := s.abortLatency(ctx, 100, max(s.cfg.Samples/20, 50))
		if err != nil {
			return nil, err
		}
		out = append(out, ab)
	}

	if want("sandbox") {
		s.say("one run_command call, bare and sandboxed…")
		rows, err := s.sandbox(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}

	if want("checkpoint") {
		s.say("turn steps with and without checkpoints…")
		rows, err := s.checkpointCost(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}

	if want("waiting") {
		s.say("%d turns waiting on their model…", s.cfg.Waiting)
		rows, err := s.waitingTurns(ctx, s.cfg.Waiting)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}

	if want("stream") {
		s.say("streamed steps against a paced fake of the Responses API…")
		rows, err := s.streamRows(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}

	if want("assembly") {
		s.say("turn assembly…")
		asm, err := s.assembly(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, asm...)
	}
	return out, nil
}
