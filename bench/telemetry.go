package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/telemetry"
	"github.com/toolbus/toolbus/telemetry/otlptest"
)

// traced measures what tracing costs a call: no-op calls through turns on a second node of
// the suite's bus whose telemetry exports every span (OTLP/HTTP, the SDK's batch
// processor, to a receiver in this process that decodes each request), in rounds taking
// turns with the same calls on the suite's node, which has no exporter. The untraced
// rows are the baseline; every other row of the suite runs without an exporter.
func (s *suite) traced(ctx context.Context) ([]Row, error) {
	r := otlptest.New()
	defer r.Close()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": r.URL()}
	tel, err := telemetry.Open(ctx, telemetry.Config{Node: "bench-traced", Metrics: true,
		Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tel.CloseTimeout(5 * time.Second) }()
	n, err := actors.StartNode(ctx, actors.NodeConfig{
		Name: "bench-traced", Connect: s.node.Connect, Categories: []string{}, Logger: actors.DiscardLogger(),
		MaxConcurrent: 256, Telemetry: tel,
	})
	if err != nil {
		return nil, err
	}
	defer n.Close()
	noop := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "noop", Description: "Does nothing.", Category: "bench_traced"},
		Execute: func(context.Context, toolbus.Call, noArgs) (toolbus.Result, error) {
			return toolbus.TextResult("ok"), nil
		},
	})
	if err := n.Host(ctx, "bench_traced", []*toolbus.Tool{noop}); err != nil {
		return nil, err
	}
	per := max(s.cfg.Samples/rounds, 10)
	var plainSteps, plainTrips, tracedSteps, tracedTrips []time.Duration
	for round := range rounds {
		st, tr, err := s.turnSamples(ctx, &s.noop.Spec, 1, per, round == 0)
		if err != nil {
			return nil, err
		}
		plainSteps, plainTrips = append(plainSteps, st...), append(plainTrips, tr...)
		if st, tr, err = s.turnSamplesOn(ctx, n, &noop.Spec, 1, per, round == 0); err != nil {
			return nil, fmt.Errorf("traced: %w", err)
		}
		tracedSteps, tracedTrips = append(tracedSteps, st...), append(tracedTrips, tr...)
	}
	if err := tel.Flush(ctx); err != nil {
		return nil, fmt.Errorf("traced: export: %w", err)
	}
	note := fmt.Sprintf("%d spans in %d OTLP requests received", len(r.Spans()), r.Requests())
	plainTrip := latency("no-op call through a turn, no exporter (dispatch → reply)", plainTrips, "")
	plainStep := latency("turn step of 1 no-op call, no exporter", plainSteps, "")
	return []Row{
		plainTrip,
		compare(latency("no-op call through a turn, traced to OTLP/HTTP (dispatch → reply)", tracedTrips, note), plainTrip, 0, false),
		plainStep,
		compare(latency("turn step of 1 no-op call, traced to OTLP/HTTP", tracedSteps, note), plainStep, 0, false),
	}, nil
}
