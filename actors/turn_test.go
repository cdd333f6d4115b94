package actors

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/toolsets"
)

// harness is a node on a real embedded server with test categories.
type harness struct {
	t    *testing.T
	srv  *server.Server
	node *Node
}

func newHarness(t *testing.T, tools ...*toolbus.Tool) *harness {
	t.Helper()
	return newHarnessWith(t, nil, tools...)
}

// newHarnessWith is newHarness with the node's config edited first.
func newHarnessWith(t *testing.T, edit func(*NodeConfig), tools ...*toolbus.Tool) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{StoreDir: t.TempDir(), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg := NodeConfig{
		Name:       "n1",
		Connect:    func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Interest:   srv.Interest, // as an embedded node runs: what nobody watches is not sent
		Logger:     DiscardLogger(),
		AbortGrace: 300 * time.Millisecond,
	}
	if edit != nil {
		edit(&cfg)
	}
	n, err := StartNode(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	byCat := map[string][]*toolbus.Tool{}
	var cats []string
	for _, tl := range tools {
		if byCat[tl.Category] == nil {
			cats = append(cats, tl.Category)
		}
		byCat[tl.Category] = append(byCat[tl.Category], tl)
	}
	for _, c := range cats {
		if err := n.Host(ctx, c, byCat[c]); err != nil {
			t.Fatal(err)
		}
	}
	return &harness{t: t, srv: srv, node: n}
}

// run plays a script against a tool set and returns the result.
func (h *harness) run(ctx context.Context, tools []*toolbus.Tool, steps ...gateway.ScriptStep) TurnResult {
	h.t.Helper()
	model, err := gateway.NewScripted(gateway.Script{Responses: steps})
	if err != nil {
		h.t.Fatal(err)
	}
	res, err := h.node.Run(ctx, TurnConfig{
		Spec: bus.TurnSpec{Agent: "tester", Input: "go"}, Model: model, Kit: kitOf(h.t, tools...),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// kitOf is the kit of a main turn with exactly these tools.
func kitOf(t testing.TB, tools ...*toolbus.Tool) *toolsets.Kit {
	t.Helper()
	set, err := toolbus.NewSet(toolbus.SpecsOf(tools)...)
	if err != nil {
		t.Fatal(err)
	}
	return toolsets.NewKit(set)
}

type noArgs struct{}

type idArgs struct {
	ID string `json:"id"`
}

// recorder logs the start and end of calls and counts how many run at once.
type recorder struct {
	mu     sync.Mutex
	log    []string
	active int
	peak   int
}

func (r *recorder) enter(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, "start "+id)
	r.active++
	r.peak = max(r.peak, r.active)
}

func (r *recorder) exit(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, "end "+id)
	r.active--
}

func (r *recorder) entries() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// barrier releases its waiters once n have arrived. A waiter that is not
// joined by the others within its context fails, which is how a test proves
// that calls ran at the same time rather than one after the other.
type barrier struct {
	n       int
	mu      sync.Mutex
	arrived int
	open    chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, open: make(chan struct{})} }

func (b *barrier) wait(ctx context.Context) error {
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.n {
		close(b.open)
	}
	b.mu.Unlock()
	select {
	case <-b.open:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("barrier: only %d of %d calls arrived", b.arrived, b.n)
	}
}

func call(name, args string) gateway.ScriptCall {
	return gateway.ScriptCall{Name: name, Arguments: args}
}

func outputs(res TurnResult) map[string]toolbus.Item {
	out := map[string]toolbus.Item{}
	for _, it := range res.Transcript {
		if it.Kind == toolbus.KindCallOutput {
			out[it.CallID] = it
		}
	}
	return out
}

func outputText(it toolbus.Item) string {
	var parts []string
	for _, p := range it.Output {
		parts = append(parts, p.Text)
	}
	return strings.Join(parts, "\n")
}

func outcomes(res TurnResult) []string {
	var out []string
	for _, c := range res.Calls {
		out = append(out, c.Tool+":"+string(c.Outcome))
	}
	return out
}

func TestParallelCallsRunTogether(t *testing.T) {
	t.Parallel()
	const n = 4
	b := newBarrier(n)
	rec := &recorder{}
	meet := toolbus.MustDefine(toolbus.Def[idArgs]{
		Spec: toolbus.Spec{Name: "meet", Category: "test", Mode: toolbus.Parallel, Timeout: 10 * time.Second},
		Execute: func(ctx context.Context, c toolbus.Call, a idArgs) (toolbus.Result, error) {
			rec.enter(a.ID)
			defer rec.exit(a.ID)
			if err := b.wait(ctx); err != nil {
				return toolbus.Result{}, err
			}
			return toolbus.TextResult("met " + a.ID), nil
		},
	})
	h := newHarness(t, meet)
	var calls []gateway.ScriptCall
	for i := range n {
		calls = append(calls, call("meet", fmt.Sprintf(`{"id":"m%d"}`, i)))
	}
	res := h.run(context.Background(), []*toolbus.Tool{meet},
		gateway.ScriptStep{Calls: calls}, gateway.ScriptStep{Text: "done"})
	if res.State != bus.TurnCompleted || res.Text != "done" {
		t.Fatalf("state %s text %q err %q", res.State, res.Text, res.ErrorText())
	}
	for _, c := range res.Calls {
		if c.Outcome != bus.OutcomeOK {
			t.Errorf("call %s: %s %s", c.Call, c.Outcome, c.Error)
		}
	}
	if rec.peak != n {
		t.Errorf("peak concurrency %d, want %d", rec.peak, n)
	}
}

func TestSequentialCallsNeverOverlapAndKeepOrder(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	step := toolbus.MustDefine(toolbus.Def[idArgs]{
		Spec: toolbus.Spec{Name: "step", Category: "test", Mode: toolbus.Sequential},
		Execute: func(ctx context.Context, c toolbus.Call, a idArgs) (toolbus.Result, error) {
			rec.enter(a.ID)
			defer rec.exit(a.ID)
			time.Sleep(5 * time.Millisecond) // long enough for a wrongly dispatched next call to arrive
			return toolbus.TextResult(a.ID), nil
		},
	})
	h := newHarness(t, step)
	var calls []gateway.ScriptCall
	var want []string
	for i := range 5 {
		id := fmt.Sprintf("s%d", i)
		calls = append(calls, call("step", `{"id":"`+id+`"}`))
		want = append(want, "start "+id, "end "+id)
	}
	res := h.run(context.Background(), []*toolbus.Tool{step}, gateway.ScriptStep{Calls: calls}, gateway.ScriptStep{Text: "ok"})
	if res.State != bus.TurnCompleted {
		t.Fatalf("state %s: %s", res.State, res.ErrorText())
	}
	if got := rec.entries(); !slices.Equal(got, want) {
		t.Errorf("execution order\n got %v\nwant %v", got, want)
	}
	if rec.peak != 1 {
		t.Errorf("peak concurrency %d, want 1", rec.peak)
	}
}

// TestMixedBatchBarriers checks P P S P P: the first two run together, the
// sequential call runs alone after both, and the last two run together after it.
func TestMixedBatchBarriers(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	first, last := newBarrier(2), newBarrier(2)
	par := toolbus.MustDefine(toolbus.Def[idArgs]{
		Spec: toolbus.Spec{Name: "par", Category: "test", Mode: toolbus.Parallel, Timeout: 10 * time.Second},
		Execute: func(ctx context.Context, c toolbus.Call, a idArgs) (toolbus.Result, error) {
			rec.enter(a.ID)
			defer rec.exit(a.ID)
			b := first
			if a.ID >= "p3" {
				b = last
			}
			return toolbus.TextResult(a.ID), b.wait(ctx)
		},
	})
	seq := toolbus.MustDefine(toolbus.Def[idArgs]{
		Spec: toolbus.Spec{Name: "seq", Category: "test", Mode: toolbus.Sequential},
		Execute: func(ctx context.Context, c toolbus.Call, a idArgs) (toolbus.Result, error) {
			rec.enter(a.ID)
			defer rec.exit(a.ID)
			time.Sleep(5 * time.Millisecond)
			return toolbus.TextResult(a.ID), nil
		},
	})
	h := newHarness(t, par, seq)
	res := h.run(context.Background(), []*toolbus.Tool{par, seq}, gateway.ScriptStep{Calls: []gateway.ScriptCall{
		call("par", `{"id":"p1"}`), call("par", `{"id":"p2"}`), call("seq", `{"id":"s"}`),
		call("par", `{"id":"p3"}`), call("par", `{"id":"p4"}`),
	}}, gateway.ScriptStep{Text: "ok"})
	if got := outcomes(res); !slices.Equal(got, []string{"par:ok", "par:ok", "seq:ok", "par:ok", "par:ok"}) {
		t.Fatalf("outcomes %v (%+v)", got, res.Calls)
	}
	log := rec.entries()
	idx := func(e string) int { return slices.Index(log, e) }
	// s starts after both p1 and p2 ended, and ends before p3 and p4 start.
	if idx("start s") < idx("end p1") || idx("start s") < idx("end p2") {
		t.Errorf("sequential call started before the parallel run ended: %v", log)
	}
	if idx("end s") > idx("start p3") || idx("end s") > idx("start p4") {
		t.Errorf("calls after the sequential call started before it ended: %v", log)
	}
	if rec.peak != 2 {
		t.Errorf("peak concurrency %d, want 2", rec.peak)
	}
}

func TestResultsInModelOrder(t *testing.T) {
	t.Parallel()
	// Each call waits for the one after it to finish, so they finish in
	// reverse order of the model's.
	const n = 4
	done := make([]chan struct{}, n+1)
	for i := range done {
		done[i] = make(chan struct{})
	}
	close(done[n])
	type posArgs struct {
		Pos int `json:"pos"`
	}
	wait := toolbus.MustDefine(toolbus.Def[posArgs]{
		Spec: toolbus.Spec{Name: "wait", Category: "test", Timeout: 10 * time.Second},
		Execute: func(ctx context.Context, c toolbus.Call, a posArgs) (toolbus.Result, error) {
			select {
			case <-done[a.Pos+1]:
			case <-ctx.Done():
				return toolbus.Result{}, ctx.Err()
			}
			close(done[a.Pos])
			return toolbus.TextResult(fmt.Sprint("result ", a.Pos)), nil
		},
	})
	h := newHarness(t, wait)
	var calls []gateway.ScriptCall
	for i := range n {
		calls = append(calls, gateway.ScriptCall{ID: fmt.Sprintf("c%d", i), Name: "wait", Arguments: fmt.Sprintf(`{"pos":%d}`, i)})
	}
	res := h.run(context.Background(), []*toolbus.Tool{wait}, gateway.ScriptStep{Calls: calls}, gateway.ScriptStep{Text: "ok"})
	var got []string
	for _, it := range res.Transcript {
		if it.Kind == toolbus.KindCallOutput {
			got = append(got, it.CallID+"="+outputText(it))
		}
	}
	want := []string{"c0=result 0", "c1=result 1", "c2=result 2", "c3=result 3"}
	if !slices.Equal(got, want) {
		t.Errorf("outputs %v, want %v", got, want)
	}
}

func TestBadCallsReachTheModelAndTheTurnGoesOn(t *testing.T) {
	t.Parallel()
	type pathArgs struct {
		Path string `json:"path" jsonschema:"minLength=1"`
	}
	ran := atomic.Int32{}
	read := toolbus.MustDefine(toolbus.Def[pathArgs]{
		Spec: toolbus.Spec{Name: "read", Category: "test", ReadOnly: true},
		Execute: func(ctx context.Context, c toolbus.Call, a pathArgs) (toolbus.Result, error) {
			ran.Add(1)
			return toolbus.TextResult("content of " + a.Path), nil
		},
	})
	h := newHarness(t, read)
	res := h.run(context.Background(), []*toolbus.Tool{read},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{
			{ID: "unknown", Name: "delete_everything", Arguments: `{}`},
			{ID: "invalid", Name: "read", Arguments: `{"path": 7}`},
			{ID: "repaired", Name: "read", Arguments: "```json\n{'path': 'a.txt',}\n```"},
		}},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{{ID: "again", Name: "read", Arguments: `{"path":"b.txt"}`}}},
		gateway.ScriptStep{Text: "finished"},
	)
	if res.State != bus.TurnCompleted || res.Text != "finished" || res.Steps != 3 {
		t.Fatalf("state %s text %q steps %d: %s", res.State, res.Text, res.Steps, res.ErrorText())
	}
	out := outputs(res)
	if it := out["unknown"]; !it.IsError || !strings.Contains(outputText(it), `unknown tool "delete_everything"`) || !strings.Contains(outputText(it), "read") {
		t.Errorf("unknown tool output: %+v", it)
	}
	if it := out["invalid"]; !it.IsError || !strings.Contains(outputText(it), "/path") {
		t.Errorf("invalid args output: %+v", it)
	}
	if it := out["repaired"]; it.IsError || outputText(it) != "content of a.txt" {
		t.Errorf("repaired call output: %+v", it)
	}
	if it := out["again"]; it.IsError || outputText(it) != "content of b.txt" {
		t.Errorf("second step output: %+v", it)
	}
	if n := ran.Load(); n != 2 {
		t.Errorf("tool ran %d times, want 2", n)
	}
	var rungs []string
	for _, c := range res.Calls {
		if c.Call == "repaired" {
			rungs = c.Rungs
		}
	}
	if !slices.Contains(rungs, "extract") || !slices.Contains(rungs, "repair") {
		t.Errorf("repaired call rungs %v, want extract and repair", rungs)
	}
}

func TestHostRefusesInvalidDirectRequest(t *testing.T) {
	t.Parallel()
	type countArgs struct {
		N int `json:"n" jsonschema:"minimum=1"`
	}
	ran := atomic.Int32{}
	count := toolbus.MustDefine(toolbus.Def[countArgs]{
		Spec: toolbus.Spec{Name: "count", Category: "test"},
		Execute: func(ctx context.Context, c toolbus.Call, a countArgs) (toolbus.Result, error) {
			ran.Add(1)
			return toolbus.TextResult(fmt.Sprint(a.N)), nil
		},
	})
	h := newHarness(t, count)
	nc, err := h.srv.Connect("direct")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	past := bus.FormatDeadline(time.Now().Add(-time.Second))
	for _, tc := range []struct {
		args    string
		headers map[string]string
		outcome bus.Outcome
		errPart string
	}{
		{`{"n":0}`, nil, bus.OutcomeInvalid, "/n"},
		{`{"n":"3"}`, nil, bus.OutcomeInvalid, "/n"},
		{`not json`, nil, bus.OutcomeInvalid, "invalid arguments"},
		{`{"n":3}`, map[string]string{bus.HeaderDeadline: "tomorrow"}, bus.OutcomeInvalid, `bad Toolbus-Deadline header "tomorrow"`},
		{`{"n":3}`, map[string]string{bus.HeaderDeadline: past}, bus.OutcomeTimeout, "deadline already past on arrival (" + past + "); the tool did not run"},
		{`{"n":3}`, map[string]string{bus.HeaderTurn: "a.b"}, bus.OutcomeInvalid, `bad Toolbus-Turn header "a.b"`},
		// Counted once: an empty header is an absent one, and truncation only
		// stops destructive tools.
		{`{"n":3}`, map[string]string{bus.HeaderDeadline: "", bus.HeaderTruncated: "1"}, bus.OutcomeOK, ""},
	} {
		msg := nats.NewMsg(bus.ToolSubject("test", "count"))
		msg.Data = []byte(tc.args)
		for k, v := range tc.headers {
			msg.Header.Set(k, v)
		}
		m, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		var r bus.ToolReply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		if r.Outcome != tc.outcome || !strings.Contains(r.Error, tc.errPart) {
			t.Errorf("%s %v: outcome %s error %q, want %s containing %q", tc.args, tc.headers, r.Outcome, r.Error, tc.outcome, tc.errPart)
		}
	}
	if n := ran.Load(); n != 1 {
		t.Errorf("tool ran %d times, want 1", n)
	}
	// Every refusal counts as an error in the endpoint's stats; the run as ok.
	m, err := nc.Request("$SRV.STATS."+bus.CategoryService("test"), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats struct {
		Endpoints []struct {
			Name string `json:"name"`
			Data struct {
				OK     int64 `json:"ok"`
				Errors int64 `json:"errors"`
			} `json:"data"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(m.Data, &stats); err != nil {
		t.Fatal(err)
	}
	if len(stats.Endpoints) != 1 || stats.Endpoints[0].Data.OK != 1 || stats.Endpoints[0].Data.Errors != 6 {
		t.Errorf("stats %s", m.Data)
	}
}

func TestDeadlineCancelsCall(t *testing.T) {
	t.Parallel()
	var sawCancel atomic.Bool
	slow := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "slow", Category: "test", Timeout: 100 * time.Millisecond},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			<-ctx.Done()
			sawCancel.Store(true)
			return toolbus.Result{}, ctx.Err()
		},
	})
	h := newHarness(t, slow)
	res := h.run(context.Background(), []*toolbus.Tool{slow},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{call("slow", `{}`)}}, gateway.ScriptStep{Text: "ok"})
	if got := outcomes(res); !slices.Equal(got, []string{"slow:timeout"}) {
		t.Fatalf("outcomes %v: %+v", got, res.Calls)
	}
	if !sawCancel.Load() {
		t.Error("execute never saw its context cancelled")
	}
	if res.State != bus.TurnCompleted {
		t.Errorf("state %s", res.State)
	}
}

func TestAbortRecordsHonestOutcomes(t *testing.T) {
	t.Parallel()
	started := newBarrier(3) // the three in-flight calls, plus the test
	release := make(chan struct{})
	var stopped atomic.Int32
	coop := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "coop", Category: "test", Timeout: time.Minute},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			_ = started.wait(context.Background())
			<-ctx.Done()
			stopped.Add(1)
			return toolbus.TextResult("partial work"), ctx.Err()
		},
	})
	stubborn := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "stubborn", Category: "test", Timeout: time.Minute},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			_ = started.wait(context.Background())
			<-release // ignores its context
			return toolbus.TextResult("late"), nil
		},
	})
	later := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "later", Category: "test", Mode: toolbus.Sequential},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			t.Error("a call after the abort ran")
			return toolbus.Result{}, nil
		},
	})
	// The grace must outlast the cooperative call's reply on a loaded machine: at
	// 300 ms it was abandoned once in CI (go test -race beside the other packages).
	// The stubborn call is abandoned after it, so the test takes that long.
	h := newHarnessWith(t, func(c *NodeConfig) { c.AbortGrace = 3 * time.Second }, coop, stubborn, later)
	defer close(release)

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_ = started.wait(context.Background())
		cancel() // node.Run turns this into an abort on the bus
	}()
	res := h.run(ctx, []*toolbus.Tool{coop, stubborn, later},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{
			{ID: "a", Name: "coop", Arguments: `{}`},
			{ID: "b", Name: "stubborn", Arguments: `{}`},
			{ID: "c", Name: "later", Arguments: `{}`},
		}},
		gateway.ScriptStep{Text: "must not be reached"},
	)
	if res.State != bus.TurnAborted {
		t.Fatalf("state %s: %s", res.State, res.ErrorText())
	}
	want := []string{"coop:stopped", "stubborn:abandoned", "later:not_started"}
	if got := outcomes(res); !slices.Equal(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	out := outputs(res)
	for _, id := range []string{"a", "b", "c"} {
		if it, ok := out[id]; !ok || !it.IsError {
			t.Errorf("call %s has no error output: %+v", id, it)
		}
	}
	if txt := outputText(out["a"]); !strings.Contains(txt, "the turn was aborted: cancelled by the caller") {
		t.Errorf("stopped call does not say why: %q", txt)
	}
	if !strings.Contains(outputText(out["a"]), "partial work") {
		t.Errorf("stopped call lost its partial output: %q", outputText(out["a"]))
	}
	if stopped.Load() != 1 {
		t.Errorf("cooperative call saw no cancellation")
	}
	if res.Steps != 1 {
		t.Errorf("the model was called %d times, want 1", res.Steps)
	}
}

// A response the abort cuts after its first call went out is a step of the turn: the
// transcript holds the call as the step's, and the turn's steps say so (they said none).
func TestAbortMidResponseCountsStep(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	coop := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "coop", Category: "test", Timeout: time.Minute},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			close(started)
			<-ctx.Done()
			return toolbus.Result{}, ctx.Err()
		},
	})
	h := newHarness(t, coop)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel() // node.Run turns this into an abort on the bus
	}()
	// The model writes its second call a minute after the first: the abort comes first.
	res := h.run(ctx, []*toolbus.Tool{coop}, gateway.ScriptStep{Calls: []gateway.ScriptCall{
		{ID: "a", Name: "coop", Arguments: `{}`},
		{ID: "b", Name: "coop", Arguments: `{}`, DelayMS: 60_000},
	}})
	if res.State != bus.TurnAborted {
		t.Fatalf("state %s: %s", res.State, res.ErrorText())
	}
	var step int
	for _, it := range res.Transcript {
		if it.Kind == toolbus.KindFunctionCall && it.CallID == "a" && it.Run != nil {
			step = it.Run.Step
		}
	}
	if step != 1 || res.Steps != 1 {
		t.Errorf("the call is step %d's, the turn took %d steps; want 1 and 1", step, res.Steps)
	}
}

func TestAbortWhileWaitingForModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	entered := make(chan struct{})
	model := modelFunc(func(ctx context.Context, req *gateway.Request) (*gateway.Response, error) {
		close(entered)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	res, err := h.node.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Input: "hi"}, Model: model, Kit: kitOf(t)})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bus.TurnAborted {
		t.Errorf("state %s (%s), want aborted", res.State, res.ErrorText())
	}
}

type modelFunc func(ctx context.Context, req *gateway.Request) (*gateway.Response, error)

func (f modelFunc) Respond(ctx context.Context, req *gateway.Request) (*gateway.Response, error) {
	return f(ctx, req)
}

func TestCategoryWithoutHostFailsFast(t *testing.T) {
	t.Parallel()
	orphan := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "orphan", Category: "nobody", Timeout: time.Hour},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			return toolbus.Result{}, nil
		},
	})
	h := newHarness(t) // hosts nothing
	res := h.run(context.Background(), []*toolbus.Tool{orphan},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{{ID: "x", Name: "orphan", Arguments: `{}`}}},
		gateway.ScriptStep{Text: "ok"})
	if got := outcomes(res); !slices.Equal(got, []string{"orphan:unavailable"}) {
		t.Fatalf("outcomes %v", got)
	}
	if txt := outputText(outputs(res)["x"]); !strings.Contains(txt, `no host serves category "nobody"`) {
		t.Errorf("output %q", txt)
	}
	if res.State != bus.TurnCompleted {
		t.Errorf("state %s", res.State)
	}
}

func TestTerminateAndStepLimit(t *testing.T) {
	t.Parallel()
	stop := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "stop", Category: "test"},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			r := toolbus.TextResult("stopping")
			r.Terminate = true
			return r, nil
		},
	})
	h := newHarness(t, stop)
	res := h.run(context.Background(), []*toolbus.Tool{stop},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{call("stop", `{}`)}},
		gateway.ScriptStep{Text: "must not be reached"})
	if res.State != bus.TurnTerminated || res.Steps != 1 {
		t.Errorf("state %s steps %d", res.State, res.Steps)
	}

	loop := modelFunc(func(ctx context.Context, req *gateway.Request) (*gateway.Response, error) {
		return &gateway.Response{Items: []toolbus.Item{{Kind: toolbus.KindFunctionCall, CallID: fmt.Sprint("l", req.Step), Name: "nothing", Arguments: "{}"}}}, nil
	})
	res, err := h.node.Run(context.Background(), TurnConfig{Spec: bus.TurnSpec{Input: "loop", Limits: bus.TurnLimits{MaxSteps: 3}}, Model: loop, Kit: kitOf(t, stop)})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bus.TurnStepLimit || res.Steps != 3 {
		t.Errorf("state %s steps %d", res.State, res.Steps)
	}
}

func TestTruncatedDestructiveCallIsRefused(t *testing.T) {
	t.Parallel()
	type writeArgs struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	wrote := atomic.Int32{}
	write := toolbus.MustDefine(toolbus.Def[writeArgs]{
		Spec: toolbus.Spec{Name: "write", Category: "test", Destructive: true, Mode: toolbus.Sequential},
		Execute: func(ctx context.Context, c toolbus.Call, a writeArgs) (toolbus.Result, error) {
			wrote.Add(1)
			return toolbus.TextResult("written"), nil
		},
	})
	h := newHarness(t, write)
	res := h.run(context.Background(), []*toolbus.Tool{write},
		gateway.ScriptStep{Truncated: true, Calls: []gateway.ScriptCall{{ID: "w", Name: "write", Arguments: `{"path":"a.txt","content":"hel`}}},
		gateway.ScriptStep{Text: "ok"})
	if wrote.Load() != 0 {
		t.Error("a truncated destructive call ran")
	}
	if it := outputs(res)["w"]; !it.IsError || !strings.Contains(outputText(it), "re-issue") {
		t.Errorf("output %+v", it)
	}
}

func TestTranscriptIsStored(t *testing.T) {
	t.Parallel()
	echo := toolbus.MustDefine(toolbus.Def[idArgs]{
		Spec: toolbus.Spec{Name: "echo", Category: "test"},
		Execute: func(ctx context.Context, c toolbus.Call, a idArgs) (toolbus.Result, error) {
			return toolbus.TextResult(a.ID), nil
		},
	})
	h := newHarness(t, echo)
	res := h.run(context.Background(), []*toolbus.Tool{echo},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{call("echo", `{"id":"x"}`)}}, gateway.ScriptStep{Text: "bye"})
	items, err := durable.ReadTranscript(context.Background(), h.node.JetStream(), res.Turn)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(items)
	want, _ := json.Marshal(res.Transcript)
	if string(got) != string(want) {
		t.Errorf("stored transcript\n%s\nwant\n%s", got, want)
	}
}

func TestNodeStopEndsTurnsWithEveryCallAccounted(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	hang := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "hang", Category: "test", Timeout: time.Minute},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			close(started)
			<-release // ignores cancellation, as a stuck tool would
			return toolbus.Result{}, nil
		},
	})
	later := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "later", Category: "test", Mode: toolbus.Sequential},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			return toolbus.Result{}, nil
		},
	})
	h := newHarness(t, hang, later)
	model, _ := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{{Calls: []gateway.ScriptCall{
		{ID: "h", Name: "hang", Arguments: `{}`}, {ID: "l", Name: "later", Arguments: `{}`},
	}}}})
	done := make(chan TurnResult, 1)
	if _, err := h.node.Spawn(context.Background(), TurnConfig{Spec: bus.TurnSpec{Input: "go"}, Model: model, Kit: kitOf(t, hang, later), Done: func(r TurnResult) { done <- r }}); err != nil {
		t.Fatal(err)
	}
	<-started
	go h.node.Close()
	res := <-done
	if res.State != bus.TurnFailed || !errors.Is(res.Err, ErrNodeStopped) {
		t.Errorf("state %s error %q", res.State, res.ErrorText())
	}
	if got := outcomes(res); !slices.Equal(got, []string{"hang:abandoned", "later:not_started"}) {
		t.Errorf("outcomes %v", got)
	}
	out := outputs(res)
	for _, id := range []string{"h", "l"} {
		if it, ok := out[id]; !ok || !it.IsError {
			t.Errorf("call %s has no error output: %+v", id, it)
		}
	}
}

func TestPanicBecomesErrorResult(t *testing.T) {
	t.Parallel()
	boom := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "boom", Category: "test"},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			var m map[string]int
			m["x"]++ // nil map write
			return toolbus.Result{}, nil
		},
	})
	fine := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "fine", Category: "test"},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			return toolbus.TextResult("still serving"), nil
		},
	})
	h := newHarness(t, boom, fine)
	res := h.run(context.Background(), []*toolbus.Tool{boom, fine},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{{ID: "b", Name: "boom", Arguments: `{}`}}},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{{ID: "f", Name: "fine", Arguments: `{}`}}},
		gateway.ScriptStep{Text: "ok"})
	if got := outcomes(res); !slices.Equal(got, []string{"boom:panic", "fine:ok"}) {
		t.Fatalf("outcomes %v", got)
	}
	if txt := outputText(outputs(res)["b"]); !strings.Contains(txt, "tool boom failed internally") || !strings.Contains(txt, "nil map") {
		t.Errorf("panic output %q", txt)
	}
	if txt := outputText(outputs(res)["f"]); txt != "still serving" {
		t.Errorf("host after the panic: %q", txt)
	}
}

func TestHostConcurrencyLimit(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	slow := toolbus.MustDefine(toolbus.Def[idArgs]{
		Spec: toolbus.Spec{Name: "slow", Category: "limited", Timeout: 10 * time.Second},
		Execute: func(ctx context.Context, c toolbus.Call, a idArgs) (toolbus.Result, error) {
			rec.enter(a.ID)
			defer rec.exit(a.ID)
			time.Sleep(10 * time.Millisecond)
			return toolbus.TextResult(a.ID), nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{StoreDir: t.TempDir(), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	n, err := StartNode(ctx, NodeConfig{Name: "n1", Logger: DiscardLogger(), MaxConcurrent: 2,
		Connect: func(name string) (*nats.Conn, error) { return srv.Connect(name) }})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Host(ctx, "limited", []*toolbus.Tool{slow}); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, srv: srv, node: n}
	var calls []gateway.ScriptCall
	for i := range 6 {
		calls = append(calls, call("slow", fmt.Sprintf(`{"id":"c%d"}`, i)))
	}
	res := h.run(ctx, []*toolbus.Tool{slow}, gateway.ScriptStep{Calls: calls}, gateway.ScriptStep{Text: "ok"})
	for _, c := range res.Calls {
		if c.Outcome != bus.OutcomeOK {
			t.Errorf("call %s: %s %s", c.Call, c.Outcome, c.Error)
		}
	}
	if rec.peak > 2 {
		t.Errorf("peak concurrency %d with a limit of 2", rec.peak)
	}
}

// A result too large for a message comes back through the object store, whole; one over
// what a call may carry is an error the model sees, not a hang.
func TestOversizedResultIsAnErrorNotAHang(t *testing.T) {
	t.Parallel()
	type sizeArgs struct {
		N int `json:"n"`
	}
	big := toolbus.MustDefine(toolbus.Def[sizeArgs]{
		Spec: toolbus.Spec{Name: "big", Category: "test", Timeout: time.Hour},
		Execute: func(ctx context.Context, c toolbus.Call, a sizeArgs) (toolbus.Result, error) {
			return toolbus.TextResult(strings.Repeat("x", a.N)), nil
		},
	})
	// Over the 1 MiB a message carries, so that the reply and the transcript message go
	// through the object stores.
	const large = 1<<20 + 200<<10
	h := newHarness(t, big)
	res := h.run(context.Background(), []*toolbus.Tool{big},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{
			{ID: "b", Name: "big", Arguments: fmt.Sprintf(`{"n":%d}`, large)},
			{ID: "h", Name: "big", Arguments: fmt.Sprintf(`{"n":%d}`, bus.MaxCallPayload+1)},
		}},
		gateway.ScriptStep{Text: "ok"})
	if got := outcomes(res); !slices.Equal(got, []string{"big:ok", "big:error"}) {
		t.Fatalf("outcomes %v", got)
	}
	if txt := outputText(outputs(res)["b"]); txt != strings.Repeat("x", large) {
		t.Errorf("the 1.2 MiB result came back as %d bytes", len(txt))
	}
	if txt := outputText(outputs(res)["h"]); !strings.Contains(txt, "tool big produced a result of 16 MiB, over the 16 MiB a call may carry; the result was dropped: ask for less output") {
		t.Errorf("output %q", txt)
	}
	// The transcript keeps the large output (its message through the object store); the
	// stored reply was deleted once read.
	js := h.node.JetStream()
	ctx := context.Background()
	items, err := durable.ReadTranscript(ctx, js, res.Turn)
	if err != nil {
		t.Fatal(err)
	}
	if got := outputText(outputs(TurnResult{Transcript: items})["b"]); got != strings.Repeat("x", large) {
		t.Errorf("the transcript holds %d bytes of the 1.2 MiB output", len(got))
	}
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		obs, err := js.ObjectStore(ctx, bus.ObjectPayloads)
		if err != nil {
			return err
		}
		if list, err := obs.List(ctx); !errors.Is(err, jetstream.ErrNoObjectsFound) {
			return fmt.Errorf("%d objects left in %s (%v)", len(list), bus.ObjectPayloads, err)
		}
		return nil
	})
}

// A secret the process knows never reaches the transcript stream, whether a tool prints
// it as it is or base64-encoded, nor the model quotes it.
func TestTranscriptRedactsSecrets(t *testing.T) {
	const secret = "sk-transcript-7f3a-not-a-real-key"
	t.Setenv("TOOLBUS_MODEL_API_KEY", secret)
	redact.AddEnvSecrets()
	b64 := base64.StdEncoding.EncodeToString([]byte(secret))
	leak := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "leak", Category: "test"},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			return toolbus.TextResult("key=" + secret + "\nencoded=" + b64), nil
		},
	})
	h := newHarness(t, leak)
	res := h.run(context.Background(), []*toolbus.Tool{leak},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{call("leak", `{}`)}}, gateway.ScriptStep{Text: "the key is " + secret})
	for _, it := range outputs(res) {
		if !strings.Contains(outputText(it), secret) {
			t.Fatalf("the tool did not print the secret: %+v", it)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	turns, err := durable.Open(ctx, h.node.JetStream(), durable.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := turns.StoredTranscript(ctx, res.Turn) // every message, as stored
	if err != nil {
		t.Fatal(err)
	}
	var stored strings.Builder
	for _, m := range msgs {
		stored.Write(m.Data)
	}
	got := stored.String()
	for _, form := range []string{secret, b64} {
		if strings.Contains(got, form) {
			t.Errorf("the stored transcript holds %q:\n%s", form, got)
		}
	}
	if n := strings.Count(got, redact.Replacement); n < 3 {
		t.Errorf("%d redactions in the stored transcript, want 3 (plain, base64, model text):\n%s", n, got)
	}
}

// TestDetailsAndPresentationsReachWatchers: a tool's details stay in the call's
// record, and its presentation events are published on the event subject too.
func TestDetailsAndPresentationsReachWatchers(t *testing.T) {
	t.Parallel()
	show := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "show", Category: "test", Timeout: 10 * time.Second},
		Execute: func(ctx context.Context, c toolbus.Call, _ struct{}) (toolbus.Result, error) {
			res := toolbus.TextResult("shown")
			res.Details = json.RawMessage(`{"rows":3}`)
			res.Events = []toolbus.Event{{Kind: "table", Label: "3 rows", Data: json.RawMessage(`[1,2,3]`)}}
			return res, nil
		},
	})
	h := newHarness(t, show)
	nc, err := h.srv.Connect("watcher")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	seen := make(chan bus.Event, 1)
	sub, err := nc.Subscribe(bus.AllTurns, func(m *nats.Msg) {
		ts, ok := bus.ParseTurnSubject(m.Subject)
		var ev bus.Event
		if ok && ts.Kind == bus.KindEvent && ts.Event == bus.EventPresentation && json.Unmarshal(m.Data, &ev) == nil {
			seen <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	res := h.run(context.Background(), []*toolbus.Tool{show},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{call("show", "{}")}}, gateway.ScriptStep{Text: "ok"})
	if len(res.Calls) != 1 || string(res.Calls[0].Details) != `{"rows":3}` {
		t.Errorf("call records %+v, want the details kept", res.Calls)
	}
	ev := <-seen
	if ev.Label != "3 rows" || string(ev.Data) != "[1,2,3]" || ev.Tool != "show" {
		t.Errorf("presentation event %+v", ev)
	}
}

// TestUsageAddsUp: each step's status carries its response's tokens, and the
// turn's end the sum.
func TestUsageAddsUp(t *testing.T) {
	t.Parallel()
	noop := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "noop", Category: "test", Timeout: 10 * time.Second},
		Execute: func(ctx context.Context, c toolbus.Call, _ struct{}) (toolbus.Result, error) {
			return toolbus.TextResult("ok"), nil
		},
	})
	h := newHarness(t, noop)
	res := h.run(context.Background(), []*toolbus.Tool{noop},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{call("noop", "{}")}, Usage: &gateway.Usage{InputTokens: 100, OutputTokens: 10}},
		gateway.ScriptStep{Text: "done", Usage: &gateway.Usage{InputTokens: 120, OutputTokens: 5}})
	if want := (bus.Usage{InputTokens: 220, OutputTokens: 15}); res.Usage != want {
		t.Errorf("turn usage %+v, want %+v", res.Usage, want)
	}
	// The transcript holds each step's tokens too, in items the gateways skip.
	var notes []string
	for _, it := range res.Transcript {
		if it.Kind == toolbus.KindNote {
			notes = append(notes, string(it.Raw))
		}
	}
	if len(notes) != 2 || !strings.Contains(notes[0], `"input_tokens":100`) || !strings.Contains(notes[1], `"output_tokens":5`) {
		t.Errorf("usage notes in the transcript: %q", notes)
	}
}

// TestUnwatchedTurnSendsOnlyItsCalls: with nobody subscribed, a turn's statuses, the text
// its model streams and its calls' events are not published at all; a watcher that
// subscribes gets every one.
func TestUnwatchedTurnSendsOnlyItsCalls(t *testing.T) {
	t.Parallel()
	noop := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "noop", Category: "test", Timeout: 10 * time.Second},
		Execute: func(ctx context.Context, c toolbus.Call, _ struct{}) (toolbus.Result, error) {
			return toolbus.TextResult("ok"), nil
		},
	})
	// The server's answers (bus.TestInterestFollowsSubscriptions), and what was left out.
	var mu sync.Mutex
	var left []string
	skipped := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(slices.Values(left))
	}
	h := newHarnessWith(t, func(c *NodeConfig) {
		srvInterest := c.Interest
		c.Interest = func(subject string) bool {
			if srvInterest(subject) {
				return true
			}
			if ts, ok := bus.ParseTurnSubject(subject); ok {
				mu.Lock()
				defer mu.Unlock()
				left = append(left, ts.Kind+"."+string(ts.Event)+ts.Status)
			}
			return false
		}
	}, noop)
	script := []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{call("noop", "{}"), call("noop", "{}")}},
		{Text: "done"},
	}
	h.run(context.Background(), []*toolbus.Tool{noop}, script...)
	// The host's last event follows its reply: wait for it.
	// The answer, "done", streams as one piece of text.
	want := []string{"evt.completed", "evt.completed", "evt.started", "evt.started", "status.done", "status.started", "status.step", "text."}
	bustest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if got := skipped(); !slices.Equal(got, want) {
			return fmt.Errorf("with nobody watching, the turn and host left out %q, want %q", got, want)
		}
		return nil
	})
	mu.Lock()
	left = nil
	mu.Unlock()

	nc, err := h.srv.Connect("watcher")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var seen []string
	_, err = nc.Subscribe(bus.AllTurns, func(m *nats.Msg) {
		ts, ok := bus.ParseTurnSubject(m.Subject)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch ts.Kind {
		case bus.KindEvent:
			seen = append(seen, "evt."+string(ts.Event))
		case bus.KindStatus:
			seen = append(seen, "status."+ts.Status)
		case bus.KindText:
			seen = append(seen, "text.")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	h.run(context.Background(), []*toolbus.Tool{noop}, script...)
	bustest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		got := slices.Sorted(slices.Values(seen))
		if !slices.Equal(got, want) {
			return fmt.Errorf("the watcher saw %q, want %q", got, want)
		}
		return nil
	})
	if left := skipped(); len(left) > 0 {
		t.Errorf("with a watcher, the turn and host still left out %q", left)
	}
}

// TestTraceparent: a turn's calls carry one trace id and a span id each, with the sampled
// flag only where the node asks for it (NodeConfig.TraceSampled).
func TestTraceparent(t *testing.T) {
	t.Parallel()
	noop := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "noop", Category: "test", Timeout: 10 * time.Second},
		Execute: func(ctx context.Context, c toolbus.Call, _ struct{}) (toolbus.Result, error) {
			return toolbus.TextResult("ok"), nil
		},
	})
	for _, sampled := range []bool{false, true} {
		t.Run(fmt.Sprint("sampled=", sampled), func(t *testing.T) {
			h := newHarnessWith(t, func(c *NodeConfig) { c.TraceSampled = sampled }, noop)
			nc, err := h.srv.Connect("spy")
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			sub, err := nc.SubscribeSync(bus.ToolSubject("test", "noop"))
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			h.run(context.Background(), []*toolbus.Tool{noop},
				gateway.ScriptStep{Calls: []gateway.ScriptCall{call("noop", "{}"), call("noop", "{}")}}, gateway.ScriptStep{Text: "done"})
			flags := "00"
			if sampled {
				flags = "01"
			}
			var traces, spans []string
			for range 2 {
				m, err := sub.NextMsg(5 * time.Second)
				if err != nil {
					t.Fatal(err)
				}
				parts := strings.Split(m.Header.Get(bus.HeaderTraceparent), "-")
				if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || parts[3] != flags {
					t.Fatalf("traceparent %q, want 00-<32 hex>-<16 hex>-%s", m.Header.Get(bus.HeaderTraceparent), flags)
				}
				traces, spans = append(traces, parts[1]), append(spans, parts[2])
			}
			if traces[0] != traces[1] || spans[0] == spans[1] {
				t.Errorf("trace ids %q and span ids %q: want one trace, two spans", traces, spans)
			}
		})
	}
}

// TestCallsExpireInTheirOwnTime: a turn gives up on each call its host never answers at
// that call's deadline (and the reply grace), also when a later call of the batch has the
// earlier deadline.
func TestCallsExpireInTheirOwnTime(t *testing.T) {
	t.Parallel()
	void := func(name string, timeout time.Duration) *toolbus.Tool {
		return toolbus.MustDefine(toolbus.Def[struct{}]{
			Spec: toolbus.Spec{Name: name, Category: "void", Timeout: timeout},
			Execute: func(context.Context, toolbus.Call, struct{}) (toolbus.Result, error) {
				return toolbus.Result{}, errors.New("never hosted")
			},
		})
	}
	long, short := void("long", 4*time.Second), void("short", 100*time.Millisecond)
	h := newHarness(t)
	nc, err := h.srv.Connect("swallow")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe(bus.CategorySubjects("void"), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	res := h.run(context.Background(), []*toolbus.Tool{long, short},
		gateway.ScriptStep{Calls: []gateway.ScriptCall{call("long", "{}"), call("short", "{}")}}, gateway.ScriptStep{Text: "done"})
	if got, want := outcomes(res), []string{"long:timeout", "short:timeout"}; !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	// The short call was given up on at its own deadline, not at the long one's.
	if l, s := res.Calls[0].Latency, res.Calls[1].Latency; s >= 4*time.Second || l < 4*time.Second {
		t.Errorf("the long call ended after %v, the short one after %v: want the short one before 4s, the long one after", l, s)
	}
}
