package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/gateway/gatewaytest"
	"github.com/toolbus/toolbus/toolsets"
)

// streamKey is the key the bench's fake Responses API is sent.
const streamKey = "sk-bench-stream-0a1b2c3d4e"

// streamCategory hosts the bench's slow call: 500 ms, as a search or a build would take.
const streamCategory = "benchstream"

// streamRows measures streamed steps against a paced fake of the Responses API (a
// loopback HTTP server writing the SSE wire, gatewaytest), in the same run:
//   - the wall time of a step whose first call takes 500 ms and is complete at 10 % of a
//     1 s response (the second, a no-op, at its end), streamed (the first call runs
//     while the model writes) against not streamed (both go out after the response);
//     target: streamed ≤ 0.7× (its floor is 1 s / 1.5 s);
//   - the time from a call's response.output_item.done, written and flushed by the fake,
//     to its request on the bus (a plain subscriber on the tool's subject), a step of one
//     call after another; target: p50 ≤ the bus's own share + 30 µs. That share: a
//     message of the request's shape published on the node's connection at the same
//     pace to the same subject, heard by the same subscriber while the tool's host
//     answers it (measured here: 12 µs without the host, 33 µs with it, where the
//     dispatch row is 120 µs: gateway 22 µs, turn to publish 15 µs).
func (s *suite) streamRows(ctx context.Context) ([]Row, error) {
	slow := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "slow500ms", Description: "Takes 500 ms.", Category: streamCategory},
		Execute: func(ctx context.Context, _ toolbus.Call, _ noArgs) (toolbus.Result, error) {
			t := time.NewTimer(500 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				return toolbus.TextResult("done"), nil
			case <-ctx.Done():
				return toolbus.Result{}, ctx.Err()
			}
		},
	})
	if err := s.node.Host(ctx, streamCategory, []*toolbus.Tool{slow}); err != nil {
		return nil, err
	}
	kit, err := kitOf(&slow.Spec, &s.noop.Spec)
	if err != nil {
		return nil, err
	}

	// The step: the slow call done at 100 ms, the no-op at 1 s, the response's end.
	rounds := max(s.cfg.Samples/400, 1) // 2.5 s a round: 5 at the default samples
	step := gatewaytest.NewResponses("resp_step").
		Pace(100*time.Millisecond, nil).Call("c_slow", slow.Name, "{}").
		Pace(900*time.Millisecond, nil).Call("c_noop", s.noop.Name, "{}")
	step.Completed(100, 20)
	answer := gatewaytest.NewResponses("resp_answer").Message("done")
	answer.Completed(120, 2)
	var streamed, whole []time.Duration
	for range rounds {
		for _, noStream := range []bool{false, true} {
			d, err := s.streamStep(ctx, kit, noStream, step.Stream(), answer.Stream())
			if err != nil {
				return nil, err
			}
			if noStream {
				whole = append(whole, d)
			} else {
				streamed = append(streamed, d)
			}
		}
	}
	base := msRow("step of a 500 ms call complete at 10 % of a 1 s response, not streamed", whole,
		"from the request to the next one: both calls go out after the response")
	r := msRow("the same step, streamed (the call dispatched as it is complete)", streamed,
		"the slow call runs while the model writes the rest; the step still lasts until the response ends (1 s), so 1 s / 1.5 s = 0.67× is this ratio's floor")
	r.Baseline = base.Name
	r.Ratio = r.P50 / base.P50
	// The floor is 1/1.5 (the note): ≤ 0.7× is what a turn that adds little can meet.
	r.Target = "p50 ≤ 0.7× baseline"
	met := r.Ratio <= 0.7
	r.Met = &met

	n := max(s.cfg.Samples/10, 50)
	dispatch, err := s.doneToRequest(ctx, n)
	if err != nil {
		return nil, err
	}
	hop, err := s.pacedPublish(ctx, n)
	if err != nil {
		return nil, err
	}
	http, err := pacedHTTP(ctx, n)
	if err != nil {
		return nil, err
	}
	http.Baseline = hop.Name
	if hop.P50 > 0 {
		http.Ratio = http.P50 / hop.P50
	}
	// What the gateway and the turn add to the bus's own hop: at most 30 µs. The HTTP
	// row is the part of that no gateway can save: the event's trip over loopback.
	return []Row{base, r, hop, http, compareAdded(dispatch, hop, 30)}, nil
}

// pacedHTTP measures the HTTP share of doneToRequest: a response of n calls from the same
// fake, each call's output_item.done written donePace after the one before (1 ms after
// its output_item.added), read by a plain reader of the body's lines that notes when it
// has the event's data line. No decoding, no gateway, no turn: the trip of the event over
// loopback HTTP and what a reader must do to have it at all.
func pacedHTTP(ctx context.Context, n int) (Row, error) {
	var (
		mu   sync.Mutex
		sent []time.Time
	)
	written := func() {
		now := time.Now()
		mu.Lock()
		sent = append(sent, now)
		mu.Unlock()
	}
	b := gatewaytest.NewResponses("resp_hop")
	for i := range n {
		b.Pace(donePace-time.Millisecond, nil).Call(fmt.Sprintf("c%d", i), "noop", "{}").DelayLast(time.Millisecond).OnWrite(written)
	}
	srv := gatewaytest.NewServer(gatewaytest.Stream{Events: b.Completed(10, 5)})
	defer srv.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.BaseURL()+"/responses", strings.NewReader(`{"stream":true}`))
	if err != nil {
		return Row{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		return Row{}, err
	}
	defer resp.Body.Close()
	got := make([]time.Time, 0, n)
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	done := false // the last line read was the event line of an output_item.done
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return Row{}, fmt.Errorf("stream bench: read the paced response: %w", err)
		}
		switch {
		case done && bytes.HasPrefix(line, []byte("data: ")):
			got = append(got, time.Now())
			done = false
		default:
			done = bytes.Equal(bytes.TrimSpace(line), []byte("event: response.output_item.done"))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != n || len(got) != n {
		return Row{}, fmt.Errorf("stream bench: %d events written, %d read, want %d", len(sent), len(got), n)
	}
	samples := make([]time.Duration, n)
	for i := range samples {
		samples[i] = got[i].Sub(sent[i])
	}
	return latency("a call's response.output_item.done at the same pace, read off loopback HTTP by a plain reader", samples,
		"the HTTP share of the row below: from just before the fake writes the event to a reader of the body's lines having its data line, nothing decoded"), nil
}

// donePace is how far apart doneToRequest's calls are: each step's call is written 1 ms
// into its response, which goes on 2 ms after it.
const donePace = 3 * time.Millisecond

// pacedPublish measures the bus's share of doneToRequest: n messages of a call request's
// shape (the no-op tool's subject, a reply subject, its headers) published on the node's
// connection donePace apart, each heard by a plain subscriber on a connection of its own
// while the tool's host, on the node, runs it (its reply goes nowhere).
func (s *suite) pacedPublish(ctx context.Context, n int) (Row, error) {
	nc, err := s.node.Connect("bench-stream-hop")
	if err != nil {
		return Row{}, err
	}
	defer nc.Close()
	subject := bus.ToolSubject(s.noop.Category, s.noop.Name)
	heard := make(chan time.Time, 1)
	sub, err := nc.Subscribe(subject, func(*nats.Msg) { heard <- time.Now() })
	if err != nil {
		return Row{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		return Row{}, err
	}
	req := bus.ToolRequest{Turn: bus.NewID(), Call: "c0", Agent: "bench", Deadline: time.Now().Add(time.Minute),
		Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	pub := s.node.Actors().Conn()
	samples := make([]time.Duration, 0, n)
	tick := time.NewTicker(donePace)
	defer tick.Stop()
	for range n {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return Row{}, ctx.Err()
		}
		m := &nats.Msg{Subject: subject, Reply: bus.ResultSubject(req.Turn, req.Call), Data: []byte("{}"), Header: make(nats.Header, 8)}
		req.SetHeaders(m.Header)
		sent := time.Now()
		if err := pub.PublishMsg(m); err != nil {
			return Row{}, err
		}
		select {
		case at := <-heard:
			samples = append(samples, at.Sub(sent))
		case <-time.After(5 * time.Second):
			return Row{}, fmt.Errorf("stream bench: a paced message was not heard within 5 s")
		case <-ctx.Done():
			return Row{}, ctx.Err()
		}
	}
	return latency("a request of the no-op tool published on the node's connection at the same pace, to a plain subscriber", samples,
		"the bus's share of the row below, its host running each request as there: without a host about 12 µs"), nil
}

// msRow summarises samples in milliseconds.
func msRow(name string, samples []time.Duration, note string) Row {
	r := latency(name, samples, note)
	r.Unit = "ms"
	r.P50, r.P90, r.P99 = r.P50/1000, r.P90/1000, r.P99/1000
	return r
}

// kitOf is the kit of a turn with exactly these tools.
func kitOf(specs ...*toolbus.Spec) (*toolsets.Kit, error) {
	set, err := toolbus.NewSet(specs...)
	if err != nil {
		return nil, err
	}
	return toolsets.NewKit(set), nil
}

// streamModel is a Responses gateway on a fake server.
func streamModel(srv *gatewaytest.Server, noStream bool) (gateway.Model, error) {
	return gateway.NewResponses("gpt-bench", gateway.Config{
		APIKey: streamKey, BaseURL: srv.BaseURL(), HTTPClient: srv.Client(), NoStream: noStream, MaxRetries: -1,
	})
}

// streamStep runs a turn of two steps (the step, then an answer) and returns the first
// step's wall time: from its request to the next one, which the turn sends once the
// step's calls are done.
func (s *suite) streamStep(ctx context.Context, kit *toolsets.Kit, noStream bool, streams ...gatewaytest.Stream) (time.Duration, error) {
	srv := gatewaytest.NewServer(streams...)
	defer srv.Close()
	model, err := streamModel(srv, noStream)
	if err != nil {
		return 0, err
	}
	res, err := s.node.Actors().Run(ctx, actors.TurnConfig{Spec: bus.TurnSpec{Agent: "bench", Input: "bench"}, Model: model, Kit: kit})
	if err != nil {
		return 0, err
	}
	if res.State != bus.TurnCompleted {
		return 0, fmt.Errorf("stream bench: turn ended %s: %s", res.State, res.ErrorText())
	}
	at := srv.Arrivals()
	if len(at) != 2 {
		return 0, fmt.Errorf("stream bench: %d model requests, want 2", len(at))
	}
	return at[1].Sub(at[0]), nil
}

// doneToRequest measures, over a turn of n steps of one no-op call each, the time from
// the fake writing a call's output_item.done to the call's request arriving on the bus.
func (s *suite) doneToRequest(ctx context.Context, n int) (Row, error) {
	var (
		mu        sync.Mutex
		sent      []time.Time // the fake wrote the call's output_item.done
		delivered []time.Time // the gateway handed the call to the turn (StreamItem)
		got       []time.Time // the request reached the bus
	)
	written := func() {
		now := time.Now()
		mu.Lock()
		sent = append(sent, now)
		mu.Unlock()
	}
	streams := make([]gatewaytest.Stream, 0, n+1)
	for i := range n {
		// Each step one call: its output_item.done is the moment measured from.
		// The model takes its time to write the call (1 ms before its output_item.done)
		// and goes on writing after it (2 ms), as a model does: the measured path races
		// neither the decoding of the events before it nor the response's end.
		b := gatewaytest.NewResponses(fmt.Sprintf("resp_%d", i)).Call(fmt.Sprintf("c%d", i), s.noop.Name, "{}").
			DelayLast(time.Millisecond).OnWrite(written)
		streams = append(streams, gatewaytest.Stream{Events: b.Pace(donePace-time.Millisecond, nil).Completed(10, 5)})
	}
	streams = append(streams, gatewaytest.Stream{Events: gatewaytest.NewResponses("resp_answer").Message("done").Completed(10, 1)})
	srv := gatewaytest.NewServer(streams...)
	defer srv.Close()

	nc, err := s.node.Connect("bench-stream-watch")
	if err != nil {
		return Row{}, err
	}
	defer nc.Close()
	sub, err := nc.Subscribe(bus.ToolSubject(s.noop.Category, s.noop.Name), func(*nats.Msg) {
		now := time.Now()
		mu.Lock()
		got = append(got, now)
		mu.Unlock()
	})
	if err != nil {
		return Row{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		return Row{}, err
	}
	gw, err := streamModel(srv, false)
	if err != nil {
		return Row{}, err
	}
	model := &deliveryModel{Model: gw, delivered: func() {
		now := time.Now()
		mu.Lock()
		delivered = append(delivered, now)
		mu.Unlock()
	}}
	spec := bus.TurnSpec{Agent: "bench", Input: "bench", Limits: bus.TurnLimits{MaxSteps: n + 1}}
	kit, err := kitOf(&s.noop.Spec)
	if err != nil {
		return Row{}, err
	}
	res, err := s.node.Actors().Run(ctx, actors.TurnConfig{Spec: spec, Model: model, Kit: kit})
	if err != nil {
		return Row{}, err
	}
	if res.State != bus.TurnCompleted {
		return Row{}, fmt.Errorf("stream bench: turn ended %s: %s", res.State, res.ErrorText())
	}
	if err := nc.Flush(); err != nil {
		return Row{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != n || len(got) != n || len(delivered) != n {
		return Row{}, fmt.Errorf("stream bench: %d calls written, %d delivered, %d requests seen, want %d", len(sent), len(delivered), len(got), n)
	}
	samples := make([]time.Duration, n)
	gwShare := make([]time.Duration, n)
	turnShare := make([]time.Duration, n)
	for i := range samples {
		samples[i] = got[i].Sub(sent[i])
		gwShare[i] = delivered[i].Sub(sent[i])
		turnShare[i] = got[i].Sub(delivered[i])
	}
	share, rest := latency("", gwShare, ""), latency("", turnShare, "")
	return latency("a call's response.output_item.done to its request on the bus", samples,
		fmt.Sprintf("from just before the fake writes the event, a plain subscriber on the tool's subject hears the request; of it, HTTP, SSE and decoding until the gateway hands the call to the turn: p50 %.1f µs; from there, the turn and the bus: p50 %.1f µs", share.P50, rest.P50)), nil
}

// deliveryModel notes when its gateway hands the turn a call complete.
type deliveryModel struct {
	gateway.Model
	delivered func()
}

func (m *deliveryModel) Respond(ctx context.Context, req *gateway.Request) (*gateway.Response, error) {
	if f := req.Stream; f != nil {
		r := *req
		r.Stream = func(ev gateway.StreamEvent) {
			if ev.Kind == gateway.StreamItem && ev.Item.Kind == toolbus.KindFunctionCall {
				m.delivered()
			}
			f(ev)
		}
		req = &r
	}
	return m.Model.Respond(ctx, req)
}
