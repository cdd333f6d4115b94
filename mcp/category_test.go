package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/node"
)

// wait bounds every wait of these tests: events on a loaded machine, never a pace.
const wait = 30 * time.Second

// startNode starts an embedded node (no built-in categories) hosting the given MCP
// servers, and a client of its bus.
func startNode(t *testing.T, servers ...mcp.ServerConfig) (*node.Node, *client.Client) {
	t.Helper()
	log := bustest.Logger(t, slog.LevelDebug)
	// Longer than the servers' InitTimeout, so Start returns with each first start ended.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Config{
		Bus:  server.Config{StoreDir: t.TempDir(), Logger: log},
		Node: node.NodeConfig{Categories: []string{}, Turns: true, Logger: log},
		MCP:  servers,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	nc, err := n.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(nc, client.OwnConn())
	t.Cleanup(cl.Close)
	return n, cl
}

// everything is the reference server behind -mcp everything=… (stdio).
//
// Its start gets a minute, not the default 20 s: on a loaded machine (load average 35
// on 2 cores while another checkout's tests ran) starts are slow.
func everything(t *testing.T) mcp.ServerConfig {
	return mcp.ServerConfig{Name: "everything", Command: []string{filepath.Join(npmPrefix(t), "bin", "mcp-server-everything"), "stdio"},
		InitTimeout: time.Minute}
}

// call runs one call of a namespaced tool as `toolbus call` does: the spec from the
// bus's catalog, the arguments through the ladder, one request to the host.
func call(t *testing.T, ctx context.Context, cl *client.Client, name, raw string) bus.ToolReply {
	t.Helper()
	tool, err := cl.Tool(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	args, err := client.Args(tool, raw)
	if err != nil {
		t.Fatalf("%s %s: %v", name, raw, err)
	}
	reply, err := cl.Call(ctx, tool, "ann", args)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return reply
}

func text(r bus.ToolReply) string {
	var b strings.Builder
	for _, p := range r.Content {
		b.WriteString(p.Text)
	}
	return b.String()
}

// progressEvents subscribes to every call's progress events on the bus.
func progressEvents(t *testing.T, n *node.Node) chan bus.Event {
	t.Helper()
	nc, err := n.Connect("watch")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ch := make(chan bus.Event, 256)
	if _, err := nc.Subscribe(bus.EventSubject("*", "*", bus.EventProgress), func(m *nats.Msg) {
		var ev bus.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			select {
			case ch <- ev:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestMCPCategoryHostsServerTools hosts @modelcontextprotocol/server-everything behind
// -mcp: its tools are listed in the bus's catalog with their schemas and annotations,
// calls of echo and get-sum go through the host, trigger-long-running-operation's MCP
// progress becomes the call's progress events, and a scripted turn of an agent whose
// profile names the namespace calls the tools like any others.
func TestMCPCategoryHostsServerTools(t *testing.T) {
	t.Parallel()
	n, cl := startNode(t, everything(t))
	ctx := bustest.Context(t)
	if up, why := n.MCP()[0].State(); !up {
		t.Fatalf("everything is not up: %v", why)
	}

	cats, err := cl.Categories(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cats {
		if c.Name != "mcp-everything" {
			continue
		}
		for _, s := range c.Specs {
			names = append(names, s.QualifiedName())
			if s.Name == "echo" && (!strings.Contains(string(s.Params.JSON()), `"message"`) || s.Description != "Echoes back the input string") {
				t.Errorf("echo's spec: %q %s", s.Description, s.Params.JSON())
			}
		}
	}
	for _, want := range []string{"everything.echo", "everything.get-sum", "everything.trigger-long-running-operation"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("catalog of mcp-everything %v lacks %s", names, want)
		}
	}

	if r := call(t, ctx, cl, "everything.echo", `{"message": "hello"}`); r.Outcome != bus.OutcomeOK || text(r) != "Echo: hello" {
		t.Errorf("echo: %s %q %s", r.Outcome, text(r), r.Error)
	}
	// Repaired on the way, as a model's arguments are: single quotes, a trailing comma.
	if r := call(t, ctx, cl, "everything.get-sum", `{'a': 2, 'b': 40,}`); r.Outcome != bus.OutcomeOK || !strings.Contains(text(r), "42") {
		t.Errorf("get-sum: %s %q %s", r.Outcome, text(r), r.Error)
	}

	progress := progressEvents(t, n)
	r := call(t, ctx, cl, "everything.trigger-long-running-operation", `{"duration": 0.6, "steps": 3}`)
	if r.Outcome != bus.OutcomeOK || !strings.Contains(text(r), "Long running operation completed") {
		t.Fatalf("long running operation: %s %q %s", r.Outcome, text(r), r.Error)
	}
	var labels []string
	bustest.CheckFor(t, wait, 10*time.Millisecond, func() error {
		for {
			select {
			case ev := <-progress:
				if ev.Call == r.Call {
					labels = append(labels, ev.Label)
				}
				continue
			default:
			}
			break
		}
		// The server sends its last notification just before its result: the call may
		// end first, and that one is not the call's any more.
		if len(labels) < 2 {
			return fmt.Errorf("progress events of the call: %q, want at least 2", labels)
		}
		return nil
	})
	if labels[0] != "1/3" || labels[1] != "2/3" {
		t.Errorf("progress labels %q, want 1/3, 2/3…", labels)
	}

	// A turn: the profile names the namespace, the model calls a tool of it.
	profiles, err := cl.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.Put(ctx, []byte(`{"version": 1, "agent": "ann", "namespaces": [{"name": "everything", "load": "upfront"}]}`)); err != nil {
		t.Fatal(err)
	}
	script := `{"responses": [{"calls": [{"name": "echo", "namespace": "everything", "arguments": "{\"message\": \"from a turn\"}"}]}, {"text": "done"}]}`
	res, err := n.Run(ctx, node.Turn{Agent: "ann", Input: "echo it", Script: script})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Calls) != 1 || res.Calls[0].Outcome != bus.OutcomeOK {
		t.Fatalf("turn calls %+v", res.Calls)
	}
	if b, _ := json.Marshal(res.Transcript); !strings.Contains(string(b), "Echo: from a turn") {
		t.Errorf("the transcript lacks the echo: %s", b)
	}
}

// TestMCPCategoryCancel aborts calls in flight: on the reference server the call ends
// as stopped long before the operation would, and on a go-sdk server the tool's own
// context is cancelled (the abort reached it as MCP notifications/cancelled).
func TestMCPCategoryCancel(t *testing.T) {
	t.Parallel()
	marks := t.TempDir()
	n, cl := startNode(t, everything(t), testServerConfig(t, "gosdk", marks))
	ctx := bustest.Context(t)
	progress := progressEvents(t, n)

	for _, tc := range []struct{ tool, args string }{
		{"everything.trigger-long-running-operation", `{"duration": 30, "steps": 30}`},
		{"gosdk.slow", `{"seconds": 30}`},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			// Cancelled once the call shows progress: it is running on the server.
			go func() {
				for {
					select {
					case <-progress:
						cancel()
						return
					case <-cctx.Done():
						return
					}
				}
			}()
			start := time.Now()
			tool, err := cl.Tool(ctx, tc.tool)
			if err != nil {
				t.Fatal(err)
			}
			args, err := client.Args(tool, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			r, err := cl.Call(cctx, tool, "ann", args)
			if err != nil {
				t.Fatal(err)
			}
			if r.Outcome != bus.OutcomeStopped || time.Since(start) > 20*time.Second {
				t.Errorf("aborted call: %s after %s: %s", r.Outcome, time.Since(start), r.Error)
			}
		})
	}
	bustest.CheckFor(t, wait, 20*time.Millisecond, func() error {
		b, err := os.ReadFile(filepath.Join(marks, "cancelled"))
		if err != nil {
			return fmt.Errorf("the go-sdk server's slow tool saw no cancellation: %v", err)
		}
		t.Logf("the server's tool saw: %s", b)
		return nil
	})
	// The server lives on: a call after the aborted ones works.
	if r := call(t, ctx, cl, "gosdk.echo_v2", `{"message": "still here"}`); r.Outcome != bus.OutcomeOK {
		t.Errorf("echo after the aborts: %s %s", r.Outcome, r.Error)
	}
}

// TestMCPCategoryServerDies covers a server's bad behaviour: it dies in a call (an
// honest error, its tools refused with the reason while it is down, then started
// again), names toolbus maps, a schema that is not an object (left out), a result of
// 10 MiB (delivered through the object store), and a server that never answers
// initialize (refused after the timeout, retried, while the other category works).
func TestMCPCategoryServerDies(t *testing.T) {
	t.Parallel()
	gosdk := testServerConfig(t, "gosdk", t.TempDir())
	gosdk.RestartMin = 3 * time.Second // a window in which the server is down
	mute := mcp.ServerConfig{Name: "mute", Command: []string{"sleep", "600"}, InitTimeout: 500 * time.Millisecond, RestartMin: time.Hour}
	// The 10 MiB call goes to a server of its own, beside the rest (it takes seconds
	// under the race detector).
	bulk := testServerConfig(t, "bulk", t.TempDir())
	n, cl := startNode(t, gosdk, mute, bulk)
	ctx := bustest.Context(t)
	bigDone := make(chan struct{})
	go func() {
		defer close(bigDone)
		tool, err := cl.Tool(ctx, "bulk.big")
		if err != nil {
			t.Error(err)
			return
		}
		args, _ := client.Args(tool, `{}`)
		r, err := cl.Call(ctx, tool, "ann", args)
		if err != nil || r.Outcome != bus.OutcomeOK || len(text(r)) != 10<<20 {
			t.Errorf("big: %v %s, %d bytes, %s", err, r.Outcome, len(text(r)), r.Error)
		}
	}()
	defer func() { <-bigDone }()

	m := n.MCP()
	if up, why := m[1].State(); up || why == nil || !strings.Contains(why.Error(), "no answer to initialize within 500ms") {
		t.Errorf("the mute server: up %v, %v", up, why)
	}
	if up, why := m[0].State(); !up {
		t.Fatalf("gosdk is not up: %v", why)
	}

	cats, err := cl.Categories(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cats {
		for _, s := range c.Specs {
			names = append(names, s.QualifiedName())
		}
	}
	got := strings.Join(names, " ")
	for _, want := range []string{"gosdk.echo_v2", "gosdk.say_hello", "gosdk.big", "gosdk.die", "gosdk.slow"} {
		if !strings.Contains(got, want) {
			t.Errorf("catalog %v lacks %s", names, want)
		}
	}
	if strings.Contains(got, "array-root") || strings.Contains(got, "mute") {
		t.Errorf("catalog %v holds a tool it should not", names)
	}
	if r := call(t, ctx, cl, "gosdk.say_hello", `{}`); r.Outcome != bus.OutcomeOK || text(r) != "hello" {
		t.Errorf("say hello: %s %q %s", r.Outcome, text(r), r.Error)
	}

	// Looked up now: the call while the server is down must go out at once, within
	// the 3 s before it is started again, not after a catalog lookup.
	echo, err := cl.Tool(ctx, "gosdk.echo_v2")
	if err != nil {
		t.Fatal(err)
	}
	echoArgs, err := client.Args(echo, `{"message": "x"}`)
	if err != nil {
		t.Fatal(err)
	}
	r := call(t, ctx, cl, "gosdk.die", `{}`)
	if r.Outcome != bus.OutcomeError || !strings.Contains(r.Error, "mcp server gosdk ended during the call") {
		t.Errorf("die: %s %s", r.Outcome, r.Error)
	}
	bustest.CheckFor(t, wait, 10*time.Millisecond, func() error {
		if up, _ := m[0].State(); up {
			return errors.New("gosdk still counts as up")
		}
		return nil
	})
	r, err = cl.Call(ctx, echo, "ann", echoArgs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != bus.OutcomeError || !strings.Contains(r.Error, "mcp server is down: gosdk: the server ended") {
		t.Errorf("a call while down: %s %s", r.Outcome, r.Error)
	}
	bustest.CheckFor(t, wait, 50*time.Millisecond, func() error {
		if up, why := m[0].State(); !up {
			return fmt.Errorf("gosdk is not started again: %v", why)
		}
		return nil
	})
	if r := call(t, ctx, cl, "gosdk.echo_v2", `{"message": "back"}`); r.Outcome != bus.OutcomeOK || text(r) != "echo: back" {
		t.Errorf("echo after the restart: %s %q %s", r.Outcome, text(r), r.Error)
	}
}

// TestMCPCategoryOverHTTP hosts a go-sdk server that speaks streamable HTTP behind
// -mcp NAME=URL, with the header its config gives.
func TestMCPCategoryOverHTTP(t *testing.T) {
	t.Parallel()
	s := sdk.NewServer(&sdk.Implementation{Name: "http-server", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "shout", Description: "Upper-cases", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, a echoArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.ToUpper(a.Message)}}}, nil, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	t.Cleanup(func() {
		for ss := range s.Sessions() {
			_ = ss.Close()
		}
	})
	n, cl := startNode(t, mcp.ServerConfig{Name: "remote", URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer k"}})
	if up, why := n.MCP()[0].State(); !up {
		t.Fatalf("remote is not up: %v", why)
	}
	tool, err := cl.Tool(bustest.Context(t), "remote.shout")
	if err != nil {
		t.Fatal(err)
	}
	if !tool.ReadOnly || tool.Mode != 0 || tool.Category != "mcp-remote" {
		t.Errorf("spec %+v", tool)
	}
	if r := call(t, bustest.Context(t), cl, "remote.shout", `{"message": "hi"}`); r.Outcome != bus.OutcomeOK || text(r) != "HI" {
		t.Errorf("shout: %s %q %s", r.Outcome, text(r), r.Error)
	}
}

// TestMCPCategoryToolsChangeOnRestart: the tools of a server are read again each time
// it starts, and when it says its list changed (notifications/tools/list_changed):
// a tool it offers anew is hosted, and callable, and one it no longer offers leaves the
// catalog, without a restart of the node.
func TestMCPCategoryToolsChangeOnRestart(t *testing.T) {
	t.Parallel()
	marks := t.TempDir()
	n, cl := startNode(t, testServerConfig(t, "gosdk", marks))
	ctx := bustest.Context(t)
	if up, why := n.MCP()[0].State(); !up {
		t.Fatalf("gosdk is not up: %v", why)
	}
	// catalog waits until the catalog's gosdk tools hold want and lack gone.
	catalog := func(want, gone string) {
		t.Helper()
		bustest.CheckFor(t, wait, 50*time.Millisecond, func() error {
			cats, err := cl.Categories(ctx)
			if err != nil {
				return err
			}
			has := map[string]bool{}
			for _, c := range cats {
				for _, s := range c.Specs {
					has[s.QualifiedName()] = true
				}
			}
			switch {
			case want != "" && !has[want]:
				return fmt.Errorf("the catalog lacks %s", want)
			case gone != "" && has[gone]:
				return fmt.Errorf("the catalog still holds %s", gone)
			case !has["gosdk.echo_v2"]:
				return errors.New("the catalog lacks gosdk.echo_v2")
			}
			return nil
		})
	}
	catalog("gosdk.grow", "gosdk.extra")

	// Restarted with a tool more: hosted, callable.
	if err := os.WriteFile(filepath.Join(marks, "extra"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := call(t, ctx, cl, "gosdk.die", `{}`); r.Outcome != bus.OutcomeError {
		t.Fatalf("die: %s %s", r.Outcome, r.Error)
	}
	catalog("gosdk.extra", "")
	if r := call(t, ctx, cl, "gosdk.extra", `{}`); r.Outcome != bus.OutcomeOK || text(r) != "extra" {
		t.Errorf("extra: %s %q %s", r.Outcome, text(r), r.Error)
	}

	// Restarted without it: gone from the catalog.
	if err := os.Remove(filepath.Join(marks, "extra")); err != nil {
		t.Fatal(err)
	}
	if r := call(t, ctx, cl, "gosdk.die", `{}`); r.Outcome != bus.OutcomeError {
		t.Fatalf("die: %s %s", r.Outcome, r.Error)
	}
	catalog("", "gosdk.extra")

	// The server adds a tool as it runs and says so: hosted, callable.
	if r := call(t, ctx, cl, "gosdk.grow", `{}`); r.Outcome != bus.OutcomeOK || text(r) != "grew" {
		t.Fatalf("grow: %s %q %s", r.Outcome, text(r), r.Error)
	}
	catalog("gosdk.grown", "")
	if r := call(t, ctx, cl, "gosdk.grown", `{}`); r.Outcome != bus.OutcomeOK || text(r) != "grown" {
		t.Errorf("grown: %s %q %s", r.Outcome, text(r), r.Error)
	}
	if r := call(t, ctx, cl, "gosdk.echo_v2", `{"message": "still"}`); r.Outcome != bus.OutcomeOK || text(r) != "echo: still" {
		t.Errorf("echo: %s %q %s", r.Outcome, text(r), r.Error)
	}
}
