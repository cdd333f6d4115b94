package actors

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors/batch"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/gateway/gatewaytest"
)

// storedCalls reads a turn's transcript back from its stream, as a resumed turn, the
// console and `toolbus run -json` read it, and returns its function calls by id.
func storedCalls(t *testing.T, h *harness, turn string) ([]toolbus.Item, map[string]toolbus.Item) {
	t.Helper()
	js, err := jetstream.New(bustest.Conn(t, h.srv, "reader"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	items, err := durable.ReadTranscript(ctx, js, turn)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]toolbus.Item{}
	for _, it := range items {
		if it.Kind == toolbus.KindFunctionCall {
			calls[it.CallID] = it
		}
	}
	return items, calls
}

// runOf writes a call's recorded run as "step.n", with "s" for a sequential call and
// "r" for a read-only one; "-" for none.
func runOf(it toolbus.Item) string {
	r := it.Run
	if r == nil {
		return "-"
	}
	s := string(rune('0'+r.Step)) + "." + string(rune('0'+r.N))
	if r.Sequential {
		s += "s"
	}
	if r.ReadOnly {
		s += "r"
	}
	return s
}

// TestTranscriptRecordsRuns: each function call in the stored transcript records the run
// the turn placed it in (its step, its run in the step's batch, its tool's mode and
// read-only flag then), for a whole response and for one that streams and whose calls go
// out before it ends; a refused call records none. A resumed turn plans by what the
// calls record, not by what the tools say on the day it resumes.
func TestTranscriptRecordsRuns(t *testing.T) {
	t.Parallel()
	ok := func(name string, mode toolbus.Mode, ro bool) *toolbus.Tool {
		return toolbus.MustDefine(toolbus.Def[noArgs]{
			Spec: toolbus.Spec{Name: name, Category: "test", Mode: mode, ReadOnly: ro},
			Execute: func(context.Context, toolbus.Call, noArgs) (toolbus.Result, error) {
				return toolbus.TextResult(name + " done"), nil
			},
		})
	}
	p, r, s := ok("p", toolbus.Parallel, false), ok("r", toolbus.Parallel, true), ok("s", toolbus.Sequential, false)
	h := newHarness(t, p, r, s)

	t.Run("whole", func(t *testing.T) {
		t.Parallel()
		model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
			{Calls: []gateway.ScriptCall{
				{ID: "a", Name: "p", Arguments: `{}`},
				{ID: "b", Name: "r", Arguments: `{}`},
				{ID: "c", Name: "s", Arguments: `{}`},
				{ID: "d", Name: "p", Arguments: `{}`},
				{ID: "e", Name: "nope", Arguments: `{}`},
				{ID: "f", Name: "p", Arguments: `{}`},
			}},
			{Calls: []gateway.ScriptCall{{ID: "g", Name: "s", Arguments: `{}`}}},
			{Text: "done"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		id := bus.NewID()
		res, err := h.node.Run(context.Background(), TurnConfig{Spec: bus.TurnSpec{ID: id, Agent: "tester", Input: "go"}, Model: model, Kit: kitOf(t, p, r, s)})
		if err != nil {
			t.Fatal(err)
		}
		if res.State != bus.TurnCompleted {
			t.Fatalf("turn %s: %s", res.State, res.ErrorText())
		}
		items, calls := storedCalls(t, h, id)
		var got []string
		for _, c := range []string{"a", "b", "c", "d", "e", "f", "g"} {
			got = append(got, c+":"+runOf(calls[c]))
		}
		want := []string{"a:1.1", "b:1.1r", "c:1.2s", "d:1.3", "e:-", "f:1.3", "g:2.1s"}
		if !slices.Equal(got, want) {
			t.Errorf("recorded runs %v, want %v", got, want)
		}

		// The first response as a node lost before any output was stored would leave it,
		// resumed on a day its tools all say parallel and destructive (e was refused then
		// and is now): the recorded modes plan it.
		var first []toolbus.Item
		for _, it := range items {
			if it.Kind == toolbus.KindCallOutput {
				break
			}
			first = append(first, it)
		}
		plan := durable.PlanBatch(first, func(_ int, c toolbus.Item) durable.CallInfo {
			return durable.CallInfo{Refused: c.Name == "nope"}
		})
		wantPlan := []durable.Action{durable.Abandon, durable.Run, durable.Run, durable.Run, durable.Refused, durable.Run}
		if !slices.Equal(plan.Actions, wantPlan) {
			t.Errorf("resume plan %v, want %v: a (destructive) may have run, b (read-only) runs again, c (sequential) held back the rest", plan.Actions, wantPlan)
		}
	})

	t.Run("streamed", func(t *testing.T) {
		t.Parallel()
		first := gatewaytest.NewResponses("resp_1").
			Call("c_a", "p", "{}").
			Call("c_b", "s", "{}").
			Call("c_c", "r", "{}").
			Message("All", " asked.").
			Completed(10, 5)
		_, cfg := streamServer(t,
			gatewaytest.Stream{Events: first},
			gatewaytest.Stream{Events: gatewaytest.NewResponses("resp_2").Message("done").Completed(20, 5)})
		model, err := gateway.NewResponses("gpt-test", cfg)
		if err != nil {
			t.Fatal(err)
		}
		id := bus.NewID()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := h.node.Run(ctx, TurnConfig{Spec: bus.TurnSpec{ID: id, Agent: "tester", Input: "go"}, Model: model, Kit: kitOf(t, p, r, s)})
		if err != nil {
			t.Fatal(err)
		}
		if res.State != bus.TurnCompleted {
			t.Fatalf("turn %s: %s", res.State, res.ErrorText())
		}
		_, calls := storedCalls(t, h, id)
		var got []string
		for _, c := range []string{"c_a", "c_b", "c_c"} {
			got = append(got, c+":"+runOf(calls[c]))
		}
		if want := []string{"c_a:1.1", "c_b:1.2s", "c_c:1.3r"}; !slices.Equal(got, want) {
			t.Errorf("recorded runs %v, want %v", got, want)
		}
	})
}

// TestTranscriptRecordsRepairedArguments: a call whose arguments the repair ladder had
// to mend keeps the model's text as it came (Arguments) and records the JSON the tool got
// and the rungs that made it (Repaired, Rungs); a clean call records neither. A resumed
// turn takes the recorded arguments as they are: it does not repair the model's text
// again.
func TestTranscriptRecordsRepairedArguments(t *testing.T) {
	t.Parallel()
	type noteArgs struct {
		Text string `json:"text"`
		N    int    `json:"n"`
	}
	var (
		mu  sync.Mutex
		got = map[string]noteArgs{}
	)
	note := toolbus.MustDefine(toolbus.Def[noteArgs]{
		Spec: toolbus.Spec{Name: "note", Category: "test"},
		Execute: func(_ context.Context, c toolbus.Call, a noteArgs) (toolbus.Result, error) {
			mu.Lock()
			got[c.ID] = a
			mu.Unlock()
			return toolbus.TextResult("noted"), nil
		},
	})
	h := newHarness(t, note)
	const broken = "```json\n{'text': 'hi', \"n\": 2,}\n```"
	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{
			{ID: "fixed", Name: "note", Arguments: broken},
			{ID: "clean", Name: "note", Arguments: `{"text": "ok", "n": 1}`},
		}},
		{Text: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := bus.NewID()
	res, err := h.node.Run(context.Background(), TurnConfig{Spec: bus.TurnSpec{ID: id, Agent: "tester", Input: "go"}, Model: model, Kit: kitOf(t, note)})
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(res); res.State != bus.TurnCompleted || !slices.Equal(got, []string{"note:ok", "note:ok"}) {
		t.Fatalf("turn %s, outcomes %v: %s", res.State, got, res.ErrorText())
	}
	_, calls := storedCalls(t, h, id)
	fixed, clean := calls["fixed"], calls["clean"]
	if fixed.Arguments != broken {
		t.Errorf("the repaired call's Arguments %q, want the model's text %q", fixed.Arguments, broken)
	}
	if string(fixed.Repaired) != `{"n":2,"text":"hi"}` {
		t.Errorf("the repaired call records %s, want the JSON the tool got", fixed.Repaired)
	}
	if !slices.Contains(fixed.Rungs, "extract") || !slices.Contains(fixed.Rungs, "repair") {
		t.Errorf("the repaired call's rungs %v, want extract and repair", fixed.Rungs)
	}
	mu.Lock()
	ran := got[res.Calls[0].Call]
	mu.Unlock()
	if want := (noteArgs{Text: "hi", N: 2}); ran != want {
		t.Errorf("the tool got %+v, want %+v", ran, want)
	}
	if clean.Repaired != nil || clean.Rungs != nil {
		t.Errorf("the clean call records a repair: %s %v", clean.Repaired, clean.Rungs)
	}

	// Resumed: the recorded arguments are taken as they are, and so are their rungs;
	// the model's text is not read again (here it would not even parse).
	tr := &turn{cfg: TurnConfig{Kit: kitOf(t, note)}}
	tr.byWire = map[string]*pendingCall{}
	resumed := fixed
	resumed.Arguments = "not json at all"
	added := tr.addCalls([]toolbus.Item{resumed}, false)
	if len(added) != 1 || tr.b.State(added[0].i) == batch.Done {
		t.Fatalf("the resumed call was refused: %+v", added[0].record)
	}
	pc := added[0]
	if string(pc.args) != `{"n":2,"text":"hi"}` || !slices.Contains(pc.record.Rungs, "repair") {
		t.Errorf("the resumed call runs with %s (rungs %v), want the recorded arguments and rungs", pc.args, pc.record.Rungs)
	}
	var back map[string]any
	if err := json.Unmarshal(pc.args, &back); err != nil || back["text"] != "hi" {
		t.Errorf("resumed arguments %s: %v", pc.args, err)
	}
}
