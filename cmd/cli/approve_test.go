package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/needs"
)

// TestApproveFromAnotherShell: a turn of an agent whose profile holds destructive calls
// waits; `run` says how to decide; `toolbus approve` lets the call run, and with -refuse
// the model is told and the command never runs.
func TestApproveFromAnotherShell(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	creds := []string{"-server", rb.url, "-user", "ops", "-pass-file", rb.passFile}
	if code, out, errOut := cli(ctx, append(append([]string{"agent", "set"}, creds...), "-approvals", "destructive", "careful")...); code != exitOK {
		t.Fatalf("agent set: %d %s %s", code, out, errOut)
	}
	nc, err := rb.srv.Connect("test-operator")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	held := make(chan bus.ApprovalRequest, 4)
	sub, err := nc.Subscribe(bus.AllApprovals, func(m *nats.Msg) {
		var req bus.ApprovalRequest
		if json.Unmarshal(m.Data, &req) == nil {
			held <- req
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, `{"responses":[{"calls":[{"id":"cmd","name":"run_command","arguments":"{\"command\":\"echo approved-run\"}"}]},{"text":"done"}]}`)

	for _, tc := range []struct {
		name     string
		decision []string
		want     []string
		bwrap    bool // the approved command runs, in the sandbox
	}{
		{"approved", nil, []string{"waiting for approval: run_command (destructive): Running `echo approved-run`, with {\"command\":\"echo approved-run\"}", "approve: toolbus approve -server " + rb.url + " ", "✓ Ran `echo approved-run` (exit 0", "completed"}, true},
		{"refused", []string{"-refuse", "-reason", "not on a Friday"}, []string{"✗ run_command: call refused by", "not on a Friday", "completed"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bwrap {
				needs.Bwrap(t)
			}
			type result struct {
				code        int
				out, errOut string
			}
			done := make(chan result, 1)
			go func() {
				code, out, errOut := cli(ctx, append(append([]string{"run"}, creds...), "-agent", "careful", "-model", "script:"+script, "echo something")...)
				done <- result{code, out, errOut}
			}()
			var req bus.ApprovalRequest
			select {
			case req = <-held:
			case <-time.After(30 * time.Second):
				t.Fatal("no approval request")
			}
			args := append(append(append([]string{"approve"}, creds...), tc.decision...), req.Turn, req.Call)
			if code, out, errOut := cli(ctx, args...); code != exitOK || !strings.Contains(errOut, "run_command (destructive): Running `echo approved-run`, with {\"command\":\"echo approved-run\"}") {
				t.Fatalf("approve: %d\n%s\n%s", code, out, errOut)
			}
			r := <-done
			if r.code != exitOK {
				t.Fatalf("run: %d\n%s\n%s", r.code, r.out, r.errOut)
			}
			for _, want := range tc.want {
				if !strings.Contains(r.out, want) {
					t.Errorf("run output lacks %q:\n%s", want, r.out)
				}
			}
		})
	}
	// Nothing is held: approve says so.
	if code, _, errOut := cli(ctx, append(append([]string{"approve"}, creds...), "nosuchturn", "c1")...); code != exitFailed || !strings.Contains(errOut, "no turn nosuchturn on this bus") {
		t.Errorf("approve of no turn: %d %s", code, errOut)
	}
}

// A turn spec larger than the bus carries is refused before it is sent, saying so.
func TestRunRefusesASpecOverMaxPayload(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	huge := strings.Repeat("be brief. ", 120_000) // 1.2 MB, over the default 1 MiB
	code, _, errOut := cli(ctx, rb.args("run", "-model", "script:"+writeScript(t, `{"responses":[{"text":"ok"}]}`), "-instructions", huge, "hello")...)
	if code != exitFailed || !strings.Contains(errOut, "more than the bus carries in one message (1048576, the server's max_payload)") {
		t.Errorf("exit %d, stderr %.300s", code, errOut)
	}
}
