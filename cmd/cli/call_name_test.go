package main

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/schema"
)

// TestCallRefusalNamesToolAsGiven: `toolbus call` refuses arguments naming the tool as
// the person gave it (docs/tools.md: `invalid arguments for crm.add_note`), not by its
// bare name: pycalc.add is refused as pycalc.add, and the same tool called by its bare
// name as add. The host never hears of either call.
func TestCallRefusalNamesToolAsGiven(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, false)
	nc, err := rb.srv.Connect("pycalc")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var calls atomic.Int32
	svc, err := catalog.Serve(nc, catalog.Service{Category: "pycalc", Node: "py1",
		Specs: []*toolbus.Spec{{Name: "add", Category: "pycalc", Namespace: "pycalc",
			Params: schema.MustFromJSON([]byte(`{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}`))}},
		Handle: func(*toolbus.Spec, micro.Request) { calls.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	ctx := testContext(t)
	for _, name := range []string{"pycalc.add", "add"} {
		code, _, stderr := cli(ctx, rb.args("call", name, `{"a":"x"}`)...)
		// After the gating note: the default agent has no profile.
		want := "\ntoolbus: invalid arguments for " + name + ": arguments do not match the schema:\n- /a: "
		if code != exitFailed || !strings.Contains(stderr, want) {
			t.Errorf("call %s: exit %d, stderr:\n%s\nwant exit %d and a start of\n%s", name, code, stderr, exitFailed, want)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the host got %d calls of refused arguments", n)
	}
}
