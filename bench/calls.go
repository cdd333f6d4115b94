package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/toolsets"
)

// direct measures a no-op tool's Execute called as a Go function.
func (s *suite) direct() Row {
	args := json.RawMessage(`{}`)
	samples := make([]time.Duration, 0, s.cfg.Samples)
	ctx := context.Background()
	for range s.cfg.Samples {
		t0 := time.Now()
		_, _ = s.noop.Execute(ctx, toolbus.Call{Args: args})
		samples = append(samples, time.Since(t0))
	}
	return latency("direct Go call of the no-op tool", samples, "")
}

// rounds is how many times the measurements compared with each other take turns, so
// that a change in the shared machine's pace during a run shows in the baseline as much
// as in what is compared with it.
const rounds = 10

// latencies measures, in rounds: raw NATS request-reply, and with withTurns a request to
// the no-op tool's host, a call and a step through a turn, and a call to a foreign host.
func (s *suite) latencies(ctx context.Context, withTurns bool) ([]Row, error) {
	req, stop, err := s.echo()
	if err != nil {
		return nil, err
	}
	defer stop()
	hostConn, err := s.node.Connect("bench-host-requester")
	if err != nil {
		return nil, err
	}
	defer hostConn.Close()
	var foreign *toolbus.Spec
	var skel *skeleton
	if withTurns {
		spec, stop, err := s.foreignTool(ctx)
		if err != nil {
			return nil, err
		}
		defer stop()
		foreign = spec
		if skel, err = s.startSkeleton(); err != nil {
			return nil, err
		}
		defer skel.stop()
	}
	per := max(s.cfg.Samples/rounds, 10)
	var raw, host, steps, trips, foreignTrips []time.Duration
	var skelTiming skeletonTiming
	for round := range rounds {
		got, err := s.rawSamples(req, per, round == 0)
		if err != nil {
			return nil, err
		}
		raw = append(raw, got...)
		if !withTurns {
			continue
		}
		if got, err = s.hostSamples(ctx, hostConn, per, round); err != nil {
			return nil, err
		}
		host = append(host, got...)
		st, tr, err := s.turnSamples(ctx, &s.noop.Spec, 1, per, round == 0)
		if err != nil {
			return nil, err
		}
		steps, trips = append(steps, st...), append(trips, tr...)
		if _, tr, err = s.turnSamples(ctx, foreign, 1, per, round == 0); err != nil {
			return nil, err
		}
		foreignTrips = append(foreignTrips, tr...)
		// The skeleton's first step has no step before it; its turns' steps are timed
		// as the turn rows' are, after a warm-up turn in the first round.
		if round == 0 {
			if err := skel.turn(ctx, per, nil); err != nil {
				return nil, err
			}
		}
		tm := &skeletonTiming{}
		if err := skel.turn(ctx, per+1, tm); err != nil {
			return nil, err
		}
		skelTiming.trips = append(skelTiming.trips, tm.trips[1:]...)
		skelTiming.steps = append(skelTiming.steps, tm.steps...)
	}
	out := []Row{latency("raw NATS request-reply", raw, "")}
	if withTurns {
		out = append(out,
			latency("request to the no-op tool's host, no turn", host, ""),
			latency("no-op call through a turn (dispatch → reply)", trips, ""),
			latency("turn step of 1 no-op call", steps, ""),
			latency("one no-op call through a turn to a foreign host (dispatch → reply)", foreignTrips, ""),
			latency("the design's skeleton: one no-op call (dispatch → reply)", skelTiming.trips, skeletonLatencyNote),
			latency("the design's skeleton: a step of one no-op call", skelTiming.steps, skeletonLatencyNote))
	}
	return out, nil
}

// skeletonLatencyNote is the note of the skeleton's latency rows.
const skeletonLatencyNote = "a turn of the design's skeleton (skeleton.go: the model asked on a worker, the host handing each request to one, nothing else), timed as the turn rows are: the floor of the call and step rows' designs"

// rawSamples times core NATS request-reply on the same server, with an echo responder on
// its own connection: the floor of any call over the bus.
func (s *suite) rawSamples(req *nats.Conn, n int, warm bool) ([]time.Duration, error) {
	payload := []byte(`{}`)
	if warm {
		for range 200 {
			if _, err := req.Request("bench.echo", payload, 5*time.Second); err != nil {
				return nil, err
			}
		}
	}
	samples := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := req.Request("bench.echo", payload, 5*time.Second); err != nil {
			return nil, err
		}
		samples = append(samples, time.Since(t0))
	}
	return samples, nil
}

// hostSamples times plain NATS requests to the no-op tool's host, with a call id and
// deadline but no turn: the host's share of a call.
func (s *suite) hostSamples(ctx context.Context, nc *nats.Conn, n, round int) ([]time.Duration, error) {
	subject := bus.ToolSubject(s.noop.Category, s.noop.Name)
	warm := 0
	if round == 0 {
		warm = 200
	}
	samples := make([]time.Duration, 0, n)
	for i := range n + warm {
		m := nats.NewMsg(subject)
		m.Data = []byte(`{}`)
		bus.ToolRequest{Call: fmt.Sprint("h", round, "_", i), Deadline: time.Now().Add(time.Minute)}.SetHeaders(m.Header)
		t0 := time.Now()
		reply, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return nil, err
		}
		if i >= warm {
			samples = append(samples, time.Since(t0))
		}
		var r bus.ToolReply
		if err := json.Unmarshal(reply.Data, &r); err != nil || r.Outcome != bus.OutcomeOK {
			return nil, fmt.Errorf("host request: %s %v", reply.Data, err)
		}
	}
	return samples, nil
}

// echo starts an echo responder and returns a requester connection.
func (s *suite) echo() (*nats.Conn, func(), error) {
	resp, err := s.node.Connect("bench-echo")
	if err != nil {
		return nil, nil, err
	}
	if _, err := resp.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		resp.Close()
		return nil, nil, err
	}
	if err := resp.Flush(); err != nil {
		resp.Close()
		return nil, nil, err
	}
	req, err := s.node.Connect("bench-requester")
	if err != nil {
		resp.Close()
		return nil, nil, err
	}
	return req, func() { req.Close(); resp.Close() }, nil
}

// turnSteps runs turns of `calls` calls per step and reports each step (the model's
// response handed over → the model asked again: repair, dispatch, execution, results,
// transcript and status) and each call's round trip (the turn's publish → the turn's
// receipt of the reply).
func (s *suite) turnSteps(ctx context.Context, what string, tool *toolbus.Spec, calls, steps int) (step, call Row, err error) {
	samples, trips, err := s.turnSamples(ctx, tool, calls, steps, true)
	if err != nil {
		return step, call, fmt.Errorf("%s: %w", what, err)
	}
	plural := "call"
	if calls > 1 {
		plural = "calls"
	}
	return latency(fmt.Sprintf("turn step of %d %s %s", calls, what, plural), samples, ""),
		latency(fmt.Sprintf("%s call through a turn (dispatch → reply)", what), trips, ""), nil
}

// turnSamples runs turns of `calls` calls of tool per step until it has timed `steps`
// steps, after a turn to warm up when warm is set. Turns of at most 100 steps keep the
// transcript, and its copies to the model, realistic.
func (s *suite) turnSamples(ctx context.Context, tool *toolbus.Spec, calls, steps int, warm bool) (samples, trips []time.Duration, err error) {
	return s.turnSamplesOn(ctx, s.node.Actors(), tool, calls, steps, warm)
}

// turnSamplesOn is turnSamples with turns on node n.
func (s *suite) turnSamplesOn(ctx context.Context, node *actors.Node, tool *toolbus.Spec, calls, steps int, warm bool) (samples, trips []time.Duration, err error) {
	set, err := toolbus.NewSet(tool)
	if err != nil {
		return nil, nil, err
	}
	for ; len(samples) < steps; warm = false {
		n := min(100, steps-len(samples))
		m := &stepModel{tool: tool.Name, namespace: tool.Namespace, calls: calls, steps: n}
		res, err := node.Run(ctx, actors.TurnConfig{Model: m, Kit: toolsets.NewKit(set),
			Spec: bus.TurnSpec{Input: "bench", Limits: bus.TurnLimits{MaxSteps: n + 1}}})
		if err != nil {
			return nil, nil, err
		}
		if res.State != bus.TurnCompleted {
			return nil, nil, fmt.Errorf("turn ended %s: %s", res.State, res.ErrorText())
		}
		for _, c := range res.Calls {
			if c.Outcome != bus.OutcomeOK {
				return nil, nil, fmt.Errorf("call %s: %s %s", c.Call, c.Outcome, c.Error)
			}
			if !warm {
				trips = append(trips, c.Latency)
			}
		}
		if !warm {
			samples = append(samples, m.gaps...)
		}
	}
	return samples, trips, nil
}

// throughputs measures, in three rounds taking turns, concurrent core NATS
// request-reply (as many requesters as there are turns), the wire of a call alone (wire:
// the same requesters sending what a turn sends, to a service that answers as a host
// does, and nothing else), the design's skeleton (skeleton.go) and concurrent turns of one
// no-op call per step.
func (s *suite) throughputs(ctx context.Context) (raw, wire, skel, turns Row, err error) {
	req, stop, err := s.echo()
	if err != nil {
		return raw, wire, skel, turns, err
	}
	defer stop()
	wc, stopWire, err := s.wireService()
	if err != nil {
		return raw, wire, skel, turns, err
	}
	defer stopWire()
	k, err := s.startSkeleton()
	if err != nil {
		return raw, wire, skel, turns, err
	}
	defer k.stop()
	set, err := toolbus.NewSet(&s.noop.Spec)
	if err != nil {
		return raw, wire, skel, turns, err
	}
	per := max(s.cfg.Samples/10, 50) // steps of each turn in a round, as many requests of each requester
	each := s.cfg.Turns * per        // the calls of a round of the requesters or skeleton turns
	var rawT, wireT, skelT, turnT tally
	for range 3 {
		if err := rawT.run(each, func() error {
			return s.concurrently(func() error {
				for range per {
					if _, err := req.Request("bench.echo", []byte(`{}`), 10*time.Second); err != nil {
						return err
					}
				}
				return nil
			})
		}); err != nil {
			return raw, wire, skel, turns, err
		}
		if err := wireT.run(each, func() error {
			return s.concurrently(func() error { return wireCallsOn(ctx, wc, per) })
		}); err != nil {
			return raw, wire, skel, turns, err
		}
		if err := skelT.run(each, func() error {
			return s.concurrently(func() error { return k.turn(ctx, per, nil) })
		}); err != nil {
			return raw, wire, skel, turns, err
		}
		var calls atomic.Int64
		if err := turnT.run(0, func() error {
			return s.concurrently(func() error {
				m := &stepModel{tool: s.noop.Name, calls: 1, steps: per}
				res, err := s.node.Actors().Run(ctx, actors.TurnConfig{Model: m, Kit: toolsets.NewKit(set),
					Spec: bus.TurnSpec{Input: "bench", Limits: bus.TurnLimits{MaxSteps: per + 1}}})
				if err == nil && res.State != bus.TurnCompleted {
					err = fmt.Errorf("turn ended %s: %s", res.State, res.ErrorText())
				}
				calls.Add(int64(len(res.Calls)))
				return err
			})
		}); err != nil {
			return raw, wire, skel, turns, err
		}
		turnT.calls += int(calls.Load())
	}
	raw = rawT.row(fmt.Sprintf("raw NATS request-reply, %d concurrent requesters", s.cfg.Turns), "")
	wire = wireT.row(fmt.Sprintf("the wire of a call alone, %d concurrent requesters", s.cfg.Turns),
		"each requester sends what a turn sends for a no-op call (subject, reply subject on a subscription of its own, headers, arguments) to a micro endpoint that reads the headers and answers with a no-op call's reply at once: no turn, no tool, no transcript; ")
	skel = skelT.row(fmt.Sprintf("the design's skeleton, %d concurrent turns of one no-op call per step", s.cfg.Turns),
		"what any runtime built as toolbus is must do for a call: the model asked on a worker, the request sent with a turn's headers and its reply subject, the host's micro endpoint handing it to a worker that reads the headers, decodes the arguments and answers; no actor, validation, deadline, transcript, event or status; ")
	turns = turnT.row(fmt.Sprintf("%d concurrent turns, one no-op call per step", s.cfg.Turns), "")
	if wire.Value > 0 && skel.Value > 0 {
		turns.Note = fmt.Sprintf("%.2f× the design's skeleton (%.2f× raw), %.2f× the wire of a call alone (%.2f× raw); %s",
			turns.Value/skel.Value, skel.Value/raw.Value, turns.Value/wire.Value, wire.Value/raw.Value, turns.Note)
	}
	return raw, wire, skel, turns, nil
}

// tally adds up the rounds of one throughput row: the calls made, the time they took and
// the processor time the process spent meanwhile.
type tally struct {
	calls     int
	time, cpu time.Duration
}

// run times f, a round of calls calls (0: f's caller counts them).
func (t *tally) run(calls int, f func() error) error {
	start, cpu := time.Now(), processCPU()
	if err := f(); err != nil {
		return err
	}
	t.time, t.cpu = t.time+time.Since(start), t.cpu+processCPU()-cpu
	t.calls += calls
	return nil
}

// row is the tally as a row of calls a second, its note what is measured before the
// processor time a call.
func (t *tally) row(name, what string) Row {
	return Row{Name: name, Unit: "calls/s", Value: float64(t.calls) / t.time.Seconds(), Samples: t.calls,
		Note: what + cpuNote(t.cpu, t.calls, t.time)}
}

// wireSubject is the subject of the wire measurement's service.
const wireSubject = "bench.wire.noop"

// wireService is a micro service that answers each request on wireSubject as a host
// answers a no-op call, with nothing in between (the headers read, a reply encoded once),
// and a connection of its own for the requesters, as a node's turns share one.
func (s *suite) wireService() (_ *nats.Conn, stop func(), err error) {
	tr := bus.ToolReply{Call: "c", Tool: s.noop.Name, Outcome: bus.OutcomeOK, Content: []toolbus.ContentPart{toolbus.Text("ok")}}
	reply, err := tr.AppendJSON(nil)
	if err != nil {
		return nil, nil, err
	}
	hc, err := s.node.Connect("bench-wire-host")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			hc.Close() // its service and subscriptions with it
		}
	}()
	svc, err := micro.AddService(hc, micro.Config{Name: "bench-wire", Version: "1.0.0"})
	if err != nil {
		return nil, nil, err
	}
	if err := svc.AddEndpoint("noop", micro.HandlerFunc(func(r micro.Request) {
		if _, err := bus.ParseToolRequest(nats.Header(r.Headers())); err != nil {
			_ = r.Error("400", err.Error(), nil)
			return
		}
		_ = r.Respond(reply)
	}), micro.WithEndpointSubject(wireSubject)); err != nil {
		return nil, nil, err
	}
	if err := hc.Flush(); err != nil {
		return nil, nil, err
	}
	rc, err := s.node.Connect("bench-wire-turns")
	if err != nil {
		return nil, nil, err
	}
	return rc, func() { rc.Close(); _ = svc.Stop(); hc.Close() }, nil
}

// wireCallsOn sends n calls' requests one after another as a turn would (each with a
// turn's headers and its reply subject, heard on a subscription of its own) and waits
// for each reply.
func wireCallsOn(ctx context.Context, nc *nats.Conn, n int) error {
	turn := bus.NewID()
	replies := make(chan *nats.Msg, 1)
	sub, err := nc.Subscribe(bus.ResultSubject(turn, "*"), func(m *nats.Msg) { replies <- m })
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	for i := range n {
		call := "c" + strconv.Itoa(i)
		m := &nats.Msg{Subject: wireSubject, Reply: bus.ResultSubject(turn, call), Data: []byte(`{}`), Header: make(nats.Header, 8)}
		bus.ToolRequest{Turn: turn, Call: call, Agent: "bench", Deadline: time.Now().Add(time.Minute),
			Traceparent: wireTraceparent, Vouch: wireVouch}.SetHeaders(m.Header)
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
		select {
		case <-replies:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("wire bench: no reply to call %d within 10 s", i)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// A traceparent and a vouch of the sizes a turn sends.
const (
	wireTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	wireVouch       = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"
)

// concurrently runs f on as many goroutines as the throughput measurement has turns and
// returns one of their errors.
func (s *suite) concurrently(f func() error) error {
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range s.cfg.Turns {
		wg.Go(func() {
			if err := f(); err != nil {
				failed.Store(&err)
			}
		})
	}
	wg.Wait()
	if e := failed.Load(); e != nil {
		return *e
	}
	return nil
}

// messagesPerCall counts the messages the server takes in per no-op call through a turn
// (one call a step, 100 steps a turn), from the server's own count: with no one watching
// the turn (statuses, events and text are sent only to an interest), and with a watcher
// of everything of its turns, the count by kind in the note.
func (s *suite) messagesPerCall(ctx context.Context) ([]Row, error) {
	set, err := toolbus.NewSet(&s.noop.Spec)
	if err != nil {
		return nil, err
	}
	const turns, steps = 5, 100
	count := func() (float64, error) {
		v0, err := s.node.Server().NATS().Varz(nil)
		if err != nil {
			return 0, err
		}
		calls := 0
		for range turns {
			m := &stepModel{tool: s.noop.Name, calls: 1, steps: steps}
			res, err := s.node.Actors().Run(ctx, actors.TurnConfig{Model: m, Kit: toolsets.NewKit(set),
				Spec: bus.TurnSpec{Input: "bench", Limits: bus.TurnLimits{MaxSteps: steps + 1}}})
			if err != nil {
				return 0, err
			}
			if res.State != bus.TurnCompleted {
				return 0, fmt.Errorf("turn ended %s: %s", res.State, res.ErrorText())
			}
			calls += len(res.Calls)
		}
		v1, err := s.node.Server().NATS().Varz(nil)
		if err != nil {
			return 0, err
		}
		return float64(v1.InMsgs-v0.InMsgs) / float64(calls), nil
	}
	quiet, err := count()
	if err != nil {
		return nil, err
	}
	nc, err := s.node.Connect("bench-watch-all")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	var (
		mu   sync.Mutex
		kind = map[string]int{}
	)
	watch := func(m *nats.Msg) {
		k := "other"
		if st, ok := bus.ParseTurnSubject(m.Subject); ok {
			k = st.Kind
		} else if strings.HasPrefix(m.Subject, bus.TranscriptSubject("")) {
			k = "transcript"
		} else if strings.HasPrefix(m.Subject, strings.TrimSuffix(bus.AllTools, ">")) {
			k = "request"
		}
		mu.Lock()
		kind[k]++
		mu.Unlock()
	}
	for _, subject := range []string{bus.AllTurns, bus.AllTools, bus.TranscriptSubject("*")} {
		if _, err := nc.Subscribe(subject, watch); err != nil {
			return nil, err
		}
	}
	if err := nc.Flush(); err != nil {
		return nil, err
	}
	watched, err := count()
	if err != nil {
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(kind)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(kind[k])/float64(turns*steps)))
	}
	return []Row{
		{Name: "messages per no-op call through a turn, no one watching", Unit: "msgs", Value: quiet, Samples: turns * steps,
			Note: "the request and its reply; the transcript's appends, a batch of steps at most 100 ms apart"},
		{Name: "messages per no-op call through a turn, its subjects watched", Unit: "msgs", Value: watched, Samples: turns * steps,
			Note: "by kind, per call: " + strings.Join(parts, ", ")},
	}, nil
}

// cpuNote gives the processor time of a throughput row's calls (the whole process's:
// server, requesters, hosts and turns), a call's and the processors' share, which
// tells a row that is bound by the processors from one that waits: on 2 cores, a row
// that keeps both busy at 28 µs a call cannot pass 71k calls/s.
func cpuNote(cpu time.Duration, calls int, wall time.Duration) string {
	if calls == 0 || wall <= 0 {
		return ""
	}
	return fmt.Sprintf("%.1f µs of processor time a call, %.2f processors busy", float64(cpu.Nanoseconds())/1e3/float64(calls), cpu.Seconds()/wall.Seconds())
}

// processCPU is the processor time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
