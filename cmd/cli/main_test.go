package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/needs"
	"github.com/toolbus/toolbus/internal/testmain"
	"github.com/toolbus/toolbus/toolsets"
)

const (
	demoScript = "../../examples/demo/script.json"
	demoHome   = "../../examples/demo/home"
	demoPrompt = "Look around and check the project"
)

// parallelTests: several tests play the paced demo script (4 s of waiting each), which go
// test's default of 2 at once (GOMAXPROCS) would run one pair at a time. 6 since the tests
// that set variables or standard input run in parallel too (testEnv): the package took
// 13.2-14.8 s at 4, 11.3-12.7 s at 6 and 12.6 s at 8 (-race, 2 cores).
const parallelTests = 6

// cliEnv makes the test binary the toolbus command line (its arguments the command's)
// instead of running the tests: for programs the tests start that start toolbus
// themselves, as mcporter does with a stdio MCP server.
const runCLIEnv = "TOOLBUS_TEST_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(runCLIEnv) != "" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	// The flags read these; a developer's environment must not send the
	// tests to a real bus or model.
	for _, v := range []string{"NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_CREDS", "TOOLBUS_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "TOOLBUS_MODEL_API_KEY", "TOOLBUS_REQUEST_TIMEOUT"} {
		os.Unsetenv(v)
	}
	testmain.Main(m, testmain.Config{Parallel: parallelTests})
}

// output is a concurrency-safe buffer that can wait for a text to appear.
type output struct {
	mu      sync.Mutex
	b       bytes.Buffer
	waiters []outputWaiter
}

type outputWaiter struct {
	text string
	seen chan struct{}
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.b.Write(p)
	o.waiters = deleteSeen(o.waiters, o.b.String())
	return n, err
}

func deleteSeen(ws []outputWaiter, s string) []outputWaiter {
	kept := ws[:0]
	for _, w := range ws {
		if strings.Contains(s, w.text) {
			close(w.seen)
			continue
		}
		kept = append(kept, w)
	}
	return kept
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// waitFor blocks until the output holds text, failing the test when ctx ends first.
func (o *output) waitFor(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	o.mu.Lock()
	w := outputWaiter{text: text, seen: make(chan struct{})}
	o.waiters = deleteSeen(append(o.waiters, w), o.b.String())
	o.mu.Unlock()
	select {
	case <-w.seen:
	case <-ctx.Done():
		t.Fatalf("output never showed %q; it holds:\n%s", text, o.String())
	}
}

// cli runs the command line in-process, in the process's environment.
func cli(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	return cliEnv(ctx, processEnv(), args...)
}

// cliEnv runs the command line in-process, in the environment e.
func cliEnv(ctx context.Context, e *env, args ...string) (code int, stdout, stderr string) {
	var out, errOut output
	code = runEnv(ctx, e, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// testEnv is an environment for one run: the variables vars and no other, and a
// standard input that reads stdin. Unlike t.Setenv and a swapped os.Stdin, it leaves
// the process alone, so the tests that need one run in parallel; the variables of the
// process (a developer's keys, NATS_URL) do not reach the run.
func testEnv(vars map[string]string, stdin string) *env {
	return &env{getenv: func(k string) string { return vars[k] }, stdin: strings.NewReader(stdin)}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// snapshot maps every file under dir to its content, to prove a run wrote nothing.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := make(map[string]string)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		files[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestRunDemo(t *testing.T) {
	needs.Bwrap(t) // the demo runs sh check.sh, in the sandbox
	t.Parallel()
	before := snapshot(t, demoHome)
	code, stdout, stderr := cli(testContext(t), "run", "-model", "script:"+demoScript, "-home", demoHome, demoPrompt)
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	for _, want := range []string{
		"Let me look around the project first.\n",
		"→ Listing the home directory\n",
		"✓ Listed 4 entries in the home directory (",
		"✓ Read 8 lines of README.md (",
		"✓ Read 5 lines of notes.txt (",
		"↳ read_file (Read 5 lines of notes.txt): arguments repaired (repair)\n",
		"→ Running `sh check.sh`\n",
		"✓ Ran `sh check.sh` (exit 0) (",
		"✓ Updated the todo list: 0 of 3 done (",
		"All checks pass: the three sums are right",
		"3. README.md does not describe the checks yet.\n",
		"completed · 4 steps · 5 calls · ",
		"agent home: " + absPath(t, demoHome) + " (read-write, commands run here, in a sandbox)\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	// The answer comes once, after every activity.
	if n := strings.Count(stdout, "tinycalc is a small shell calculator"); n != 1 {
		t.Errorf("the answer is printed %d times", n)
	}
	if strings.Index(stdout, "tinycalc is a small") < strings.Index(stdout, "✓ Updated the todo list") {
		t.Errorf("the answer comes before the last activity:\n%s", stdout)
	}
	if stderr != "" {
		t.Errorf("stderr: %s", stderr)
	}
	if after := snapshot(t, demoHome); !equalMaps(before, after) {
		t.Errorf("the demo changed its home:\nbefore %v\nafter %v", before, after)
	}
}

// TestRunDemoWithoutBubblewrap: on a machine without bubblewrap (a fresh one, before
// apt-get install bubblewrap) the demo says first that run_command will refuse and how
// to fix it, and its model does not claim that the checks it could not run pass (the
// script's if_error). The command runs in a process of its own whose PATH has no bwrap
// (this one's sandbox check is made once, for every test).
func TestRunDemoWithoutBubblewrap(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testContext(t), exe, "run", "-model", "script:"+demoScript, "-home", demoHome, demoPrompt)
	cmd.Env = append(os.Environ(), runCLIEnv+"=1", "PATH="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v, stderr:\n%s\nstdout:\n%s", err, &stderr, &stdout)
	}
	if e := stderr.String(); !strings.Contains(e, "run_command will refuse every call: command sandbox unavailable: bubblewrap is not installed") ||
		!strings.Contains(e, "apt-get install bubblewrap") {
		t.Errorf("stderr does not say that commands will be refused, and how to fix it:\n%s", e)
	}
	out := stdout.String()
	for _, want := range []string{
		"✗ Could not run `sh check.sh` (error)",
		"check.sh could not run, so I can't say whether the checks pass.",
		"The checks could not run here (run_command's error above says why)",
		"completed · 4 steps · 5 calls · ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "checks pass:") || strings.Contains(out, "The checks pass.") {
		t.Errorf("the model claims the checks pass:\n%s", out)
	}
}

func absPath(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestRunJSON(t *testing.T) {
	needs.Bwrap(t) // the demo runs sh check.sh, in the sandbox
	t.Parallel()
	code, stdout, stderr := cli(testContext(t), "run", "-json", "-model", "script:"+demoScript, "-home", demoHome, demoPrompt)
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	var out client.RunOutput
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, stdout)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than the JSON document:\n%s", stdout)
	}
	if out.Status.State != bus.TurnCompleted || out.Status.Turn != out.Turn || out.Status.Step != 4 || len(out.Status.Calls) != 5 {
		t.Errorf("status = %+v", out.Status)
	}
	calls := map[string]string{}
	outputs := map[string]toolbus.Item{}
	for _, it := range out.Transcript {
		switch it.Kind {
		case toolbus.KindFunctionCall:
			calls[it.CallID] = it.Name
		case toolbus.KindCallOutput:
			outputs[it.CallID] = it
		}
	}
	if len(calls) != 5 || len(outputs) != 5 {
		t.Fatalf("transcript has %d calls and %d outputs, want 5 each", len(calls), len(outputs))
	}
	for id, name := range calls {
		o, ok := outputs[id]
		if !ok || o.IsError || len(o.Output) == 0 {
			t.Errorf("call %s (%s): output %+v", id, name, o)
		}
	}
	if got := outputs["call_0_2"].Output; len(got) == 0 || !strings.Contains(got[0].Text, "Open items for tinycalc") {
		t.Errorf("the repaired read of notes.txt gave %+v", got)
	}
	// Each call says where it ran and, repaired, what its tool got (docs/durable.md).
	var runs []string
	for _, it := range out.Transcript {
		if it.Kind != toolbus.KindFunctionCall {
			continue
		}
		if it.Run == nil {
			t.Errorf("call %s records no run", it.CallID)
			continue
		}
		runs = append(runs, fmt.Sprintf("%s:%d.%d", it.CallID, it.Run.Step, it.Run.N))
		if repaired := it.CallID == "call_0_2"; repaired != (it.Repaired != nil) {
			t.Errorf("call %s records repaired arguments %s", it.CallID, it.Repaired)
		}
	}
	if got := strings.Join(runs, " "); got != "call_0_0:1.1 call_0_1:1.1 call_0_2:1.1 call_1_0:2.1 call_2_0:3.1" {
		t.Errorf("recorded runs: %s", got)
	}
	if first := out.Transcript[0]; first.Kind != toolbus.KindMessage || first.Text != demoPrompt {
		t.Errorf("transcript starts with %+v", first)
	}
}

// sleepScript runs a command that outlasts the test unless the turn is
// aborted, then a call that never starts.
const sleepScript = `{"responses": [
  {"text": "Waiting.", "calls": [
    {"name": "run_command", "arguments": "{\"command\": \"sleep 30\"}"},
    {"name": "list_files", "arguments": "{}"}
  ]},
  {"text": "Done."}
]}`

func writeScript(t testing.TB, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunInterrupted(t *testing.T) {
	needs.Bwrap(t) // sleep 30 runs in the sandbox
	t.Parallel()
	script := writeScript(t, sleepScript)
	ctx, interrupt := context.WithCancel(testContext(t))
	defer interrupt()
	var stdout, stderr output
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"run", "-model", "script:" + script, "-home", t.TempDir(), "wait"}, &stdout, &stderr)
	}()
	stdout.waitFor(t, testContext(t), "→ Running `sleep 30`")
	interrupt()
	if got := <-code; got != exitInterrupted {
		t.Fatalf("exit %d, want %d; stderr:\n%s\nstdout:\n%s", got, exitInterrupted, stderr.String(), stdout.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"⊘ abort requested: interrupted",
		"✗ Stopped `sleep 30` after ",
		"— call stopped: ",
		"✗ list_files: call not started: the turn was aborted: interrupted",
		"aborted · 1 step · 2 calls",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Done.") {
		t.Errorf("the model was called after the abort:\n%s", out)
	}
}

// remoteBus is a listening bus with a node that runs turns in the demo home.
type remoteBus struct {
	url       string
	passFile  string // holds the password of the user ops
	watchFile string // holds the password of the user watch, a watcher
	srv       *server.Server
	node      *actors.Node
}

func startRemoteBus(t *testing.T, turns bool) *remoteBus {
	t.Helper()
	ctx := testContext(t)
	watch, err := server.RolePermissions(server.RoleWatcher, "watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(ctx, server.Config{
		Listen: "127.0.0.1:-1", Logger: actors.DiscardLogger(), Users: []server.User{
			{Name: "ops", Password: "secret-pw"},
			{Name: "watch", Password: "watch-pw", Role: server.RoleWatcher, Permissions: watch},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	rb := &remoteBus{url: srv.ClientURL(), srv: srv, passFile: filepath.Join(dir, "ops-pw"), watchFile: filepath.Join(dir, "watch-pw")}
	if err := os.WriteFile(rb.passFile, []byte("secret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rb.watchFile, []byte("watch-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !turns {
		return rb
	}
	home, err := filepath.Abs(demoHome)
	if err != nil {
		t.Fatal(err)
	}
	rb.node, err = actors.StartNode(ctx, actors.NodeConfig{
		Name:       "remote1",
		Connect:    func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Categories: toolsets.Categories(),
		Turns:      true,
		Home:       home,
		Logger:     actors.DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rb.node.Close)
	return rb
}

func (rb *remoteBus) args(cmd string, args ...string) []string {
	return append([]string{cmd, "-server", rb.url, "-user", "ops", "-pass-file", rb.passFile}, args...)
}

func TestRunWithoutNode(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, false)
	ctx := testContext(t)
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"any node", nil, "toolbus: no node runs turns on nats://127.0.0.1:"},
		{"named node", []string{"-node", "n7"}, "toolbus: no node named n7 runs turns on nats://127.0.0.1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := rb.args("run", append(tc.extra, "-model", "script:"+demoScript, "hello")...)
			code, _, stderr := cli(ctx, args...)
			if code != exitFailed || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, exitFailed, tc.want)
			}
		})
	}
}

// cliResult is what a command run in the background ended with.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runWithGhost runs `toolbus run -give-up 1s` against rb, whose only taker of turns is
// a stand-in node that hears the start and answers it (when answer is set) with
// nothing more: it returns the turn's id once the stand-in heard it, and the run's end.
func runWithGhost(t *testing.T, rb *remoteBus, answer bool) (string, <-chan cliResult) {
	t.Helper()
	ghost, err := rb.srv.Connect("ghost")
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan string, 1)
	if _, err := ghost.Subscribe(bus.AnyNodeStartTurn, func(m *nats.Msg) {
		var spec bus.TurnSpec
		_ = json.Unmarshal(m.Data, &spec)
		if answer {
			b, _ := json.Marshal(bus.StartTurnReply{Turn: spec.ID, Node: "ghost"})
			_ = m.Respond(b)
		}
		heard <- spec.ID
	}); err != nil {
		t.Fatal(err)
	}
	if err := ghost.Flush(); err != nil {
		t.Fatal(err)
	}
	done := make(chan cliResult, 1)
	ctx := testContext(t)
	go func() {
		code, stdout, stderr := cli(ctx, rb.args("run", "-give-up", "1s", "-model", "script:"+demoScript, "hello")...)
		done <- cliResult{code, stdout, stderr}
	}()
	select {
	case id := <-heard:
		return id, done
	case r := <-done:
		t.Fatalf("run ended before its start was heard: %d\n%s%s", r.code, r.stdout, r.stderr)
		return "", nil
	}
}

// A run that heard nothing of its turn gives up once its connection to the bus has been
// down for -give-up, and says what it knows: the node that took the turn (a stand-in
// that answers the start and says nothing more) went away with the bus's only server
// before the turn's first status.
func TestRunGivesUpWithoutTheBus(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, false)
	_, done := runWithGhost(t, rb, true)
	rb.srv.Close()
	select {
	case r := <-done:
		// The start's answer may be lost with the server (the test closes it once
		// the answer is sent, not heard): then the start was not answered.
		heard := strings.Contains(r.stderr, "nothing was heard of it, and the connection to nats://127.0.0.1:")
		unanswered := strings.Contains(r.stderr, "the start of the turn was not answered: the connection to nats://127.0.0.1:")
		if r.code != exitFailed || !heard && !unanswered || !strings.Contains(r.stderr, "toolbus watch ") {
			t.Errorf("exit %d, stderr:\n%s\nstdout:\n%s", r.code, r.stderr, r.stdout)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("toolbus run did not give up with the bus gone")
	}
}

// A run whose start reached a node, and whose answer was lost with the bus's only
// server, does not say the start failed: it waits for the connection to come back, to
// ask again, for -give-up, and then says the turn may have been queued and how to find
// out.
func TestRunStartUnansweredWithoutTheBus(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, false)
	id, done := runWithGhost(t, rb, false)
	rb.srv.Close()
	select {
	case r := <-done:
		want := "turn " + id + ": the start of the turn was not answered: the connection to nats://127.0.0.1:"
		if r.code != exitFailed || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "`toolbus watch "+id+"` once the bus is back") {
			t.Errorf("exit %d, stderr:\n%s\nstdout:\n%s\nwant %q and how to watch it", r.code, r.stderr, r.stdout, want)
		}
	case <-time.After(10 * time.Second): // the start's own bound is 15 s; -give-up is 1 s
		t.Fatal("toolbus run did not give up on its start with the bus gone")
	}
}

// A watcher's run is refused by the bus, and says so at once (client.ErrRefused, the
// server's words), on any node or a named one, rather than waiting out the start's
// timeout for a node that never heard it.
func TestRunAsWatcherRefused(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	for _, tc := range []struct {
		name    string
		extra   []string
		subject string
	}{
		{"any node", nil, bus.AnyNodeStartTurn},
		{"named node", []string{"-node", "remote1"}, bus.NodeStartTurnSubject("remote1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "-server", rb.url, "-user", "watch", "-pass-file", rb.watchFile}, tc.extra...)
			code, stdout, stderr := cli(ctx, append(args, "-model", "script:"+demoScript, "hello")...)
			want := `refused by the bus: nats: permissions violation: Permissions Violation for Publish to "` + tc.subject + `"`
			if code != exitFailed || !strings.Contains(stderr, want) {
				t.Errorf("exit %d, stderr %q, stdout %q; want %d and %q", code, stderr, stdout, exitFailed, want)
			}
		})
	}
	// Nothing was started.
	nc, err := rb.srv.Connect("check")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if recs, err := client.New(nc).Turns(ctx); (err != nil && !errors.Is(err, client.ErrNoTurns)) || len(recs) != 0 {
		t.Errorf("a watcher's run: %d turns on the bus, %v", len(recs), err)
	}
}

func TestRemoteRunWatchAndAbort(t *testing.T) {
	needs.Bwrap(t) // the demo and the aborted sleep run in the sandbox
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watched, watchErr output
	watchDone := make(chan int, 1)
	go func() { watchDone <- run(watchCtx, rb.args("watch"), &watched, &watchErr) }()
	// Probe until watch shows a message, so that it sees the whole turn.
	probeConn, err := rb.srv.Connect("probe")
	if err != nil {
		t.Fatal(err)
	}
	probeCtx, probed := context.WithCancel(ctx)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = probeConn.Publish(bus.AbortSubject("probe"), []byte(`{"turn_id":"probe","reason":"probe"}`))
			select {
			case <-probeCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	watched.waitFor(t, ctx, "probe abort")
	probed()

	// A turn on the remote node, script sent inline.
	code, stdout, stderr := cli(ctx, rb.args("run", "-model", "script:"+demoScript, demoPrompt)...)
	if code != exitOK || !strings.Contains(stdout, "turn ") || !strings.Contains(stdout, " on node remote1") ||
		!strings.Contains(stdout, "✓ Ran `sh check.sh` (exit 0") {
		t.Fatalf("remote run: exit %d, stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	turn := regexp.MustCompile(`turn (\S+) on node`).FindStringSubmatch(stdout)[1]

	// A second turn, aborted from another command.
	script := writeScript(t, sleepScript)
	var runOut, runErr output
	runDone := make(chan int, 1)
	go func() {
		runDone <- run(ctx, rb.args("run", "-model", "script:"+script, "wait"), &runOut, &runErr)
	}()
	runOut.waitFor(t, ctx, "→ Running `sleep 30`")
	sleeping := regexp.MustCompile(`turn (\S+) on node`).FindStringSubmatch(runOut.String())[1]
	code, stdout, stderr = cli(ctx, rb.args("abort", "-reason", "test over", sleeping)...)
	if code != exitOK || !strings.Contains(stdout, "turn "+sleeping+" aborted after 1 step") ||
		!strings.Contains(stdout, "run_command stopped: call stopped") || !strings.Contains(stdout, "list_files not_started") {
		t.Errorf("abort: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	if got := <-runDone; got != exitInterrupted || !strings.Contains(runOut.String(), "⊘ abort requested: test over") {
		t.Errorf("aborted run: exit %d, output:\n%s%s", got, runOut.String(), runErr.String())
	}
	// Aborting it again, or a turn the bus does not know, fails and says why.
	code, _, stderr = cli(ctx, rb.args("abort", sleeping)...)
	if want := "turn " + sleeping + " has ended (aborted)"; code != exitFailed || !strings.Contains(stderr, want) {
		t.Errorf("abort of an ended turn: exit %d, stderr %q, want %q", code, stderr, want)
	}
	code, _, stderr = cli(ctx, rb.args("abort", "-wait", "200ms", "T-unknown")...)
	if want := "no turn T-unknown on this bus"; code != exitFailed || !strings.Contains(stderr, want) {
		t.Errorf("abort of an unknown turn: exit %d, stderr %q, want %q", code, stderr, want)
	}

	// A third turn, one of whose calls is cancelled: the turn goes on and completes.
	var cancelOut, cancelErr output
	cancelDone := make(chan int, 1)
	go func() {
		cancelDone <- run(ctx, rb.args("run", "-model", "script:"+script, "wait"), &cancelOut, &cancelErr)
	}()
	cancelOut.waitFor(t, ctx, "→ Running `sleep 30`")
	going := regexp.MustCompile(`turn (\S+) on node`).FindStringSubmatch(cancelOut.String())[1]
	code, stdout, stderr = cli(ctx, rb.args("abort", "-call", "call_0_0", "-reason", "not now", going)...)
	if code != exitOK || !strings.Contains(stdout, "call call_0_0 (run_command) of turn "+going+": stopped") || !strings.Contains(stdout, "not now") {
		t.Errorf("abort -call: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	if got := <-cancelDone; got != exitOK || !strings.Contains(cancelOut.String(), "Done.") {
		t.Errorf("the run whose call was cancelled: exit %d, output:\n%s%s", got, cancelOut.String(), cancelErr.String())
	}

	// watch has its own connection: the last status can reach it after the
	// aborted run has already seen it and exited.
	watched.waitFor(t, ctx, shortID(sleeping)+" status.done")
	stopWatch()
	if got := <-watchDone; got != exitOK {
		t.Errorf("watch exit %d: %s", got, watchErr.String())
	}
	lines := watched.String()
	short := shortID(turn)
	for _, want := range []string{
		short + " status.started  node remote1, agent default",
		short + " evt.started     list_files   Listing the home directory",
		short + " evt.completed   run_command  Ran `sh check.sh` (exit 0",
		short + " res             todo_write   ok ",
		short + " status.done     completed after 4 steps, 5 calls",
		shortID(sleeping) + " abort           test over",
		shortID(sleeping) + " status.done     aborted after 1 step, 2 calls",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("watch output lacks %q:\n%s", want, lines)
		}
	}
}

func TestTools(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	kit, err := toolsets.Assemble(bus.TurnSpec{Agent: defaultAgent}, nil, nil, toolsets.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"todo_read", "todo_write", "list_files", "read_file", "write_file", "run_command",
		"workflow_start", "workflow_view", "workflow_list", "workflow_cancel"}
	responsesDefs, err := gateway.ResponsesToolDefinitions(kit.Tools.Specs(), false)
	if err != nil {
		t.Fatal(err)
	}
	chatDefs, err := gateway.ChatToolDefinitions(kit.Tools.Specs())
	if err != nil {
		t.Fatal(err)
	}
	anthropicDefs, err := gateway.AnthropicToolDefinitions(kit.Tools.Specs())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want json.RawMessage // what the gateway sends
		// name of definition i in its JSON
		nameOf func(def map[string]json.RawMessage) string
		typ    string // of every definition: "function", or none (a Messages API custom tool)
	}{
		{"responses", []string{"-json"}, responsesDefs, func(d map[string]json.RawMessage) string { return unquote(t, d["name"]) }, "function"},
		{"responses explicit", []string{"-json", "-api", "responses", "-hosted-tool-search"}, responsesDefs, func(d map[string]json.RawMessage) string { return unquote(t, d["name"]) }, "function"},
		{"chat", []string{"-api", "chat", "-json"}, chatDefs, func(d map[string]json.RawMessage) string {
			var fn struct{ Name string }
			_ = json.Unmarshal(d["function"], &fn)
			return fn.Name
		}, "function"},
		{"anthropic", []string{"-api", "anthropic", "-json"}, anthropicDefs, func(d map[string]json.RawMessage) string { return unquote(t, d["name"]) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := cli(ctx, append([]string{"tools"}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			// The indented output is the gateway's bytes with whitespace added.
			var got bytes.Buffer
			if err := json.Compact(&got, []byte(stdout)); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, stdout)
			}
			if !bytes.Equal(got.Bytes(), tc.want) {
				t.Errorf("output is not what the gateway sends\ngot:  %s\nwant: %s", got.Bytes(), tc.want)
			}
			var defs []map[string]json.RawMessage
			if err := json.Unmarshal([]byte(stdout), &defs); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range defs {
				if d["type"] != nil && unquote(t, d["type"]) != tc.typ || d["type"] == nil && tc.typ != "" {
					t.Errorf("definition of type %s", d["type"])
				}
				names = append(names, tc.nameOf(d))
			}
			if strings.Join(names, ",") != strings.Join(want, ",") {
				t.Errorf("tools %v, want %v", names, want)
			}
		})
	}

	code, stdout, _ := cli(ctx, "tools")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	rows := regexp.MustCompile(`(?m)^run_command +computer +sequential +destructive +Run a shell command`)
	if !strings.HasPrefix(stdout, "NAME") || !rows.MatchString(stdout) ||
		!regexp.MustCompile(`(?m)^read_file +computer +parallel +read-only +`).MatchString(stdout) {
		t.Errorf("table:\n%s", stdout)
	}
}

func unquote(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s is not a JSON string: %v", raw, err)
	}
	return s
}

func TestCall(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		stdout     []string
		stderr     []string
		stdoutJSON bool
		bwrap      bool // the command runs in the sandbox
	}{
		{
			name:   "read",
			args:   []string{"-home", demoHome, "read_file", `{"path":"README.md"}`},
			code:   exitOK,
			stdout: []string{"# tinycalc", "`sh calc.sh 1 2 3` prints 6"},
			stderr: []string{"✓ Read 8 lines of README.md ("},
		},
		{
			name:   "repaired",
			args:   []string{"read_file", "-home", demoHome, `{'path': 'notes.txt',}`},
			code:   exitOK,
			stdout: []string{"Open items for tinycalc"},
			stderr: []string{`arguments repaired (repair): {"path":"notes.txt"}`},
		},
		{
			name:       "json",
			args:       []string{"-json", "-home", demoHome, "run_command", `{"command":"sh calc.sh 4 5"}`},
			code:       exitOK,
			stdout:     []string{`"outcome": "ok"`, `"tool": "run_command"`, `9`, `"sandbox": "bwrap"`},
			stdoutJSON: true,
			bwrap:      true,
		},
		{
			name:       "sandbox off",
			args:       []string{"-json", "-sandbox=off", "-home", demoHome, "run_command", `{"command":"sh calc.sh 4 5"}`},
			code:       exitOK,
			stdout:     []string{`"outcome": "ok"`, `9`, `"sandbox": "off"`},
			stderr:     []string{"warning: NO SANDBOX: run_command runs commands as bare processes of the node (-sandbox=off)"},
			stdoutJSON: true,
		},
		{
			name:   "invalid arguments",
			args:   []string{"-home", demoHome, "read_file", `{"path": 7}`},
			code:   exitFailed,
			stderr: []string{"toolbus: invalid arguments for read_file: ", "/path: "},
		},
		{
			// Two words, no JSON at all: not "a string", which it never was.
			name:   "not JSON",
			args:   []string{"-home", demoHome, "read_file", "hello world"},
			code:   exitFailed,
			stderr: []string{`toolbus: invalid arguments for read_file: arguments must be a JSON object such as {"path": …}, got text that is not JSON; this tool requires: path`},
		},
		{
			name:   "unknown tool",
			args:   []string{"read_fil", `{}`},
			code:   exitFailed,
			stderr: []string{`toolbus: unknown tool "read_fil" (did you mean read_file?); the tools served on the embedded bus are: recall, get_page, list_files, read_file, write_file, run_command, job_start, job_status, job_result, job_cancel, schedule_create, schedule_list, schedule_cancel, todo_read, todo_write, web_search, web_fetch`},
		},
		{
			// The default agent has no profile, so no brain: call says it skips the gating.
			name:   "gated tool",
			args:   []string{"recall", `{"query": "ferry"}`},
			code:   exitOK,
			stderr: []string{"toolbus: note: agent default's turns would not have recall (it has no profile, so not the brain category); call runs it anyway: a direct call skips the profile's gating\n"},
		},
		{
			name:   "tool error",
			args:   []string{"-home", demoHome, "read_file", `{"path":"missing.txt"}`},
			code:   exitFailed,
			stderr: []string{"✗ Could not read missing.txt", "toolbus: read_file: error: "},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bwrap {
				needs.Bwrap(t)
			}
			t.Parallel() // each call starts an embedded bus of its own
			code, stdout, stderr := cli(ctx, append([]string{"call"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s\nstdout:\n%s", code, tc.code, stderr, stdout)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			// Said once for the gated tool; the others are in every main turn.
			if n, want := strings.Count(stderr, "gating"), strings.Count(strings.Join(tc.stderr, "\n"), "gating"); n != want {
				t.Errorf("the gating note %d times, want %d:\n%s", n, want, stderr)
			}
			if tc.stdoutJSON {
				var reply bus.ToolReply
				if err := json.Unmarshal([]byte(stdout), &reply); err != nil || reply.Outcome != bus.OutcomeOK {
					t.Errorf("stdout is not an ok ToolReply (%v):\n%s", err, stdout)
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no command", nil, exitUsage, "Usage: toolbus <command>"},
		{"unknown command", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"abort without server", []string{"abort", "T1"}, exitUsage, "abort needs -server"},
		{"watch without server", []string{"watch"}, exitUsage, "watch needs -server"},
		{"run without prompt", []string{"run", "-model", "script:" + demoScript}, exitUsage, "no prompt"},
		{"run without model", []string{"run", "hello"}, exitUsage, "no model"},
		{"run -node without server", []string{"run", "-node", "n1", "-model", "script:x", "hi"}, exitUsage, "-node picks a node of a running bus"},
		{"run -home with server", []string{"run", "-server", "nats://127.0.0.1:1", "-home", ".", "-model", "script:x", "hi"}, exitUsage, "-home configures the embedded node"},
		{"run -hosted-tool-search with server", []string{"run", "-server", "nats://127.0.0.1:1", "-hosted-tool-search", "-model", "openai:m", "hi"}, exitUsage, "-hosted-tool-search configures the embedded node"},
		{"run -api-key-file with server", []string{"run", "-server", "nats://127.0.0.1:1", "-api-key-file", "k", "-model", "openai:m", "hi"}, exitUsage, "-api-key-file configures the embedded node"},
		{"run -request-timeout with server", []string{"run", "-server", "nats://127.0.0.1:1", "-request-timeout", "1m", "-model", "openai:m", "hi"}, exitUsage, "-request-timeout configures the embedded node"},
		{"run negative request timeout", []string{"run", "-request-timeout", "-1s", "-model", "openai:m", "hi"}, exitUsage, "-request-timeout -1s: want a positive duration"},
		{"bad agent", []string{"tools", "-agent", "a.b"}, exitUsage, `-agent "a.b"`},
		{"bad flag", []string{"tools", "-nope"}, exitUsage, "flag provided but not defined: -nope"},
		{"tools unknown api", []string{"tools", "-json", "-api", "gemini"}, exitUsage, `-api "gemini": want responses, chat or anthropic`},
		{"tools -api without -json", []string{"tools", "-api", "chat"}, exitUsage, "add -json"},
		{"tools hosted search on chat", []string{"tools", "-json", "-api", "chat", "-hosted-tool-search"}, exitUsage, "-hosted-tool-search is a Responses API choice"},
		{"missing script", []string{"run", "-model", "script:/does/not/exist.json", "hi"}, exitFailed, "toolbus: load script: "},
		{"call without tool", []string{"call"}, exitUsage, "want a tool name"},
		{"run script without file", []string{"run", "-model", "script:", "hi"}, exitUsage, "-model script: wants a file: script:FILE"},
		{"run -sandbox with server", []string{"run", "-server", "nats://127.0.0.1:1", "-sandbox", "off", "-model", "script:x", "hi"}, exitUsage, "-sandbox configures the embedded node"},
		{"call -sandbox with server", []string{"call", "-server", "nats://127.0.0.1:1", "-sandbox=off", "run_command", `{"command":"true"}`}, exitUsage, "-sandbox configures the embedded node"},
		{"unknown sandbox", []string{"call", "-sandbox", "docker", "run_command"}, exitUsage, `unknown sandbox mode "docker": want bwrap or off`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := cli(ctx, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
		})
	}

	code, stdout, _ := cli(ctx, "help")
	for _, c := range commands {
		if !strings.Contains(stdout, "\n  "+c.name+" ") {
			t.Errorf("help does not list %s:\n%s", c.name, stdout)
		}
	}
	if code != exitOK || !strings.Contains(stdout, "toolbus run -model script:examples/demo/script.json") {
		t.Errorf("help: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := cli(ctx, "run", "-h"); code != exitOK || !strings.Contains(stderr, "Usage: toolbus run [flags] PROMPT") {
		t.Errorf("run -h: exit %d\n%s", code, stderr)
	}
}

// groups are the commands that only dispatch to subcommands.
var groups = map[string]bool{"agent": true, "brain": true, "jobs": true, "schedules": true, "skills": true, "workflow": true}

// TestHelp runs every command's -h: it exits 0 and prints, in one layout, the
// synopsis, one example and every flag the command defines, with one dash.
func TestHelp(t *testing.T) {
	ctx := testContext(t)
	var made []*flag.FlagSet
	flagSetMade = func(fs *flag.FlagSet) { made = append(made, fs) }
	defer func() { flagSetMade = nil }()
	names := []string{"agent set", "agent get", "agent list", "agent rm",
		"jobs list", "jobs show", "jobs cancel", "schedules list", "schedules show", "schedules rm",
		"workflow start", "workflow view", "workflow list", "workflow cancel"}
	for _, c := range commands {
		names = append(names, c.name)
	}
	for _, name := range names {
		made = nil
		code, stdout, stderr := cli(ctx, append(strings.Fields(name), "-h")...)
		if code != exitOK || stdout != "" {
			t.Errorf("%s -h: exit %d, stdout %q", name, code, stdout)
		}
		list := "\n\nFlags:\n"
		if groups[name] {
			list = "\n\nSubcommands: " // a group has no flags of its own
		}
		for _, want := range []string{"Usage: toolbus " + name + " ", "\n\nExample:\n  toolbus " + name, list} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s -h lacks %q:\n%s", name, want, stderr)
			}
		}
		if strings.Contains(stderr, "--") {
			t.Errorf("%s -h writes a flag with two dashes:\n%s", name, stderr)
		}
		if name == "node" {
			continue // its flag set is internal/nodecmd's, which checks its flags itself
		}
		if len(made) != 1 {
			t.Fatalf("%s -h made %d flag sets", name, len(made))
		}
		made[0].VisitAll(func(f *flag.Flag) {
			if !regexp.MustCompile(`\n  -` + regexp.QuoteMeta(f.Name) + `[ \t\n]`).MatchString(stderr) {
				t.Errorf("%s -h does not list -%s:\n%s", name, f.Name, stderr)
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		pos  []string
		json bool
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, false},
		{[]string{"-json", "a"}, []string{"a"}, true},
		{[]string{"a", "-json", "b"}, []string{"a", "b"}, true},
		{[]string{"a", "--", "-json"}, []string{"a", "-json"}, false},
	} {
		fs := newFlagSet("t", "", "", &bytes.Buffer{})
		asJSON := fs.Bool("json", false, "")
		pos, err := parseArgs(fs, tc.args)
		if err != nil || strings.Join(pos, "|") != strings.Join(tc.pos, "|") || *asJSON != tc.json {
			t.Errorf("parseArgs(%q) = %q, json %v, %v; want %q, json %v", tc.args, pos, *asJSON, err, tc.pos, tc.json)
		}
	}
}

// A password on the command line is refused: every user of the host could read it.
func TestPasswordFlagRefused(t *testing.T) {
	t.Parallel()
	code, _, stderr := cli(testContext(t), "turns", "-server", "nats://127.0.0.1:1", "-user", "ops", "-pass", "secret-pw")
	if code != exitUsage || !strings.Contains(stderr, "-pass-file FILE or the environment variable NATS_PASSWORD") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}
