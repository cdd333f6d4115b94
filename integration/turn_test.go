//go:build linux

package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/internal/needs"
)

// runOutput is what `toolbus run -json` prints: the final turn status and
// the transcript read back from JetStream.
type runOutput struct {
	Turn   string `json:"turn_id"`
	Status struct {
		Turn  string `json:"turn_id"`
		Node  string `json:"node"`
		State string `json:"state"`
		Step  int    `json:"step"`
		Text  string `json:"text"`
		Error string `json:"error"`
		Calls []struct {
			Call    string `json:"call_id"`
			Tool    string `json:"tool"`
			Outcome string `json:"outcome"`
			Error   string `json:"error"`
		} `json:"calls"`
	} `json:"status"`
	Transcript []struct {
		Kind     string          `json:"kind"`
		Provider string          `json:"provider"`
		Raw      json.RawMessage `json:"raw"`
		CallID   string          `json:"call_id"`
		Name     string          `json:"name"`
		Output   []struct {
			Text string `json:"text"`
		} `json:"output"`
		IsError bool `json:"is_error"`
	} `json:"transcript"`
}

// output returns the text the model got back for the call with id callID.
func (r runOutput) output(callID string) (string, bool) {
	for _, it := range r.Transcript {
		if it.Kind == "function_call_output" && it.CallID == callID {
			var b strings.Builder
			for _, p := range it.Output {
				b.WriteString(p.Text)
			}
			return b.String(), true
		}
	}
	return "", false
}

// scriptCall is one call of a scripted model response.
type scriptCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Arguments string `json:"arguments"`
}

// writeScript writes a scripted model: one response per element of steps,
// each a list of calls, then a final response with the text answer.
func writeScript(t testing.TB, answer string, steps ...[]scriptCall) string {
	t.Helper()
	type step struct {
		Text  string       `json:"text,omitempty"`
		Calls []scriptCall `json:"calls,omitempty"`
	}
	var s struct {
		Responses []step `json:"responses"`
	}
	for _, calls := range steps {
		s.Responses = append(s.Responses, step{Calls: calls})
	}
	s.Responses = append(s.Responses, step{Text: answer})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runTurn runs `toolbus run -json` against a node and decodes its output.
func runTurn(t testing.TB, url, script string) (runOutput, int) {
	t.Helper()
	out, errOut, err := runCLI(t, "run", "-server", url, "-model", "script:"+script, "-json", "do the scripted work")
	code := exitCode(err)
	if code < 0 {
		t.Fatalf("toolbus run: %v\n%s", err, errOut)
	}
	if strings.TrimSpace(out) == "" {
		t.Fatalf("toolbus run -json printed nothing (exit %d)\nstderr:\n%s", code, errOut)
	}
	var r runOutput
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("decode toolbus run -json (exit %d): %v\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	if errOut != "" {
		t.Logf("toolbus run stderr:\n%s", errOut)
	}
	return r, code
}

// connect opens a nats.go connection for the test's own probes of the bus.
func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("integration-test"), nats.Timeout(waitLimit), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// waitForResponders waits until a request on subject gets an answer
// (want true) or finds no responders (want false). Interest crosses routes
// asynchronously, so a node's subscriptions reach the others a moment after
// it is ready.
func waitForResponders(t testing.TB, nc *nats.Conn, subject, body string, want bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		_, err := nc.Request(subject, []byte(body), 2*time.Second)
		answered := err == nil
		switch {
		case errors.Is(err, nats.ErrTimeout):
			// Sent to a node that was going away: ask again.
		case err != nil && !errors.Is(err, nats.ErrNoResponders):
			t.Fatalf("request %s: %v", subject, err)
		case answered == want:
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("request %s: answered = %v for %s, want %v", subject, answered, waitLimit, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestClusterCrossNode(t *testing.T) {
	t.Parallel()
	var cport [3]int
	var routes []string
	for i := range cport {
		cport[i] = freePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cport[i]))
	}
	cluster := func(i int, args ...string) []string {
		return append([]string{
			"-cluster-name", "c",
			"-cluster-listen", fmt.Sprintf("127.0.0.1:%d", cport[i]),
			"-routes", strings.Join(routes, ","),
			// Three replicas keep the transcript stream and the todo bucket
			// writable when one node is lost.
			"-replicas", "3",
		}, args...)
	}
	home2 := t.TempDir()
	notes := "cluster notes\nwritten for n2\n"
	if err := os.WriteFile(filepath.Join(home2, "notes.md"), []byte(notes), 0o600); err != nil {
		t.Fatal(err)
	}

	// All three start at once: JetStream elects its meta leader only when a
	// quorum is up. n1 runs turns and hosts todo; n2 hosts computer only; n3
	// only completes the quorum.
	n1 := startNode(t, "n1", cluster(0, "-categories", "todo", "-turns=true")...)
	n2 := startNode(t, "n2", cluster(1, "-categories", "computer", "-turns=false", "-home", home2)...)
	n3 := startNode(t, "n3", cluster(2, "-categories=", "-turns=false")...)
	for _, n := range []*node{n1, n2, n3} {
		n.waitReady(t)
	}
	probe := connect(t, n1.url)
	waitForResponders(t, probe, "toolbus.tool.computer.list_files", "{}", true)

	t.Run("calls cross to n2", func(t *testing.T) {
		needs.Bwrap(t) // its command runs in n2's sandbox
		script := writeScript(t, "Looked around.",
			[]scriptCall{
				{ID: "list", Name: "list_files", Arguments: `{}`},
				{ID: "read", Name: "read_file", Arguments: `{"path":"notes.md"}`},
			},
			[]scriptCall{{ID: "cmd", Name: "run_command", Arguments: `{"command":"echo ran in $PWD"}`}},
		)
		r, code := runTurn(t, n1.url, script)
		if code != 0 || r.Status.State != "completed" {
			t.Fatalf("turn ended %s (exit %d, %s); want completed, exit 0", r.Status.State, code, r.Status.Error)
		}
		if r.Status.Node != "n1" {
			t.Errorf("turn ran on %q, want n1 (the only node with -turns)", r.Status.Node)
		}
		if r.Status.Text != "Looked around." {
			t.Errorf("answer = %q, want the script's", r.Status.Text)
		}
		if len(r.Status.Calls) != 3 {
			t.Fatalf("%d calls recorded, want 3: %+v", len(r.Status.Calls), r.Status.Calls)
		}
		for _, c := range r.Status.Calls {
			if c.Outcome != "ok" {
				t.Errorf("call %s (%s): outcome %s (%s), want ok", c.Call, c.Tool, c.Outcome, c.Error)
			}
		}
		want := map[string]string{
			"list": "notes.md",
			"read": "written for n2",
			"cmd":  "ran in " + home2,
		}
		for id, text := range want {
			got, ok := r.output(id)
			if !ok {
				t.Errorf("transcript has no output for call %s", id)
				continue
			}
			if !strings.Contains(got, text) {
				t.Errorf("output of call %s does not contain %q:\n%s", id, text, got)
			}
		}
	})

	t.Run("nats trace shows the route", func(t *testing.T) {
		out, errOut, err := runNats(t, "--server", n1.url, "trace", "--deliver", "toolbus.tool.computer.list_files", "{}")
		if err != nil {
			t.Fatalf("nats trace: %v\n%s", err, errOut)
		}
		for _, want := range []string{`server:"n1"`, `Router "n2"`, `Client "toolbus-host-computer@n2"`, `queue:"toolbus.computer"`} {
			if !strings.Contains(out, want) {
				t.Errorf("nats trace output lacks %s:\n%s", want, out)
			}
		}
	})

	// The transcript stream's leader goes to n2, so that losing n2 also
	// makes JetStream elect a new one: turns must live through that too.
	moveStreamLeader(t, n1.url, durable.TranscriptStream, "n2")

	// n2 dies as a crash would; n1 and n3 keep the quorum.
	n2.proc.kill()
	waitForResponders(t, probe, "toolbus.tool.computer.list_files", "{}", false)
	gone := writeScript(t, "The computer is gone.",
		[]scriptCall{
			{ID: "todo", Name: "todo_read", Arguments: `{}`},
			{ID: "list", Name: "list_files", Arguments: `{}`},
		},
	)

	t.Run("computer gone", func(t *testing.T) {
		// Plain output: this checks the tools, not the transcript store.
		out, errOut, err := runCLI(t, "run", "-server", n1.url, "-model", "script:"+gone, "do the scripted work")
		if code := exitCode(err); code != 0 {
			t.Fatalf("toolbus run: exit %d (%v), want 0\nstdout:\n%s\nstderr:\n%s", code, err, out, errOut)
		}
		for _, want := range []string{
			"✓ Read the todo list",                         // n1 hosts todo
			"✗ list_files: tool list_files is unavailable", // nobody hosts computer
			"The computer is gone.",
			"completed · 2 steps · 2 calls",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("toolbus run output lacks %q:\n%s", want, out)
			}
		}
		if errOut != "" {
			t.Logf("toolbus run stderr:\n%s", errOut)
		}
	})

	t.Run("transcript survives losing its leader", func(t *testing.T) {
		r, code := runTurn(t, n1.url, gone)
		if code != 0 || r.Status.State != "completed" || r.Status.Error != "" {
			t.Fatalf("turn ended %s (exit %d, error %q); want completed, exit 0, no error", r.Status.State, code, r.Status.Error)
		}
		outcomes := map[string]string{}
		for _, c := range r.Status.Calls {
			outcomes[c.Call] = c.Outcome
		}
		if outcomes["todo"] != "ok" || outcomes["list"] != "unavailable" {
			t.Errorf("outcomes = %v, want todo ok (n1 hosts it) and list unavailable", outcomes)
		}
		if got, _ := r.output("list"); !strings.Contains(got, "unavailable") {
			t.Errorf("the model is not told the tool is unavailable: %q", got)
		}
		if got, ok := r.output("todo"); !ok || got == "" {
			t.Errorf("the transcript lacks the todo_read output")
		}
	})
}

// moveStreamLeader makes node the leader of a replicated stream, with the
// nats CLI.
func moveStreamLeader(t testing.TB, url, stream, node string) {
	t.Helper()
	leader := func() string {
		out, errOut, err := runNats(t, "--server", url, "stream", "info", stream, "--json")
		if err != nil {
			t.Fatalf("nats stream info %s: %v\n%s", stream, err, errOut)
		}
		var info struct {
			Cluster struct {
				Leader string `json:"leader"`
			} `json:"cluster"`
		}
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("decode nats stream info %s: %v\n%s", stream, err, out)
		}
		return info.Cluster.Leader
	}
	deadline := time.Now().Add(waitLimit)
	for {
		l := leader()
		if l == node {
			return
		}
		if l != "" {
			if _, errOut, err := runNats(t, "--server", url, "stream", "cluster", "step-down", stream, "--preferred", node); err != nil {
				t.Logf("nats stream cluster step-down %s: %v\n%s", stream, err, errOut)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s: leader %q, could not move it to %s within %s", stream, l, node, waitLimit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
