package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/node"
)

// notes is a namespace of tools a Go program hosts on the bus, for the MCP side to
// serve: a destructive write, and a slow read that reports progress.
type notes struct {
	writes  atomic.Int32
	stopped chan struct{} // closed when slow sees its context end
	once    sync.Once
}

type writeArgs struct {
	Title string   `json:"title" jsonschema:"the note's title"`
	Tags  []string `json:"tags,omitempty" jsonschema:"labels"`
}

type slowArgs2 struct {
	Steps int `json:"steps" jsonschema:"minimum=1"`
}

func (n *notes) tools(t *testing.T) []*toolbus.Tool {
	n.stopped = make(chan struct{})
	write := toolbus.MustDefine(toolbus.Def[writeArgs]{
		Spec: toolbus.Spec{Name: "write_note", Description: "Write a note.", Category: "notes", Namespace: "notes",
			Destructive: true, Mode: toolbus.Sequential},
		Execute: func(ctx context.Context, c toolbus.Call, a writeArgs) (toolbus.Result, error) {
			n.writes.Add(1)
			return toolbus.TextResult("saved " + a.Title + " [" + strings.Join(a.Tags, ",") + "]").
				WithDetails(map[string]any{"title": a.Title, "tags": a.Tags}), nil
		},
	})
	slow := toolbus.MustDefine(toolbus.Def[slowArgs2]{
		Spec: toolbus.Spec{Name: "slow_read", Description: "Read slowly.", Category: "notes", Namespace: "notes", ReadOnly: true},
		Execute: func(ctx context.Context, c toolbus.Call, a slowArgs2) (toolbus.Result, error) {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for i := 1; i <= a.Steps; i++ {
				select {
				case <-ctx.Done():
					n.once.Do(func() { close(n.stopped) })
					return toolbus.Result{}, ctx.Err()
				case <-tick.C:
					c.Progress(fmt.Sprintf("step %d of %d", i, a.Steps))
				}
			}
			return toolbus.TextResult("read"), nil
		},
	})
	return []*toolbus.Tool{write, slow}
}

// serveWorld is a node hosting the notes tools (and todo, a built-in category), an
// agent profile, and an MCP server of the bus for that agent.
type serveWorld struct {
	node  *node.Node
	cl    *client.Client
	notes *notes
	srv   *mcp.Server
	log   *bustest.Buffer // what the node and the server logged
}

func startServeWorld(t *testing.T, profile string, cfg mcp.ServeConfig) *serveWorld {
	t.Helper()
	return startServeWorldTurns(t, profile, cfg, false)
}

// startServeWorldTurns is startServeWorld whose node runs turns (turns true): the bus
// keeps turn records and transcripts, where an MCP session's turn is recorded.
func startServeWorldTurns(t *testing.T, profile string, cfg mcp.ServeConfig, turns bool) *serveWorld {
	t.Helper()
	log, logged := bustest.LoggerBuffer(t, slog.LevelInfo)
	w := &serveWorld{notes: &notes{}, log: logged}
	n, err := node.Start(bustest.Context(t), node.Config{
		Bus:   server.Config{StoreDir: t.TempDir(), Logger: log},
		Node:  node.NodeConfig{Categories: []string{"todo"}, Logger: log, Turns: turns},
		Tools: w.notes.tools(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	nc, err := n.Connect("mcp")
	if err != nil {
		t.Fatal(err)
	}
	w.node, w.cl = n, client.New(nc, client.OwnConn(), client.Logger(log))
	t.Cleanup(w.cl.Close)
	ctx := bustest.Context(t)
	if profile != "" {
		ps, err := w.cl.Profiles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ps.Put(ctx, []byte(profile)); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Client, cfg.Logger = w.cl, log
	if cfg.Agent == "" {
		cfg.Agent = "ann"
	}
	w.srv, err = mcp.NewServer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.srv.Close)
	return w
}

// connect is an MCP client (the go-sdk's) of the world's server, over in-memory
// transports.
func (w *serveWorld) connect(t *testing.T, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	ctx := bustest.Context(t)
	ct, st := sdk.NewInMemoryTransports()
	ss, err := w.srv.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func toolNames(t *testing.T, cs *sdk.ClientSession) map[string]*sdk.Tool {
	t.Helper()
	out := map[string]*sdk.Tool{}
	for tool, err := range cs.Tools(bustest.Context(t), nil) {
		if err != nil {
			t.Fatal(err)
		}
		out[tool.Name] = tool
	}
	return out
}

func resultText(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

const annProfile = `{"version": 2, "agent": "ann", "namespaces": [{"name": "notes"}]}`

// TestMCPServeListsProfileTools: the tools the agent's profile gives its turns, named
// namespace__tool, with their schemas and annotations; another agent's profile and a
// namespace filter serve others; a category that starts later reaches the client as
// notifications/tools/list_changed.
func TestMCPServeListsProfileTools(t *testing.T) {
	t.Parallel()
	changed := make(chan struct{}, 8)
	w := startServeWorld(t, annProfile, mcp.ServeConfig{})
	cs := w.connect(t, &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}})
	tools := toolNames(t, cs)
	for _, want := range []string{"notes__write_note", "notes__slow_read", "todo_read", "todo_write"} {
		if tools[want] == nil {
			t.Errorf("tools %v lack %s", slices.Collect(mapsKeys(tools)), want)
		}
	}
	wn, sr := tools["notes__write_note"], tools["notes__slow_read"]
	if wn != nil && (wn.Annotations.ReadOnlyHint || wn.Annotations.DestructiveHint == nil || !*wn.Annotations.DestructiveHint || wn.Description != "Write a note.") {
		t.Errorf("write_note: %+v", wn.Annotations)
	}
	if sr != nil && (!sr.Annotations.ReadOnlyHint || !sr.Annotations.IdempotentHint) {
		t.Errorf("slow_read: %+v", sr.Annotations)
	}
	if wn != nil {
		b, _ := json.Marshal(wn.InputSchema)
		if !strings.Contains(string(b), `"title":{"description":"the note's title","type":"string"}`) {
			t.Errorf("write_note's schema: %s", b)
		}
	}

	// Another agent, no profile: built-in tools only. A namespace filter: notes only.
	bob := startServeWorld(t, "", mcp.ServeConfig{Agent: "bob"})
	if got := toolNames(t, bob.connect(t, nil)); got["notes__write_note"] != nil || got["todo_read"] == nil {
		t.Errorf("bob's tools: %v", slices.Collect(mapsKeys(got)))
	}
	only := startServeWorld(t, annProfile, mcp.ServeConfig{Namespaces: []string{"notes"}})
	if got := toolNames(t, only.connect(t, nil)); len(got) != 2 || got["notes__write_note"] == nil {
		t.Errorf("namespace notes only: %v", slices.Collect(mapsKeys(got)))
	}

	// A host of the namespace starts: the client is told, and lists it.
	extra := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "count_notes", Description: "Count.", Category: "notes-extra", Namespace: "notes", ReadOnly: true},
		Execute: func(ctx context.Context, c toolbus.Call, a struct{}) (toolbus.Result, error) {
			return toolbus.TextResult("3"), nil
		},
	})
	if err := w.node.Host(bustest.Context(t), "notes-extra", []*toolbus.Tool{extra}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(wait):
		t.Fatal("no notifications/tools/list_changed after a category started")
	}
	bustest.CheckFor(t, wait, 20*time.Millisecond, func() error {
		if toolNames(t, cs)["notes__count_notes"] == nil {
			return errors.New("count_notes is not listed")
		}
		return nil
	})
}

func mapsKeys(m map[string]*sdk.Tool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestMCPServeCallValidatesAndRepairs: arguments the schema refuses never reach the
// tool (the client gets each problem); arguments the ladder repairs (a JSON array sent
// as a string) run; the result comes back as text and structured content, and the
// call is on the bus like any other.
func TestMCPServeCallValidatesAndRepairs(t *testing.T) {
	t.Parallel()
	w := startServeWorld(t, annProfile, mcp.ServeConfig{})
	cs := w.connect(t, nil)
	ctx := bustest.Context(t)

	nc, err := w.node.Connect("watch")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	started, err := nc.SubscribeSync(bus.EventSubject("*", "*", bus.EventStarted))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"tags": []string{"a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsError || !strings.Contains(resultText(r), "invalid arguments for write_note") || !strings.Contains(resultText(r), "title") || w.notes.writes.Load() != 0 {
		t.Errorf("missing title: error %v, %q, %d writes", r.IsError, resultText(r), w.notes.writes.Load())
	}

	r, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"title": "plan", "tags": `["x", "y"]`}})
	if err != nil {
		t.Fatal(err)
	}
	if r.IsError || resultText(r) != "saved plan [x,y]" {
		t.Fatalf("repaired call: error %v, %q", r.IsError, resultText(r))
	}
	if b, _ := json.Marshal(r.StructuredContent); string(b) != `{"tags":["x","y"],"title":"plan"}` {
		t.Errorf("structured content %s", b)
	}
	m, err := started.NextMsg(wait)
	if err != nil {
		t.Fatalf("the call is not on the bus: %v", err)
	}
	var ev bus.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Tool != "write_note" ||
		ev.Turn != r.Meta[mcp.MetaTurn] || ev.Call != r.Meta[mcp.MetaCall] {
		t.Errorf("started event %s; the result's _meta %v", m.Data, r.Meta)
	}
}

// TestMCPServeHeldCallWaitsForApproval: the profile holds destructive calls; the MCP
// call waits until `toolbus approve` (client.Approve) grants it, and a refusal comes
// back as an error result; a server that may not wait refuses at once, saying why.
func TestMCPServeHeldCallWaitsForApproval(t *testing.T) {
	t.Parallel()
	profile := `{"version": 2, "agent": "ann", "namespaces": [{"name": "notes"}], "approvals": "destructive"}`
	w := startServeWorld(t, profile, mcp.ServeConfig{})
	ctx := bustest.Context(t)
	var progress []string
	var mu sync.Mutex
	cs := w.connect(t, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		progress = append(progress, req.Params.Message)
		mu.Unlock()
	}})
	nc, err := w.node.Connect("operator")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	requests, err := nc.SubscribeSync(bus.AllApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	for _, decision := range []string{bus.ApprovalGrant, bus.ApprovalRefuse} {
		type result struct {
			r   *sdk.CallToolResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			params := &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"title": decision}}
			params.SetProgressToken("held-" + decision)
			r, err := cs.CallTool(ctx, params)
			done <- result{r, err}
		}()
		m, err := requests.NextMsg(wait)
		if err != nil {
			t.Fatalf("no approval request: %v", err)
		}
		var req bus.ApprovalRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Fatal(err)
		}
		select {
		case res := <-done:
			t.Fatalf("the held call ended before a decision: %+v %v", res.r, res.err)
		default:
		}
		if w.notes.writes.Load() != 0 && decision == bus.ApprovalGrant {
			t.Fatal("the tool ran before it was approved")
		}
		// As `toolbus approve` does: ask, then decide for these arguments.
		asked, err := w.cl.Approve(ctx, req.Turn, req.Call, bus.Approval{})
		if err != nil || asked.Request.ArgsHash != req.ArgsHash || !strings.Contains(string(asked.Request.Args), decision) {
			t.Fatalf("ask: %+v %v", asked, err)
		}
		if _, err := w.cl.Approve(ctx, req.Turn, req.Call, bus.Approval{Decision: decision, ArgsHash: req.ArgsHash, By: "tester", Reason: "no"}); err != nil {
			t.Fatal(err)
		}
		res := <-done
		if res.err != nil {
			t.Fatal(res.err)
		}
		switch decision {
		case bus.ApprovalGrant:
			if res.r.IsError || resultText(res.r) != "saved approve []" || w.notes.writes.Load() != 1 {
				t.Errorf("approved: %v %q", res.r.IsError, resultText(res.r))
			}
		case bus.ApprovalRefuse:
			if !res.r.IsError || resultText(res.r) != "call refused by tester before it ran: no" || w.notes.writes.Load() != 1 {
				t.Errorf("refused: %v %q, %d writes", res.r.IsError, resultText(res.r), w.notes.writes.Load())
			}
		}
	}
	mu.Lock()
	if len(progress) == 0 || !strings.HasPrefix(progress[0], "waiting for approval: toolbus approve ") {
		t.Errorf("progress while held: %q", progress)
	}
	mu.Unlock()

	// A server that may not wait says so at once.
	nowait := startServeWorld(t, profile, mcp.ServeConfig{ApprovalWait: -1})
	r, err := nowait.connect(t, nil).CallTool(ctx, &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"title": "x"}})
	if err != nil || !r.IsError || !strings.Contains(resultText(r), "needs a person's approval") || nowait.notes.writes.Load() != 0 {
		t.Errorf("no wait: %v %+v %q", err, r, resultText(r))
	}

	// As an operator, whom the bus refuses approval requests: refused at once, saying
	// why, not after the whole wait.
	ops, err := server.RolePermissions(server.RoleOperator, "ops", nil)
	if err != nil {
		t.Fatal(err)
	}
	log := bustest.Logger(t, slog.LevelInfo)
	secured := &notes{}
	n, err := node.Start(ctx, node.Config{
		Bus: server.Config{StoreDir: t.TempDir(), Logger: log, Listen: "127.0.0.1:-1",
			Users: []server.User{{Name: "ops", Password: "ops-pw-77", Role: server.RoleOperator, Permissions: ops}}},
		Node:  node.NodeConfig{Categories: []string{}, Logger: log},
		Tools: secured.tools(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	cl, err := client.Dial(ctx, n.Server().ClientURL(), "mcp-as-ops", bus.Credentials{User: "ops", Password: "ops-pw-77"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ps, err := cl.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Put(ctx, []byte(profile)); err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.NewServer(ctx, mcp.ServeConfig{Client: cl, Agent: "ann", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	w2 := &serveWorld{node: n, cl: cl, notes: secured, srv: srv}
	start := time.Now()
	r, err = w2.connect(t, nil).CallTool(ctx, &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"title": "x"}})
	if err != nil || !r.IsError || !strings.Contains(resultText(r), "Permissions Violation") || !strings.Contains(resultText(r), "an operator may not") ||
		time.Since(start) > mcp.DefaultApprovalWait/2 || secured.writes.Load() != 0 {
		t.Errorf("as an operator, after %s: %v %q", time.Since(start), err, resultText(r))
	}
}

// TestMCPServeCancelAborts: the client cancels a running call (notifications/cancelled);
// the call's host sees its context end, while another call of the same session, under
// the session's one turn, runs on to its end.
func TestMCPServeCancelAborts(t *testing.T) {
	t.Parallel()
	w := startServeWorld(t, annProfile, mcp.ServeConfig{})
	ctx := bustest.Context(t)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs := w.connect(t, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
		if req.Params.ProgressToken == "doomed" {
			cancel() // it runs: cancel it
		}
	}})
	nc, err := w.node.Connect("watch")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	started, err := nc.SubscribeSync(bus.EventSubject("*", "*", bus.EventStarted))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// A sibling that outlives the cancelled call: 40 steps of 50 ms.
	sibling := make(chan *sdk.CallToolResult, 1)
	go func() {
		r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__slow_read", Arguments: map[string]any{"steps": 40}})
		if err != nil {
			t.Error(err)
		}
		sibling <- r
	}()
	params := &sdk.CallToolParams{Name: "notes__slow_read", Arguments: map[string]any{"steps": 100000}}
	params.SetProgressToken("doomed")
	start := time.Now()
	_, err = cs.CallTool(cctx, params)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
	select {
	case <-w.notes.stopped:
	case <-time.After(wait):
		t.Fatalf("the tool never saw the cancellation (%s since the call)", time.Since(start))
	}
	select {
	case r := <-sibling:
		if r == nil || r.IsError || resultText(r) != "read" {
			t.Errorf("the sibling call: %+v", r)
		}
	case <-time.After(wait):
		t.Fatal("the sibling call did not end")
	}
	var turns []string
	for range 2 {
		m, err := started.NextMsg(wait)
		if err != nil {
			t.Fatal(err)
		}
		var ev bus.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		turns = append(turns, ev.Turn)
	}
	if turns[0] != turns[1] {
		t.Errorf("the session's calls went under turns %q", turns)
	}
}

// TestMCPServeProgress: the host's progress events reach the client as progress
// notifications, in order.
func TestMCPServeProgress(t *testing.T) {
	t.Parallel()
	w := startServeWorld(t, annProfile, mcp.ServeConfig{})
	var mu sync.Mutex
	var got []string
	cs := w.connect(t, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, req.Params.Message)
		mu.Unlock()
	}})
	params := &sdk.CallToolParams{Name: "notes__slow_read", Arguments: map[string]any{"steps": 4}}
	params.SetProgressToken(7)
	r, err := cs.CallTool(bustest.Context(t), params)
	if err != nil || r.IsError {
		t.Fatalf("%v %+v", err, r)
	}
	bustest.CheckFor(t, wait, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		// The last event may trail the result.
		if len(got) < 3 {
			return fmt.Errorf("progress %q, want at least 3", got)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if got[0] != "step 1 of 4" || got[1] != "step 2 of 4" {
		t.Errorf("progress %q", got)
	}
}

// TestMCPServeHTTPNeedsToken: over streamable HTTP, a request without the bearer
// token is refused with 401, one with it is served; an address off loopback without
// a token is refused before anything listens.
func TestMCPServeHTTPNeedsToken(t *testing.T) {
	t.Parallel()
	w := startServeWorld(t, annProfile, mcp.ServeConfig{})
	hs := httptest.NewServer(w.srv.Handler("s3cret-token"))
	t.Cleanup(hs.Close)
	ctx := bustest.Context(t)
	impl := &sdk.Implementation{Name: "http-client", Version: "1"}

	_, err := sdk.NewClient(impl, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL, MaxRetries: -1}, nil)
	if err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("no token: %v", err)
	}
	bad := &http.Client{Transport: bearer{"wrong", http.DefaultTransport}}
	if _, err := sdk.NewClient(impl, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: bad, MaxRetries: -1}, nil); err == nil {
		t.Error("a wrong token was let in")
	}
	good := &http.Client{Transport: bearer{"s3cret-token", http.DefaultTransport}}
	cs, err := sdk.NewClient(impl, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: good, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"title": "over http"}})
	if err != nil || r.IsError || resultText(r) != "saved over http []" {
		t.Errorf("call over HTTP: %v %+v", err, r)
	}

	for addr, ok := range map[string]bool{"127.0.0.1:7331": true, "localhost:7331": true, "[::1]:7331": true, "0.0.0.0:7331": false, "192.0.2.1:7331": false} {
		err := mcp.CheckListen(addr, false)
		if ok != (err == nil) || (!ok && !errors.Is(err, mcp.ErrNeedsToken)) {
			t.Errorf("CheckListen(%s) = %v", addr, err)
		}
		if err := mcp.CheckListen(addr, true); err != nil {
			t.Errorf("CheckListen(%s, token) = %v", addr, err)
		}
	}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// startQuietHost serves quiet.hush, which answers "shh", from a micro service as a host
// publishes it, without the host's announcement on toolbus.catalog.changed.
func startQuietHost(t *testing.T, w *serveWorld) {
	t.Helper()
	nc, err := w.node.Connect("quiet-host")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := micro.AddService(nc, micro.Config{Name: bus.CategoryService("quiet"), Version: "0.1.0", QueueGroup: bus.CategoryQueue("quiet")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	hush := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "hush", Description: "Say nothing.", Category: "quiet", Namespace: "quiet", ReadOnly: true},
		Execute: func(context.Context, toolbus.Call, struct{}) (toolbus.Result, error) {
			return toolbus.Result{}, nil
		},
	})
	reply, _ := json.Marshal(bus.ToolReply{Tool: "hush", Outcome: bus.OutcomeOK, Content: []bus.ContentPart{{Type: bus.ContentText, Text: "shh"}}})
	if err := svc.AddEndpoint("hush", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(reply) }),
		micro.WithEndpointSubject(bus.ToolSubject("quiet", "hush")), micro.WithEndpointMetadata(catalog.Metadata(&hush.Spec))); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the server has its subscriptions, as a host's Start makes sure
		t.Fatal(err)
	}
}

// quietProfile gives ann the quiet namespace (startQuietHost).
const quietProfile = `{"version": 2, "agent": "ann", "namespaces": [{"name": "quiet"}]}`

// TestMCPServeRefreshesWithoutAnnouncement: a host that never announced itself (it
// came up while the first read of the catalog missed it, or announces nothing) is
// served once the server reads the catalog again on its own (ServeConfig.Refresh).
func TestMCPServeRefreshesWithoutAnnouncement(t *testing.T) {
	t.Parallel()
	w := startServeWorld(t, quietProfile, mcp.ServeConfig{Refresh: 100 * time.Millisecond})
	cs := w.connect(t, nil)
	if toolNames(t, cs)["quiet__hush"] != nil {
		t.Fatal("hush is served before its host started")
	}
	startQuietHost(t, w)
	bustest.CheckFor(t, wait, 50*time.Millisecond, func() error {
		if names := toolNames(t, cs); names["quiet__hush"] == nil {
			return fmt.Errorf("hush is not served: %v", slices.Collect(mapsKeys(names)))
		}
		return nil
	})
}

// TestMCPServeFindsAToolOnItsFirstCall: a call of a tool the server does not serve yet
// reads the catalog again before it is answered: a host that started a moment ago, and
// whose announcement the server did not hear, is found by the call that wants it (no
// backstop refresh here), not refused as an unknown tool.
func TestMCPServeFindsAToolOnItsFirstCall(t *testing.T) {
	t.Parallel()
	w := startServeWorld(t, quietProfile, mcp.ServeConfig{Refresh: -1})
	cs := w.connect(t, nil)
	ctx := bustest.Context(t)
	if toolNames(t, cs)["quiet__hush"] != nil {
		t.Fatal("hush is served before its host started")
	}
	startQuietHost(t, w)
	// Calls, not a wait for the list: only a call reads the catalog here. The first
	// finds the tool; under heavy load (the whole suite run twice at once) the read of
	// the catalog it made missed the host's answer once, and a call a second later
	// (the bound on such reads) found it.
	var res *sdk.CallToolResult
	bustest.CheckFor(t, wait, 100*time.Millisecond, func() error {
		var err error
		res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "quiet__hush", Arguments: map[string]any{}})
		if err != nil || res.IsError || len(res.Content) == 0 {
			return fmt.Errorf("a call after its host started: %+v, %v", res, err)
		}
		return nil
	})
	if text, ok := res.Content[0].(*sdk.TextContent); !ok || text.Text != "shh" {
		t.Errorf("content %+v, want the host's answer", res.Content[0])
	}
}
