//go:build linux

package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// The durable-turn tests use a tool host of their own, slowhost (testdata/slowhost): tools
// that take the time asked of them and log each execution, so a test can count how often
// a call ran, whichever node drove the turn.

var slowhostBin struct {
	once sync.Once
	path string
	err  error
}

func slowhostBinary(t testing.TB) string {
	t.Helper()
	slowhostBin.once.Do(func() {
		goCmd, err := goTool()
		if err != nil {
			slowhostBin.err = err
			return
		}
		root, err := repoRoot()
		if err != nil {
			slowhostBin.err = err
			return
		}
		slowhostBin.path, slowhostBin.err = goBuild(goCmd, root, "./integration/testdata/slowhost", filepath.Join(bins.dir, "slowhost"))
	})
	if slowhostBin.err != nil {
		t.Fatal(slowhostBin.err)
	}
	return slowhostBin.path
}

// slowhost is a running slowhost process and its execution log.
type slowhost struct {
	proc    *process
	log     string
	release string // created by Release
}

// held is the seconds of a slow call held until releaseHeld; heldLater, until
// releaseLater.
const (
	held      = -1
	heldLater = -2
)

// releaseHeld ends every held call, those in flight and those to come.
func (h *slowhost) releaseHeld(t testing.TB) {
	t.Helper()
	if err := os.WriteFile(h.release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// releaseLater ends every call held by heldLater.
func (h *slowhost) releaseLater(t testing.TB) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("%s.%d", h.release, -heldLater), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startSlowhost starts slowhost connected to the given client URLs (it reconnects to
// any of them) and waits until the bus sees its category.
func startSlowhost(t testing.TB, nc *nats.Conn, urls ...string) *slowhost {
	t.Helper()
	dir := t.TempDir()
	h := &slowhost{log: filepath.Join(dir, "slowhost.log"), release: filepath.Join(dir, "release")}
	h.proc = startProcess(t, "slowhost", slowhostBinary(t), "-server", strings.Join(urls, ","), "-log", h.log, "-release", h.release)
	checkFor(t, "slowhost on the bus", func() error {
		if _, err := nc.Request("$SRV.PING.toolbus-slow", nil, time.Second); err != nil {
			return fmt.Errorf("slowhost not on the bus: %v\n%s", err, h.proc.stderr.String())
		}
		return nil
	})
	return h
}

// count is how often the log holds line.
func (h *slowhost) count(line string) int {
	b, _ := os.ReadFile(h.log)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if l == line {
			n++
		}
	}
	return n
}

// waitStarted waits until every id's execution has started.
func (h *slowhost) waitStarted(t testing.TB, ids ...string) {
	t.Helper()
	checkFor(t, "calls started", func() error {
		for _, id := range ids {
			if h.count("start "+id) == 0 {
				b, _ := os.ReadFile(h.log)
				return fmt.Errorf("call %s has not started; slowhost log:\n%s", id, b)
			}
		}
		return nil
	})
}

// startedTurns collects the started statuses of every turn.
func startedTurns(t testing.TB, nc *nats.Conn) chan turnStarted {
	t.Helper()
	ch := make(chan turnStarted, 16)
	sub, err := nc.Subscribe("toolbus.turn.*.status.started", func(m *nats.Msg) {
		var st turnStarted
		if json.Unmarshal(m.Data, &st) == nil {
			ch <- st
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

type turnStarted struct {
	Turn    string `json:"turn_id"`
	Node    string `json:"node"`
	Resumed *struct {
		Node string `json:"node"`
		From string `json:"from"`
		Why  string `json:"why"`
	} `json:"resumed"`
	Time time.Time `json:"time"` // when its node made it
}

func nextStarted(t testing.TB, ch chan turnStarted) turnStarted {
	t.Helper()
	select {
	case st := <-ch:
		return st
	case <-time.After(waitLimit):
		t.Fatal("no turn started")
	}
	return turnStarted{}
}

// threeNodes starts a cluster of three nodes that all run turns, with three replicas of
// everything, and short leases so that a lost node's turns move quickly.
func threeNodes(t *testing.T, args ...string) []*node {
	t.Helper()
	return threeNodesWith(t, nil, args...)
}

// threeNodesWith is threeNodes with flags for some nodes only (by index).
func threeNodesWith(t *testing.T, only map[int][]string, args ...string) []*node {
	t.Helper()
	var cport [3]int
	var routes []string
	for i := range cport {
		cport[i] = freePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cport[i]))
	}
	var nodes []*node
	for i := range 3 {
		nodes = append(nodes, startNode(t, fmt.Sprintf("n%d", i+1), append([]string{
			"-cluster-name", "c", "-cluster-listen", fmt.Sprintf("127.0.0.1:%d", cport[i]), "-routes", strings.Join(routes, ","),
			"-replicas", "3", "-turns=true", "-turn-lease", "2s",
		}, append(args, only[i]...)...)...))
	}
	for _, n := range nodes {
		n.waitReady(t)
	}
	return nodes
}

// processLoad reads a node's goroutine count (its monitoring endpoint's /stacksz) and
// resident memory (/proc).
func processLoad(t testing.TB, n *node, monitor string) (goroutines int, rss int64) {
	t.Helper()
	resp, err := http.Get("http://" + monitor + "/stacksz")
	if err != nil {
		t.Fatalf("%s monitoring: %v", n.name, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Only toolbus's own goroutines: the server's follow JetStream leadership, which
	// moves to the node that stays up while the others restart.
	for _, g := range strings.Split(string(b), "\n\n") {
		if strings.Contains(g, "github.com/toolbus/toolbus/") {
			goroutines++
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.proc.cmd.Process.Pid))
	if err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				var kb int64
				fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
				rss = kb << 10
			}
		}
	}
	return goroutines, rss
}

// resumeNoteFrom is the node a transcript's resume note says the turn came from.
func resumeNoteFrom(raw json.RawMessage) string {
	var note struct {
		Type string `json:"type"`
		From string `json:"from"`
	}
	if json.Unmarshal(raw, &note) != nil || note.Type != "toolbus.resume" {
		return ""
	}
	return note.From
}

func urlsOf(nodes []*node) []string {
	var urls []string
	for _, n := range nodes {
		urls = append(urls, n.url)
	}
	return urls
}

func byName(nodes []*node, name string) *node {
	for _, n := range nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// slowScript is a turn whose first batch is calls, then the answer.
func slowScript(t testing.TB, steps ...[]scriptCall) string {
	return writeScript(t, "All done.", steps...)
}

func slowCall(id, tool string, seconds float64) scriptCall {
	return scriptCall{ID: id, Name: tool, Namespace: "slow", Arguments: fmt.Sprintf(`{"id":%q,"seconds":%g}`, id, seconds)}
}

// TestTurnResumesAfterNodeKill kills the node that drives a turn while a read-only and a
// destructive call are in flight; another node resumes the turn from its checkpoint.
func TestTurnResumesAfterNodeKill(t *testing.T) {
	t.Parallel()
	nodes := threeNodes(t, "-categories=")
	urls := urlsOf(nodes)
	nc := connect(t, strings.Join(urls, ","))
	host := startSlowhost(t, nc, urls...)
	if out, errOut, err := runCLI(t, "agent", "set", "-server", strings.Join(urls, ","), "-upfront", "slow", "dur"); err != nil {
		t.Fatalf("agent set: %v\n%s%s", err, out, errOut)
	}
	started := startedTurns(t, nc)
	script := slowScript(t, []scriptCall{
		slowCall("q1", "wait", 0),    // finishes and is recorded before the kill (checked)
		slowCall("r1", "wait", held), // read-only, in flight: runs again
		slowCall("d1", "mark", held), // destructive, in flight: abandoned
	})
	run := startProcess(t, "toolbus run", cliBin(t), "run", "-server", strings.Join(urls, ","), "-agent", "dur",
		"-model", "script:"+script, "-json", "work slowly")
	first := nextStarted(t, started)
	host.waitStarted(t, "q1", "r1", "d1")
	// q1 is recorded, not only finished: its output is appended to the transcript after
	// the host answers, and a kill before the append is acknowledged rightly runs the
	// read-only call again (seen once under the full suite).
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	checkFor(t, "q1 recorded", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		a, err := durable.AuditTranscript(ctx, js, first.Turn)
		if err != nil || a.Outputs["q1"] == 0 {
			return fmt.Errorf("q1's output is not in the transcript yet (%v; host log has %d ends of q1)", err, host.count("end q1"))
		}
		return nil
	})
	owner := byName(nodes, first.Node)
	if owner == nil {
		t.Fatalf("turn started on unknown node %q", first.Node)
	}
	owner.proc.kill()
	// Held until the read-only call runs again on the node that resumed the turn.
	liveJS, err := jetstream.New(connect(t, otherURLs(nodes, owner)))
	if err != nil {
		t.Fatal(err)
	}
	checkFor(t, "r1 started again", func() error {
		if n := host.count("start r1"); n < 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			rec, _ := json.Marshal(turnRecordOf(ctx, liveJS, first.Turn))
			return fmt.Errorf("r1 started %d times; the turn's record: %s", n, rec)
		}
		return nil
	})
	host.releaseHeld(t)
	if code := run.wait(t); code != 0 {
		t.Fatalf("toolbus run exited %d\nstdout:\n%s\nstderr:\n%s", code, run.stdout.String(), run.stderr.String())
	}
	var r runOutput
	if err := json.Unmarshal([]byte(run.stdout.String()), &r); err != nil {
		t.Fatalf("decode run -json: %v\n%s", err, run.stdout.String())
	}
	rec := turnRecord(t, connect(t, otherURLs(nodes, owner)), first.Turn)
	if r.Status.State != "completed" || r.Status.Node == owner.name || rec.Owner != r.Status.Node || len(rec.Resumes) != 1 ||
		rec.Resumes[0].From != owner.name {
		t.Errorf("turn ended %s on %s (%s); record: owner %s, resumes %+v; want completed on another node, resumed once from %s",
			r.Status.State, r.Status.Node, r.Status.Error, rec.Owner, rec.Resumes, owner.name)
	}
	outcomes := map[string]string{}
	for _, c := range r.Status.Calls {
		outcomes[c.Call] = c.Outcome
	}
	if outcomes["q1"] != "ok" || outcomes["r1"] != "ok" || outcomes["d1"] != "abandoned" {
		t.Errorf("outcomes %v, want q1 ok, r1 ok (run again), d1 abandoned", outcomes)
	}
	if got, _ := r.output("d1"); !strings.Contains(got, "the node running the turn ("+owner.name+") was lost") {
		t.Errorf("d1's output %q does not say its node was lost", got)
	}
	// No call that had completed ran twice; the read-only one in flight ran again; the
	// destructive one did not.
	for line, want := range map[string]int{"start q1": 1, "start r1": 2, "start d1": 1} {
		if got := host.count(line); got != want {
			t.Errorf("slowhost logged %q %d times, want %d", line, got, want)
		}
	}
	// The transcript is whole: every call has exactly one output, and it says where
	// the turn was resumed.
	calls, outputs, notes := 0, map[string]int{}, 0
	for _, it := range r.Transcript {
		switch {
		case it.Kind == "function_call":
			calls++
		case it.Kind == "function_call_output":
			outputs[it.CallID]++
		case it.Kind == "note" && resumeNoteFrom(it.Raw) == owner.name:
			notes++
		}
	}
	if calls != 3 || len(outputs) != 3 || outputs["q1"] != 1 || outputs["r1"] != 1 || outputs["d1"] != 1 || notes != 1 {
		t.Errorf("transcript: %d calls, outputs %v, %d resume notes; want 3 calls with one output each and one note", calls, outputs, notes)
	}
}

// TestGracefulStopHandsTurnsOver stops the node that drives a turn with SIGTERM while a
// call runs: the call finishes, the turn goes back to the intake at its checkpoint, and
// another node goes on from there, with nothing abandoned.
func TestGracefulStopHandsTurnsOver(t *testing.T) {
	t.Parallel()
	nodes := threeNodes(t, "-categories=")
	urls := urlsOf(nodes)
	nc := connect(t, strings.Join(urls, ","))
	host := startSlowhost(t, nc, urls...)
	if out, errOut, err := runCLI(t, "agent", "set", "-server", strings.Join(urls, ","), "-upfront", "slow", "grace"); err != nil {
		t.Fatalf("agent set: %v\n%s%s", err, out, errOut)
	}
	started := startedTurns(t, nc)
	script := slowScript(t, []scriptCall{slowCall("w1", "wait", 2)}, []scriptCall{slowCall("w2", "wait", 0)})
	run := startProcess(t, "toolbus run", cliBin(t), "run", "-server", strings.Join(urls, ","), "-agent", "grace",
		"-model", "script:"+script, "-json", "work slowly")
	first := nextStarted(t, started)
	host.waitStarted(t, "w1")
	owner := byName(nodes, first.Node)
	owner.proc.terminate()
	if code := owner.proc.wait(t); code != 0 {
		t.Errorf("the stopped node exited %d, want 0:\n%s", code, tail(owner.proc.stderr.String()))
	}
	if !strings.Contains(owner.proc.stderr.String(), "turn handed back to the intake") {
		t.Errorf("the stopped node does not say it handed the turn back:\n%s", tail(owner.proc.stderr.String()))
	}
	if code := run.wait(t); code != 0 {
		t.Fatalf("toolbus run exited %d\nstdout:\n%s\nstderr:\n%s", code, run.stdout.String(), run.stderr.String())
	}
	var r runOutput
	if err := json.Unmarshal([]byte(run.stdout.String()), &r); err != nil {
		t.Fatalf("decode run -json: %v\n%s", err, run.stdout.String())
	}
	for _, c := range r.Status.Calls {
		if c.Outcome != "ok" {
			t.Errorf("call %s: %s (%s), want ok", c.Call, c.Outcome, c.Error)
		}
	}
	if r.Status.State != "completed" || host.count("start w1") != 1 || host.count("start w2") != 1 {
		t.Errorf("turn %s; w1 ran %d times, w2 %d; want completed, once each", r.Status.State, host.count("start w1"), host.count("start w2"))
	}
	rec := turnRecord(t, connect(t, otherURLs(nodes, owner)), first.Turn)
	// The first move is the hand-back; on a loaded machine a node that took the turn
	// may still be slow to read it back and let another take over from it, which the
	// record shows too.
	if len(rec.Resumes) == 0 || rec.Resumes[0].From != "" || !strings.Contains(rec.Resumes[0].Why, "handed back") ||
		rec.Resumes[0].Node == owner.name || rec.Owner == owner.name {
		t.Errorf("the turn's record after the stop of %s: owner %s, resumes %+v; want a hand-back to another node first", owner.name, rec.Owner, rec.Resumes)
	}
	if len(rec.Resumes) > 1 {
		t.Logf("the turn moved again after the hand-back: %+v", rec.Resumes[1:])
	}
}

// otherURLs are the client URLs of the nodes but one.
func otherURLs(nodes []*node, but *node) string {
	var urls []string
	for _, n := range nodes {
		if n != but {
			urls = append(urls, n.url)
		}
	}
	return strings.Join(urls, ",")
}

// turnRecord reads a turn's record, through the durable state as a client opens it.
func turnRecord(t testing.TB, nc *nats.Conn, id string) bus.TurnRecord {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	store, err := durable.Open(ctx, js, durable.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := store.Record(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestNodeRestartResumesOwnTurns kills a lone node in a turn and starts it again on the
// same store: it resumes its own turn.
func TestNodeRestartResumesOwnTurns(t *testing.T) {
	t.Parallel()
	n := startNode(t, "solo", "-categories=", "-turn-lease", "2s")
	n.waitReady(t)
	nc := connect(t, n.url)
	host := startSlowhost(t, nc, n.url)
	if out, errOut, err := runCLI(t, "agent", "set", "-server", n.url, "-upfront", "slow", "solo"); err != nil {
		t.Fatalf("agent set: %v\n%s%s", err, out, errOut)
	}
	started := startedTurns(t, nc)
	script := slowScript(t, []scriptCall{slowCall("r1", "wait", 2)})
	run := startProcess(t, "toolbus run", cliBin(t), "run", "-server", n.url, "-agent", "solo", "-model", "script:"+script, "-json", "work slowly")
	nextStarted(t, started)
	host.waitStarted(t, "r1")
	n.proc.kill()
	n.restart(t)
	n.waitReady(t)
	// The clients reconnect to the restarted node; the turn's progress comes to them
	// once they are back.
	if code := run.wait(t); code != 0 {
		t.Fatalf("toolbus run exited %d\nstdout:\n%s\nstderr:\n%s", code, run.stdout.String(), run.stderr.String())
	}
	var r runOutput
	if err := json.Unmarshal([]byte(run.stdout.String()), &r); err != nil {
		t.Fatalf("decode run -json: %v\n%s", err, run.stdout.String())
	}
	if r.Status.State != "completed" || r.Status.Node != "solo" || host.count("start r1") != 2 {
		t.Errorf("turn %s on %s, r1 ran %d times; want completed on solo, and the read-only call run again", r.Status.State, r.Status.Node, host.count("start r1"))
	}
	notes := 0
	for _, it := range r.Transcript {
		if it.Kind == "note" && resumeNoteFrom(it.Raw) == "solo" {
			notes++
		}
	}
	if notes != 1 {
		t.Errorf("%d notes of solo resuming its own turn in the transcript, want 1:\n%s", notes, run.stdout.String())
	}
}

// TestDuplicateTurnIDRefused starts a turn id twice.
func TestDuplicateTurnIDRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t, "dup", "-categories=")
	n.waitReady(t)
	nc := connect(t, n.url)
	spec := `{"turn_id":"dup-1","input":"hello","script":{"responses":[{"text":"hi"}]}}`
	ask := func() map[string]string {
		t.Helper()
		m, err := nc.Request("toolbus.nodes.turn.start", []byte(spec), waitLimit)
		if err != nil {
			t.Fatal(err)
		}
		var reply map[string]string
		if err := json.Unmarshal(m.Data, &reply); err != nil {
			t.Fatal(err)
		}
		return reply
	}
	if r := ask(); r["error"] != "" || r["turn_id"] != "dup-1" {
		t.Fatalf("first start: %v", r)
	}
	r := ask()
	if !strings.Contains(r["error"], "start turn dup-1: create the turn record: turn id already used: it is ") || r["code"] != "turn_exists" {
		t.Errorf("second start of dup-1: %v", r)
	}
}

// TestClientSeesLostOwner kills the only node while `toolbus run` follows its turn: run
// says the node seems lost, then gives up with what to do.
func TestClientSeesLostOwner(t *testing.T) {
	t.Parallel()
	n := startNode(t, "lonely", "-categories=", "-turn-lease", "1s")
	n.waitReady(t)
	nc := connect(t, n.url)
	host := startSlowhost(t, nc, n.url)
	if out, errOut, err := runCLI(t, "agent", "set", "-server", n.url, "-upfront", "slow", "lost"); err != nil {
		t.Fatalf("agent set: %v\n%s%s", err, out, errOut)
	}
	script := slowScript(t, []scriptCall{slowCall("r1", "wait", 30)})
	run := startProcess(t, "toolbus run", cliBin(t), "run", "-server", n.url, "-agent", "lost", "-give-up", "3s", "-model", "script:"+script, "work slowly")
	host.waitStarted(t, "r1")
	n.proc.kill()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	select {
	case <-run.done:
	case <-ctx.Done():
		t.Fatalf("toolbus run did not give up:\n%s\nits goroutines (SIGQUIT):\n%s", run.stdout.String(), run.stacks())
	}
	if code := run.wait(t); code != 1 {
		t.Errorf("toolbus run exited %d, want 1", code)
	}
	for _, want := range []string{"node lonely has said nothing of turn", "seems lost"} {
		if !strings.Contains(run.stdout.String(), want) {
			t.Errorf("run output lacks %q:\n%s", want, run.stdout.String())
		}
	}
	if !strings.Contains(run.stderr.String(), "was lost and no node resumed the turn") || !strings.Contains(run.stderr.String(), "toolbus resume") {
		t.Errorf("run's error does not say what happened and what to do:\n%s", run.stderr.String())
	}
}

// soakTurns is the number of turns of TestSoakDurableTurns; CI runs the short form.
var soakTurns = flag.Int("soak.turns", 12, "turns in TestSoakDurableTurns (the long form: 300, with kills and pauses)")

// TestSoakDurableTurns runs many turns of several calls over a three-node cluster while
// nodes are killed with -9 and started again: no turn is lost, and no destructive call
// runs twice (one in flight when its node died is abandoned, never run again).
func TestSoakDurableTurns(t *testing.T) {
	t.Parallel()
	// n3 is never killed: its goroutines and memory show whether the runtime leaks.
	monitor := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	nodes := threeNodesWith(t, map[int][]string{2: {"-monitor", monitor}}, "-categories=", "-max-turns", "4")
	steady := nodes[2]
	urls := urlsOf(nodes)
	nc := connect(t, strings.Join(urls, ","))
	// The tools' host stays on the node that is never stopped: calls that a paused
	// server swallowed would wait out their deadlines (a minute), which says nothing
	// of the turn nodes this soak is about.
	host := startSlowhost(t, nc, steady.url)
	if out, errOut, err := runCLI(t, "agent", "set", "-server", strings.Join(urls, ","), "-upfront", "slow", "soak"); err != nil {
		t.Fatalf("agent set: %v\n%s%s", err, out, errOut)
	}
	n := *soakTurns
	began := time.Now()
	startG, startMem := processLoad(t, steady, monitor)
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("soak-%d", i)
		type call struct {
			ID        string `json:"id"`
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
			Arguments string `json:"arguments"`
		}
		c := func(id, tool string, s float64) call {
			return call{ID: id, Name: tool, Namespace: "slow", Arguments: fmt.Sprintf(`{"id":%q,"seconds":%g}`, id, s)}
		}
		script := map[string]any{"responses": []any{
			map[string]any{"calls": []call{c(fmt.Sprintf("a%d", i), "wait", 1), c(fmt.Sprintf("b%d", i), "mark", 1)}},
			map[string]any{"calls": []call{c(fmt.Sprintf("c%d", i), "wait", 0.5)}},
			map[string]any{"text": "done"},
		}}
		spec, _ := json.Marshal(map[string]any{"turn_id": ids[i], "agent": "soak", "input": "soak", "script": script})
		checkFor(t, "start "+ids[i], func() error {
			m, err := nc.Request("toolbus.nodes.turn.start", spec, 10*time.Second)
			if err != nil {
				return err
			}
			var reply map[string]string
			_ = json.Unmarshal(m.Data, &reply)
			if e := reply["error"]; e != "" && !strings.Contains(e, "already used") {
				return fmt.Errorf("%s", e)
			}
			return nil
		})
	}

	// Read the records through the node that is never killed, each read bounded: a
	// request sent while a connection is being re-established waits out its context.
	js, err := jetstream.New(connect(t, steady.url))
	if err != nil {
		t.Fatal(err)
	}
	// record reads a turn's record; the zero record when it cannot be read now.
	record := func(id string) bus.TurnRecord {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		store, err := durable.Open(rctx, js, durable.Config{})
		if err != nil || !store.HasTurns() {
			return bus.TurnRecord{}
		}
		rec, _, _ := store.Record(rctx, id)
		return rec
	}
	// holder is a node that may be stopped and a running turn it holds, in its first
	// batch (2 s or more left): each stop then costs a turn its node, whatever the
	// machine's speed. (A turn found running may end before the stop: on a loaded
	// machine the one pause of the short form hit a turn as it ended, twice in four
	// runs, and nothing was resumed.)
	holder := func() (*node, string) {
		for i, id := range ids {
			if host.count(fmt.Sprintf("start a%d", i)) == 0 || host.count(fmt.Sprintf("end b%d", i)) > 0 {
				continue
			}
			rec := record(id)
			if rec.State != bus.TurnRunning {
				continue
			}
			for _, v := range nodes[:2] {
				if rec.Owner == v.name {
					return v, id
				}
			}
		}
		return nil, ""
	}

	// Stop a node at a time while the turns run, a pause and a kill in turn.
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	// A stop at a time, and a pause after each restart for the cluster to settle: a
	// three-node cluster keeps its quorum through one node lost, not through constant churn.
	kills, pauses, maxKills := 0, 0, max(2, n/10)
	var chaosErr error
	wait := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(d):
			return true
		}
	}
	chaos.Go(func() {
		for wait(250 * time.Millisecond) {
			if kills+pauses >= maxKills {
				return
			}
			victim, turn := holder()
			if victim == nil {
				continue
			}
			if pauses <= kills {
				// Paused until another node has taken the turn (a paused node is a lost
				// node), then on: woken, it writes nothing for the turns it lost.
				pid := victim.proc.cmd.Process.Pid
				_ = syscall.Kill(-pid, syscall.SIGSTOP)
				pauses++
				for until := time.Now().Add(time.Minute); time.Now().Before(until) && wait(100*time.Millisecond); {
					if rec := record(turn); rec.Owner != "" && rec.Owner != victim.name || rec.State.Ended() {
						break
					}
				}
				_ = syscall.Kill(-pid, syscall.SIGCONT)
				if !wait(time.Second) {
					return
				}
				continue
			}
			victim.proc.kill()
			kills++
			victim.restart(t)
			// Not waitReady: a test may fail only from its own goroutine.
			for !strings.Contains(victim.proc.stderr.String(), `msg="node ready"`) {
				if victim.proc.exited() {
					chaosErr = fmt.Errorf("node %s did not come back: %v\n%s", victim.name, victim.proc.err, tail(victim.proc.stderr.String()))
					return
				}
				if !wait(50 * time.Millisecond) {
					return
				}
			}
			if !wait(3 * time.Second) {
				return
			}
		}
	})
	var states map[string]int
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for {
		states = map[string]int{}
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		store, err := durable.Open(rctx, js, durable.Config{})
		if err == nil && store.HasTurns() {
			for _, id := range ids {
				rec, _, err := store.Record(rctx, id)
				if err != nil {
					states["unread"]++
					continue
				}
				states[string(rec.State)]++
			}
		}
		rcancel()
		if states["completed"] == n || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(stop)
	chaos.Wait()
	if chaosErr != nil {
		t.Fatal(chaosErr)
	}
	if states["completed"] != n {
		t.Fatalf("after %s and %d node kills: turn states %v; want all %d completed", time.Since(began).Round(time.Second), kills, states, n)
	}
	twice, abandoned := 0, 0
	for i := range n {
		switch host.count(fmt.Sprintf("start b%d", i)) {
		case 0:
			abandoned++
		case 1:
		default:
			twice++
		}
	}
	if twice > 0 {
		t.Errorf("%d destructive calls ran more than once", twice)
	}
	// Every transcript as readers get it: each call once, with one output. As stored,
	// no position twice and nothing of a node that had lost the turn after the new
	// owner's first message, unless a change of the stream's leader let one past the
	// server's check (durable.md, The fence): readers skip those, and the soak says how
	// many it found.
	badReads, repeated, stale := 0, 0, 0
	for _, id := range ids {
		items, err := durable.ReadTranscript(ctx, js, id)
		if err != nil {
			t.Fatalf("read transcript %s: %v", id, err)
		}
		calls, outputs := map[string]int{}, map[string]int{}
		for _, it := range items {
			switch it.Kind {
			case toolbus.KindFunctionCall:
				calls[it.CallID]++
			case toolbus.KindCallOutput:
				outputs[it.CallID]++
			}
		}
		for c, k := range calls {
			if k != 1 || outputs[c] != 1 {
				badReads++
				t.Errorf("%s: call %s read %d times with %d outputs", id, c, k, outputs[c])
			}
		}
		a, err := durable.AuditTranscript(ctx, js, id)
		if err != nil {
			t.Fatalf("audit %s: %v", id, err)
		}
		repeated += a.RepeatedPos
		stale += a.StaleAfterFence
		if a.RepeatedPos+a.StaleAfterFence > 0 || badReads > 0 {
			t.Logf("%s: claims of its messages in stream order %v", id, a.Epochs)
			logRecord(t, js, id)
		}
	}
	resumes := 0
	if store, err := durable.Open(ctx, js, durable.Config{}); err == nil {
		for _, id := range ids {
			if rec, _, err := store.Record(ctx, id); err == nil {
				resumes += len(rec.Resumes)
			}
		}
	}
	// The pause comes first; the short form's turns may all end before the kill that
	// follows it (TestTurnResumesAfterNodeKill kills on its own), the long form's do not.
	if pauses == 0 || resumes == 0 || (n >= 100 && kills == 0) {
		t.Errorf("%d kills, %d pauses, %d resumes: the soak did not exercise a paused (and, in the long form, a lost) node", kills, pauses, resumes)
	}
	t.Logf("%d turns of 3 calls, %d node kills and restarts, %d pauses, %d resumes: all completed in %s (0 lost); no destructive call ran twice (%d never ran: abandoned in flight or before); every call read once with one output; stored: %d messages with a repeated position, %d after the fence (skipped by readers)",
		n, kills, pauses, resumes, time.Since(began).Round(100*time.Millisecond), abandoned, repeated, stale)
	// Once idle, the node that ran through it all is back to where it started: its
	// goroutines within a small margin (connections to restarted nodes come and go).
	var endG int
	var endMem int64
	checkFor(t, "goroutines back to their start", func() error {
		endG, endMem = processLoad(t, steady, monitor)
		if endG > startG+5 {
			return fmt.Errorf("%s has %d toolbus goroutines, %d at the start", steady.name, endG, startG)
		}
		return nil
	})
	t.Logf("%s: %d toolbus goroutines and %d MiB resident at the start, %d and %d MiB at the end", steady.name, startG, startMem>>20, endG, endMem>>20)
}

// logRecord logs a turn's record and its transcript's messages as stored (position,
// claim, step, the kinds of their items): what a failed audit needs to be read.
func logRecord(t *testing.T, js jetstream.JetStream, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := durable.Open(ctx, js, durable.Config{})
	if err != nil {
		t.Logf("%s: open the store: %v", id, err)
		return
	}
	if rec, _, err := store.Record(ctx, id); err == nil {
		b, _ := json.Marshal(rec)
		t.Logf("%s: record %s", id, b)
	}
	msgs, err := store.StoredTranscript(ctx, id)
	if err != nil {
		t.Logf("%s: stored transcript: %v", id, err)
		return
	}
	for _, m := range msgs {
		var items []struct {
			Kind   string `json:"kind"`
			CallID string `json:"call_id"`
		}
		_ = json.Unmarshal(m.Data, &items)
		t.Logf("%s: seq %d pos %s epoch %s step %s items %v", id, m.Seq, m.Header.Get(bus.HeaderSeq), m.Header.Get(bus.HeaderEpoch), m.Header.Get(bus.HeaderStep), items)
	}
}
