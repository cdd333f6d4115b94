package mcp_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/mcp"
)

// TestMCPHTTPSessionIdleCloses: an HTTP client that goes away without DELETE (the
// wire's own messages, no SDK client to say goodbye) has its session closed once it
// has sent nothing for SessionIdle, and its turn ended as aborted saying so; its next
// request gets 404. A session with a call in flight for longer than that is not idle:
// its call completes, and the session is closed only after.
func TestMCPHTTPSessionIdleCloses(t *testing.T) {
	t.Parallel()
	// 1.5 s: with 400 ms, a session was closed between its initialize and its next
	// request under heavy load (the whole suite run twice at once), a client's requests
	// a moment apart.
	const idle = 1500 * time.Millisecond
	w := startServeWorldTurns(t, annProfile, mcp.ServeConfig{SessionIdle: idle}, true)
	hs := httptest.NewServer(w.srv.Handler(""))
	t.Cleanup(hs.Close)
	ctx := bustest.Context(t)

	gone := newRawMCP(t, hs.URL)
	res := gone.call(t, "tools/call", map[string]any{"name": "todo_read", "arguments": map[string]any{}})
	goneTurn := metaTurn(t, res)

	// A call of 40 steps of 50 ms: two seconds, more than the idle time, in flight.
	busy := newRawMCP(t, hs.URL)
	slow := make(chan json.RawMessage, 1)
	go func() {
		slow <- busy.call(t, "tools/call", map[string]any{"name": "notes__slow_read", "arguments": map[string]any{"steps": 40}})
	}()

	bustest.CheckFor(t, wait, 20*time.Millisecond, func() error {
		rec, err := w.cl.Record(ctx, goneTurn)
		switch {
		case err != nil:
			return err
		case rec == nil || rec.State != bus.TurnAborted:
			return fmt.Errorf("record %+v", rec)
		case !strings.Contains(rec.Error, "sent no request for 1.5s") || rec.Step != 1:
			return fmt.Errorf("record's error %q, step %d", rec.Error, rec.Step)
		}
		return nil
	})
	if code := gone.status(t, "tools/list", map[string]any{}); code != http.StatusNotFound {
		t.Errorf("a request of the closed session: %d, want 404", code)
	}

	var busyTurn string
	select {
	case r := <-slow:
		var out struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal(r, &out); err != nil || out.IsError || len(out.Content) == 0 || out.Content[0].Text != "read" {
			t.Fatalf("the busy session's call: %s (%v)", r, err)
		}
		busyTurn = metaTurn(t, r)
	case <-time.After(wait):
		t.Fatal("the busy session's call did not return")
	}
	// Open until its call returned, then idle in its turn: closed in its turn.
	rec, err := w.cl.Record(ctx, busyTurn)
	if err != nil || rec == nil || rec.State != bus.TurnRunning {
		t.Errorf("the busy session's record as its call returned: %+v %v", rec, err)
	}
	bustest.CheckFor(t, wait, 20*time.Millisecond, func() error {
		rec, err := w.cl.Record(ctx, busyTurn)
		if err == nil && (rec == nil || rec.State != bus.TurnAborted || rec.Step != 1) {
			err = fmt.Errorf("the busy session's record: %+v", rec)
		}
		return err
	})
	if !strings.Contains(w.log.String(), "mcp session closed: idle") {
		t.Errorf("log:\n%s", w.log.String())
	}
}

// metaTurn is the turn a tools/call result names in its _meta.
func metaTurn(t *testing.T, res json.RawMessage) string {
	t.Helper()
	var r struct {
		Meta map[string]any `json:"_meta"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatal(err)
	}
	turn, _ := r.Meta[mcp.MetaTurn].(string)
	if turn == "" {
		t.Fatalf("no turn in %s", res)
	}
	return turn
}

// rawMCP is an MCP client over streamable HTTP written from the wire's messages
// (MCP specification 2025-06-18, "Transports"): it initializes, then posts requests
// with the session's id, and never sends DELETE.
type rawMCP struct {
	url, session string
	next         int
}

func newRawMCP(t *testing.T, url string) *rawMCP {
	t.Helper()
	c := &rawMCP{url: url}
	c.call(t, "initialize", map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw-client", "version": "1"},
	})
	if c.session == "" {
		t.Fatal("initialize: no Mcp-Session-Id")
	}
	if code, _ := c.post(t, "notifications/initialized", nil, false); code != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d", code)
	}
	return c
}

// call posts a request and returns its result.
func (c *rawMCP) call(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	code, res := c.post(t, method, params, true)
	if code != http.StatusOK {
		t.Fatalf("%s: HTTP %d", method, code)
	}
	return res
}

// status posts a request and returns the HTTP status alone.
func (c *rawMCP) status(t *testing.T, method string, params any) int {
	t.Helper()
	code, _ := c.post(t, method, params, true)
	return code
}

func (c *rawMCP) post(t *testing.T, method string, params any, request bool) (int, json.RawMessage) {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	c.next++
	id := c.next
	if request {
		msg["id"] = id
	}
	body, err := json.Marshal(msg)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		c.session = s
	}
	if resp.StatusCode != http.StatusOK || !request {
		return resp.StatusCode, nil
	}
	// The answer: one JSON message, or an event stream whose data lines carry the
	// request's progress notifications and, last, its response.
	var lines []string
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				lines = append(lines, data)
			}
		}
	} else {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		lines = append(lines, b.String())
	}
	for _, l := range lines {
		var m struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.ID != nil && *m.ID == id {
			if m.Error != nil {
				t.Errorf("%s: error %s", method, m.Error)
			}
			return resp.StatusCode, m.Result
		}
	}
	t.Errorf("%s: no response with id %d in %q", method, id, lines)
	return resp.StatusCode, nil
}
