package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/gateway/gatewaytest"
)

// streamKey is the API key of the streaming tests' fake Responses API.
const streamKey = "sk-stream-test-4c2b9e7a1d"

// streamServer is a fake Responses API streaming the given responses, closed with the
// test, and the gateway configuration that points at it.
func streamServer(t *testing.T, streams ...gatewaytest.Stream) (*gatewaytest.Server, gateway.Config) {
	t.Helper()
	srv := gatewaytest.NewServer(streams...)
	t.Cleanup(srv.Close)
	return srv, gateway.Config{APIKey: streamKey, BaseURL: srv.BaseURL(), HTTPClient: srv.Client(), MaxRetries: -1, RequestTimeout: 30 * time.Second}
}

// streamTurn runs a turn of tools against a Responses gateway on cfg.
func streamTurn(t *testing.T, h *harness, cfg gateway.Config, tools ...*toolbus.Tool) TurnResult {
	t.Helper()
	model, err := gateway.NewResponses("gpt-test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := h.node.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Agent: "tester", Input: "go"}, Model: model, Kit: kitOf(t, tools...)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// inputCalls lists the function calls and outputs of a request body, in order.
func inputCalls(t *testing.T, body []byte) []string {
	t.Helper()
	var req struct {
		Input []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		} `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range req.Input {
		if it.CallID != "" {
			out = append(out, it.Type+":"+it.CallID)
		}
	}
	return out
}

// TestEarlyDispatchKeepsOrder: a slow parallel call the model emits first starts while
// the response still streams (the response does not end before it started); a
// sequential call emitted second waits for it to finish, though the turn knew it before;
// the results go back in the model's order.
func TestEarlyDispatchKeepsOrder(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	slowStarted, release := make(chan struct{}), make(chan struct{})
	slow := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "slow", Category: "test", Mode: toolbus.Parallel},
		Execute: func(ctx context.Context, _ toolbus.Call, _ noArgs) (toolbus.Result, error) {
			rec.enter("slow")
			defer rec.exit("slow")
			close(slowStarted)
			select {
			case <-release:
			case <-ctx.Done():
				return toolbus.Result{}, ctx.Err()
			}
			return toolbus.TextResult("slow done"), nil
		},
	})
	seq := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "seq", Category: "test", Mode: toolbus.Sequential},
		Execute: func(ctx context.Context, _ toolbus.Call, _ noArgs) (toolbus.Result, error) {
			rec.enter("seq")
			defer rec.exit("seq")
			return toolbus.TextResult("seq done"), nil
		},
	})
	h := newHarness(t, slow, seq)
	first := gatewaytest.NewResponses("resp_1").
		Call("c_slow", "slow", "{", "}").
		// The rest of the response waits until the first call runs.
		Pace(0, slowStarted).Call("c_seq", "seq", "{}").
		Message("Both", " asked.").
		Completed(100, 20)
	srv, cfg := streamServer(t,
		gatewaytest.Stream{Events: first},
		gatewaytest.Stream{Events: gatewaytest.NewResponses("resp_2").Message("done").Completed(150, 5)})

	// slow finishes once the turn has the whole response (its words before the calls
	// are published then): the sequential call was known to the turn while slow ran.
	watch := bustest.Conn(t, h.srv, "watch")
	var once sync.Once
	sub, err := watch.Subscribe(bus.TurnStatusSubject("*", bus.StatusStep), func(m *nats.Msg) {
		var st bus.TurnStatus
		if json.Unmarshal(m.Data, &st) == nil && st.Text == "Both asked." {
			once.Do(func() { close(release) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}

	res := streamTurn(t, h, cfg, slow, seq)
	if res.State != bus.TurnCompleted || res.Text != "done" {
		t.Fatalf("turn %s %q: %s", res.State, res.Text, res.ErrorText())
	}
	if got, want := rec.entries(), []string{"start slow", "end slow", "start seq", "end seq"}; !slices.Equal(got, want) {
		t.Errorf("execution %v, want %v: the sequential call waits for the one before it", got, want)
	}
	if got := outcomes(res); !slices.Equal(got, []string{"slow:ok", "seq:ok"}) {
		t.Errorf("records %v, want the model's order", got)
	}
	var order []string
	for _, it := range res.Transcript {
		if it.Kind == toolbus.KindCallOutput {
			order = append(order, it.CallID)
		}
	}
	if !slices.Equal(order, []string{"c_slow", "c_seq"}) {
		t.Errorf("outputs in the transcript %v, want the model's order", order)
	}
	bodies := srv.Bodies()
	if len(bodies) != 2 {
		t.Fatalf("%d requests, want 2", len(bodies))
	}
	if got := inputCalls(t, bodies[1]); !slices.Equal(got, []string{"function_call:c_slow", "function_call:c_seq", "function_call_output:c_slow", "function_call_output:c_seq"}) {
		t.Errorf("second request's input %v", got)
	}
	if res.Usage != (bus.Usage{InputTokens: 250, OutputTokens: 25}) {
		t.Errorf("usage %+v", res.Usage)
	}
}

// TestStreamCutMidCall: a response the output limit cuts in the middle of a call's
// arguments (response.incomplete, max_output_tokens): the calls completed before the cut
// run, a destructive one included; the cut destructive call does not, and its error
// asks the model to issue it again.
func TestStreamCutMidCall(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var deleted []string
	del := toolbus.MustDefine(toolbus.Def[struct {
		Path string `json:"path"`
	}]{
		Spec: toolbus.Spec{Name: "delete", Category: "test", Destructive: true},
		Execute: func(ctx context.Context, _ toolbus.Call, a struct {
			Path string `json:"path"`
		}) (toolbus.Result, error) {
			mu.Lock()
			deleted = append(deleted, a.Path)
			mu.Unlock()
			return toolbus.TextResult("deleted " + a.Path), nil
		},
	})
	read := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "read", Category: "test", ReadOnly: true},
		Execute: func(context.Context, toolbus.Call, noArgs) (toolbus.Result, error) {
			return toolbus.TextResult("read"), nil
		},
	})
	h := newHarness(t, del, read)
	cut := gatewaytest.NewResponses("resp_1").
		Call("c_read", "read", "{}").
		Call("c_del1", "delete", `{"path":`, `"a.txt"}`).
		CutCall("c_del2", "delete", `{"path":`, `"b.t`).
		Incomplete("max_output_tokens", 100, 4096)
	_, cfg := streamServer(t,
		gatewaytest.Stream{Events: cut},
		gatewaytest.Stream{Events: gatewaytest.NewResponses("resp_2").Message("stopped").Completed(150, 5)})
	res := streamTurn(t, h, cfg, del, read)
	if res.State != bus.TurnCompleted {
		t.Fatalf("turn %s: %s", res.State, res.ErrorText())
	}
	if got := outcomes(res); !slices.Equal(got, []string{"read:ok", "delete:ok", "delete:invalid"}) {
		t.Errorf("outcomes %v, want the two whole calls run and the cut one refused", got)
	}
	mu.Lock()
	if !slices.Equal(deleted, []string{"a.txt"}) {
		t.Errorf("deleted %v, want a.txt alone", deleted)
	}
	mu.Unlock()
	if res.Calls[0].Truncated || res.Calls[1].Truncated {
		t.Errorf("truncated: %v %v, want the calls before the cut whole", res.Calls[0].Truncated, res.Calls[1].Truncated)
	}
	if msg := outputText(outputs(res)["c_del2"]); !strings.Contains(msg, "truncated") {
		t.Errorf("the cut call's output %q does not say it was truncated", msg)
	}
}

// TestAbortDuringStream: an abort while the model still streams stops the stream (the
// response never ends, yet the turn does) and gives every call an honest outcome: the
// one running stopped, the one its mode held back not started.
func TestAbortDuringStream(t *testing.T) {
	t.Parallel()
	running := make(chan struct{})
	wait := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "wait", Category: "test"},
		Execute: func(ctx context.Context, _ toolbus.Call, _ noArgs) (toolbus.Result, error) {
			close(running)
			<-ctx.Done()
			return toolbus.Result{}, context.Cause(ctx)
		},
	})
	var seqRan atomic.Bool
	seq := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "seq", Category: "test", Mode: toolbus.Sequential},
		Execute: func(context.Context, toolbus.Call, noArgs) (toolbus.Result, error) {
			seqRan.Store(true)
			return toolbus.TextResult("ran"), nil
		},
	})
	// A grace that outlasts the running call's reply on a loaded machine (300 ms
	// did not once, in TestAbortRecordsHonestOutcomes); the call stops at once here.
	h := newHarnessWith(t, func(c *NodeConfig) { c.AbortGrace = 3 * time.Second }, wait, seq)
	never := make(chan struct{})
	defer close(never)
	var streamStopped atomic.Bool
	events := gatewaytest.NewResponses("resp_1").
		Call("c_wait", "wait", "{}").
		Call("c_seq", "seq", "{}").
		Pace(0, never).Message("never sent").
		Events()
	srv, cfg := streamServer(t, gatewaytest.Stream{Events: events})
	_ = srv
	model, err := gateway.NewResponses("gpt-test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	id := bus.NewID()
	items := make(chan int, 8)
	go func() {
		// The abort comes once the first call runs and the turn holds the second,
		// complete and held back by its mode, while the response still streams.
		<-running
		for i := range items {
			if i == 1 {
				break
			}
		}
		_ = publishAbort(bustest.Conn(t, h.srv, "aborter"), id, "changed my mind")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := h.node.Run(ctx, TurnConfig{Spec: bus.TurnSpec{ID: id, Agent: "tester", Input: "go"}, Model: &watchedModel{Model: model, stopped: &streamStopped, items: items}, Kit: kitOf(t, wait, seq)})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bus.TurnAborted || !strings.Contains(res.ErrorText(), "changed my mind") {
		t.Fatalf("turn %s: %s", res.State, res.ErrorText())
	}
	if !streamStopped.Load() {
		t.Error("the turn ended while its model call still streamed")
	}
	if got := outcomes(res); !slices.Equal(got, []string{"wait:stopped", "seq:not_started"}) {
		t.Errorf("outcomes %v, want the running call stopped and the held one not started", got)
	}
	if seqRan.Load() {
		t.Error("the held sequential call ran after the abort")
	}
	// Every call in the transcript has its output: the history stays valid.
	calls, outs := 0, outputs(res)
	for _, it := range res.Transcript {
		if it.Kind == toolbus.KindFunctionCall {
			calls++
			if _, ok := outs[it.CallID]; !ok {
				t.Errorf("call %s has no output", it.CallID)
			}
		}
	}
	if calls != 2 {
		t.Errorf("%d calls in the transcript, want 2", calls)
	}
}

// watchedModel notes when its Respond returned.
type watchedModel struct {
	gateway.Model
	stopped *atomic.Bool
	// items, when set, is told the index of each item the stream delivered, once the
	// turn has it in its mailbox.
	items chan<- int
}

func (m *watchedModel) Respond(ctx context.Context, req *gateway.Request) (*gateway.Response, error) {
	defer m.stopped.Store(true)
	if m.items != nil && req.Stream != nil {
		stream := req.Stream
		req.Stream = func(ev gateway.StreamEvent) {
			stream(ev)
			if ev.Kind == gateway.StreamItem {
				select {
				case m.items <- ev.Index:
				default:
				}
			}
		}
	}
	return m.Model.Respond(ctx, req)
}

// TestDurableEarlyDispatch: a durable turn whose node is lost after the first call of a
// streaming response went out, before the response ended, is resumed on another node
// with that call neither lost (it is in the transcript, with an honest outcome, and the
// model is told) nor run again.
func TestDurableEarlyDispatch(t *testing.T) {
	t.Parallel()
	w := durableStream(t, func(a *Node, h streamHooks) {
		// Node a is lost: its connections drop, as a killed process's would, while the
		// model still streams the response and the call runs on its host. The rest of
		// the response reaches the lost node, which can store none of it.
		kill(a)
		h.goOn()
	})
	if w.out != 1 || !strings.Contains(w.output, "was lost while this call was in flight") {
		t.Errorf("c_mark's output %q (%d outputs): want one that says its node was lost", w.output, w.out)
	}
}

// TestHandBackDuringStream: a durable turn whose node stops (gracefully) while the model
// streams, a call of the response running, goes back to the intake once that call is
// done, its output stored; the node that takes it over asks the model again, and runs
// nothing twice.
func TestHandBackDuringStream(t *testing.T) {
	t.Parallel()
	w := durableStream(t, func(a *Node, h streamHooks) {
		stopped := make(chan struct{})
		go func() { a.Close(); close(stopped) }()
		h.release() // the call finishes while its turn waits to hand back
		<-stopped
	})
	if w.out != 1 || w.output != "marked" {
		t.Errorf("c_mark's output %q (%d outputs): want its own, stored before the hand-back", w.output, w.out)
	}
}

// streamHooks let a test move durableStream's world on: release lets the running call
// finish; goOn lets the held response go on streaming.
type streamHooks struct{ release, goOn func() }

// streamWorld is what durableStream saw.
type streamWorld struct {
	out    int    // outputs of c_mark in the transcript
	output string // its text
}

// durableStream runs a durable turn whose first response streams one call (c_mark, on a
// host node of its own) and then holds; once the call runs, lose does away with the
// turn's node a; node b then takes the turn over, and the model answers its second
// request. It checks what both tests expect: the turn completed on b, the call ran once,
// the transcript holds it once and the resumed request shows it with its output.
func durableStream(t *testing.T, lose func(a *Node, h streamHooks)) streamWorld {
	t.Helper()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	var runs atomic.Int32
	started, finish := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(finish) }) }
	t.Cleanup(release)
	mark := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "mark", Description: "Marks.", Category: "dur", Namespace: "dur"},
		Execute: func(ctx context.Context, _ toolbus.Call, _ noArgs) (toolbus.Result, error) {
			if runs.Add(1) == 1 {
				close(started)
			}
			select {
			case <-finish:
			case <-ctx.Done():
			}
			return toolbus.TextResult("marked"), nil
		},
	})
	lost := make(chan struct{})
	var onceOn sync.Once
	goOn := func() { onceOn.Do(func() { close(lost) }) }
	t.Cleanup(goOn)
	first := gatewaytest.NewResponses("resp_1").
		Call("c_mark", "mark", "{}").
		Pace(0, lost).Call("c_late", "mark", "{}"). // never sent while node a holds the turn
		Completed(10, 10)
	fake, gw := streamServer(t,
		gatewaytest.Stream{Events: first},
		gatewaytest.Stream{Events: gatewaytest.NewResponses("resp_2").Message("checked").Completed(20, 5)})
	// 3 s: a node confirms its hold within a third of a lease, and 333 ms was too short
	// for node b under load 14 (the package run three times beside others): it stopped
	// the turn, took it again and asked the fake model a third time.
	const lease = 3 * time.Second
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})
	startNode := func(name string, turns bool) *Node {
		n, err := StartNode(ctx, NodeConfig{
			Name: name, Connect: func(c string) (*nats.Conn, error) { return srv.Connect(c) },
			Turns: turns, Categories: []string{}, Gateway: gw, TurnLease: lease, HandBackGrace: 10 * time.Second,
			AbortGrace: 300 * time.Millisecond, Logger: logs.logger().With("node", name),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	host := startNode("host", false)
	if err := host.Host(ctx, "dur", []*toolbus.Tool{mark}); err != nil {
		t.Fatal(err)
	}
	a := startNode("a", true)
	profiles, err := a.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.Put(ctx, []byte(`{"version":1,"agent":"ann","namespaces":[{"name":"dur","load":"upfront"}]}`)); err != nil {
		t.Fatal(err)
	}
	watch := bustest.Conn(t, srv, "watch")
	id := bus.NewID()
	done, err := watch.SubscribeSync(bus.TurnStatusSubject(id, bus.StatusDone))
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.submit(ctx, bus.TurnSpec{ID: id, Agent: "ann", Input: "mark it", Model: "openai:gpt-test"}, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the first call never went out")
	}
	lose(a, streamHooks{release: release, goOn: goOn})
	startNode("b", true)

	m, err := done.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the turn did not end: %v", err)
	}
	var st bus.TurnStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	if st.State != bus.TurnCompleted || st.Node != "b" || st.Text != "checked" {
		t.Fatalf("turn ended %s on %s (%q): %s", st.State, st.Node, st.Text, st.Error)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the call ran %d times, want once", n)
	}
	items, err := durable.ReadTranscript(ctx, bustest.JetStream(t, srv, "reader"), id)
	if err != nil {
		t.Fatal(err)
	}
	var w streamWorld
	calls := 0
	for _, it := range items {
		switch {
		case it.Kind == toolbus.KindFunctionCall:
			calls++
			if it.CallID != "c_mark" {
				t.Errorf("call %s in the transcript: only c_mark was complete", it.CallID)
			}
		case it.Kind == toolbus.KindCallOutput && it.CallID == "c_mark":
			w.out++
			w.output = outputText(it)
		}
	}
	if calls != 1 {
		t.Errorf("c_mark is %d times in the transcript, want once", calls)
	}
	bodies := fake.Bodies()
	if len(bodies) != 2 {
		t.Fatalf("%d model requests, want 2", len(bodies))
	}
	if got := inputCalls(t, bodies[1]); !slices.Equal(got, []string{"function_call:c_mark", "function_call_output:c_mark"}) {
		t.Errorf("the resumed turn's request holds %v", got)
	}
	return w
}

// kill drops every connection of a node at once, as the end of its process would: it
// stores nothing more, and its lease runs out.
func kill(n *Node) {
	n.connMu.Lock()
	conns := slices.Clone(n.conns)
	n.connMu.Unlock()
	for _, nc := range conns {
		nc.Close()
	}
}

// TestResponsesStream: a turn against the Responses API streaming its step: the text
// reaches the bus piece by piece, in order (bus.TextDelta); the two parallel calls both
// run before the response ends (response.completed is held until both started); the
// usage is recorded; the transcript holds whole items, not pieces.
func TestResponsesStream(t *testing.T) {
	t.Parallel()
	var started atomic.Int32
	both := make(chan struct{})
	read := toolbus.MustDefine(toolbus.Def[struct {
		Path string `json:"path"`
	}]{
		Spec: toolbus.Spec{Name: "read_file", Category: "test", ReadOnly: true},
		Execute: func(ctx context.Context, _ toolbus.Call, a struct {
			Path string `json:"path"`
		}) (toolbus.Result, error) {
			if started.Add(1) == 2 {
				close(both)
			}
			return toolbus.TextResult("contents of " + a.Path), nil
		},
	})
	h := newHarness(t, read)
	first := gatewaytest.NewResponses("resp_1").
		Message("Reading", " both", " files.").
		Call("call_a", "read_file", `{"path":`, `"a.txt"}`).
		Call("call_b", "read_file", `{"path":`, `"b.txt"}`).
		Pace(0, both).Completed(321, 45)
	_, cfg := streamServer(t,
		gatewaytest.Stream{Events: first},
		gatewaytest.Stream{Events: gatewaytest.NewResponses("resp_2").Message("Both", " read.").Completed(400, 6)})

	id := bus.NewID()
	watch := bustest.Conn(t, h.srv, "watch")
	texts, err := watch.SubscribeSync(bus.TextSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	model, err := gateway.NewResponses("gpt-test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := h.node.Run(ctx, TurnConfig{Spec: bus.TurnSpec{ID: id, Agent: "tester", Input: "read a and b"}, Model: model, Kit: kitOf(t, read)})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bus.TurnCompleted || res.Text != "Both read." {
		t.Fatalf("turn %s %q: %s", res.State, res.Text, res.ErrorText())
	}
	if got := outcomes(res); !slices.Equal(got, []string{"read_file:ok", "read_file:ok"}) {
		t.Errorf("outcomes %v", got)
	}
	if res.Usage != (bus.Usage{InputTokens: 721, OutputTokens: 51}) {
		t.Errorf("usage %+v, want both responses' tokens", res.Usage)
	}
	var got []string
	for i := range 5 {
		m, err := texts.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("text piece %d: %v", i+1, err)
		}
		var d bus.TextDelta
		if err := json.Unmarshal(m.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Turn != id || d.Seq != i+1 || d.Item != 0 {
			t.Errorf("piece %+v: want turn %s, seq %d, item 0", d, id, i+1)
		}
		got = append(got, fmt.Sprintf("%d:%s", d.Step, d.Text))
	}
	if want := []string{"1:Reading", "1: both", "1: files.", "2:Both", "2: read."}; !slices.Equal(got, want) {
		t.Errorf("text pieces %q, want %q", got, want)
	}
	var messages, notes []string
	for _, it := range res.Transcript {
		switch it.Kind {
		case toolbus.KindMessage:
			messages = append(messages, it.Role+":"+it.Text)
		case toolbus.KindNote:
			notes = append(notes, string(it.Raw))
		}
	}
	if want := []string{"user:read a and b", "assistant:Reading both files.", "assistant:Both read."}; !slices.Equal(messages, want) {
		t.Errorf("messages %q, want whole items %q", messages, want)
	}
	if len(notes) != 2 || !strings.Contains(notes[0], `"input_tokens":321`) || !strings.Contains(notes[0], `"output_tokens":45`) {
		t.Errorf("usage notes %q", notes)
	}
}
