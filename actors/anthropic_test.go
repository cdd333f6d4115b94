package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// anthropicServer speaks the Messages API (POST /v1/messages, JSON): each request is
// answered by the next of its answers, and kept.
type anthropicServer struct {
	t       *testing.T
	srv     *httptest.Server
	answers []string

	mu       sync.Mutex
	requests [][]byte
}

func newAnthropicServer(t *testing.T, answers ...string) *anthropicServer {
	t.Helper()
	s := &anthropicServer{t: t, answers: answers}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.requests)
		s.requests = append(s.requests, body)
		s.mu.Unlock()
		if r.URL.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != "sk-ant-turn-test-0a1b2c3d" || n >= len(s.answers) {
			t.Errorf("request %d: %s x-api-key set %v", n+1, r.URL.Path, r.Header.Get("X-Api-Key") != "")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"unexpected request"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, s.answers[n])
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *anthropicServer) model(t *testing.T) gateway.Model {
	t.Helper()
	m, err := gateway.NewAnthropic("claude-test", gateway.Config{
		APIKey: "sk-ant-turn-test-0a1b2c3d", BaseURL: s.srv.URL, HTTPClient: s.srv.Client(), MaxRetries: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (s *anthropicServer) request(i int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.requests) {
		s.t.Fatalf("request %d: only %d received", i, len(s.requests))
	}
	return s.requests[i]
}

func messagesAnswer(id, stop string, blocks ...string) string {
	return fmt.Sprintf(`{"id":%q,"type":"message","role":"assistant","model":"claude-test","content":[%s],"stop_reason":%q,"stop_sequence":null,`+
		`"usage":{"input_tokens":30,"output_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":1200}}`, id, strings.Join(blocks, ","), stop)
}

// TestAnthropicTurn: a turn on the Messages API. The model calls a read-only tool twice
// in one response; both calls run at once, and the next request opens its user message
// with one tool_result per tool_use id, in the calls' order; then the model answers with
// text and the turn completes.
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
	api := newAnthropicServer(t,
		messagesAnswer("msg_1", "tool_use",
			`{"type":"text","text":"Looking up both."}`,
			`{"type":"tool_use","id":"toolu_01A","name":"lookup","input":{"id":"r1"}}`,
			`{"type":"tool_use","id":"toolu_01B","name":"lookup","input":{"id":"r2"}}`),
		messagesAnswer("msg_2", "end_turn", `{"type":"text","text":"r1 and r2 are records."}`),
	)
	h := newHarness(t, lookup)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := h.node.Run(ctx, TurnConfig{
		Spec: bus.TurnSpec{Agent: "tester", Input: "Look up r1 and r2."}, Model: api.model(t), Kit: kitOf(t, lookup),
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
	if err := json.Unmarshal(api.request(1), &second); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range second.Messages {
		roles = append(roles, m.Role)
	}
	if want := []string{"user", "assistant", "user"}; !slices.Equal(roles, want) {
		t.Fatalf("roles %v, want %v:\n%s", roles, want, api.request(1))
	}
	var uses []string
	for _, c := range second.Messages[1].Content {
		if c.Type == "tool_use" {
			uses = append(uses, c.ID)
		}
	}
	answer := second.Messages[2].Content
	if len(answer) < len(uses) {
		t.Fatalf("the user message holds %d blocks for %d calls:\n%s", len(answer), len(uses), api.request(1))
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
	api := newAnthropicServer(t,
		messagesAnswer("msg_1", "tool_use",
			`{"type":"tool_use","id":"toolu_01A","name":"list_files","input":{"path":"."}}`,
			`{"type":"tool_use","id":"toolu_01B","name":"list_files","input":{"path":"sub"}}`),
		messagesAnswer("msg_2", "end_turn", `{"type":"text","text":"Listed."}`),
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
	srv, err := bus.Start(ctx, bus.Config{StoreDir: t.TempDir(), Logger: DiscardLogger()})
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
		Gateway:    gateway.Config{BaseURL: api.srv.URL, APIKey: "sk-ant-turn-test-0a1b2c3d", HTTPClient: api.srv.Client(), MaxRetries: -1},
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
	if _, err := n.Submit(ctx, bus.TurnSpec{ID: id, Agent: "ann", Input: "list both", Model: "anthropic:claude-test"}, ""); err != nil {
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
	if body := string(api.request(1)); !strings.Contains(body, `"tool_use_id":"toolu_01A"`) || !strings.Contains(body, "notes.txt") {
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
	api := newAnthropicServer(t)
	h := newHarness(t, noop, nsLookup)
	_, err := h.node.Run(context.Background(), TurnConfig{
		Spec: bus.TurnSpec{Agent: "tester", Input: "go"}, Model: api.model(t), Kit: kitOf(t, noop, nsLookup),
	})
	if err == nil || !strings.Contains(err.Error(), `both go out as "crm__lookup"`) {
		t.Fatalf("err = %v, want the name clash", err)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.requests) != 0 {
		t.Errorf("%d requests sent", len(api.requests))
	}
}
