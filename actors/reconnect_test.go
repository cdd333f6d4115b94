package actors

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/schema"
)

// TestTurnAsksAgainAfterItsReconnect: a reply a host sends while the turn's own
// connection is down is lost, and the host cannot know (its connection stayed up). When
// the turn's connection is re-established, the turn asks again for the replies of its
// calls in flight, which the host keeps: the call ends ok, not at its deadline. A call
// whose host never answers ends at its deadline, and its output says the connection went
// down while it ran, so its answer may have been lost.
func TestTurnAsksAgainAfterItsReconnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The host: it hears both calls and answers neither (the reply to "kept" is lost on
	// its way, as one sent while the turn's connection is down), but keeps "kept"'s
	// reply and sends it when asked again, as package host does.
	hostConn := bustest.Conn(t, h.srv, "worker")
	var (
		mu    sync.Mutex
		heard []string
	)
	both := make(chan struct{})
	handle := func(s *toolbus.Spec, r micro.Request) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, s.Name)
		if len(heard) == 2 {
			close(both)
		}
	}
	idSchema := schema.MustFromJSON([]byte(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":false}`))
	svc, err := catalog.Serve(hostConn, catalog.Service{Category: "crm", Node: "worker", Handle: handle, Specs: []*toolbus.Spec{
		{Name: "kept", Category: "crm", Namespace: "crm", Params: idSchema, Timeout: 8 * time.Second},
		{Name: "silent", Category: "crm", Namespace: "crm", Params: idSchema, Timeout: 4 * time.Second},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	var asked []string
	if _, err := hostConn.Subscribe(bus.ResendSubjects("crm"), func(m *nats.Msg) {
		call := m.Header.Get(bus.HeaderCall)
		mu.Lock()
		asked = append(asked, call)
		mu.Unlock()
		if call != "kept" {
			return // nothing kept: still running, as far as the turn can tell
		}
		b, _ := json.Marshal(bus.ToolReply{Call: call, Tool: "kept", Outcome: bus.OutcomeOK,
			Content: []bus.ContentPart{{Type: bus.ContentText, Text: "kept reply"}}})
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	if err := hostConn.Flush(); err != nil {
		t.Fatal(err)
	}
	profiles, err := h.node.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.Put(ctx, []byte(`{"version":1,"agent":"ann","namespaces":[{"name":"crm","load":"upfront"}]}`)); err != nil {
		t.Fatal(err)
	}
	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{
			{ID: "kept", Name: "kept", Namespace: "crm", Arguments: `{"id":"k"}`},
			{ID: "silent", Name: "silent", Namespace: "crm", Arguments: `{"id":"s"}`},
		}},
		{Text: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	type ran struct {
		res TurnResult
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := h.node.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Agent: "ann", Input: "go"}, Model: model})
		done <- ran{res, err}
	}()
	select {
	case <-both:
	case r := <-done:
		t.Fatalf("the turn ended before the host heard its calls: %+v %v", r.res, r.err)
	}

	// The turn's connection is cut; it reconnects.
	nc := h.node.Conn()
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.NATS().DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if nc.Stats().Reconnects == 0 || !nc.IsConnected() {
			return errors.New("the node's connection has not reconnected")
		}
		return nil
	})

	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.State != bus.TurnCompleted || r.res.Text != "done" {
		t.Fatalf("turn %s (%s): %q", r.res.State, r.res.ErrorText(), r.res.Text)
	}
	if got, want := outcomes(r.res), []string{"kept:ok", "silent:timeout"}; !slices.Equal(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	out := outputs(r.res)
	if got := outputText(out["kept"]); got != "kept reply" {
		t.Errorf("kept's output %q, want the reply sent again", got)
	}
	if got := outputText(out["silent"]); !strings.Contains(got, "did not answer before its deadline; the connection to the bus went down while it ran, so its answer may have been lost: it may have run") {
		t.Errorf("silent's output %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(asked)
	if !slices.Equal(asked, []string{"kept", "silent"}) {
		t.Errorf("asked again for %v, want both calls in flight once", asked)
	}
}
