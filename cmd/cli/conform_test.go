package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/internal/needs"
	"github.com/toolbus/toolbus/schema"
)

// TestConformGoHost runs `toolbus conform` against the Go host of category computer on a
// node of a listening bus, the slow call a sandboxed sleep: every case passes, none is
// skipped, and the output shows each case's request, expected reply and answer.
func TestConformGoHost(t *testing.T) {
	needs.Bwrap(t) // the slow call is a sandboxed sleep, and every case must pass
	t.Parallel()
	rb := startRemoteBus(t, true)
	code, stdout, stderr := cli(testContext(t), rb.args("conform", "-category", "computer",
		"-slow-tool", "run_command", "-slow-args", `{"command":"sleep 30"}`)...)
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	for _, want := range []string{
		"ok    Toolbus-Turn that is not an id (",
		"ok    abort during the call: stopped, with the abort (run_command)\n",
		"ok    Toolbus-Truncated \"no\" on a destructive tool (write_file)\n",
		"      want  {\"call_id\":",
		"      got   {\"call_id\":",
		" failed, 0 skipped\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if regexp.MustCompile(`(?m)^(FAIL|skip)  `).MatchString(stdout) {
		t.Errorf("a case failed or was skipped:\n%s", stdout)
	}
}

// TestConformCatchesAWrongHost: a host that answers every request with one refusal of
// its own words, without duration_ns, fails conform: exit 1, each failed case with why.
func TestConformCatchesAWrongHost(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, false)
	nc, err := rb.srv.Connect("sloppy")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := catalog.Serve(nc, catalog.Service{Category: "sloppy", Node: "s1",
		Specs: []*toolbus.Spec{{Name: "look", Category: "sloppy", ReadOnly: true,
			Params: schema.MustFromJSON([]byte(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`))}},
		Handle: func(s *toolbus.Spec, r micro.Request) {
			_ = r.Respond([]byte(`{"call_id":"` + r.Headers().Get(bus.HeaderCall) + `","tool":"look","outcome":"invalid","error":"bad request"}`))
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	code, stdout, stderr := cli(testContext(t), rb.args("conform", "-category", "sloppy")...)
	if code != exitFailed || !strings.Contains(stderr, "toolbus: the host of category sloppy answered ") {
		t.Fatalf("exit %d, want %d; stderr:\n%s\nstdout:\n%s", code, exitFailed, stderr, stdout)
	}
	for _, want := range []string{
		"FAIL  deadline already past on arrival (look)\n",
		"      why   no duration_ns; it is always present (0 for a refusal)\n",
		`      why   outcome "invalid"; want "timeout"`,
		`      why   error "bad request"; want "deadline already past on arrival (2020-01-01T00:00:00Z); the tool did not run"`,
		"skip  abort during the call: stopped, with the abort: needs a call that runs 3 s or more",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}
