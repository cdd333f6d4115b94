package actors

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/schema"
)

// TestCallRecordNamespace: a call the model named by a bare name ("add") that ran a
// namespaced tool (pycalc.add, the only add of the turn: allowed by the assembly rules)
// has the tool's namespace in its call record, in the turn's result and in the done
// status on the bus (what `toolbus run -json` and the console read), so the record says
// which tool ran. A built-in tool's record has none.
func TestCallRecordNamespace(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	f := &foreignHost{}
	hostConn, err := h.srv.Connect("pyhost")
	if err != nil {
		t.Fatal(err)
	}
	defer hostConn.Close()
	params := schema.MustFromJSON([]byte(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`))
	svc, err := catalog.Serve(hostConn, catalog.Service{Category: "pycalc", Node: "pyhost", Handle: f.handle, Specs: []*toolbus.Spec{
		{Name: "add", Category: "pycalc", Namespace: "pycalc", Params: params, ReadOnly: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	profiles, err := h.node.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.Put(ctx, []byte(`{"version":1,"agent":"ann","namespaces":[{"name":"pycalc","load":"upfront"}]}`)); err != nil {
		t.Fatal(err)
	}

	watch, err := h.srv.Connect("watch")
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	done := make(chan *nats.Msg, 4)
	sub, err := watch.ChanSubscribe(bus.AllStatuses, done)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}

	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{
			{ID: "bare", Name: "add", Arguments: `{"id":"a"}`},
			{ID: "named", Name: "add", Namespace: "pycalc", Arguments: `{"id":"b"}`},
			{ID: "builtin", Name: "todo_read", Arguments: `{}`},
		}},
		{Text: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.node.Run(ctx, TurnConfig{Spec: bus.TurnSpec{ID: "t-ns", Agent: "ann", Input: "add"}, Model: model})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bus.TurnCompleted {
		t.Fatalf("turn %s: %s", res.State, res.ErrorText())
	}
	want := map[string]string{"bare": "pycalc", "named": "pycalc", "builtin": ""}
	check := func(where string, calls []bus.CallRecord) {
		t.Helper()
		if len(calls) != len(want) {
			t.Fatalf("%s: %d call records, want %d: %+v", where, len(calls), len(want), calls)
		}
		for _, c := range calls {
			// The harness serves no todo: the built-in call's outcome is not the point.
			if ns, ok := want[c.Call]; !ok || c.Namespace != ns || (ns != "" && c.Outcome != bus.OutcomeOK) {
				t.Errorf("%s: record of %s: namespace %q, outcome %s; want %q", where, c.Call, c.Namespace, c.Outcome, ns)
			}
		}
	}
	check("the turn's result", res.Calls)
	// The transcript says it too, for readers of the stored turn (the console): the
	// bare call's run names the namespace that ran; a named one needs none.
	for _, it := range res.Transcript {
		if it.Kind != toolbus.KindFunctionCall || it.Run == nil {
			continue
		}
		if got, want := it.Run.Namespace, map[string]string{"bare": "pycalc"}[it.CallID]; got != want {
			t.Errorf("transcript: call %s records namespace %q, want %q", it.CallID, got, want)
		}
	}
	for {
		select {
		case m := <-done:
			if !strings.HasSuffix(m.Subject, "."+bus.StatusDone) {
				continue
			}
			var st bus.TurnStatus
			if err := json.Unmarshal(m.Data, &st); err != nil {
				t.Fatal(err)
			}
			check("the done status", st.Calls)
			if !strings.Contains(string(m.Data), `"call_id":"bare","tool":"add","namespace":"pycalc"`) {
				t.Errorf("the done status's JSON lacks the bare call's namespace:\n%s", m.Data)
			}
			return
		case <-ctx.Done():
			t.Fatal("no done status")
		}
	}
}
