//go:build linux

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/internal/needs"
	"github.com/toolbus/toolbus/schema"
)

// A listening node takes its users and their roles from -users: an operator's
// command line runs a turn and reads its transcript, lists turns and is told
// when a turn it aborts does not exist; a watcher lists turns too, and a
// wrong password is refused. A second node under the tool role serves the computer
// category: it reads the turn's record (its role allows that much) and runs the call in
// the home of the turn's stored agent.
func TestNodeWithUsersFileAndOperatorCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	users := filepath.Join(dir, "users.json")
	doc := `[
	  {"user": "ops", "password": "ops-pw-5d1c", "role": "operator"},
	  {"user": "watch", "password": "watch-pw-77e0", "role": "watcher"},
	  {"user": "tools", "password": "tools-pw-0b9a", "role": "tool", "categories": ["computer"]}
	]`
	if err := os.WriteFile(users, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, "n1", "-users", users, "-categories", "todo")
	n.waitReady(t)
	server := fmt.Sprintf("nats://127.0.0.1:%d", n.port)
	as := func(user, pass string) []string {
		return []string{"-server", server, "-user", user, "-pass-file", writePassFile(t, dir, pass)}
	}
	ops, watch := as("ops", "ops-pw-5d1c"), as("watch", "watch-pw-77e0")

	script := writeScript(t, "all done")
	out, errOut, err := runCLI(t, append(append([]string{"run"}, ops...), "-model", "script:"+script, "-json", "do it")...)
	if err != nil || !strings.Contains(out, `"transcript"`) || !strings.Contains(out, "all done") {
		t.Fatalf("toolbus run as operator: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	for _, who := range [][]string{ops, watch} {
		out, errOut, err = runCLI(t, append([]string{"turns"}, who...)...)
		if err != nil || !strings.Contains(out, "completed") {
			t.Errorf("toolbus turns as %s: %v\nstdout:\n%s\nstderr:\n%s", who[3], err, out, errOut)
		}
	}
	homes := t.TempDir()
	if err := os.MkdirAll(filepath.Join(homes, "ann"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(homes, "ann", "notes.txt"), []byte("ann's notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := startProcess(t, "node w1 (tool role)", nodeBin(t), nodeArgs(append(as("tools", "tools-pw-0b9a"),
		"-name", "w1", "-categories", "computer", "-turns=false", "-home-root", homes, "-store-dir", filepath.Join(dir, "w1"))...)...)
	checkFor(t, "the tool node is ready", func() error {
		if !strings.Contains(w.stderr.String(), "node ready") {
			return fmt.Errorf("not yet: %s", w.stderr.String())
		}
		return nil
	})
	script = writeScript(t, "read them", []scriptCall{{ID: "r", Name: "read_file", Arguments: `{"path":"notes.txt"}`}})
	out, errOut, err = runCLI(t, append(append([]string{"run"}, ops...), "-agent", "ann", "-model", "script:"+script, "read my notes")...)
	if err != nil || !strings.Contains(out, "✓ Read 1 line of notes.txt") {
		t.Fatalf("a turn of ann whose read_file the tool node serves: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	_, errOut, err = runCLI(t, append(append([]string{"abort"}, ops...), "-wait", "300ms", "NoSuchTurn")...)
	if exitCode(err) != 1 || !strings.Contains(errOut, "no turn NoSuchTurn on this bus") {
		t.Errorf("abort of an unknown turn: exit %d\n%s", exitCode(err), errOut)
	}
	_, errOut, err = runCLI(t, append([]string{"turns"}, as("ops", "wrong-password")...)...)
	if exitCode(err) != 1 || !strings.Contains(errOut, "Authorization Violation") {
		t.Errorf("toolbus turns with a wrong password: exit %d\n%s", exitCode(err), errOut)
	}
}

// rolesNode starts node n1 with a client listener whose users come from doc, and waits
// until it is ready; it returns the node, its URL without credentials, and a helper that
// gives the command line's flags to log in as a user.
func rolesNode(t *testing.T, doc string, args ...string) (n *node, server string, as func(user, pass string) []string) {
	t.Helper()
	dir := t.TempDir()
	users := filepath.Join(dir, "users.json")
	if err := os.WriteFile(users, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	n = startNode(t, "n1", append([]string{"-users", users}, args...)...)
	n.waitReady(t)
	server = fmt.Sprintf("nats://127.0.0.1:%d", n.port)
	as = func(user, pass string) []string {
		return []string{"-server", server, "-user", user, "-pass-file", writePassFile(t, dir, pass)}
	}
	return n, server, as
}

// dialAs connects to server as a user of the users file, the way toolbus does
// (bus.Dial: the user's own inbox prefix); asynchronous errors arrive on the channel.
func dialAs(t *testing.T, server, user, pass string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 64)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	nc, err := bus.Dial(ctx, server, "test-"+user, bus.Credentials{User: user, Password: pass},
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// waitViolations waits until errs has reported a permissions violation for each
// subject.
func waitViolations(t *testing.T, who string, errs <-chan error, subjects ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, s := range subjects {
		missing[s] = true
	}
	deadline := time.After(waitLimit)
	for len(missing) > 0 {
		select {
		case err := <-errs:
			for s := range missing {
				if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+s+`"`) {
					delete(missing, s)
				}
			}
		case <-deadline:
			t.Fatalf("%s: no permissions violation for %v", who, missing)
		}
	}
}

// A watcher and a tool host (listener users of -users, under roles watcher and tool)
// try to read every reply on the bus: an operator's `toolbus call read_file` of a
// secret file, the operator's turn, and the node's own traffic. Their subscriptions
// are refused as permissions violations and receive nothing; the operator gets its
// replies, and the watcher still reads what it may.
func TestInboxIsPrivate(t *testing.T) {
	t.Parallel()
	n, server, as := rolesNode(t, `[
	  {"user": "ops", "password": "ops-pw-5d1c", "role": "operator"},
	  {"user": "watch", "password": "watch-pw-77e0", "role": "watcher"},
	  {"user": "crm", "password": "crm-pw-31a8", "role": "tool", "categories": ["crm"]}
	]`, "-categories", "computer")
	const secret = "the launch code is 0451"
	home := filepath.Join(n.dir, "homes", "default")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "notes.txt"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	targets := []string{">", "_INBOX.>", bus.UserInbox("ops"), bus.InboxPrefix("ops") + ".*"}
	var subs []*nats.Subscription
	for _, spy := range []struct{ user, pass string }{{"watch", "watch-pw-77e0"}, {"crm", "crm-pw-31a8"}} {
		nc, errs := dialAs(t, server, spy.user, spy.pass)
		for _, subject := range targets {
			sub, err := nc.SubscribeSync(subject)
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		waitViolations(t, spy.user, errs, targets...)
	}

	ops, watch := as("ops", "ops-pw-5d1c"), as("watch", "watch-pw-77e0")
	out, errOut, err := runCLI(t, append(append([]string{"call"}, ops...), "read_file", `{"path":"notes.txt"}`)...)
	if err != nil || !strings.Contains(out, secret) {
		t.Fatalf("toolbus call read_file as the operator: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	script := writeScript(t, "read them", []scriptCall{{ID: "r", Name: "read_file", Arguments: `{"path":"notes.txt"}`}})
	out, errOut, err = runCLI(t, append(append([]string{"run"}, ops...), "-model", "script:"+script, "-json", "read my notes")...)
	if err != nil || !strings.Contains(out, secret) {
		t.Fatalf("toolbus run as the operator: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	out, errOut, err = runCLI(t, append([]string{"turns"}, watch...)...)
	if err != nil || !strings.Contains(out, "completed") {
		t.Fatalf("toolbus turns as the watcher: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}

	for _, sub := range subs {
		if n, _, _ := sub.Pending(); n != 0 {
			m, _ := sub.NextMsg(0)
			t.Errorf("a refused subscription to %q received %d messages, the first on %q", sub.Subject, n, m.Subject)
		}
	}
}

// A tool host answers only the calls it received. While run_command of a turn runs on
// a node under the tool role (category computer), a host of category crm (a listener
// user of role tool) publishes a forged result on the call's reply subject: the server
// refuses it, the turn keeps waiting and takes the command's real output. The crm host
// still answers the turn's call of its own tool.
//
// The command runs until the test has seen the forgery refused (it waits for a file the
// test then writes in its home), and the test reads the call's results from before the
// turn starts: the command used to sleep 3 s, in which the test had to hear of the
// call, subscribe to its result and see the forgery refused, or miss the result.
func TestHostAnswersOnlyItsCalls(t *testing.T) {
	needs.Bwrap(t) // the turn's command runs in the tool node's sandbox
	t.Parallel()
	n, server, as := rolesNode(t, `[
	  {"user": "ops", "password": "ops-pw-5d1c", "role": "operator"},
	  {"user": "tools", "password": "tools-pw-0b9a", "role": "tool", "categories": ["computer"]},
	  {"user": "crm", "password": "crm-pw-31a8", "role": "tool", "categories": ["crm"]}
	]`, "-categories=")
	observer := connect(t, n.url) // the node's admin, for the test's eyes only
	started := make(chan *nats.Msg, 16)
	if _, err := observer.Subscribe("toolbus.turn.*.evt.*."+string(bus.EventStarted), func(m *nats.Msg) { started <- m }); err != nil {
		t.Fatal(err)
	}
	// Every result of a call "cmd", whatever its turn: the scripted call's id.
	results, err := observer.SubscribeSync(bus.ResultSubject("*", "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	if err := observer.Flush(); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	home := filepath.Join(dir, "homes", "ann")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	w := startProcess(t, "node w1 (tool role)", nodeBin(t), nodeArgs(append(as("tools", "tools-pw-0b9a"),
		"-name", "w1", "-categories", "computer", "-turns=false", "-home-root", filepath.Join(dir, "homes"), "-store-dir", filepath.Join(dir, "w1"))...)...)
	checkFor(t, "the tool node is ready", func() error {
		if !strings.Contains(w.stderr.String(), "node ready") {
			return fmt.Errorf("not yet: %s", w.stderr.String())
		}
		return nil
	})

	crm, crmErrs := dialAs(t, server, "crm", "crm-pw-31a8")
	spec := &toolbus.Spec{Name: "lookup", Description: "Look a customer up. Reads nothing, changes nothing.", Category: "crm",
		Namespace: "crm", ReadOnly: true, Params: schema.MustFromJSON([]byte(`{"type":"object","properties":{}}`)), Timeout: time.Minute}
	svc, err := catalog.Serve(crm, catalog.Service{Category: "crm", Node: "test", Specs: []*toolbus.Spec{spec},
		Handle: func(s *toolbus.Spec, r micro.Request) {
			req, _ := bus.ParseToolRequest(nats.Header(r.Headers()))
			b, _ := json.Marshal(bus.ToolReply{Call: req.Call, Tool: s.Name, Outcome: bus.OutcomeOK,
				Content: []bus.ContentPart{{Type: bus.ContentText, Text: "crm record 42"}}})
			_ = r.Respond(b)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	b, _ := json.Marshal(bus.CatalogChange{Category: "crm", Node: "test", State: bus.CatalogUp})
	if err := crm.Publish(bus.CatalogChanged, b); err != nil {
		t.Fatal(err)
	}

	ops := as("ops", "ops-pw-5d1c")
	if out, errOut, err := runCLI(t, append(append([]string{"agent", "set"}, ops...), "-upfront", "crm", "ann")...); err != nil {
		t.Fatalf("agent set: %v\n%s%s", err, out, errOut)
	}
	script := writeScript(t, "all done",
		[]scriptCall{{ID: "cmd", Name: "run_command", Arguments: `{"command":"until [ -e release ]; do sleep 0.05; done; echo real-output"}`}},
		[]scriptCall{{ID: "crm", Name: "lookup", Namespace: "crm", Arguments: `{}`}})
	run := startProcess(t, "toolbus run", cliBin(t), append(append([]string{"run"}, ops...),
		"-agent", "ann", "-model", "script:"+script, "-json", "run it, then look it up")...)

	var turn, call string
	deadline := time.After(waitLimit)
	for call == "" {
		select {
		case m := <-started:
			var ev bus.Event
			if err := json.Unmarshal(m.Data, &ev); err == nil && ev.Tool == "run_command" {
				turn, call = ev.Turn, ev.Call
			}
		case <-deadline:
			t.Fatalf("run_command never started\nstdout:\n%s\nstderr:\n%s", run.stdout.String(), run.stderr.String())
		}
	}
	forged, _ := json.Marshal(bus.ToolReply{Call: call, Tool: "run_command", Outcome: bus.OutcomeOK,
		Content: []bus.ContentPart{{Type: bus.ContentText, Text: "forged-output"}}})
	if err := crm.Publish(bus.ResultSubject(turn, call), forged); err != nil {
		t.Fatal(err)
	}
	waitViolations(t, "crm", crmErrs, bus.ResultSubject(turn, call))
	if run.exited() {
		t.Fatalf("the turn ended while its command ran\nstdout:\n%s", run.stdout.String())
	}
	if err := os.WriteFile(filepath.Join(home, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := results.NextMsg(waitLimit)
	if err != nil {
		t.Fatalf("no result: %v", err)
	}
	if m.Subject != bus.ResultSubject(turn, call) || !strings.Contains(string(m.Data), "real-output") {
		t.Fatalf("the first result of a call cmd is %s on %s, want the command's on %s", m.Data, m.Subject, bus.ResultSubject(turn, call))
	}

	if code := run.wait(t); code != 0 {
		t.Fatalf("toolbus run exited %d\nstdout:\n%s\nstderr:\n%s", code, run.stdout.String(), run.stderr.String())
	}
	var r runOutput
	if err := json.Unmarshal([]byte(run.stdout.String()), &r); err != nil {
		t.Fatalf("decode toolbus run -json: %v\n%s", err, run.stdout.String())
	}
	if got, _ := r.output("cmd"); !strings.Contains(got, "real-output") || strings.Contains(got, "forged") {
		t.Errorf("run_command's output in the transcript: %q", got)
	}
	if got, _ := r.output("crm"); !strings.Contains(got, "crm record 42") {
		t.Errorf("the crm host's answer to its own call: %q", got)
	}
}
