package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/gateway/gatewaytest"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// anthropicKey is the API key of the Messages API fakes.
const anthropicKey = "sk-ant-turn-test-0a1b2c3d"

// anthropicServer is a fake Messages API (gatewaytest): each request is answered by the
// next of its messages, as SSE when it asks to stream, as JSON when not. Closed with
// the test, it checks then that every request went to POST /v1/messages with the key in
// x-api-key.
func anthropicServer(t *testing.T, messages ...*gatewaytest.Messages) *gatewaytest.Server {
	t.Helper()
	streams := make([]gatewaytest.Stream, len(messages))
	for i, m := range messages {
		streams[i] = m.Stream()
	}
	srv := gatewaytest.NewServer(streams...)
	t.Cleanup(func() {
		srv.Close()
		for i, r := range srv.Requests() {
			if r.Method != http.MethodPost || r.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != anthropicKey || r.Header.Get("Authorization") != "" {
				t.Errorf("request %d: %s %s, x-api-key right %v, authorization set %v", i+1, r.Method, r.Path,
					r.Header.Get("X-Api-Key") == anthropicKey, r.Header.Get("Authorization") != "")
			}
		}
	})
	return srv
}

// anthropicConfig is the gateway configuration of the fake.
func anthropicConfig(srv *gatewaytest.Server) gateway.Config {
	return gateway.Config{APIKey: anthropicKey, BaseURL: srv.URL(), HTTPClient: srv.Client(), MaxRetries: -1}
}

func anthropicModel(t *testing.T, srv *gatewaytest.Server) gateway.Model {
	t.Helper()
	m, err := gateway.NewAnthropic("claude-test", anthropicConfig(srv))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// anthropicRequest is the body of request i.
func anthropicRequest(t *testing.T, srv *gatewaytest.Server, i int) []byte {
	t.Helper()
	bodies := srv.Bodies()
	if i >= len(bodies) {
		t.Fatalf("request %d: only %d received", i, len(bodies))
	}
	return bodies[i]
}

// anthropicUsage is the usage of every answer of the fakes: most of the input read from
// the prompt cache.
var anthropicUsage = gatewaytest.Usage{Input: 30, CacheRead: 1200, Output: 9}

// TestAnthropicTurn: a turn on the Messages API, streamed. The model calls a read-only
// tool twice in one response; both calls run at once, dispatched from the stream before
// it ends (its message_delta is held until both started), and the next request opens
// its user message with one tool_result per tool_use id, in the calls' order; then the
// model answers with text, which reaches the bus piece by piece, and the turn completes.
func TestAnthropicTurn(t *testing.T) {
	t.Parallel()
	b := newBarrier(2)
	lookup := toolbus.MustDefine(toolbus.Def[idArgs]{
		Spec: toolbus.Spec{Name: "lookup", Description: "Look up a record by id.", Category: "test", Mode: toolbus.Parallel, ReadOnly: true, Timeout: 10 * time.Second},
		Execute: func(ctx context.Context, c toolbus.Call, a idArgs) (toolbus.Result, error) {
			if err := b.wait(ctx); err != nil { // both calls are in flight together, or neither returns
				return toolbus.Result{}, err
			}
			return toolbus.TextResult("record " + a.ID), nil
		},
	})
	api := anthropicServer(t,
		gatewaytest.NewMessages("msg_1", anthropicUsage).
			Text("Looking", " up both.").
			ToolUse("toolu_01A", "lookup", `{"id":`, `"r1"}`).
			ToolUse("toolu_01B", "lookup", `{"id":"r2"}`).
			Pace(0, b.open).End("tool_use"),
		gatewaytest.NewMessages("msg_2", anthropicUsage).Text("r1 and r2", " are records.").End("end_turn"),
	)
	h := newHarness(t, lookup)
	id := bus.NewID()
	watch := bustest.Conn(t, h.srv, "watch")
	texts, err := watch.SubscribeSync(bus.TextSubject(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := h.node.Run(ctx, TurnConfig{
		Spec: bus.TurnSpec{ID: id, Agent: "tester", Input: "Look up r1 and r2."}, Model: anthropicModel(t, api), Kit: kitOf(t, lookup),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bus.TurnCompleted || res.Text != "r1 and r2 are records." {
		t.Fatalf("state %s text %q err %q", res.State, res.Text, res.ErrorText())
	}
	if got, want := outcomes(res), []string{"lookup:ok", "lookup:ok"}; !slices.Equal(got, want) {
		t.Errorf("outcomes %v, want %v", got, want)
	}
	if want := (bus.Usage{InputTokens: 2460, OutputTokens: 18, CacheReadInputTokens: 2400}); res.Usage != want {
		t.Errorf("usage %+v, want %+v", res.Usage, want)
	}
	var pieces []string
	for i := range 4 {
		m, err := texts.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("text piece %d: %v", i+1, err)
		}
		var d bus.TextDelta
		if err := json.Unmarshal(m.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Turn != id || d.Seq != i+1 || d.Item != 0 {
			t.Errorf("piece %+v: want turn %s, seq %d, item 0", d, id, i+1)
		}
		pieces = append(pieces, fmt.Sprintf("%d:%s", d.Step, d.Text))
	}
	if want := []string{"1:Looking", "1: up both.", "2:r1 and r2", "2: are records."}; !slices.Equal(pieces, want) {
		t.Errorf("text pieces %q, want %q", pieces, want)
	}
	for i, body := range api.Bodies() {
		if !strings.Contains(string(body), `"stream":true`) {
			t.Errorf("request %d did not ask to stream: %s", i+1, body)
		}
	}

	var second struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string `json:"type"`
				ID        string `json:"id"`
				ToolUseID string `json:"tool_use_id"`
				IsError   bool   `json:"is_error"`
				Content   []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(anthropicRequest(t, api, 1), &second); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range second.Messages {
		roles = append(roles, m.Role)
	}
	if want := []string{"user", "assistant", "user"}; !slices.Equal(roles, want) {
		t.Fatalf("roles %v, want %v:\n%s", roles, want, anthropicRequest(t, api, 1))
	}
	var uses []string
	for _, c := range second.Messages[1].Content {
		if c.Type == "tool_use" {
			uses = append(uses, c.ID)
		}
	}
	answer := second.Messages[2].Content
	if len(answer) < len(uses) {
		t.Fatalf("the user message holds %d blocks for %d calls:\n%s", len(answer), len(uses), anthropicRequest(t, api, 1))
	}
	for i, id := range uses {
		c := answer[i]
		if c.Type != "tool_result" || c.ToolUseID != id || c.IsError {
			t.Errorf("block %d of the answer: %+v, want the tool_result of %s", i, c, id)
		}
		if want := "record r" + fmt.Sprint(i+1); len(c.Content) != 1 || c.Content[0].Text != want {
			t.Errorf("tool_result of %s: %+v, want %q", id, c.Content, want)
		}
	}
	for _, c := range answer[len(uses):] {
		if c.Type == "tool_result" {
			t.Errorf("a second tool_result after the first %d: %+v", len(uses), c)
		}
	}
}

// A durable turn whose spec names an anthropic: model: the node opens it with its own
// gateway configuration, and the turn runs two read-only list_files at once.
func TestAnthropicDurableTurn(t *testing.T) {
	t.Parallel()
	api := anthropicServer(t,
		gatewaytest.NewMessages("msg_1", anthropicUsage).
			ToolUse("toolu_01A", "list_files", `{"path":"."}`).
			ToolUse("toolu_01B", "list_files", `{"path":`, `"sub"}`).End("tool_use"),
		gatewaytest.NewMessages("msg_2", anthropicUsage).Text("Listed.").End("end_turn"),
	)
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "sub", "notes.txt"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{StoreDir: t.TempDir(), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	n, err := StartNode(ctx, NodeConfig{
		Name:       "n1",
		Connect:    func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Categories: []string{computer.Category},
		Home:       home,
		Turns:      true,
		Gateway:    anthropicConfig(api),
		Logger:     DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	id := bus.NewID()
	done, err := n.Conn().SubscribeSync(bus.TurnStatusSubject(id, bus.StatusDone))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = done.Unsubscribe() }()
	if err := n.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.submit(ctx, bus.TurnSpec{ID: id, Agent: "ann", Input: "list both", Model: "anthropic:claude-test"}, ""); err != nil {
		t.Fatal(err)
	}
	m, err := done.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the turn did not end: %v", err)
	}
	var st bus.TurnStatus
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	if st.State != bus.TurnCompleted || st.Text != "Listed." || len(st.Calls) != 2 {
		t.Fatalf("turn %s with %d calls: %q %s", st.State, len(st.Calls), st.Text, st.Error)
	}
	for _, c := range st.Calls {
		if c.Outcome != bus.OutcomeOK {
			t.Errorf("call %s: %s %s", c.Call, c.Outcome, c.Error)
		}
	}
	if body := string(anthropicRequest(t, api, 1)); !strings.Contains(body, `"tool_use_id":"toolu_01A"`) || !strings.Contains(body, "notes.txt") {
		t.Errorf("the second request lacks the results:\n%s", body)
	}
}

// A tool whose name the Messages API refuses ends the turn before any request.
func TestAnthropicToolNamesCheckedAtAssembly(t *testing.T) {
	t.Parallel()
	noop := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "crm__lookup", Category: "test", Timeout: 10 * time.Second},
		Execute: func(context.Context, toolbus.Call, struct{}) (toolbus.Result, error) {
			return toolbus.TextResult("ok"), nil
		},
	})
	nsLookup := toolbus.MustDefine(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: "lookup", Namespace: "crm", Category: "test", Timeout: 10 * time.Second},
		Execute: func(context.Context, toolbus.Call, struct{}) (toolbus.Result, error) {
			return toolbus.TextResult("ok"), nil
		},
	})
	api := anthropicServer(t)
	h := newHarness(t, noop, nsLookup)
	_, err := h.node.Run(context.Background(), TurnConfig{
		Spec: bus.TurnSpec{Agent: "tester", Input: "go"}, Model: anthropicModel(t, api), Kit: kitOf(t, noop, nsLookup),
	})
	if err == nil || !strings.Contains(err.Error(), `both go out as "crm__lookup"`) {
		t.Fatalf("err = %v, want the name clash", err)
	}
	if n := len(api.Bodies()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}
