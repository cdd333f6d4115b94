package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/client"
	durablepkg "github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// benchResult is one row of the suite: a measurement, the baseline it is
// compared with (measured in the same run), and the target ratio.
type benchResult struct {
	Name     string  `json:"name"`
	Unit     string  `json:"unit"` // "us" or "calls/s"
	P50      float64 `json:"p50,omitempty"`
	P90      float64 `json:"p90,omitempty"`
	P99      float64 `json:"p99,omitempty"`
	Value    float64 `json:"value,omitempty"` // throughput rows
	Samples  int     `json:"samples"`
	Baseline string  `json:"baseline,omitempty"`
	// Ratio is the p50 (or throughput) over the baseline's.
	Ratio  float64 `json:"ratio,omitempty"`
	Target string  `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
	Note   string  `json:"note,omitempty"`
}

type benchReport struct {
	GoVersion string        `json:"go_version"`
	CPUs      int           `json:"cpus"`
	Started   time.Time     `json:"started"`
	Results   []benchResult `json:"results"`
}

type benchOptions struct {
	n          int
	turns      int
	waiting    int
	json       bool
	cpuProfile string
	only       string
}

// runBench runs the performance suite in one process, against one embedded
// server, so every ratio compares numbers taken minutes apart at most.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o benchOptions
	fs := newFlagSet("bench", "[flags]",
		"Measures the runtime in one process against one embedded server: raw NATS, a\n"+
			"tool's host, calls and steps through a turn, parallelism, throughput, abort and\n"+
			"assembly, each row against a baseline taken in the same run.", stderr)
	fs.IntVar(&o.n, "n", 2000, "samples per latency measurement")
	fs.IntVar(&o.turns, "turns", 64, "concurrent turns in the throughput measurement")
	fs.IntVar(&o.waiting, "waiting", 10000, "turns waiting on their model in the memory and mass-abort measurement")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&o.only, "only", "", "run only the measurements whose name contains this text")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments %q", pos)
	}
	if o.n < 10 {
		return usagef("-n %d: want at least 10", o.n)
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	progress := io.Discard
	if !o.json {
		progress = stderr
	}
	b, err := newBencher(ctx, o, progress)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer b.close()
	report := benchReport{GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Started: time.Now()}
	report.Results, err = b.runAll(ctx)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	printBench(stdout, report)
	return nil
}

// benchNameWidth is where a measurement's name wraps, so the table fits in 120 columns.
const benchNameWidth = 42

func printBench(w io.Writer, r benchReport) {
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "#\tmeasurement\tp50\tp90\tp99\tvalue\tvs\tratio\ttarget\t\n")
	num := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v)
	}
	// A baseline is named by its row number: its name is in its own row.
	rowOf := make(map[string]int, len(r.Results))
	for i, res := range r.Results {
		if _, dup := rowOf[res.Name]; !dup {
			rowOf[res.Name] = i + 1
		}
	}
	for i, res := range r.Results {
		met := ""
		if res.Met != nil {
			met = "met"
			if !*res.Met {
				met = "MISSED"
			}
		}
		ratio, vs := "-", "-"
		if res.Ratio != 0 {
			ratio = fmt.Sprintf("%.2f×", res.Ratio)
		}
		if n, ok := rowOf[res.Baseline]; ok && res.Baseline != "" {
			vs = fmt.Sprintf("#%d", n)
		}
		lines := wrapWords(res.Name+" ("+res.Unit+")", benchNameWidth)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", i+1, lines[0],
			num(res.P50), num(res.P90), num(res.P99), num(res.Value), vs, ratio,
			strings.TrimSpace(strings.Replace(res.Target, " baseline", "", 1)+" "+met))
		for _, l := range lines[1:] {
			fmt.Fprintf(tw, "\t  %s\t\t\t\t\t\t\t\t\n", l)
		}
	}
	tw.Flush()
	for _, line := range strings.Split(strings.TrimRight(table.String(), "\n"), "\n") {
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	fmt.Fprintf(w, "\n%s, %d CPUs. Latencies in microseconds; each ratio is against\nthe row numbered under vs, measured in this run.\n", r.GoVersion, r.CPUs)
}

// wrapWords breaks s into lines of at most width characters, at spaces.
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len([]rune(line))+1+len([]rune(word)) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}

// bencher holds the embedded server and node the suite runs against.
type bencher struct {
	o        benchOptions
	progress io.Writer
	srv      *bus.Server
	node     *actors.Node
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

func newBencher(ctx context.Context, o benchOptions, progress io.Writer) (*bencher, error) {
	b := &bencher{o: o, progress: progress}
	b.noop = toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{
			Name:        "noop",
			Description: "Does nothing.",
			Category:    "bench",
		},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			return toolbus.TextResult("ok"), nil
		},
	})
	b.wait = toolbus.MustDefine(toolbus.Def[noArgs]{
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
	b.block = toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{
			Name:        "block",
			Description: "Blocks until cancelled.",
			Category:    "bench",
		},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			r := b.blockCh.Load()
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
	var err error
	b.srv, err = bus.Start(ctx, bus.Config{Name: "bench", Logger: actors.DiscardLogger()})
	if err != nil {
		return nil, err
	}
	b.node, err = actors.StartNode(ctx, actors.NodeConfig{
		Name:       "bench",
		Connect:    func(name string) (*nats.Conn, error) { return b.srv.Connect(name) },
		Interest:   b.srv.Interest,
		Logger:     actors.DiscardLogger(),
		AbortGrace: 2 * time.Second,
		// The abort measurement holds 100 calls in flight at once.
		MaxConcurrent: 256,
		// Durable turns, for the checkpoint measurement.
		Turns: true,
	})
	if err != nil {
		b.srv.Close()
		return nil, err
	}
	if err := b.node.Host(ctx, "bench", []*toolbus.Tool{b.noop, b.wait, b.block}); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *bencher) close() {
	if b.node != nil {
		b.node.Close()
	}
	if b.srv != nil {
		b.srv.Close()
	}
}

func (b *bencher) say(format string, args ...any) {
	fmt.Fprintf(b.progress, format+"\n", args...)
}

func (b *bencher) runAll(ctx context.Context) ([]benchResult, error) {
	var out []benchResult
	want := func(name string) bool { return b.o.only == "" || bytes.Contains([]byte(name), []byte(b.o.only)) }

	b.say("direct call…")
	direct := b.direct()
	out = append(out, direct)

	b.say("raw NATS request-reply, a tool's host, and calls through turns, taking turns…")
	lat, err := b.latencies(ctx, want("one call through a turn"))
	if err != nil {
		return nil, err
	}
	raw := lat[0]
	out = append(out, raw)
	if len(lat) > 1 {
		out = append(out, compare(lat[1], raw, 0, false), compare(lat[2], raw, 2.0, true), compare(lat[3], raw, 3.0, true),
			compare(lat[4], raw, 0, false))
	}

	if want("parallel") {
		b.say("8 parallel 20 ms calls against one…")
		steps := max(b.o.n/40, 20)
		single, _, err := b.turnSteps(ctx, "20 ms", &b.wait.Spec, 1, steps)
		if err != nil {
			return nil, err
		}
		eight, _, err := b.turnSteps(ctx, "parallel 20 ms", &b.wait.Spec, 8, steps)
		if err != nil {
			return nil, err
		}
		out = append(out, single, compare(eight, single, 1.3, true))
	}

	if want("throughput") {
		b.say("concurrent throughput: raw request-reply and %d turns, taking turns…", b.o.turns)
		rawT, turnsT, err := b.throughputs(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, rawT, compareThroughput(turnsT, rawT, 0.5))
	}

	if want("abort") {
		b.say("abort latency with 100 calls in flight…")
		ab, err := b.abortLatency(ctx, 100, max(b.o.n/20, 50))
		if err != nil {
			return nil, err
		}
		out = append(out, ab)
	}

	if want("sandbox") {
		b.say("one run_command call, bare and sandboxed…")
		rows, err := b.sandbox(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}

	if want("checkpoint") {
		b.say("turn steps with and without checkpoints…")
		rows, err := b.checkpointCost(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}

	if want("waiting") {
		b.say("%d turns waiting on their model…", b.o.waiting)
		rows, err := b.waitingTurns(ctx, b.o.waiting)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}

	if want("assembly") {
		b.say("turn assembly…")
		asm, err := b.assembly(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, asm...)
	}
	return out, nil
}

// direct measures a no-op tool's Execute called as a Go function.
func (b *bencher) direct() benchResult {
	args := json.RawMessage(`{}`)
	samples := make([]time.Duration, 0, b.o.n)
	ctx := context.Background()
	for range b.o.n {
		t0 := time.Now()
		_, _ = b.noop.Execute(ctx, toolbus.Call{Args: args})
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
func (b *bencher) latencies(ctx context.Context, withTurns bool) ([]benchResult, error) {
	req, stop, err := b.echo()
	if err != nil {
		return nil, err
	}
	defer stop()
	hostConn, err := b.srv.Connect("bench-host-requester")
	if err != nil {
		return nil, err
	}
	defer hostConn.Close()
	var foreign *toolbus.Spec
	if withTurns {
		spec, stop, err := b.foreignTool(ctx)
		if err != nil {
			return nil, err
		}
		defer stop()
		foreign = spec
	}
	per := max(b.o.n/rounds, 10)
	var raw, host, steps, trips, foreignTrips []time.Duration
	for round := range rounds {
		s, err := b.rawSamples(req, per, round == 0)
		if err != nil {
			return nil, err
		}
		raw = append(raw, s...)
		if !withTurns {
			continue
		}
		if s, err = b.hostSamples(ctx, hostConn, per, round); err != nil {
			return nil, err
		}
		host = append(host, s...)
		st, tr, err := b.turnSamples(ctx, &b.noop.Spec, 1, per, round == 0)
		if err != nil {
			return nil, err
		}
		steps, trips = append(steps, st...), append(trips, tr...)
		if _, tr, err = b.turnSamples(ctx, foreign, 1, per, round == 0); err != nil {
			return nil, err
		}
		foreignTrips = append(foreignTrips, tr...)
	}
	out := []benchResult{latency("raw NATS request-reply", raw, "")}
	if withTurns {
		out = append(out,
			latency("request to the no-op tool's host, no turn", host, ""),
			latency("no-op call through a turn (dispatch → reply)", trips, ""),
			latency("turn step of 1 no-op call", steps, ""),
			latency("one no-op call through a turn to a foreign host (dispatch → reply)", foreignTrips, ""))
	}
	return out, nil
}

// rawSamples times core NATS request-reply on the same server, with an echo responder on
// its own connection: the floor of any call over the bus.
func (b *bencher) rawSamples(req *nats.Conn, n int, warm bool) ([]time.Duration, error) {
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
func (b *bencher) hostSamples(ctx context.Context, nc *nats.Conn, n, round int) ([]time.Duration, error) {
	subject := bus.ToolSubject(b.noop.Category, b.noop.Name)
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
func (b *bencher) echo() (*nats.Conn, func(), error) {
	resp, err := b.srv.Connect("bench-echo")
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
	req, err := b.srv.Connect("bench-requester")
	if err != nil {
		resp.Close()
		return nil, nil, err
	}
	return req, func() { req.Close(); resp.Close() }, nil
}

// stepModel asks for `calls` calls of one tool per step, for `steps` steps,
// and records the time between handing a response to the turn and being
// asked again: everything the runtime does for that step's calls.
type stepModel struct {
	tool      string
	namespace string
	calls     int
	steps     int

	mu   sync.Mutex
	last time.Time
	gaps []time.Duration
}

func (m *stepModel) Respond(ctx context.Context, req *gateway.Request) (*gateway.Response, error) {
	now := time.Now()
	m.mu.Lock()
	if req.Step > 0 {
		m.gaps = append(m.gaps, now.Sub(m.last))
	}
	m.mu.Unlock()
	if req.Step >= m.steps {
		return &gateway.Response{Items: []gateway.Item{{Kind: gateway.KindMessage, Role: gateway.RoleAssistant, Text: "done"}}}, nil
	}
	resp := &gateway.Response{Items: make([]gateway.Item, m.calls)}
	for i := range resp.Items {
		resp.Items[i] = gateway.Item{Kind: gateway.KindFunctionCall, CallID: fmt.Sprintf("c%d_%d", req.Step, i), Name: m.tool, Namespace: m.namespace, Arguments: "{}"}
	}
	m.mu.Lock()
	m.last = time.Now()
	m.mu.Unlock()
	return resp, nil
}

// turnSteps runs turns of `calls` calls per step and reports each step (the model's
// response handed over → the model asked again: repair, dispatch, execution, results,
// transcript and status) and each call's round trip (the turn's publish → the turn's
// receipt of the reply).
func (b *bencher) turnSteps(ctx context.Context, what string, tool *toolbus.Spec, calls, steps int) (step, call benchResult, err error) {
	samples, trips, err := b.turnSamples(ctx, tool, calls, steps, true)
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
func (b *bencher) turnSamples(ctx context.Context, tool *toolbus.Spec, calls, steps int, warm bool) (samples, trips []time.Duration, err error) {
	set, err := toolbus.NewSet(tool)
	if err != nil {
		return nil, nil, err
	}
	for ; len(samples) < steps; warm = false {
		n := min(100, steps-len(samples))
		m := &stepModel{tool: tool.Name, namespace: tool.Namespace, calls: calls, steps: n}
		res, err := b.node.Run(ctx, actors.TurnConfig{Model: m, Kit: toolsets.NewKit(set),
			Spec: bus.TurnSpec{Input: "bench", Limits: bus.TurnLimits{MaxSteps: n + 1}}})
		if err != nil {
			return nil, nil, err
		}
		if res.State != bus.TurnCompleted {
			return nil, nil, fmt.Errorf("turn ended %s: %s", res.State, res.Error)
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
// request-reply (as many requesters as there are turns) and concurrent turns of one
// no-op call per step.
func (b *bencher) throughputs(ctx context.Context) (raw, turns benchResult, err error) {
	req, stop, err := b.echo()
	if err != nil {
		return raw, turns, err
	}
	defer stop()
	set, err := toolbus.NewSet(&b.noop.Spec)
	if err != nil {
		return raw, turns, err
	}
	per := max(b.o.n/10, 50) // steps of each turn in a round, as many requests of each requester
	var rawCalls, turnCalls int
	var rawTime, turnTime time.Duration
	for range 3 {
		start := time.Now()
		if err := b.concurrently(func() error {
			for range per {
				if _, err := req.Request("bench.echo", []byte(`{}`), 10*time.Second); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return raw, turns, err
		}
		rawTime += time.Since(start)
		rawCalls += b.o.turns * per

		var calls atomic.Int64
		start = time.Now()
		if err := b.concurrently(func() error {
			m := &stepModel{tool: b.noop.Name, calls: 1, steps: per}
			res, err := b.node.Run(ctx, actors.TurnConfig{Model: m, Kit: toolsets.NewKit(set),
				Spec: bus.TurnSpec{Input: "bench", Limits: bus.TurnLimits{MaxSteps: per + 1}}})
			if err == nil && res.State != bus.TurnCompleted {
				err = fmt.Errorf("turn ended %s: %s", res.State, res.Error)
			}
			calls.Add(int64(len(res.Calls)))
			return err
		}); err != nil {
			return raw, turns, err
		}
		turnTime += time.Since(start)
		turnCalls += int(calls.Load())
	}
	raw = benchResult{Name: fmt.Sprintf("raw NATS request-reply, %d concurrent requesters", b.o.turns), Unit: "calls/s",
		Value: float64(rawCalls) / rawTime.Seconds(), Samples: rawCalls}
	turns = benchResult{Name: fmt.Sprintf("%d concurrent turns, one no-op call per step", b.o.turns), Unit: "calls/s",
		Value: float64(turnCalls) / turnTime.Seconds(), Samples: turnCalls}
	return raw, turns, nil
}

// concurrently runs f on as many goroutines as the throughput measurement has turns and
// returns one of their errors.
func (b *bencher) concurrently(f func() error) error {
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range b.o.turns {
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

// abortLatency starts a turn with `inflight` blocked calls, publishes its
// abort, and measures until the last call's context is cancelled.
func (b *bencher) abortLatency(ctx context.Context, inflight, rounds int) (benchResult, error) {
	set, err := toolbus.NewSet(&b.block.Spec)
	if err != nil {
		return benchResult{}, err
	}
	ctl, err := b.srv.Connect("bench-abort")
	if err != nil {
		return benchResult{}, err
	}
	defer ctl.Close()
	var samples []time.Duration
	for round := range rounds + 1 {
		r := &blockRound{}
		r.started.Add(inflight)
		r.done.Add(inflight)
		b.blockCh.Store(r)
		m := &stepModel{tool: b.block.Name, calls: inflight, steps: 1}
		done := make(chan actors.TurnResult, 1)
		id, err := b.node.Spawn(ctx, actors.TurnConfig{Model: m, Kit: toolsets.NewKit(set),
			Spec: bus.TurnSpec{Input: "bench", Limits: bus.TurnLimits{MaxSteps: 2}}, Done: func(r actors.TurnResult) { done <- r }})
		if err != nil {
			return benchResult{}, err
		}
		r.started.Wait()
		t0 := time.Now()
		if err := client.New(ctl).Abort(ctx, id, "bench"); err != nil {
			return benchResult{}, err
		}
		r.done.Wait()
		res := <-done
		if res.State != bus.TurnAborted {
			return benchResult{}, fmt.Errorf("abort: turn ended %s", res.State)
		}
		if round == 0 {
			continue // warm-up
		}
		last := slices.MaxFunc(r.cancelled, time.Time.Compare)
		samples = append(samples, last.Sub(t0))
	}
	res := latency(fmt.Sprintf("abort → all %d in-flight calls cancelled", inflight), samples, "")
	res.Target = "p99 ≤ 2000 µs"
	met := res.P99 <= 2000
	res.Met = &met
	return res, nil
}

// waitModel is a model that never answers: its turns wait until they are aborted.
type waitModel struct{ waiting *sync.WaitGroup }

func (m *waitModel) Respond(ctx context.Context, _ *gateway.Request) (*gateway.Response, error) {
	m.waiting.Done()
	<-ctx.Done()
	return nil, ctx.Err()
}

// waitingTurns starts n turns whose model never answers, measures what each costs the
// node in memory (heap and stacks, after a collection, against before them), then
// aborts them all and measures until the last one ended.
func (b *bencher) waitingTurns(ctx context.Context, n int) ([]benchResult, error) {
	set, err := toolbus.NewSet(&b.noop.Spec)
	if err != nil {
		return nil, err
	}
	ctl, err := b.srv.Connect("bench-waiting")
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	inUse := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse + ms.StackInuse
	}
	before := inUse()
	var waiting, ended sync.WaitGroup
	waiting.Add(n)
	ended.Add(n)
	m := &waitModel{waiting: &waiting}
	var aborted atomic.Int64
	ids := make([]string, 0, n)
	for range n {
		id, err := b.node.Spawn(ctx, actors.TurnConfig{Model: m, Kit: toolsets.NewKit(set),
			Spec: bus.TurnSpec{Input: "wait"},
			Done: func(r actors.TurnResult) {
				if r.State == bus.TurnAborted {
					aborted.Add(1)
				}
				ended.Done()
			}})
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	waiting.Wait()
	per := float64(inUse()-min(before, inUse())) / float64(n) / 1024
	// The aborts go out as one burst (actors.Abort flushes each, a round trip apiece).
	abort, err := json.Marshal(bus.Abort{Reason: "bench"})
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	for _, id := range ids {
		if err := ctl.Publish(bus.AbortSubject(id), abort); err != nil {
			return nil, err
		}
	}
	if err := ctl.Flush(); err != nil {
		return nil, err
	}
	ended.Wait()
	took := time.Since(t0)
	if a := aborted.Load(); a != int64(n) {
		return nil, fmt.Errorf("waiting turns: %d of %d ended aborted", a, n)
	}
	memMet, abortMet := per <= 64, took <= time.Second
	return []benchResult{
		{Name: fmt.Sprintf("memory per turn waiting on its model, %d turns", n), Unit: "KiB", Value: per, Samples: n,
			Target: "≤ 64 KiB", Met: &memMet},
		{Name: fmt.Sprintf("abort of %d waiting turns, until the last ended", n), Unit: "ms",
			Value: float64(took) / float64(time.Millisecond), Samples: n, Target: "≤ 1000 ms", Met: &abortMet},
	}, nil
}

// checkpointCost measures a step of one no-op call in a turn run in Go (no record, no
// fenced appends) against the same step in a durable turn taken from the intake (the
// response stored before the call goes out, the output as it arrives, each a fenced
// append; the record only at the claim and the end). Both turns play the same script; a
// step's time is the turn's wall time over its steps. Target: ≤ 5× (issue "Durable
// state with one owner"), and at most two writes a step, counted from the transcript.
func (b *bencher) checkpointCost(ctx context.Context) ([]benchResult, error) {
	steps := max(b.o.n/10, 50)
	type call struct {
		ID        string `json:"id"`
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
		Arguments string `json:"arguments"`
	}
	type step struct {
		Text  string `json:"text,omitempty"`
		Calls []call `json:"calls,omitempty"`
	}
	var script struct {
		Responses []step `json:"responses"`
	}
	for i := range steps {
		script.Responses = append(script.Responses, step{Calls: []call{{ID: fmt.Sprintf("c%d", i), Name: b.noop.Name, Namespace: b.noop.Category, Arguments: "{}"}}})
	}
	script.Responses = append(script.Responses, step{Text: "done"})
	raw, err := json.Marshal(script)
	if err != nil {
		return nil, err
	}
	// The durable turn includes the bench category through its agent's profile (a
	// category without a namespace is the namespace of its name).
	profiles, err := b.node.Profiles(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := profiles.Put(ctx, []byte(`{"version":1,"agent":"bench","namespaces":[{"name":"bench","load":"upfront"}]}`)); err != nil {
		return nil, err
	}
	spec := bus.TurnSpec{Agent: "bench", Input: "bench", Script: raw, Limits: bus.TurnLimits{MaxSteps: bus.MaxStepsLimit}}
	if steps+1 > bus.MaxStepsLimit {
		return nil, fmt.Errorf("checkpoint bench: %d steps exceed the limit", steps)
	}

	// In Go, no checkpoints: the same kit as the durable turn gets.
	var sc gateway.Script
	if err := json.Unmarshal(raw, &sc); err != nil {
		return nil, err
	}
	scripted, err := gateway.NewScripted(sc)
	if err != nil {
		return nil, err
	}
	kit, err := b.node.Assemble(ctx, spec)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	res, err := b.node.Run(ctx, actors.TurnConfig{Spec: spec, Model: scripted, Kit: kit})
	if err != nil {
		return nil, err
	}
	if res.State != bus.TurnCompleted {
		return nil, fmt.Errorf("checkpoint bench: turn in Go ended %s: %s", res.State, res.Error)
	}
	plain := time.Since(t0) / time.Duration(res.Steps)

	// Durable: through the intake, waiting for its done status.
	done, err := b.node.Conn().SubscribeSync(bus.AllStatuses)
	if err != nil {
		return nil, err
	}
	defer func() { _ = done.Unsubscribe() }()
	t0 = time.Now()
	id, err := b.node.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	var st bus.TurnStatus
	for {
		m, err := done.NextMsgWithContext(ctx)
		if err != nil {
			return nil, err
		}
		if m.Subject == bus.TurnStatusSubject(id, bus.StatusDone) {
			if err := json.Unmarshal(m.Data, &st); err != nil {
				return nil, err
			}
			break
		}
	}
	if st.State != bus.TurnCompleted {
		return nil, fmt.Errorf("checkpoint bench: durable turn ended %s: %s", st.State, st.Error)
	}
	durable := time.Since(t0) / time.Duration(st.Step)
	audit, err := durablepkg.AuditTranscript(ctx, b.node.JetStream(), id)
	if err != nil {
		return nil, err
	}
	// The claim's message (the input) is the turn's, not a step's.
	perStep := float64(audit.Messages-1) / float64(st.Step)
	base := benchResult{Name: "turn step of 1 no-op call, turn run in Go (not durable)", Unit: "us",
		P50: float64(plain) / float64(time.Microsecond), Samples: res.Steps, Note: "mean of one turn's steps"}
	r := benchResult{Name: "turn step of 1 no-op call, durable turn (fenced appends)", Unit: "us",
		P50: float64(durable) / float64(time.Microsecond), Samples: st.Step,
		Note: fmt.Sprintf("mean of one turn's steps; %.2f writes a step (transcript appends; the record is written at the claim and the end)", perStep)}
	return []benchResult{base, compare(r, base, 5, true)}, nil
}

// foreignTool serves a no-op tool as a plain micro service that follows
// docs/protocol.md (not a toolbus host), and finds its spec through the bus catalog.
func (b *bencher) foreignTool(ctx context.Context) (*toolbus.Spec, func(), error) {
	nc, err := b.srv.Connect("bench-foreign")
	if err != nil {
		return nil, nil, err
	}
	svc, err := startForeignHost(nc, "foreign", "ext", 1)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	stop := func() { _ = svc.Stop(); nc.Close() }
	cat := catalog.New(b.node.Conn(), catalog.Options{Logger: actors.DiscardLogger()})
	if err := cat.Refresh(ctx); err != nil {
		stop()
		return nil, nil, err
	}
	spec, err := cat.Lookup("ext.tool_0")
	if err != nil {
		stop()
		return nil, nil, err
	}
	return spec, stop, nil
}

// startForeignHost serves n no-op tools of category in namespace as a plain micro
// service that answers each request in its handler, with no toolbus host around it.
func startForeignHost(nc *nats.Conn, category, namespace string, n int) (micro.Service, error) {
	params := schema.MustFromJSON([]byte(`{"type":"object","properties":{}}`))
	specs := make([]*toolbus.Spec, n)
	for i := range specs {
		specs[i] = &toolbus.Spec{Name: fmt.Sprintf("tool_%d", i), Description: fmt.Sprintf("Foreign tool number %d.", i),
			Namespace: namespace, NamespaceDescription: "Tools of " + namespace + ".", Category: category, Params: params}
	}
	return catalog.Serve(nc, catalog.Service{Category: category, Node: "bench-foreign", Specs: specs,
		Handle: func(s *toolbus.Spec, r micro.Request) {
			b, _ := json.Marshal(bus.ToolReply{Call: r.Headers().Get(bus.HeaderCall), Tool: s.Name, Outcome: bus.OutcomeOK,
				Content: []bus.ContentPart{{Type: bus.ContentText, Text: "ok"}}})
			_ = r.Respond(b)
		}})
}

// assembly measures building a main turn's kit: built-in tools only, against putting
// the same specs into a set; then from a catalog of 500 foreign tools in 20 namespaces,
// all named by the agent's profile.
func (b *bencher) assembly(ctx context.Context) ([]benchResult, error) {
	spec := bus.TurnSpec{Agent: "bench", Input: "bench"}
	prebuilt, err := toolsets.Assemble(spec, nil, nil, toolsets.Options{})
	if err != nil {
		return nil, err
	}
	specs := prebuilt.Tools.Specs()

	nc, err := b.srv.Connect("bench-catalog")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	profile := &toolsets.Profile{Version: toolsets.ProfileVersion, Agent: "bench"}
	for i := range 20 {
		ns := fmt.Sprintf("ns%02d", i)
		svc, err := startForeignHost(nc, "cat"+ns, ns, 25)
		if err != nil {
			return nil, err
		}
		defer func() { _ = svc.Stop() }()
		profile.Namespaces = append(profile.Namespaces, toolsets.NamespaceRef{Name: ns})
	}
	cat := catalog.New(b.node.Conn(), catalog.Options{Logger: actors.DiscardLogger()})
	if err := cat.Refresh(ctx); err != nil {
		return nil, err
	}
	big, err := toolsets.Assemble(spec, profile, cat, toolsets.Options{})
	if err != nil {
		return nil, err
	}
	if big.Tools.Len() != len(specs)+500 || len(big.Notes) > 0 {
		return nil, fmt.Errorf("assembly from the catalog: %d tools (want %d), notes %q", big.Tools.Len(), len(specs)+500, big.Notes)
	}

	var asm, set, asmBig []time.Duration
	for range b.o.n {
		t0 := time.Now()
		if _, err := toolsets.Assemble(spec, nil, nil, toolsets.Options{}); err != nil {
			return nil, err
		}
		asm = append(asm, time.Since(t0))
		t0 = time.Now()
		if _, err := toolbus.NewSet(specs...); err != nil {
			return nil, err
		}
		set = append(set, time.Since(t0))
		t0 = time.Now()
		if _, err := toolsets.Assemble(spec, profile, cat, toolsets.Options{}); err != nil {
			return nil, err
		}
		asmBig = append(asmBig, time.Since(t0))
	}
	base := latency("tool set from already-built specs", set, "")
	r := latency(fmt.Sprintf("turn assembly (%d built-in tools)", len(specs)), asm, "")
	rb := latency(fmt.Sprintf("turn assembly from a catalog of 500 tools in 20 namespaces (%d tools)", big.Tools.Len()), asmBig, "")
	rb.Target = "p50 ≤ 100 µs"
	met := rb.P50 <= 100
	rb.Met = &met
	return []benchResult{base, compare(r, base, 0, false), rb}, nil
}

// sandbox measures one run_command call (`true`) in a bubblewrap sandbox against the same
// call run as a bare process; without bubblewrap, the sandboxed row says why.
func (b *bencher) sandbox(ctx context.Context) ([]benchResult, error) {
	home, err := os.MkdirTemp("", "toolbus-bench-home-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	n := max(b.o.n/20, 50)
	samples, err := computer.CommandLatencies(ctx, computer.Config{Sandbox: computer.SandboxConfig{Mode: computer.SandboxOff}}, home, n)
	if err != nil {
		return nil, err
	}
	bare := latency("one run_command call, bare process", samples, "/bin/sh -c true in its own process group")
	const name = "one run_command call, sandboxed (bwrap)"
	samples, err = computer.CommandLatencies(ctx, computer.Config{}, home, n)
	if errors.Is(err, computer.ErrSandboxUnavailable) {
		return []benchResult{bare, {Name: name, Unit: "us", Baseline: bare.Name, Note: err.Error()}}, nil
	}
	if err != nil {
		return nil, err
	}
	return []benchResult{bare, compare(latency(name, samples, "the same in a bubblewrap sandbox"), bare, 0, false)}, nil
}

// latency summarises samples in microseconds.
func latency(name string, samples []time.Duration, note string) benchResult {
	s := slices.Clone(samples)
	slices.Sort(s)
	pct := func(p float64) float64 {
		if len(s) == 0 {
			return 0
		}
		i := min(int(p*float64(len(s))), len(s)-1)
		return float64(s[i]) / float64(time.Microsecond)
	}
	return benchResult{Name: name, Unit: "us", P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Samples: len(s), Note: note}
}

// compare sets r's ratio of p50s to base and checks it against a maximum.
func compare(r, base benchResult, maxRatio float64, withTarget bool) benchResult {
	r.Baseline = base.Name
	if base.P50 > 0 {
		r.Ratio = r.P50 / base.P50
	}
	if withTarget {
		r.Target = fmt.Sprintf("p50 ≤ %.1f× baseline", maxRatio)
		met := r.Ratio <= maxRatio
		r.Met = &met
	}
	return r
}

func compareThroughput(r, base benchResult, minRatio float64) benchResult {
	r.Baseline = base.Name
	if base.Value > 0 {
		r.Ratio = r.Value / base.Value
	}
	r.Target = fmt.Sprintf("≥ %.1f× baseline", minRatio)
	met := r.Ratio >= minRatio
	r.Met = &met
	return r
}
