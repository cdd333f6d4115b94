package host_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/host"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
)

// maxHostBinary is what a program hosting one tool on a remote bus may weigh (issue 38):
// it links the wire and the host, not the server, the categories or the providers.
const maxHostBinary = 25_000_000

// A Go program hosts a tool on a bus that runs elsewhere: examples/go-host, built as a
// user builds it, run as a process of its own with a tool user's login, serves a turn of
// the bus's node and a client's direct calls with the outcomes a node's host gives, and
// leaves the catalog when stopped.
func TestHostServesOnRemoteBus(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command to build examples/go-host:", err)
	}
	bin := filepath.Join(t.TempDir(), "go-host")
	// -ldflags=: linked as a user's plain go build links it, with its debug information,
	// whatever GOFLAGS says (.ci/run links without DWARF, which weighs less).
	build := exec.Command(goBin, "build", "-ldflags=", "-o", bin, "../examples/go-host")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/go-host: %v\n%s", err, out)
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("examples/go-host: %.1f MB", float64(st.Size())/1e6)
	if st.Size() > maxHostBinary {
		t.Errorf("examples/go-host is %d bytes, over the %d a program hosting one tool may weigh", st.Size(), maxHostBinary)
	}

	ctx := bustest.Context(t)
	perms, err := server.RolePermissions(server.RoleTool, "words", []string{"text"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Start(ctx, node.Config{
		Bus: server.Config{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(), Logger: quiet,
			Users: []server.User{{Name: "words", Password: "words-pw", Role: server.RoleTool, Permissions: perms}}},
		Node: node.NodeConfig{Logger: quiet, Categories: []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	nc, err := n.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan bus.CatalogChange, 16)
	sub, err := nc.Subscribe(bus.CatalogChanged, func(m *nats.Msg) {
		var c bus.CatalogChange
		if json.Unmarshal(m.Data, &c) == nil && c.Category == "text" {
			changes <- c
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "NATS_URL="+n.Server().ClientURL(), "NATS_USER=words", "NATS_PASSWORD=words-pw")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// waitChange waits for the catalog to say text is in state, the process running
	// meanwhile unless it has exited already.
	waitChange := func(state string, running bool) {
		t.Helper()
		ex := exited
		if !running {
			ex = nil
		}
		for {
			select {
			case c := <-changes:
				if c.State == state {
					return
				}
			case err := <-ex:
				exited <- err // for the cleanup
				t.Fatalf("go-host exited (%v) before the catalog said %s:\n%s", err, state, out.String())
			case <-ctx.Done():
				t.Fatalf("the catalog never said text is %s:\n%s", state, out.String())
			}
		}
	}
	waitChange(bus.CatalogUp, true)

	// A turn of the node calls it: the test's copy of the tool gives the turn its spec,
	// and would answer otherwise, so the answer says where it ran.
	res, err := n.Run(ctx, node.Turn{
		Input: "How many words?",
		Script: `{"responses": [
			{"calls": [{"name": "count_words", "arguments": "{\"text\": \"the quick brown fox\"}"}]},
			{"text": "Four."}]}`,
		Tools: []*toolbus.Tool{countWordsHere},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != "completed" || len(res.Calls) != 1 || res.Calls[0].Outcome != bus.OutcomeOK || res.Outputs[0].Text() != "4" {
		t.Fatalf("turn: %s, calls %+v, outputs %+v; want completed with one ok call answered 4 by go-host", res.State, res.Calls, res.Outputs)
	}

	// A client's direct calls: a count, and arguments the host refuses as a node's does.
	args, err := countWordsHere.Params.Parse(`{"text": "one two three"}`, schema.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := client.New(nc).Call(ctx, &countWordsHere.Spec, "", args)
	if err != nil || reply.Outcome != bus.OutcomeOK || len(reply.Content) != 1 || reply.Content[0].Text != "3" {
		t.Fatalf("direct call: %+v, %v; want ok 3", reply, err)
	}
	m, err := nc.Request(bus.ToolSubject("text", "count_words"), []byte(`{"text": 3}`), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var bad bus.ToolReply
	if err := json.Unmarshal(m.Data, &bad); err != nil || bad.Outcome != bus.OutcomeInvalid || !strings.Contains(bad.Error, "invalid arguments for count_words") {
		t.Fatalf("a request with a number for text: %s; want invalid arguments", m.Data)
	}

	// Stopped, it exits cleanly, and it told the catalogs it left before it did.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("go-host exited with %v:\n%s", err, out.String())
		}
	case <-ctx.Done():
		t.Fatal("go-host did not exit on SIGTERM")
	}
	waitChange(bus.CatalogDown, false)
}

// countWordsHere is examples/go-host's tool as the test knows it; run here, it would
// answer "here".
var countWordsHere = toolbus.MustDefine(toolbus.Def[struct {
	Text string `json:"text" jsonschema_description:"the text whose words to count"`
}]{
	Spec: toolbus.Spec{Name: "count_words", Description: "Count the words of a text.", Category: "text", Mode: toolbus.Parallel, ReadOnly: true},
	Execute: func(context.Context, toolbus.Call, struct {
		Text string `json:"text" jsonschema_description:"the text whose words to count"`
	}) (toolbus.Result, error) {
		return toolbus.TextResult("here"), nil
	},
})

// Serve refuses what it cannot serve before it serves anything.
func TestServeRefusesBadTools(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	nc := bustest.Conn(t, srv, "serve")
	ctx := bustest.Context(t)
	for _, tc := range []struct {
		name  string
		tools []*toolbus.Tool
		want  string
	}{
		{"none", nil, "no tools"},
		{"nil", []*toolbus.Tool{nil}, "a nil tool"},
		{"twice", []*toolbus.Tool{echo, echo}, "tool echo given twice"},
	} {
		if err := host.Serve(ctx, nc, tc.tools...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Serve = %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := host.Serve(ctx, nil, echo); err == nil {
		t.Error("Serve without a connection: no error")
	}
}

// A connection that closes ends Serve with why; a context that ends, with nil, and the
// program's connection open.
func TestServeEnds(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	done := make(chan error, 1)

	nc := bustest.Conn(t, srv, "serve-close")
	up := catalogUp(t, bustest.Conn(t, srv, "watch-1"), "echo")
	go func() { done <- host.Serve(ctx, nc, echo) }()
	<-up
	nc.Close()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "connection closed") {
		t.Errorf("Serve after its connection closed = %v", err)
	}

	nc2 := bustest.Conn(t, srv, "serve-ctx")
	up = catalogUp(t, bustest.Conn(t, srv, "watch-2"), "echo")
	sctx, cancel := context.WithCancel(ctx)
	go func() { done <- host.Serve(sctx, nc2, echo) }()
	<-up
	args, err := echo.Params.Parse(`{"text": "hi"}`, schema.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := client.New(nc2).Call(ctx, &echo.Spec, "", args)
	if err != nil || reply.Outcome != bus.OutcomeOK || reply.Content[0].Text != "hi" {
		t.Fatalf("call on Serve's own connection: %+v, %v", reply, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after its context ended = %v, want nil", err)
	}
	if !nc2.IsConnected() {
		t.Error("Serve closed the program's connection")
	}
}

// catalogUp is served for a test, its wait ended with the test.
func catalogUp(t *testing.T, nc *nats.Conn, category string) <-chan struct{} {
	t.Helper()
	up, stop, err := served(nc, category)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return up
}

var echo = toolbus.MustDefine(toolbus.Def[struct {
	Text string `json:"text"`
}]{
	Spec: toolbus.Spec{Name: "echo", Description: "Say the text back.", Category: "echo"},
	Execute: func(_ context.Context, _ toolbus.Call, a struct {
		Text string `json:"text"`
	}) (toolbus.Result, error) {
		return toolbus.TextResult(a.Text), nil
	},
})

var quiet = slog.New(slog.DiscardHandler)
