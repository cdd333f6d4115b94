//go:build linux

package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// The Node.js category host of examples/worker-node serves category crm
// beside a node. These tests need node (20 or later) and npm in PATH; the
// worker's packages are installed with `npm ci` once per package-lock.json
// into the integration bin dir, next to the nats CLI.

const (
	workerNodeExample = "examples/worker-node"
	workerNodeMinNode = 20
	// crmService is the micro service the worker registers.
	crmService = "toolbus-crm"
)

// workerDeps is the npm install shared by every test of a run.
var workerDeps struct {
	once sync.Once
	node string // the node executable
	src  string // examples/worker-node
	mods string // an installed node_modules for its package-lock.json
	err  error
}

// workerNodeModules installs the worker's npm packages, once per run and,
// across runs, once per package-lock.json: a warm run does not call npm.
func workerNodeModules(t testing.TB) (node, src, mods string) {
	t.Helper()
	workerDeps.once.Do(func() {
		workerDeps.node, workerDeps.src, workerDeps.mods, workerDeps.err = installWorkerDeps()
	})
	if workerDeps.err != nil {
		t.Fatalf("the Node.js worker (%s) cannot run: %v", workerNodeExample, workerDeps.err)
	}
	return workerDeps.node, workerDeps.src, workerDeps.mods
}

func installWorkerDeps() (node, src, mods string, err error) {
	node, err = exec.LookPath("node")
	if err != nil {
		return "", "", "", fmt.Errorf("Node.js %d or later is needed (node and npm in PATH; CI installs them): %w", workerNodeMinNode, err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", "", "", fmt.Errorf("npm is needed beside node to install the worker's packages (CI installs it): %w", err)
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return "", "", "", fmt.Errorf("node --version: %w", err)
	}
	v := strings.TrimSpace(string(out))
	major, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	if n, err := strconv.Atoi(major); err != nil || n < workerNodeMinNode {
		return "", "", "", fmt.Errorf("node %s is too old: the worker needs Node.js %d or later", v, workerNodeMinNode)
	}
	root, err := repoRoot()
	if err != nil {
		return "", "", "", err
	}
	if bins.tools == "" {
		return "", "", "", fmt.Errorf("no integration tools dir: %v", bins.natsErr)
	}
	src = filepath.Join(root, filepath.FromSlash(workerNodeExample))
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		return "", "", "", err
	}
	sum := sha256.Sum256(lock)
	cache := filepath.Join(bins.tools, "worker-node-"+hex.EncodeToString(sum[:8]))
	mods = filepath.Join(cache, "node_modules")
	if _, err := os.Stat(filepath.Join(cache, ".installed")); err == nil {
		return node, src, mods, nil
	}

	// Install into a fresh folder and move it into place when complete, so
	// that an interrupted install is never taken for a finished one.
	if err := os.MkdirAll(bins.tools, 0o755); err != nil {
		return "", "", "", err
	}
	work, err := os.MkdirTemp(bins.tools, "worker-node-installing-")
	if err != nil {
		return "", "", "", err
	}
	defer os.RemoveAll(work)
	for _, f := range []string{"package.json", "package-lock.json"} {
		if err := copyFile(filepath.Join(src, f), filepath.Join(work, f)); err != nil {
			return "", "", "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = work
	// npm keeps the user's environment (registry, cache), as `go install`
	// does for the nats CLI.
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", "", "", fmt.Errorf("npm ci in %s: %w\n%s", work, err, b)
	}
	if err := os.WriteFile(filepath.Join(work, ".installed"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return "", "", "", err
	}
	if _, err := os.Stat(filepath.Join(cache, ".installed")); err == nil {
		// Another run (of this clone or another) finished first: use its copy, which
		// its tests may be using.
		return node, src, mods, nil
	}
	_ = os.RemoveAll(cache) // a half-made one from an older run
	if err := os.Rename(work, cache); err != nil {
		if _, statErr := os.Stat(filepath.Join(cache, ".installed")); statErr != nil {
			return "", "", "", fmt.Errorf("install the worker's packages: %w", err)
		}
		// Another run finished first: use its copy.
	}
	fmt.Fprintf(os.Stderr, "integration: npm ci for %s into %s in %s\n", workerNodeExample, cache, time.Since(start).Round(time.Second))
	return node, src, mods, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// workerNodeDir makes a folder of the test with the worker's current code
// (package.json and *.js of the example) and its installed node_modules.
func workerNodeDir(t testing.TB) (node, dir string) {
	t.Helper()
	node, src, mods := workerNodeModules(t)
	dir = filepath.Join(t.TempDir(), "worker-node")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(src, "*.js"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(files, filepath.Join(src, "package.json")) {
		if err := copyFile(f, filepath.Join(dir, filepath.Base(f))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(mods, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return node, dir
}

// startWorkerNode starts the Node.js worker named name beside node n and
// waits until its micro service answers $SRV.INFO. The test's cleanup stops
// it (SIGTERM, then SIGKILL).
func startWorkerNode(t testing.TB, n *node, name string) *process {
	t.Helper()
	nodeJS, dir := workerNodeDir(t)
	p := startProcess(t, "worker-node "+name, nodeJS, filepath.Join(dir, "worker.js"),
		"--server", fmt.Sprintf("nats://127.0.0.1:%d", n.port), "--user", testUser, "--password", testPass,
		"--name", name)
	nc := connect(t, n.url)
	checkFor(t, "the worker's micro service answers $SRV.INFO."+crmService, func() error {
		if p.exited() {
			t.Fatalf("worker-node %s exited (%v):\n%s", name, p.err, tail(p.stderr.String()))
		}
		m, err := nc.Request("$SRV.INFO."+crmService, nil, 2*time.Second)
		if err != nil {
			return err
		}
		var info microInfo
		if err := json.Unmarshal(m.Data, &info); err != nil {
			return fmt.Errorf("decode $SRV.INFO: %w: %s", err, m.Data)
		}
		if info.Metadata["node"] != name {
			return fmt.Errorf("$SRV.INFO.%s answered by node %q", crmService, info.Metadata["node"])
		}
		return nil
	})
	return p
}

// checkFor calls check until it returns nil, and fails the test with
// check's last error if that takes longer than waitLimit.
func checkFor(t testing.TB, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, waitLimit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// crmReply is a ToolReply of the worker, with the fields these tests read.
type crmReply struct {
	toolReply
	Label    string `json:"label"`
	Duration int64  `json:"duration_ns"`
}

// natsReqCRM runs `nats req` to a crm tool and decodes the reply.
func natsReqCRM(t testing.TB, url, tool, args string, headers ...string) crmReply {
	t.Helper()
	cmd := []string{"--server", url, "req", "--raw", "--timeout", waitLimit.String(), "toolbus.tool.crm." + tool, args}
	for _, h := range headers {
		cmd = append(cmd, "-H", h)
	}
	out, errOut, err := runNats(t, cmd...)
	if err != nil {
		t.Fatalf("nats req %s: %v\n%s", tool, err, errOut)
	}
	return decodeCRMReply(t, out)
}

func decodeCRMReply(t testing.TB, out string) crmReply {
	t.Helper()
	var r crmReply
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("decode the reply: %v\n%s", err, out)
	}
	return r
}

// awaitMsg waits, bounded by waitLimit, for a message on ch.
func awaitMsg(t testing.TB, ch <-chan *nats.Msg, what string) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(waitLimit):
		t.Fatalf("no %s within %s", what, waitLimit)
		return nil
	}
}

// subscribeChan subscribes to subject on nc and flushes, so that nothing
// published afterwards is missed.
func subscribeChan(t testing.TB, nc *nats.Conn, subject string) <-chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// crmEvent is an activity event the worker publishes.
type crmEvent struct {
	Turn  string `json:"turn_id"`
	Call  string `json:"call_id"`
	Tool  string `json:"tool"`
	Kind  string `json:"kind"`
	Label string `json:"label"`
	Time  string `json:"time"`
}

func TestWorkerNodeServes(t *testing.T) {
	t.Parallel()
	n := startNode(t, "n1")
	n.waitReady(t)
	w := startWorkerNode(t, n, "js1")
	nc := connect(t, n.url)

	t.Run("micro info", func(t *testing.T) {
		out, errOut, err := runNats(t, "--server", n.url, "micro", "info", crmService, "--json")
		if err != nil {
			t.Fatalf("nats micro info: %v\n%s", err, errOut)
		}
		var info struct {
			Info microInfo `json:"info"`
		}
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("decode nats micro info --json: %v\n%s", err, out)
		}
		if info.Info.Version != "0.1.0" || info.Info.Metadata["category"] != "crm" || info.Info.Metadata["node"] != "js1" {
			t.Errorf("service version %q, metadata %v; want 0.1.0, category crm, node js1", info.Info.Version, info.Info.Metadata)
		}
		tests := []struct {
			tool, mode, readOnly, destructive, timeout, deferLoading string
			required                                                 []string
		}{
			{"lookup_customer", "parallel", "true", "false", "", "", []string{"id"}},
			{"read_file", "parallel", "true", "false", "", "", []string{"path"}},
			{"slow_report", "parallel", "true", "false", "5s", "", []string{"seconds"}},
			{"add_note", "sequential", "false", "true", "", "true", []string{"customer", "text"}},
		}
		if len(info.Info.Endpoints) != len(tests) {
			t.Errorf("%s has %d endpoints, want %d:\n%s", crmService, len(info.Info.Endpoints), len(tests), out)
		}
		nsDescription := ""
		for _, tt := range tests {
			i := slices.IndexFunc(info.Info.Endpoints, func(e microEndpoint) bool { return e.Name == tt.tool })
			if i < 0 {
				t.Errorf("no endpoint %s in:\n%s", tt.tool, out)
				continue
			}
			ep := info.Info.Endpoints[i]
			if want := "toolbus.tool.crm." + tt.tool; ep.Subject != want || ep.QueueGroup != "toolbus.crm" {
				t.Errorf("%s: subject %q, queue group %q; want %q, toolbus.crm", tt.tool, ep.Subject, ep.QueueGroup, want)
			}
			md := ep.Metadata
			if md["mode"] != tt.mode || md["read_only"] != tt.readOnly || md["destructive"] != tt.destructive {
				t.Errorf("%s: mode/read_only/destructive = %s/%s/%s, want %s/%s/%s", tt.tool,
					md["mode"], md["read_only"], md["destructive"], tt.mode, tt.readOnly, tt.destructive)
			}
			if md["namespace"] != "crm" {
				t.Errorf("%s: namespace %q, want crm", tt.tool, md["namespace"])
			}
			if nsDescription == "" {
				nsDescription = md["namespace_description"]
			}
			if md["namespace_description"] == "" || md["namespace_description"] != nsDescription {
				t.Errorf("%s: namespace_description %q, want the same non-empty sentence on every tool (%q)", tt.tool, md["namespace_description"], nsDescription)
			}
			if got, ok := md["timeout"]; got != tt.timeout || ok != (tt.timeout != "") {
				t.Errorf("%s: timeout %q (set: %v), want %q", tt.tool, got, ok, tt.timeout)
			}
			if md["defer_loading"] != tt.deferLoading {
				t.Errorf("%s: defer_loading %q, want %q", tt.tool, md["defer_loading"], tt.deferLoading)
			}
			if md["strict"] != "true" && md["strict"] != "false" || md["description"] == "" {
				t.Errorf("%s: strict %q, description %q; want true/false and a description", tt.tool, md["strict"], md["description"])
			}
			var schema struct {
				Type       string                     `json:"type"`
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			}
			if err := json.Unmarshal([]byte(md["schema"]), &schema); err != nil {
				t.Errorf("%s: schema is not JSON: %v: %q", tt.tool, err, md["schema"])
				continue
			}
			if schema.Type != "object" || !slices.Equal(schema.Required, tt.required) {
				t.Errorf("%s: schema type %q, required %q; want object, %q", tt.tool, schema.Type, schema.Required, tt.required)
			}
			for _, r := range tt.required {
				if _, ok := schema.Properties[r]; !ok {
					t.Errorf("%s: schema has no property %q", tt.tool, r)
				}
			}
		}
	})

	t.Run("lookup_customer with headers", func(t *testing.T) {
		const traceparent = "00-ab55daee783b548fd618ecbd4d74291d-05897abbd4b6a0cc-01"
		events := subscribeChan(t, nc, "toolbus.turn.tw1.evt.cw1.*")
		r := natsReqCRM(t, n.url, "lookup_customer", `{"id":"c1"}`,
			"Toolbus-Turn:tw1", "Toolbus-Call:cw1", "Toolbus-Agent:alice", "Toolbus-Task:task-7",
			"Toolbus-Deadline:"+time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano), "traceparent:"+traceparent)
		if r.Outcome != "ok" || r.Call != "cw1" || r.Tool != "lookup_customer" {
			t.Fatalf("reply: outcome %q (%s), call %q, tool %q; want ok, cw1, lookup_customer", r.Outcome, r.Error, r.Call, r.Tool)
		}
		for _, want := range []string{"Acme Corp", "Ada Lovelace"} {
			if !strings.Contains(r.text(), want) {
				t.Errorf("content lacks %q:\n%s", want, r.text())
			}
		}
		if r.Label != "Looked up customer c1" {
			t.Errorf("label %q, want %q", r.Label, "Looked up customer c1")
		}
		var details struct {
			ID, Name string
		}
		if err := json.Unmarshal(r.Details, &details); err != nil || details.ID != "c1" || details.Name != "Acme Corp" {
			t.Errorf("details %s (%v), want the record of c1", r.Details, err)
		}
		// started before the reply, completed after it.
		for _, want := range []crmEvent{
			{Turn: "tw1", Call: "cw1", Tool: "lookup_customer", Kind: "started", Label: "Looking up customer c1"},
			{Turn: "tw1", Call: "cw1", Tool: "lookup_customer", Kind: "completed", Label: "Looked up customer c1"},
		} {
			m := awaitMsg(t, events, want.Kind+" event")
			var ev crmEvent
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				t.Fatalf("decode event: %v: %s", err, m.Data)
			}
			if m.Subject != "toolbus.turn.tw1.evt.cw1."+want.Kind {
				t.Errorf("event on %s, want kind %s", m.Subject, want.Kind)
			}
			if _, err := time.Parse(time.RFC3339Nano, ev.Time); err != nil {
				t.Errorf("event time %q: %v", ev.Time, err)
			}
			ev.Time = ""
			if ev != want {
				t.Errorf("event %+v, want %+v", ev, want)
			}
			if got := m.Header.Get("traceparent"); got != traceparent {
				t.Errorf("%s event carries traceparent %q, want %q", want.Kind, got, traceparent)
			}
		}
	})

	tests := []struct {
		name, tool, args string
		headers          []string
		outcome          string
		contains         []string // in the error, or in the content when there is none
	}{
		{
			name: "direct call gets a call id", tool: "read_file", args: `{"path":"contracts/acme.md"}`,
			outcome: "ok", contains: []string{"master agreement"},
		},
		{
			name: "unknown customer", tool: "lookup_customer", args: `{"id":"c9"}`,
			outcome: "error", contains: []string{`"c9"`, "c1, c2, c3"},
		},
		{
			name: "invalid arguments", tool: "lookup_customer", args: `{"id":5,"extra":true}`,
			outcome: "invalid", contains: []string{"invalid arguments for lookup_customer: ", "/id: ", "/extra: "},
		},
		{
			name: "missing argument", tool: "add_note", args: `{"customer":"c1"}`,
			outcome: "invalid", contains: []string{"invalid arguments for add_note: ", "/: required property 'text' is missing"},
		},
		{
			name: "not JSON", tool: "lookup_customer", args: `{"id":`,
			outcome: "invalid", contains: []string{"invalid arguments for lookup_customer: ", "not valid JSON"},
		},
		{
			name: "bad turn header", tool: "lookup_customer", args: `{"id":"c1"}`, headers: []string{"Toolbus-Turn:a.b"},
			outcome: "invalid", contains: []string{`bad Toolbus-Turn header "a.b"`},
		},
		{
			name: "bad deadline header", tool: "lookup_customer", args: `{"id":"c1"}`, headers: []string{"Toolbus-Deadline:tomorrow"},
			outcome: "invalid", contains: []string{`bad Toolbus-Deadline header "tomorrow": `},
		},
		{
			name: "past deadline", tool: "lookup_customer", args: `{"id":"c1"}`,
			headers: []string{"Toolbus-Deadline:" + time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)},
			outcome: "timeout", contains: []string{"deadline"},
		},
		{
			name: "truncated destructive call", tool: "add_note", args: `{"customer":"c1","text":"half a no`,
			headers: []string{"Toolbus-Call:cut1", "Toolbus-Truncated:1"},
			outcome: "invalid", contains: []string{"arguments were cut off (truncated); re-issue the call with the complete arguments"},
		},
		{
			name: "truncated header on a read-only tool", tool: "lookup_customer", args: `{"id":"c2"}`,
			headers: []string{"Toolbus-Truncated:1"},
			outcome: "ok", contains: []string{"Globex"},
		},
		{
			name: "add_note", tool: "add_note", args: `{"customer":"c3","text":"prefers email"}`,
			headers: []string{"Toolbus-Truncated:false", "Toolbus-Agent:alice"},
			outcome: "ok", contains: []string{"customer c3"},
		},
		{
			name: "the note is kept", tool: "lookup_customer", args: `{"id":"c3"}`,
			outcome: "ok", contains: []string{"prefers email", "(alice)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := natsReqCRM(t, n.url, tt.tool, tt.args, tt.headers...)
			if r.Outcome != tt.outcome {
				t.Fatalf("outcome %q (error %q), want %q\n%s", r.Outcome, r.Error, tt.outcome, r.text())
			}
			if r.Tool != tt.tool || r.Call == "" {
				t.Errorf("reply names tool %q, call %q; want %s and a call id", r.Tool, r.Call, tt.tool)
			}
			got := r.Error
			if got == "" {
				got = r.text()
			}
			for _, want := range tt.contains {
				if !strings.Contains(got, want) {
					t.Errorf("reply lacks %q: %q", want, got)
				}
			}
		})
	}

	t.Run("the same answers as the Go host", func(t *testing.T) {
		testWorkerNodeAnswersLikeGo(t, nc)
	})

	t.Run("slow_report aborted", func(t *testing.T) {
		started := subscribeChan(t, nc, "toolbus.turn.tw2.evt.*.started")
		req := startProcess(t, "nats req slow_report", natsBin(t), "--server", n.url, "req", "--raw", "--timeout", waitLimit.String(),
			"toolbus.tool.crm.slow_report", `{"seconds":10}`, "-H", "Toolbus-Turn:tw2", "-H", "Toolbus-Call:slow1")
		awaitMsg(t, started, "started event of slow_report")
		// The tool's own limit is 5 s: the abort has to come before it.
		if err := nc.Publish("toolbus.turn.tw2.abort", []byte(`{"turn_id":"tw2","reason":"test abort"}`)); err != nil {
			t.Fatal(err)
		}
		if code := req.wait(t); code != 0 {
			t.Fatalf("nats req exited %d:\n%s", code, req.stderr.String())
		}
		r := decodeCRMReply(t, req.stdout.String())
		if r.Outcome != "stopped" || r.Error != "call stopped: the turn was aborted: test abort" {
			t.Errorf("outcome %q, error %q; want stopped, %q", r.Outcome, r.Error, "call stopped: the turn was aborted: test abort")
		}
		if !strings.Contains(r.text(), "not finished") {
			t.Errorf("content %q does not say the report was not finished", r.text())
		}
	})

	t.Run("slow_report past its timeout", func(t *testing.T) {
		// No deadline header: the endpoint's own 5 s timeout bounds it.
		r := natsReqCRM(t, n.url, "slow_report", `{"seconds":10}`, "Toolbus-Turn:tw3")
		if r.Outcome != "timeout" || r.Error != "call timeout: context deadline exceeded" {
			t.Fatalf("outcome %q, error %q; want timeout, %q", r.Outcome, r.Error, "call timeout: context deadline exceeded")
		}
		// It ran until its limit, not for the 10 s asked.
		if d := time.Duration(r.Duration); d < 4500*time.Millisecond || d >= 10*time.Second {
			t.Errorf("ran %s, want about the 5 s timeout", d)
		}
		if !strings.HasSuffix(r.Label, "(timeout)") {
			t.Errorf("label %q does not end with (timeout)", r.Label)
		}
	})

	t.Run("stats", func(t *testing.T) {
		out, errOut, err := runNats(t, "--server", n.url, "micro", "stats", crmService, "--json")
		if err != nil {
			t.Fatalf("nats micro stats: %v\n%s", err, errOut)
		}
		var stats []struct {
			Endpoints []struct {
				Name string `json:"name"`
				Data struct {
					Inflight  *int64 `json:"inflight"`
					OK        *int64 `json:"ok"`
					Errors    *int64 `json:"errors"`
					ExecuteNS *int64 `json:"execute_ns"`
				} `json:"data"`
			} `json:"endpoints"`
		}
		if err := json.Unmarshal([]byte(out), &stats); err != nil || len(stats) != 1 {
			t.Fatalf("decode nats micro stats --json (%v): want one service\n%s", err, out)
		}
		for _, ep := range stats[0].Endpoints {
			d := ep.Data
			if d.Inflight == nil || d.OK == nil || d.Errors == nil || d.ExecuteNS == nil {
				t.Errorf("%s: endpoint data lacks inflight/ok/errors/execute_ns:\n%s", ep.Name, out)
				continue
			}
			if ep.Name == "lookup_customer" && (*d.OK < 3 || *d.Errors < 3 || *d.Inflight != 0 || *d.ExecuteNS <= 0) {
				t.Errorf("lookup_customer stats %+v, want at least 3 ok, 3 errors, none in flight", d)
			}
		}
	})

	t.Run("SIGTERM", func(t *testing.T) {
		w.terminate()
		if w.err != nil {
			t.Errorf("worker exited with %v on SIGTERM, want a clean exit\n%s", w.err, tail(w.stderr.String()))
		}
		if !strings.Contains(w.stderr.String(), `msg="stopped"`) {
			t.Errorf("worker did not log its stop:\n%s", tail(w.stderr.String()))
		}
		waitForResponders(t, nc, "toolbus.tool.crm.lookup_customer", `{"id":"c1"}`, false)
	})
}

// crmScriptCall is a call of a scripted model response, with a namespace.
type crmScriptCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Arguments string `json:"arguments"`
}

// writeNamespacedScript writes a scripted model whose first response makes
// calls and whose second one answers.
func writeNamespacedScript(t testing.TB, answer string, calls ...crmScriptCall) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"responses": []any{
		map[string]any{"calls": calls},
		map[string]any{"text": answer},
	}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWorkerNodeTurn has turns call the worker's tools by namespace. It needs
// agent profiles (`cli agent set`) and external namespaces in turns.
func TestWorkerNodeTurn(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "pipeline.md"), []byte("Q3 pipeline\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, "n1", "-home", home)
	n.waitReady(t)
	startWorkerNode(t, n, "js1")
	nc := connect(t, n.url)
	server := []string{"-server", fmt.Sprintf("nats://127.0.0.1:%d", n.port), "-user", testUser, "-pass-file", n.passFile}
	// cli runs a toolbus command (its words first, e.g. "agent", "set")
	// with the bus flags after the command's words.
	cli := func(t *testing.T, args ...string) string {
		t.Helper()
		i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "-") })
		if i < 0 {
			i = len(args)
		}
		args = slices.Concat(args[:i], server, args[i:])
		out, errOut, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("toolbus %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}

	// Nothing joins a turn because it merely appeared on the bus: before the profile
	// names crm, the agent's tools are the built-in ones.
	if out := cli(t, "tools", "-agent", "demo"); strings.Contains(out, "crm.") || !strings.Contains(out, "run_command") {
		t.Errorf("toolbus tools -agent demo lists crm tools before the profile names them:\n%s", out)
	}
	if out := cli(t, "tools", "-catalog"); !strings.Contains(out, "crm.lookup_customer") || !strings.Contains(out, "js1") {
		t.Errorf("toolbus tools -catalog does not list the worker's tools with its host:\n%s", out)
	}
	cli(t, "agent", "set", "-namespace", "crm", "demo")

	t.Run("tools", func(t *testing.T) {
		out := cli(t, "tools", "-agent", "demo")
		for _, want := range []string{"crm.lookup_customer (deferred)", "crm.read_file (deferred)", "\nread_file ", "crm.slow_report"} {
			if !strings.Contains(out, want) {
				t.Errorf("toolbus tools -agent demo lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("call", func(t *testing.T) {
		if out := cli(t, "call", "-agent", "demo", "crm.lookup_customer", `{"id":"c1"}`); !strings.Contains(out, "Acme Corp") {
			t.Errorf("toolbus call crm.lookup_customer does not print the customer:\n%s", out)
		}
	})

	// run starts `toolbus run -json` for agent demo.
	run := func(t *testing.T, script string) *process {
		t.Helper()
		args := append(append([]string{"run"}, server...), "-agent", "demo", "-model", "script:"+script, "-json", "work with the CRM")
		return startProcess(t, "toolbus run", cliBin(t), args...)
	}
	decode := func(t *testing.T, p *process) runOutput {
		t.Helper()
		var r runOutput
		if err := json.Unmarshal([]byte(p.stdout.String()), &r); err != nil {
			t.Fatalf("decode toolbus run -json: %v\nstdout:\n%s\nstderr:\n%s", err, p.stdout.String(), p.stderr.String())
		}
		return r
	}

	t.Run("parallel batch", func(t *testing.T) {
		const answer = "Acme Corp is on the enterprise plan."
		script := writeNamespacedScript(t, answer,
			crmScriptCall{ID: "lookup", Name: "lookup_customer", Namespace: "crm", Arguments: `{"id":"c1"}`},
			crmScriptCall{ID: "list", Name: "list_files", Arguments: `{}`},
			crmScriptCall{ID: "doc", Name: "read_file", Namespace: "crm", Arguments: `{"path":"contracts/acme.md"}`},
			crmScriptCall{ID: "report", Name: "slow_report", Namespace: "crm", Arguments: `{"seconds":10}`},
		)
		p := run(t, script)
		if code := p.wait(t); code != 0 {
			t.Fatalf("toolbus run exited %d, want 0\nstdout:\n%s\nstderr:\n%s", code, p.stdout.String(), p.stderr.String())
		}
		r := decode(t, p)
		if r.Status.State != "completed" || r.Status.Text != answer {
			t.Errorf("turn %s with text %q (%s); want completed with %q", r.Status.State, r.Status.Text, r.Status.Error, answer)
		}
		want := map[string]string{"lookup": "ok", "list": "ok", "doc": "ok", "report": "timeout"}
		got := map[string]string{}
		for _, c := range r.Status.Calls {
			got[c.Call] = c.Outcome
			if c.Outcome != want[c.Call] {
				t.Errorf("call %s (%s): outcome %s (%s), want %s", c.Call, c.Tool, c.Outcome, c.Error, want[c.Call])
			}
		}
		if len(got) != len(want) {
			t.Errorf("calls recorded: %v, want %v", got, want)
		}
		for id, text := range map[string]string{"lookup": "Acme Corp", "list": "pipeline.md", "doc": "master agreement", "report": "timeout"} {
			if out, ok := r.output(id); !ok || !strings.Contains(out, text) {
				t.Errorf("the output of call %s (found: %v) lacks %q:\n%s", id, ok, text, out)
			}
		}
	})

	t.Run("aborted from another process", func(t *testing.T) {
		started := subscribeChan(t, nc, "toolbus.turn.*.evt.long.started")
		script := writeNamespacedScript(t, "This answer is never reached.",
			crmScriptCall{ID: "long", Name: "slow_report", Namespace: "crm", Arguments: `{"seconds":30}`})
		p := run(t, script)
		m := awaitMsg(t, started, "started event of the long report")
		turn := strings.Split(m.Subject, ".")[2]
		// slow_report stops itself after 5 s: the abort has to come first (a limit of 2 s
		// was too short for the abort command to start under a CPU hog).
		out := cli(t, "abort", "-reason", "stopped by the test", turn)
		if !strings.Contains(out, "stopped") {
			t.Errorf("toolbus abort does not report the stopped call:\n%s", out)
		}
		if code := p.wait(t); code != 130 {
			t.Errorf("toolbus run exited %d, want 130 (aborted)\nstderr:\n%s", code, p.stderr.String())
		}
		r := decode(t, p)
		if r.Status.State != "aborted" || len(r.Status.Calls) != 1 || r.Status.Calls[0].Outcome != "stopped" {
			t.Errorf("turn %s with calls %+v; want aborted, one call stopped", r.Status.State, r.Status.Calls)
		}
		if strings.Contains(p.stdout.String(), "never reached") {
			t.Errorf("the model was called again after the abort")
		}
	})
}

// sameAnswerPair is a tool of the node's Go host and a tool of the worker of
// the same kind (read-only or destructive), sent the same requests.
type sameAnswerPair struct {
	goCategory, goTool, crmTool string
}

var (
	readOnlyPair    = sameAnswerPair{"computer", "list_files", "lookup_customer"}
	destructivePair = sameAnswerPair{"computer", "write_file", "add_note"}
)

// endpointCounts reads the ok and errors counters of a micro service's
// endpoints ($SRV.STATS).
func endpointCounts(t *testing.T, nc *nats.Conn, service string) map[string][2]int64 {
	t.Helper()
	m, err := nc.Request("$SRV.STATS."+service, nil, waitLimit)
	if err != nil {
		t.Fatalf("$SRV.STATS.%s: %v", service, err)
	}
	var stats struct {
		Endpoints []struct {
			Name string `json:"name"`
			Data struct {
				OK     int64 `json:"ok"`
				Errors int64 `json:"errors"`
			} `json:"data"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(m.Data, &stats); err != nil {
		t.Fatalf("decode $SRV.STATS.%s: %v: %s", service, err, m.Data)
	}
	counts := map[string][2]int64{}
	for _, e := range stats.Endpoints {
		counts[e.Name] = [2]int64{e.Data.OK, e.Data.Errors}
	}
	return counts
}

// testWorkerNodeAnswersLikeGo sends the same requests to a tool of the Go
// host (category computer of the node) and to a tool of the worker, and
// compares the replies: outcome, error text (with the tool's name as
// <tool>) and call id. The body is [1] unless a case says otherwise: both
// hosts refuse it with the same text, so a request whose headers pass gets
// an answer without running a tool, and a refusal before the arguments shows
// the order of the checks. Every case is refused by both, so each must also
// count once in the errors of its endpoint.
func testWorkerNodeAnswersLikeGo(t *testing.T, nc *nats.Conn) {
	const (
		onlyASCII = "; only ASCII letters, digits, '_' and '-' are allowed"
		argsError = "invalid arguments for <tool>: arguments do not match the schema:\n- /: value is array but should be object"
		truncated = "arguments were cut off (truncated); re-issue the call with the complete arguments"
		syntax    = "want an RFC 3339 time such as 2006-01-02T15:04:05.999999999Z or 2006-01-02T15:04:05+01:00"
	)
	long := strings.Repeat("x", 128)
	umlauts := strings.Repeat("ü", 64) // 128 bytes
	future := time.Now().Add(time.Hour).UTC()
	h := func(kv ...string) nats.Header {
		hdr := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			hdr[kv[i]] = append(hdr[kv[i]], kv[i+1])
		}
		return hdr
	}
	past := func(v string) string { return "deadline already past on arrival (" + v + "); the tool did not run" }
	tests := []struct {
		name    string
		pair    sameAnswerPair
		header  nats.Header
		body    string // [1] when empty
		outcome string
		err     string // the error both must send, with the tool's name as <tool>
	}{
		// Agent ids: bus.CheckAgent, 1 to 64 ASCII letters, digits, '_' or '-'.
		{"agent of 64 characters", readOnlyPair, h("Toolbus-Agent", long[:64]), "", "invalid", argsError},
		{"agent of 65 characters", readOnlyPair, h("Toolbus-Agent", long[:65]), "", "invalid",
			`bad Toolbus-Agent header "` + long[:65] + `": agent id is 65 bytes long; at most 64 are allowed`},
		{"agent of 128 characters", readOnlyPair, h("Toolbus-Agent", long), "", "invalid",
			`bad Toolbus-Agent header "` + long + `": agent id is 128 bytes long; at most 64 are allowed`},
		{"agent of 40 umlauts", readOnlyPair, h("Toolbus-Agent", umlauts[:80]), "", "invalid",
			`bad Toolbus-Agent header "` + umlauts[:80] + `": agent id is 80 bytes long; at most 64 are allowed`},
		{"agent with a path", readOnlyPair, h("Toolbus-Agent", "../a1"), "", "invalid",
			`bad Toolbus-Agent header "../a1": agent id has '.' at position 1` + onlyASCII},
		{"agent with a space", readOnlyPair, h("Toolbus-Agent", "a b"), "", "invalid",
			`bad Toolbus-Agent header "a b": agent id has ' ' at position 2` + onlyASCII},
		{"agent with an umlaut", readOnlyPair, h("Toolbus-Agent", "aüb"), "", "invalid",
			`bad Toolbus-Agent header "aüb": agent id has 'ü' at position 2` + onlyASCII},
		{"agent with a quote", readOnlyPair, h("Toolbus-Agent", "a'b"), "", "invalid",
			`bad Toolbus-Agent header "a'b": agent id has '\'' at position 2` + onlyASCII},
		{"agent with a byte that is not UTF-8", readOnlyPair, h("Toolbus-Agent", "ab\xff"), "", "invalid",
			`bad Toolbus-Agent header "ab\xff": agent id has byte 0xff at position 3` + onlyASCII},

		// Turn and call ids: bus.ValidID, a subject token of at most 128 bytes.
		{"turn of 128 bytes", readOnlyPair, h("Toolbus-Turn", long), "", "invalid", argsError},
		{"turn of 129 bytes", readOnlyPair, h("Toolbus-Turn", long+"x"), "", "invalid", `bad Toolbus-Turn header "` + long + `x"`},
		{"call of 128 bytes", readOnlyPair, h("Toolbus-Call", long), "", "invalid", argsError},
		{"call of 129 bytes", readOnlyPair, h("Toolbus-Call", long+"x"), "", "invalid", `bad Toolbus-Call header "` + long + `x"`},
		{"call of 64 umlauts", readOnlyPair, h("Toolbus-Call", umlauts), "", "invalid", argsError},
		{"call of 65 umlauts", readOnlyPair, h("Toolbus-Call", umlauts+"ü"), "", "invalid", `bad Toolbus-Call header "` + umlauts + `ü"`},
		{"turn with an umlaut", readOnlyPair, h("Toolbus-Turn", "tür-1"), "", "invalid", argsError},
		{"turn with a byte order mark", readOnlyPair, h("Toolbus-Turn", "t\ufeff1"), "", "invalid", argsError},
		{"call with a no-break space", readOnlyPair, h("Toolbus-Call", "c\u00a01"), "", "invalid", `bad Toolbus-Call header "c\u00a01"`},
		{"call ending in a no-break space", readOnlyPair, h("Toolbus-Call", "c1\u00a0"), "", "invalid", `bad Toolbus-Call header "c1\u00a0"`},
		{"call ending in a vertical tab", readOnlyPair, h("Toolbus-Call", "c1\v"), "", "invalid", `bad Toolbus-Call header "c1\v"`},
		{"call with DEL", readOnlyPair, h("Toolbus-Call", "c\x7f1"), "", "invalid", `bad Toolbus-Call header "c\x7f1"`},
		{"call with a byte that is not UTF-8", readOnlyPair, h("Toolbus-Call", "c\xff"), "", "invalid", `bad Toolbus-Call header "c\xff"`},
		{"call sent twice: the first counts", readOnlyPair, h("Toolbus-Call", "c1", "Toolbus-Call", "c 2"), "", "invalid", argsError},
		{"bad turn before bad call", readOnlyPair, h("Toolbus-Turn", "t*", "Toolbus-Call", "c>", "Toolbus-Agent", "a.b", "Toolbus-Deadline", "x"),
			"", "invalid", `bad Toolbus-Turn header "t*"`},
		{"bad call before bad agent", readOnlyPair, h("Toolbus-Call", "c>", "Toolbus-Agent", "a.b", "Toolbus-Deadline", "x"),
			"", "invalid", `bad Toolbus-Call header "c>"`},
		{"bad agent before bad deadline", readOnlyPair, h("Toolbus-Agent", "a.b", "Toolbus-Deadline", "x"),
			"", "invalid", `bad Toolbus-Agent header "a.b": agent id has '.' at position 2` + onlyASCII},

		// Toolbus-Deadline: bus.ParseDeadline.
		{"deadline in lower case", readOnlyPair, h("Toolbus-Deadline", "2099-01-01t00:00:00.5z"), "", "invalid", argsError},
		{"deadline with 9 fractional digits", readOnlyPair, h("Toolbus-Deadline", future.Format(time.RFC3339Nano)), "", "invalid", argsError},
		{"deadline with an offset", readOnlyPair, h("Toolbus-Deadline", "2099-01-01T00:00:00-05:00"), "", "invalid", argsError},
		{"deadline empty", readOnlyPair, h("Toolbus-Deadline", ""), "", "invalid", argsError},
		{"deadline with 10 fractional digits", readOnlyPair, h("Toolbus-Deadline", "2099-01-01T00:00:00.1234567891Z"), "", "invalid",
			`bad Toolbus-Deadline header "2099-01-01T00:00:00.1234567891Z": more than 9 fractional digits`},
		{"deadline tomorrow", readOnlyPair, h("Toolbus-Deadline", "tomorrow"), "", "invalid", `bad Toolbus-Deadline header "tomorrow": ` + syntax},
		{"deadline without a fraction digit", readOnlyPair, h("Toolbus-Deadline", "2099-01-01T00:00:00.Z"), "", "invalid",
			`bad Toolbus-Deadline header "2099-01-01T00:00:00.Z": ` + syntax},
		{"deadline without the offset's colon", readOnlyPair, h("Toolbus-Deadline", "2099-01-01T00:00:00+0100"), "", "invalid",
			`bad Toolbus-Deadline header "2099-01-01T00:00:00+0100": ` + syntax},
		{"deadline with a space for T", readOnlyPair, h("Toolbus-Deadline", "2099-01-01 00:00:00Z"), "", "invalid",
			`bad Toolbus-Deadline header "2099-01-01 00:00:00Z": ` + syntax},
		{"deadline in month 13", readOnlyPair, h("Toolbus-Deadline", "2099-13-01T00:00:00Z"), "", "invalid",
			`bad Toolbus-Deadline header "2099-13-01T00:00:00Z": month out of range`},
		{"deadline on February 29 of a common year", readOnlyPair, h("Toolbus-Deadline", "2099-02-29T00:00:00Z"), "", "invalid",
			`bad Toolbus-Deadline header "2099-02-29T00:00:00Z": day out of range`},
		{"deadline at hour 24", readOnlyPair, h("Toolbus-Deadline", "2099-01-01T24:00:00Z"), "", "invalid",
			`bad Toolbus-Deadline header "2099-01-01T24:00:00Z": hour out of range`},
		{"deadline at minute 60", readOnlyPair, h("Toolbus-Deadline", "2099-01-01T00:60:00Z"), "", "invalid",
			`bad Toolbus-Deadline header "2099-01-01T00:60:00Z": minute out of range`},
		{"deadline at a leap second", readOnlyPair, h("Toolbus-Deadline", "2098-12-31T23:59:60Z"), "", "invalid",
			`bad Toolbus-Deadline header "2098-12-31T23:59:60Z": second out of range`},
		{"deadline with offset +24:00", readOnlyPair, h("Toolbus-Deadline", "2099-01-01T00:00:00+24:00"), "", "invalid",
			`bad Toolbus-Deadline header "2099-01-01T00:00:00+24:00": time zone offset out of range`},

		// A deadline already past: after the headers and truncation, before the arguments.
		{"deadline past", readOnlyPair, h("Toolbus-Deadline", "2020-01-01T00:00:00Z"), "", "timeout", past("2020-01-01T00:00:00Z")},
		{"deadline past, with valid arguments", readOnlyPair, h("Toolbus-Deadline", "2020-01-01T00:00:00Z"), `{}`, "timeout", past("2020-01-01T00:00:00Z")},
		{"deadline past, in lower case with an offset", readOnlyPair, h("Toolbus-Deadline", "2020-01-01t01:00:00.120+01:00"), "", "timeout",
			past("2020-01-01T00:00:00.12Z")},
		{"deadline past, in nanoseconds", readOnlyPair, h("Toolbus-Deadline", "2020-01-01T00:00:00.123456789Z"), "", "timeout",
			past("2020-01-01T00:00:00.123456789Z")},
		{"deadline past, before year 0", readOnlyPair, h("Toolbus-Deadline", "0000-01-01T00:30:00+01:00"), "", "timeout",
			past("-0001-12-31T23:30:00Z")},
		{"deadline past, with a bad call", readOnlyPair, h("Toolbus-Call", "c.1", "Toolbus-Deadline", "2020-01-01T00:00:00Z"), "", "invalid",
			`bad Toolbus-Call header "c.1"`},
		{"deadline past, with truncation of a read-only tool", readOnlyPair, h("Toolbus-Truncated", "true", "Toolbus-Deadline", "2020-01-01T00:00:00Z"),
			"", "timeout", past("2020-01-01T00:00:00Z")},

		// Toolbus-Truncated: anything but absent, empty or false (any case) is truncated.
		{"truncated FALSE", destructivePair, h("Toolbus-Truncated", "FALSE"), "", "invalid", argsError},
		{"truncated False", destructivePair, h("Toolbus-Truncated", "False"), "", "invalid", argsError},
		{"truncated falſe", destructivePair, h("Toolbus-Truncated", "falſe"), "", "invalid", argsError},
		{"truncated empty", destructivePair, h("Toolbus-Truncated", ""), "", "invalid", argsError},
		{"truncated true", destructivePair, h("Toolbus-Truncated", "true"), "", "invalid", truncated},
		{"truncated 0", destructivePair, h("Toolbus-Truncated", "0"), "", "invalid", truncated},
		{"truncated no", destructivePair, h("Toolbus-Truncated", "no"), "", "invalid", truncated},
		{"truncated fals", destructivePair, h("Toolbus-Truncated", "fals"), "", "invalid", truncated},
		{"truncated before a past deadline", destructivePair, h("Toolbus-Truncated", "1", "Toolbus-Deadline", "2020-01-01T00:00:00Z"),
			"", "invalid", truncated},
		{"bad agent before truncation", destructivePair, h("Toolbus-Agent", "a/b", "Toolbus-Truncated", "1", "Toolbus-Deadline", "2020-01-01T00:00:00Z"),
			"", "invalid", `bad Toolbus-Agent header "a/b": agent id has '/' at position 2` + onlyASCII},
		{"bad deadline before truncation", destructivePair, h("Toolbus-Truncated", "1", "Toolbus-Deadline", "2020-01-01"),
			"", "invalid", `bad Toolbus-Deadline header "2020-01-01": ` + syntax},
		{"past deadline of a destructive tool", destructivePair, h("Toolbus-Truncated", "false", "Toolbus-Deadline", "2020-01-01T00:00:00Z"),
			"", "timeout", past("2020-01-01T00:00:00Z")},
	}

	ask := func(t *testing.T, subject string, hdr nats.Header, body string) crmReply {
		t.Helper()
		msg := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: []byte(body)}
		for k, v := range hdr {
			msg.Header[k] = slices.Clone(v)
		}
		m, err := nc.RequestMsg(msg, waitLimit)
		if err != nil {
			t.Fatalf("request %s: %v", subject, err)
		}
		return decodeCRMReply(t, string(m.Data))
	}
	goBefore, crmBefore := endpointCounts(t, nc, "toolbus-computer"), endpointCounts(t, nc, crmService)
	sent := map[sameAnswerPair]int64{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.body
			if body == "" {
				body = "[1]"
			}
			sent[tt.pair]++
			g := ask(t, "toolbus.tool."+tt.pair.goCategory+"."+tt.pair.goTool, tt.header, body)
			w := ask(t, "toolbus.tool.crm."+tt.pair.crmTool, tt.header, body)
			goErr := strings.ReplaceAll(g.Error, tt.pair.goTool, "<tool>")
			crmErr := strings.ReplaceAll(w.Error, tt.pair.crmTool, "<tool>")
			if g.Outcome != tt.outcome || goErr != tt.err {
				t.Errorf("the Go host answers %s %q, want %s %q: the case does not test what it says", g.Outcome, goErr, tt.outcome, tt.err)
			}
			if w.Outcome != g.Outcome || crmErr != goErr {
				t.Errorf("the worker answers %s %q\nthe Go host answers %s %q", w.Outcome, crmErr, g.Outcome, goErr)
			}
			if w.Tool != tt.pair.crmTool || g.Tool != tt.pair.goTool {
				t.Errorf("the replies name the tools %q and %q, want %q and %q", w.Tool, g.Tool, tt.pair.crmTool, tt.pair.goTool)
			}
			if tt.header.Get("Toolbus-Call") != "" && w.Call != g.Call {
				t.Errorf("the worker's reply has call_id %q, the Go host's %q", w.Call, g.Call)
			}
			if w.Call == "" || g.Call == "" || w.Duration != 0 || g.Duration != 0 || w.Label != "" || g.Label != "" {
				t.Errorf("call ids %q and %q, durations %d and %d, labels %q and %q; want call ids, no duration and no label for a refusal",
					w.Call, g.Call, w.Duration, g.Duration, w.Label, g.Label)
			}
		})
	}

	// Every refusal counts once in the errors of its endpoint, on both hosts.
	goAfter, crmAfter := endpointCounts(t, nc, "toolbus-computer"), endpointCounts(t, nc, crmService)
	for pair, n := range sent {
		goDelta := [2]int64{goAfter[pair.goTool][0] - goBefore[pair.goTool][0], goAfter[pair.goTool][1] - goBefore[pair.goTool][1]}
		crmDelta := [2]int64{crmAfter[pair.crmTool][0] - crmBefore[pair.crmTool][0], crmAfter[pair.crmTool][1] - crmBefore[pair.crmTool][1]}
		if want := [2]int64{0, n}; goDelta != want || crmDelta != want {
			t.Errorf("after %d refusals: ok and errors of %s grew by %v, of crm.%s by %v; want %v on both",
				n, pair.goTool, goDelta, pair.crmTool, crmDelta, want)
		}
	}
}
