package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/console"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/node"
)

// TestMCPServeSessionIsATurn: an MCP session owns a turn recorded like any other: kind
// mcp, its agent, running while the session lives, listed by `toolbus turns`
// (client.Turns) and the console with its calls (the transcript: each call as the
// client sent it and its output as the client got it), and its statuses on the bus.
// When the client ends the session, the record says completed; when toolbus mcp stops
// with a session open, aborted. `toolbus resume` refuses it: no node can run it.
func TestMCPServeSessionIsATurn(t *testing.T) {
	t.Parallel()
	w := startServeWorldTurns(t, annProfile, mcp.ServeConfig{}, true)
	ctx := bustest.Context(t)
	nc, err := w.node.Connect("watch")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	statuses, err := nc.SubscribeSync(bus.TurnStatusSubject("*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	con, err := console.Start(console.Config{Addr: "127.0.0.1:0", Client: w.cl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })

	cs := w.connect(t, nil)
	ok, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"title": "plan"}})
	if err != nil || ok.IsError {
		t.Fatalf("call: %v %+v", err, ok)
	}
	bad, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"tags": []string{"a"}}})
	if err != nil || !bad.IsError {
		t.Fatalf("invalid call: %v %+v", err, bad)
	}
	turn, _ := ok.Meta[mcp.MetaTurn].(string)
	if turn == "" || bad.Meta[mcp.MetaTurn] != turn {
		t.Fatalf("the calls' turns: %v, %v", ok.Meta, bad.Meta)
	}

	// Listed while the session lives, with its calls.
	bustest.CheckFor(t, wait, 20*time.Millisecond, func() error {
		rec, err := listed(ctx, w.cl, turn)
		switch {
		case err != nil:
			return err
		case rec.Spec.Kind != bus.TurnMCP || rec.Spec.Agent != "ann" || rec.State != bus.TurnRunning ||
			!strings.HasPrefix(rec.Owner, "toolbus-mcp@") || rec.Step != 2 || !strings.Contains(rec.Spec.Input, "test-client 1"):
			return fmt.Errorf("record %+v", rec)
		}
		return nil
	})
	items, err := w.cl.Transcript(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range items {
		switch it.Kind {
		case toolbus.KindMessage:
			got = append(got, "message")
		case toolbus.KindFunctionCall:
			got = append(got, fmt.Sprintf("call %s.%s %s", it.Namespace, it.Name, it.Arguments))
		case toolbus.KindCallOutput:
			got = append(got, fmt.Sprintf("output error=%v %.32s", it.IsError, toolbus.Result{Content: it.Output}.Text()))
		}
	}
	want := []string{
		"message",
		`call notes.write_note {"title":"plan"}`,
		"output error=false saved plan []",
		`call notes.write_note {"tags":["a"]}`,
		"output error=true invalid arguments for write_note",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("transcript:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if items[1].CallID != ok.Meta[mcp.MetaCall] {
		t.Errorf("the transcript's call %s, the result's %v", items[1].CallID, ok.Meta[mcp.MetaCall])
	}

	// The console lists it with its two calls, and shows them.
	var rows []struct {
		ID    string `json:"turn_id"`
		Kind  string `json:"kind"`
		State string `json:"state"`
		Calls *int   `json:"calls"`
	}
	getJSON(t, con.URL()+"api/turns", &rows)
	found := false
	for _, r := range rows {
		if r.ID == turn {
			found = true
			if r.Kind != "mcp" || r.State != "running" || r.Calls == nil || *r.Calls != 2 {
				t.Errorf("console row %+v (calls %v)", r, r.Calls)
			}
		}
	}
	if !found {
		t.Errorf("the console's turns %+v lack %s", rows, turn)
	}
	var view struct {
		Items []struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"items"`
	}
	getJSON(t, con.URL()+"api/turn?id="+turn, &view)
	if len(view.Items) != 5 || view.Items[1].Kind != "function_call" || view.Items[1].Name != "write_note" {
		t.Errorf("the console's turn: %+v", view.Items)
	}

	// No node can run it, and its process beats: resume refuses, having listened for
	// longer than the 50 ms asked (a beat comes every 5 s).
	if _, err := w.cl.Resume(ctx, turn, 50*time.Millisecond); !errors.Is(err, client.ErrNotLost) || !strings.Contains(err.Error(), "MCP client") {
		t.Errorf("resume: %v", err)
	}

	// The client ends the session: so does its turn, completed.
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, wait, 20*time.Millisecond, func() error {
		rec, err := listed(ctx, w.cl, turn)
		if err == nil && (rec.State != bus.TurnCompleted || rec.Step != 2 || rec.Error != "") {
			err = fmt.Errorf("record after the session: %+v", rec)
		}
		return err
	})
	kinds := map[string]bus.TurnStatus{}
	for kinds[bus.StatusDone].Turn == "" { // beats come between the others
		m, err := statuses.NextMsg(wait)
		if err != nil {
			t.Fatalf("statuses %v: %v", kinds, err)
		}
		var st bus.TurnStatus
		if err := json.Unmarshal(m.Data, &st); err != nil {
			t.Fatal(err)
		}
		kinds[m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]] = st
	}
	if done := kinds[bus.StatusDone]; done.Turn != turn || done.State != bus.TurnCompleted || done.Kind != bus.TurnMCP || len(done.Calls) != 2 ||
		done.Calls[0].Outcome != bus.OutcomeOK || done.Calls[1].Outcome != bus.OutcomeInvalid {
		t.Errorf("done status %+v", done)
	}
	// The session beat for the resume above to hear it: its process lives.
	if started, beat := kinds[bus.StatusStarted], kinds[bus.StatusBeat]; started.Lease != bus.SessionLease || beat.Lease != bus.SessionLease ||
		beat.Turn != turn || beat.State != bus.TurnRunning || beat.Kind != bus.TurnMCP {
		t.Errorf("started %+v, beat %+v", started, beat)
	}

	// Served by Run (stdio's path): the client going ends the turn completed; Run's
	// context ending (toolbus mcp told to stop), aborted.
	for _, byServer := range []bool{false, true} {
		rctx, cancel := context.WithCancel(ctx)
		ct, st := sdk.NewInMemoryTransports()
		ran := make(chan error, 1)
		go func() { ran <- w.srv.Run(rctx, st) }()
		rcs, err := sdk.NewClient(&sdk.Implementation{Name: "stdio-client", Version: "2"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		r, err := rcs.CallTool(ctx, &sdk.CallToolParams{Name: "todo_read", Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		id, _ := r.Meta[mcp.MetaTurn].(string)
		want := bus.TurnCompleted
		if byServer {
			want = bus.TurnAborted
			cancel()
		} else {
			_ = rcs.Close()
		}
		select {
		case <-ran:
		case <-time.After(wait):
			t.Fatal("Run did not return")
		}
		bustest.CheckFor(t, wait, 20*time.Millisecond, func() error {
			rec, err := listed(ctx, w.cl, id)
			if err == nil && (rec.State != want || rec.Step != 1 || !strings.Contains(rec.Spec.Input, "stdio-client 2")) {
				err = fmt.Errorf("stopped by the server %v: record %+v", byServer, rec)
			}
			return err
		})
		cancel()
		_ = rcs.Close()
	}

	// toolbus mcp stops with a session open: its turn is aborted, saying why.
	cs2 := w.connect(t, nil)
	r, err := cs2.CallTool(ctx, &sdk.CallToolParams{Name: "todo_read", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	second, _ := r.Meta[mcp.MetaTurn].(string)
	if second == "" || second == turn {
		t.Fatalf("the second session's turn %q (the first's %s)", second, turn)
	}
	w.srv.Close()
	rec, err := w.cl.Record(ctx, second)
	if err != nil || rec == nil || rec.State != bus.TurnAborted || !strings.Contains(rec.Error, "toolbus mcp stopped") || rec.Step != 1 {
		t.Errorf("the open session's record after Close: %+v %v", rec, err)
	}
}

// listed is turn's record as `toolbus turns` lists it.
func listed(ctx context.Context, cl *client.Client, turn string) (bus.TurnRecord, error) {
	recs, err := cl.Turns(ctx)
	if err != nil {
		return bus.TurnRecord{}, err
	}
	for _, r := range recs {
		if r.Spec.ID == turn {
			return r, nil
		}
	}
	return bus.TurnRecord{}, fmt.Errorf("turn %s is not listed (%d turns)", turn, len(recs))
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestMCPServeAsTurnUser: toolbus mcp on a secured bus as a user of the turn role, the
// role it needs (it owns turns, as a node that runs them): a held call waits for an
// operator's `toolbus approve` and then runs, and the session's turn is recorded; the
// operator, who approves, reads it in `toolbus turns`.
func TestMCPServeAsTurnUser(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	log := bustest.Logger(t, slog.LevelInfo)
	turnPerm, err := server.RolePermissions(server.RoleTurn, "mcpu", nil)
	if err != nil {
		t.Fatal(err)
	}
	opsPerm, err := server.RolePermissions(server.RoleOperator, "ops", nil)
	if err != nil {
		t.Fatal(err)
	}
	secured := &notes{}
	n, err := node.Start(ctx, node.Config{
		Bus: server.Config{StoreDir: t.TempDir(), Logger: log, Listen: "127.0.0.1:-1", Users: []server.User{
			{Name: "mcpu", Password: "mcp-pw-31", Role: server.RoleTurn, Permissions: turnPerm},
			{Name: "ops", Password: "ops-pw-77", Role: server.RoleOperator, Permissions: opsPerm},
		}},
		Node:  node.NodeConfig{Categories: []string{}, Turns: true, Logger: log},
		Tools: secured.tools(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	dial := func(user, pw string) *client.Client {
		cl, err := client.Dial(ctx, n.Server().ClientURL(), "test-"+user, bus.Credentials{User: user, Password: pw})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	as, ops := dial("mcpu", "mcp-pw-31"), dial("ops", "ops-pw-77")
	ps, err := ops.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Put(ctx, []byte(`{"version": 2, "agent": "ann", "namespaces": [{"name": "notes"}], "approvals": "destructive"}`)); err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.NewServer(ctx, mcp.ServeConfig{Client: as, Agent: "ann", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	w := &serveWorld{node: n, cl: as, notes: secured, srv: srv}
	cs := w.connect(t, nil)

	// The operator sees the approval request, as `toolbus approve` and the console do.
	requests, err := ops.Conn().SubscribeSync(bus.AllApprovals)
	if err != nil {
		t.Fatal(err)
	}
	if err := ops.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	done := make(chan *sdk.CallToolResult, 1)
	go func() {
		r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"title": "held"}})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	m, err := requests.NextMsg(wait)
	if err != nil {
		t.Fatalf("no approval request: %v", err)
	}
	var req bus.ApprovalRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		t.Fatal(err)
	}
	if secured.writes.Load() != 0 {
		t.Fatal("the tool ran before it was approved")
	}
	if _, err := ops.Approve(ctx, req.Turn, req.Call, bus.Approval{Decision: bus.ApprovalGrant, ArgsHash: req.ArgsHash, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	var r *sdk.CallToolResult
	select {
	case r = <-done:
	case <-time.After(wait):
		t.Fatal("the approved call did not end")
	}
	if r == nil || r.IsError || resultText(r) != "saved held []" || secured.writes.Load() != 1 {
		t.Fatalf("approved call: %+v %q", r, resultText(r))
	}
	bustest.CheckFor(t, wait, 20*time.Millisecond, func() error {
		rec, err := listed(ctx, ops, req.Turn)
		if err == nil && (rec.Spec.Kind != bus.TurnMCP || rec.Step != 1) {
			err = fmt.Errorf("record %+v", rec)
		}
		if err == nil {
			items, terr := ops.Transcript(ctx, req.Turn)
			if terr != nil || len(items) != 3 || items[1].CallID != req.Call || items[2].IsError {
				err = fmt.Errorf("transcript %+v %v", items, terr)
			}
		}
		return err
	})

	// As an operator, whom the bus refuses writes of turn records: the calls run, the
	// session is not recorded, and the refusal is heard at once, not after the write's
	// patience (Close would wait for it).
	opsSrv, err := mcp.NewServer(ctx, mcp.ServeConfig{Client: dial("ops", "ops-pw-77"), Agent: "ann", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(opsSrv.Close)
	ow := &serveWorld{node: n, cl: ops, notes: secured, srv: opsSrv}
	r, err = ow.connect(t, nil).CallTool(ctx, &sdk.CallToolParams{Name: "notes__slow_read", Arguments: map[string]any{"steps": 1}})
	if err != nil || r.IsError || resultText(r) != "read" {
		t.Fatalf("as an operator: %v %+v", err, r)
	}
	start := time.Now()
	opsSrv.Close()
	if took := time.Since(start); took > 7*time.Second {
		t.Errorf("Close took %s: the refused record was waited out", took)
	}
	if rec, err := ops.Record(ctx, r.Meta[mcp.MetaTurn].(string)); err != nil || rec != nil {
		t.Errorf("an operator's session has a record: %+v %v", rec, err)
	}
}

// TestMCPSessionEndedByAnother: a session whose record another ended (toolbus resume,
// taking it for lost while its process was paused or cut off) stops beating at its next
// write, which is refused, and its own end neither changes the record nor goes out as a
// done status that would contradict it.
func TestMCPSessionEndedByAnother(t *testing.T) {
	t.Parallel()
	w := startServeWorldTurns(t, annProfile, mcp.ServeConfig{}, true)
	ctx := bustest.Context(t)
	nc, err := w.node.Connect("watch")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cs := w.connect(t, nil)
	ok, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"title": "plan"}})
	if err != nil || ok.IsError {
		t.Fatalf("call: %v %+v", err, ok)
	}
	turn, _ := ok.Meta[mcp.MetaTurn].(string)
	statuses, err := nc.SubscribeSync(bus.TurnStatusSubject(turn, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var rec bus.TurnRecord
	bustest.CheckFor(t, wait, 20*time.Millisecond, func() error {
		rec, err = listed(ctx, w.cl, turn)
		if err == nil && rec.Step != 1 {
			err = fmt.Errorf("record %+v", rec)
		}
		return err
	})
	store, err := durable.Open(ctx, bustest.JetStream(t, w.node.Server(), "resume"), durable.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.EndLostSession(ctx, turn, rec.Owner, "taken for lost"); err != nil {
		t.Fatal(err)
	}
	// The next call's record is refused: the session stops beating; its calls go on.
	again, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "notes__write_note", Arguments: map[string]any{"title": "again"}})
	if err != nil || again.IsError {
		t.Fatalf("call after the end: %v %+v", err, again)
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, wait, 20*time.Millisecond, func() error {
		if !strings.Contains(w.log.String(), "its own end is not recorded") {
			return errors.New("the session has not ended yet")
		}
		return nil
	})
	for {
		m, err := statuses.NextMsg(10 * time.Millisecond)
		if err != nil {
			break
		}
		if strings.HasSuffix(m.Subject, "."+bus.StatusDone) {
			t.Errorf("a done status after the record's end by another: %s", m.Data)
		}
	}
	if after, err := listed(ctx, w.cl, turn); err != nil || after.State != bus.TurnFailed || after.Error != "taken for lost" || after.Stored != 4 {
		t.Errorf("record %+v %v", after, err)
	}
}
