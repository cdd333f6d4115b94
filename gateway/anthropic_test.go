package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
)

// The Messages wire as Anthropic's API reference documents it: a message object for a
// plain request, server-sent events (event: NAME / data: JSON / blank line) for a
// streamed one.

// anthropicMessage is a Messages API answer holding content blocks.
func anthropicMessage(id, stop, usage string, blocks ...string) string {
	if usage == "" {
		usage = `{"input_tokens":40,"output_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}`
	}
	return fmt.Sprintf(`{"id":%q,"type":"message","role":"assistant","model":"claude-test","content":[%s],"stop_reason":%q,"stop_sequence":null,"usage":%s}`,
		id, strings.Join(blocks, ","), stop, usage)
}

func textBlock(text string) string { return fmt.Sprintf(`{"type":"text","text":%q}`, text) }

func toolUseBlock(id, name, input string) string {
	return fmt.Sprintf(`{"type":"tool_use","id":%q,"name":%q,"input":%s}`, id, name, input)
}

const (
	thinkingBlock = `{"type":"thinking","thinking":"The user wants a.md; read it.","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}`
	redactedBlock = `{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}`
	// futureBlock is a block of a kind toolbus does not know: carried all the same.
	futureBlock = `{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"a.md <&>"}}`
)

// sseEvent is one server-sent event.
func sseEvent(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }

// sseMessage streams a message: its start, each block (start, deltas, stop), its delta
// with stop_reason and usage, its stop, with a ping after the start.
func sseMessage(id, stop string, blocks ...[]string) string {
	var b strings.Builder
	b.WriteString(sseEvent("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":40,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}`, id)))
	b.WriteString(sseEvent("ping", `{"type": "ping"}`))
	for _, events := range blocks {
		for _, e := range events {
			b.WriteString(e)
		}
	}
	b.WriteString(sseMessageEnd(stop))
	return b.String()
}

func sseMessageEnd(stop string) string {
	return sseEvent("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":12}}`, stop)) +
		sseEvent("message_stop", `{"type":"message_stop"}`)
}

// sseText is a text block streamed in pieces.
func sseText(index int, pieces ...string) []string {
	out := []string{sseEvent("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"text","text":""}}`, index))}
	for _, p := range pieces {
		out = append(out, sseEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":%q}}`, index, p)))
	}
	return append(out, sseStop(index))
}

// sseToolUse is a tool_use block whose input arrives in input_json_delta pieces; stop
// false leaves it open (a stream cut by max_tokens still stops it: see its test).
func sseToolUse(index int, id, name string, pieces ...string) []string {
	out := []string{sseEvent("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, index, id, name))}
	for _, p := range pieces {
		out = append(out, sseEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%q}}`, index, p)))
	}
	return append(out, sseStop(index))
}

// sseThinking is a thinking block: its text, then its signature.
func sseThinking(index int, thinking, signature string) []string {
	return []string{
		sseEvent("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"thinking","thinking":"","signature":""}}`, index)),
		sseEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"thinking_delta","thinking":%q}}`, index, thinking)),
		sseEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"signature_delta","signature":%q}}`, index, signature)),
		sseStop(index),
	}
}

func sseStop(index int) string {
	return sseEvent("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, index))
}

// sseHeader is the Content-Type of a stream.
var sseHeader = map[string]string{"Content-Type": "text/event-stream; charset=utf-8"}

func newAnthropic(t *testing.T, cfg gateway.Config) *gateway.Anthropic {
	t.Helper()
	m, err := gateway.NewAnthropic("claude-test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// anthropicConfig points the gateway at a fake server.
func anthropicConfig(api *fakeAPI, logs io.Writer) gateway.Config {
	cfg := api.config(logs)
	cfg.BaseURL = api.srv.URL
	return cfg
}

// anthropicTranscript holds every kind of item the gateway translates: user and
// developer text, a namespaced call and a plain one with their outputs (an error, an
// image), carried blocks of its own, and items of another provider and notes, skipped.
func anthropicTranscript() []toolbus.Item {
	return []toolbus.Item{
		toolbus.UserMessage("Look up CUST-1, then read notes.md."),
		{Kind: toolbus.KindReasoning, Provider: gateway.ProviderAnthropic, Raw: json.RawMessage(thinkingBlock), Text: "The user wants a.md; read it."},
		{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: "Looking both up.", Provider: gateway.ProviderAnthropic},
		{Kind: toolbus.KindFunctionCall, Provider: gateway.ProviderAnthropic, CallID: "toolu_a", Name: "get_customer", Namespace: "crm", Arguments: `{"customer_id":"CUST-1"}`},
		{Kind: toolbus.KindFunctionCall, CallID: "toolu_b", Name: "read_file", Arguments: `{"path":"notes.md"}`},
		{Kind: toolbus.KindCallOutput, CallID: "toolu_a", Output: []toolbus.ContentPart{toolbus.Text("no such customer")}, IsError: true},
		{Kind: toolbus.KindCallOutput, CallID: "toolu_b", Output: []toolbus.ContentPart{
			toolbus.Text("notes.md holds a chart:"), toolbus.Image("image/png", []byte{0x89, 'P', 'N', 'G'})}},
		{Kind: toolbus.KindMessage, Role: toolbus.RoleDeveloper, Text: "Answer briefly."},
		{Kind: toolbus.KindReasoning, Provider: gateway.ProviderResponses, Raw: json.RawMessage(reasoningOut)},
		toolbus.Note(json.RawMessage(`{"type":"toolbus.usage","step":1,"input_tokens":3,"output_tokens":1}`)),
	}
}

// The request as sent, byte for byte: tools (flattened names, raw and strict schemas,
// deferred ones behind the hosted search, the cache breakpoint), system, messages.
func TestAnthropicRequestGolden(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, exchange{body: anthropicMessage("msg_1", "end_turn", "", textBlock("Done."))})
	var logs bytes.Buffer
	cfg := anthropicConfig(api, &logs)
	cfg.MaxOutputTokens = 2048
	resp, err := newAnthropic(t, cfg).Respond(context.Background(), &gateway.Request{
		Instructions: "You are a careful assistant.", Input: anthropicTranscript(), Tools: testTools(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "Done." {
		t.Errorf("text %q", resp.Text())
	}
	reqs := api.requests()
	if len(reqs) != 1 || reqs[0].path != "/v1/messages" {
		t.Fatalf("requests %+v", reqs)
	}
	checkGolden(t, "anthropic_request", reqs[0].body)
	body := string(reqs[0].body)
	if want := `"input_schema":` + compact(t, []byte(limitsSchema)); !strings.Contains(body, want) {
		t.Errorf("raw schema not sent byte for byte; want %s in\n%s", want, body)
	}
	// One call at a time was asked for (ParallelToolCalls false).
	if got := jsonPath(t, api.body(0), "tool_choice"); fmt.Sprint(got) != "map[disable_parallel_tool_use:true type:auto]" {
		t.Errorf("tool_choice %v", got)
	}
	msgs := jsonPath(t, api.body(0), "messages").([]any)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, jsonPath(t, m, "role").(string))
	}
	if want := []string{"user", "assistant", "user"}; !slices.Equal(roles, want) {
		t.Fatalf("roles %v, want %v", roles, want)
	}
	if want := `"content":[` + compact(t, []byte(thinkingBlock)) + `,`; !strings.Contains(body, want) {
		t.Errorf("thinking block not carried verbatim: want %s in\n%s", want, body)
	}
	if got := jsonPath(t, msgs[1], "content", 2, "name"); got != "crm__get_customer" {
		t.Errorf("namespaced call sent as %v", got)
	}
	answer := jsonPath(t, msgs[2], "content").([]any)
	if len(answer) != 3 || jsonPath(t, answer[0], "type") != "tool_result" || jsonPath(t, answer[1], "type") != "tool_result" || jsonPath(t, answer[2], "type") != "text" {
		t.Fatalf("answer message: %v", answer)
	}
	if jsonPath(t, answer[0], "is_error") != true || jsonPath(t, answer[1], "is_error") != nil {
		t.Errorf("is_error: %v, %v", answer[0], answer[1])
	}
	if got := jsonPath(t, answer[1], "content", 1, "source", "type"); got != "base64" || jsonPath(t, answer[1], "content", 1, "type") != "image" {
		t.Errorf("image not sent as an image block: %v", answer[1])
	}
	h := reqs[0].header
	if h.Get("X-Api-Key") != testKey || h.Get("Authorization") != "" || h.Get("Anthropic-Version") == "" {
		t.Errorf("headers: x-api-key set %v, Authorization %q, anthropic-version %q", h.Get("X-Api-Key") == testKey, h.Get("Authorization"), h.Get("Anthropic-Version"))
	}
	noKey(t, "logs", logs.String())
}

// streamServer serves one streamed answer in parts: before part i+1 it waits for
// gates[i], if there is one, so a test can prove what the client reported before the
// rest of the stream existed.
type streamServer struct {
	t     *testing.T
	srv   *httptest.Server
	parts []string
	gates []<-chan struct{}

	mu   sync.Mutex
	body []byte
}

func newStreamServer(t *testing.T, parts []string, gates ...<-chan struct{}) *streamServer {
	t.Helper()
	s := &streamServer{t: t, parts: parts, gates: gates}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.body = body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for i, p := range s.parts {
			if i > 0 && i-1 < len(s.gates) {
				select {
				case <-s.gates[i-1]:
				case <-r.Context().Done():
					return
				case <-time.After(30 * time.Second):
					t.Errorf("the client never reported what came before part %d", i)
					return
				}
			}
			io.WriteString(w, p)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *streamServer) config() gateway.Config {
	return gateway.Config{APIKey: testKey, BaseURL: s.srv.URL, HTTPClient: s.srv.Client(), MaxRetries: -1}
}

// TestAnthropicStream: a streamed response reaches Request.Stream as it arrives: text
// pieces, then each block whole at its content_block_stop, a tool_use block with its
// input_json_delta pieces joined, before the next block exists; the Response holds the
// same items.
func TestAnthropicStream(t *testing.T) {
	t.Parallel()
	firstCall := make(chan struct{})
	start := sseMessage("msg_s", "", sseText(0, "Looking ", "it up."), sseToolUse(1, "toolu_1", "crm__get_customer", `{"custo`, `mer_id": "C`, `1"}`))
	start = strings.TrimSuffix(start, sseMessageEnd("")) // the rest comes after the gate
	rest := strings.Join(sseToolUse(2, "toolu_2", "read_file", `{"path":`, `"a.md"}`), "") + sseMessageEnd("tool_use")
	srv := newStreamServer(t, []string{start, rest}, firstCall)

	var (
		events []gateway.StreamEvent
		once   sync.Once
	)
	req := &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("Look up C1, read a.md.")}, Tools: testTools(t), ParallelToolCalls: true,
		Stream: func(e gateway.StreamEvent) {
			events = append(events, e)
			if e.Kind == gateway.StreamItem && e.Item.Kind == toolbus.KindFunctionCall {
				once.Do(func() { close(firstCall) })
			}
		}}
	resp, err := newAnthropic(t, srv.config()).Respond(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		switch e.Kind {
		case gateway.StreamText:
			got = append(got, fmt.Sprintf("%d text %q", e.Index, e.Text))
		case gateway.StreamItem:
			got = append(got, fmt.Sprintf("%d %s %s/%s %s %s", e.Index, e.Item.Kind, e.Item.Namespace, e.Item.Name, e.Item.Arguments, e.Item.Text))
		}
	}
	want := []string{
		`0 text "Looking "`,
		`0 text "it up."`,
		`0 message /  Looking it up.`,
		`1 function_call crm/get_customer {"customer_id": "C1"} `,
		`2 function_call /read_file {"path":"a.md"} `,
	}
	if !slices.Equal(got, want) {
		t.Errorf("stream events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if resp.Truncated || resp.ID != "msg_s" || resp.Text() != "Looking it up." || len(resp.Calls()) != 2 {
		t.Fatalf("response %+v", resp)
	}
	if c := resp.Calls()[0]; c.CallID != "toolu_1" || c.Arguments != `{"customer_id": "C1"}` || c.Truncated {
		t.Errorf("first call %+v", c)
	}
	if resp.Usage.InputTokens != 40 || resp.Usage.OutputTokens != 12 {
		t.Errorf("usage %+v", resp.Usage)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if !strings.Contains(string(srv.body), `"stream":true`) {
		t.Errorf("request did not ask for a stream: %s", srv.body)
	}

	// Without Request.Stream the same gateway sends a plain request.
	api := newFakeAPI(t, exchange{body: anthropicMessage("msg_p", "end_turn", "", textBlock("Plain."))})
	if _, err := newAnthropic(t, anthropicConfig(api, io.Discard)).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(api.requests()[0].body), `"stream"`) {
		t.Errorf("plain request asked for a stream: %s", api.requests()[0].body)
	}

	// An error event in the middle of the stream ends the call with its message.
	broken := newStreamServer(t, []string{sseMessage("msg_e", "", sseText(0, "Hal"))[:0] +
		sseEvent("message_start", `{"type":"message_start","message":{"id":"msg_e","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}`) +
		strings.Join(sseText(0, "Hal")[:2], "") +
		sseEvent("error", `{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`)})
	_, err = newAnthropic(t, broken.config()).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}, Stream: func(gateway.StreamEvent) {}})
	if err == nil || !strings.Contains(err.Error(), "overloaded_error: Overloaded") {
		t.Errorf("err = %v, want the stream's error", err)
	}
}

// TestAnthropicMaxTokensTruncates: stop_reason max_tokens marks the response truncated
// and its last block, a call cut short, truncated too; a streamed cut call never arrives
// as a StreamItem, a whole call before it does.
func TestAnthropicMaxTokensTruncates(t *testing.T) {
	t.Parallel()
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		srv := newStreamServer(t, []string{sseMessage("msg_t", "max_tokens",
			sseToolUse(0, "toolu_1", "read_file", `{"path":"a.md"}`),
			sseToolUse(1, "toolu_2", "set_limits", `{"max": `, `1`))})
		var streamed []string
		resp, err := newAnthropic(t, srv.config()).Respond(context.Background(), &gateway.Request{
			Input: []toolbus.Item{toolbus.UserMessage("x")}, Tools: testTools(t), ParallelToolCalls: true,
			Stream: func(e gateway.StreamEvent) {
				if e.Kind == gateway.StreamItem {
					streamed = append(streamed, e.Item.CallID)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(streamed, []string{"toolu_1"}) {
			t.Errorf("streamed calls %v, want only the whole one", streamed)
		}
		calls := resp.Calls()
		if !resp.Truncated || len(calls) != 2 || calls[0].Truncated || !calls[1].Truncated || calls[1].Arguments != `{"max": 1` {
			t.Errorf("response truncated %v, calls %+v: want the last one truncated with its partial arguments", resp.Truncated, calls)
		}
	})
	t.Run("message", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, exchange{body: anthropicMessage("msg_t", "max_tokens", "",
			toolUseBlock("toolu_1", "read_file", `{"path":"a.md"}`), toolUseBlock("toolu_2", "set_limits", `{}`))})
		resp, err := newAnthropic(t, anthropicConfig(api, io.Discard)).Respond(context.Background(),
			&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}, Tools: testTools(t)})
		if err != nil {
			t.Fatal(err)
		}
		calls := resp.Calls()
		if !resp.Truncated || len(calls) != 2 || calls[0].Truncated || !calls[1].Truncated {
			t.Errorf("response truncated %v, calls %+v: want the last one truncated", resp.Truncated, calls)
		}
		// A text block last: no call was cut.
		api = newFakeAPI(t, exchange{body: anthropicMessage("msg_u", "max_tokens", "", toolUseBlock("toolu_1", "read_file", `{"path":"a.md"}`), textBlock("And then"))})
		resp, err = newAnthropic(t, anthropicConfig(api, io.Discard)).Respond(context.Background(),
			&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}, Tools: testTools(t)})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Truncated || resp.Calls()[0].Truncated {
			t.Errorf("response truncated %v, call %+v", resp.Truncated, resp.Calls()[0])
		}
	})
}

// TestAnthropicThinkingCarried: thinking blocks with their signatures, redacted thinking
// and blocks toolbus does not interpret go back in the next request verbatim, in their
// place before the calls, from a plain and from a streamed response.
func TestAnthropicThinkingCarried(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, resp *gateway.Response, next []byte, want []string) {
		t.Helper()
		if got := kinds(resp.Items); len(got) != len(want)+1 {
			t.Fatalf("items %v", got)
		}
		var sent struct {
			Messages []struct {
				Role    string            `json:"role"`
				Content []json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(next, &sent); err != nil {
			t.Fatal(err)
		}
		if len(sent.Messages) != 3 || sent.Messages[1].Role != "assistant" || len(sent.Messages[1].Content) != len(want)+1 {
			t.Fatalf("next request: %s", next)
		}
		for i, w := range want {
			if got := compact(t, sent.Messages[1].Content[i]); got != compact(t, []byte(w)) {
				t.Errorf("block %d not carried verbatim:\n got %s\nwant %s", i, got, w)
			}
		}
		if got := string(sent.Messages[1].Content[len(want)]); !strings.Contains(got, `"type":"tool_use"`) {
			t.Errorf("last block %s, want the call", got)
		}
		if got := string(sent.Messages[2].Content[0]); !strings.Contains(got, `"tool_use_id":"toolu_1"`) {
			t.Errorf("answer %s", got)
		}
	}
	t.Run("message", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t,
			exchange{body: anthropicMessage("msg_1", "tool_use", "", thinkingBlock, redactedBlock, futureBlock, toolUseBlock("toolu_1", "read_file", `{"path":"a.md"}`))},
			exchange{body: anthropicMessage("msg_2", "end_turn", "", textBlock("Read."))},
		)
		m := newAnthropic(t, anthropicConfig(api, io.Discard))
		req := &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("Read a.md.")}, Tools: testTools(t), ParallelToolCalls: true}
		resp, err := m.Respond(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := kinds(resp.Items), []toolbus.ItemKind{toolbus.KindReasoning, toolbus.KindReasoning, toolbus.KindOpaque, toolbus.KindFunctionCall}; !slices.Equal(got, want) {
			t.Fatalf("items %v, want %v", got, want)
		}
		if resp.Items[0].Text != "The user wants a.md; read it." {
			t.Errorf("thinking text %q", resp.Items[0].Text)
		}
		req.Input = append(append(req.Input, resp.Items...), outputsFor(resp)...)
		if _, err := m.Respond(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		check(t, resp, api.requests()[1].body, []string{thinkingBlock, redactedBlock, futureBlock})
	})
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		const sig = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
		srv := newStreamServer(t, []string{sseMessage("msg_1", "tool_use",
			sseThinking(0, "The user wants a.md; read it.", sig), sseToolUse(1, "toolu_1", "read_file", `{"path":"a.md"}`))})
		resp, err := newAnthropic(t, srv.config()).Respond(context.Background(), &gateway.Request{
			Input: []toolbus.Item{toolbus.UserMessage("Read a.md.")}, Tools: testTools(t), ParallelToolCalls: true, Stream: func(gateway.StreamEvent) {}})
		if err != nil {
			t.Fatal(err)
		}
		api := newFakeAPI(t, exchange{body: anthropicMessage("msg_2", "end_turn", "", textBlock("Read."))})
		input := append(append([]toolbus.Item{toolbus.UserMessage("Read a.md.")}, resp.Items...), outputsFor(resp)...)
		if _, err := newAnthropic(t, anthropicConfig(api, io.Discard)).Respond(context.Background(), &gateway.Request{Input: input, Tools: testTools(t)}); err != nil {
			t.Fatal(err)
		}
		check(t, resp, api.requests()[0].body, []string{`{"type":"thinking","thinking":"The user wants a.md; read it.","signature":"` + sig + `"}`})
	})
}

// TestAnthropicCacheControl: by default the last tool and the instructions carry
// cache_control breakpoints; NoPromptCache leaves both out. The cache's tokens are
// recorded with the step's usage.
func TestAnthropicCacheControl(t *testing.T) {
	t.Parallel()
	usage := `{"input_tokens":12,"output_tokens":7,"cache_creation_input_tokens":1800,"cache_read_input_tokens":0}`
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("off=%v", off), func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t,
				exchange{body: anthropicMessage("msg_1", "end_turn", usage, textBlock("Hi."))},
				exchange{body: anthropicMessage("msg_2", "end_turn", `{"input_tokens":20,"output_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":1800}`, textBlock("Hi again."))},
			)
			cfg := anthropicConfig(api, io.Discard)
			cfg.NoPromptCache = off
			m := newAnthropic(t, cfg)
			tools := testTools(t)[:4] // none deferred: the breakpoint is on the last tool
			req := &gateway.Request{Instructions: "Be brief.", Input: []toolbus.Item{toolbus.UserMessage("Hi.")}, Tools: tools}
			first, err := m.Respond(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			second, err := m.Respond(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			body := api.body(0)
			sentTools := jsonPath(t, body, "tools").([]any)
			for i, tool := range sentTools {
				cc := jsonPath(t, tool, "cache_control")
				want := !off && i == len(sentTools)-1
				if (cc != nil) != want || want && fmt.Sprint(cc) != "map[type:ephemeral]" {
					t.Errorf("tool %d cache_control %v, want it %v", i, cc, want)
				}
			}
			if cc := jsonPath(t, body, "system", 0, "cache_control"); (cc != nil) == off {
				t.Errorf("system cache_control %v with caching off=%v", cc, off)
			}
			if jsonPath(t, body, "system", 0, "text") != "Be brief." {
				t.Errorf("system %v", jsonPath(t, body, "system"))
			}
			if want := (gateway.Usage{InputTokens: 1812, OutputTokens: 7, CacheCreationInputTokens: 1800}); first.Usage != want {
				t.Errorf("first usage %+v, want %+v", first.Usage, want)
			}
			if want := (gateway.Usage{InputTokens: 1820, OutputTokens: 3, CacheReadInputTokens: 1800}); second.Usage != want {
				t.Errorf("second usage %+v, want %+v", second.Usage, want)
			}
		})
	}
	// With deferred tools the breakpoint goes on the hosted tool search, after them.
	defs, err := gateway.AnthropicToolDefinitions(testTools(t))
	if err != nil {
		t.Fatal(err)
	}
	var tools []map[string]any
	if err := json.Unmarshal(defs, &tools); err != nil {
		t.Fatal(err)
	}
	for i, tool := range tools {
		last := i == len(tools)-1
		if _, cc := tool["cache_control"]; cc != last {
			t.Errorf("tool %d (%v): cache_control %v", i, tool["name"], cc)
		}
		if last && tool["type"] != "tool_search_tool_bm25_20251119" {
			t.Errorf("last tool %v, want the tool search", tool)
		}
	}
}

// TestAnthropicRetries: 429 with retry-after and 529 overloaded_error are retried, and
// the third attempt answers; 400, 401, 403 and 404 end the call at once with the API's
// message, the key removed.
func TestAnthropicRetries(t *testing.T) {
	t.Parallel()
	t.Run("retried", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t,
			exchange{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "0"},
				body: `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`},
			exchange{status: 529, header: map[string]string{"Retry-After": "0"},
				body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
			exchange{body: anthropicMessage("msg_1", "end_turn", "", textBlock("Finally."))},
		)
		var logs bytes.Buffer
		resp, err := newAnthropic(t, anthropicConfig(api, &logs)).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Text() != "Finally." || len(api.requests()) != 3 {
			t.Fatalf("text %q after %d requests", resp.Text(), len(api.requests()))
		}
		for _, want := range []string{"status=429 retry_after=0", "status=529 retry_after=0"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("logs lack %q:\n%s", want, logs.String())
			}
		}
		if got := api.requests()[2].header.Get("X-Stainless-Retry-Count"); got != "2" {
			t.Errorf("third attempt's retry count %q", got)
		}
	})
	t.Run("retry-after too long", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t, exchange{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "600"},
			body: `{"type":"error","error":{"type":"rate_limit_error","message":"rate limited"}}`})
		var logs bytes.Buffer
		_, err := newAnthropic(t, anthropicConfig(api, &logs)).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
		var gwErr *gateway.Error
		if !errors.As(err, &gwErr) || gwErr.Status != http.StatusTooManyRequests || !strings.Contains(gwErr.Message, "rate_limit_error: rate limited") {
			t.Fatalf("err = %v, want the 429 at once", err)
		}
		if n := len(api.requests()); n != 1 || !strings.Contains(logs.String(), "not retried") {
			t.Errorf("%d requests; logs:\n%s", n, logs.String())
		}
	})
	for _, tc := range []struct {
		status int
		body   string
		want   string
	}{
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content: Field required"}}`, "invalid_request_error: messages.0.content: Field required"},
		{401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ` + testKey + `"}}`, "the API key was refused (check TOOLBUS_MODEL_API_KEY or the -api-key-file): authentication_error: invalid x-api-key [redacted]"},
		{403, `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`, "access denied"},
		{404, `{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}`, "not_found_error: model: claude-nope"},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, exchange{status: tc.status, body: tc.body})
			_, err := newAnthropic(t, anthropicConfig(api, io.Discard)).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
			var gwErr *gateway.Error
			if !errors.As(err, &gwErr) || gwErr.Status != tc.status || gwErr.Provider != gateway.ProviderAnthropic || !strings.Contains(gwErr.Message, tc.want) {
				t.Fatalf("err = %v, want a *gateway.Error %d with %q", err, tc.status, tc.want)
			}
			if n := len(api.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			noKey(t, "error", err.Error())
		})
	}
}

// TestAnthropicKeyScope: ANTHROPIC_API_KEY reaches the Anthropic API, and
// ANTHROPIC_BASE_URL of its environment, only; another endpoint gets the key given for
// it or none. The key goes in x-api-key, never in Authorization, and is redacted.
func TestAnthropicKeyScope(t *testing.T) {
	const anthropicKey = "sk-ant-api03-scope-1c9e0b7d5a"
	const endpointKey = "sk-endpoint-5d1f0a9b7c"
	hello := exchange{body: anthropicMessage("msg_1", "end_turn", "", textBlock("Hello."))}
	for _, tc := range []struct {
		name string
		env  map[string]string // the environment ConfigFromEnv reads
		flag bool              // the base URL given as -base-url would (Config.BaseURL)
		want string            // x-api-key the server gets
	}{
		{"ANTHROPIC_API_KEY withheld from another endpoint", map[string]string{gateway.EnvAnthropicKey: anthropicKey}, true, ""},
		{"ANTHROPIC_API_KEY with ANTHROPIC_BASE_URL", map[string]string{gateway.EnvAnthropicKey: anthropicKey, gateway.EnvAnthropicBaseURL: "SERVER"}, false, anthropicKey},
		{"the same endpoint given twice", map[string]string{gateway.EnvAnthropicKey: anthropicKey, gateway.EnvAnthropicBaseURL: "SERVER/"}, true, anthropicKey},
		{"the endpoint's own key", map[string]string{gateway.EnvAnthropicKey: anthropicKey, gateway.EnvModelAPIKey: endpointKey}, true, endpointKey},
		{"OPENAI_BASE_URL is not the endpoint", map[string]string{gateway.EnvAnthropicKey: anthropicKey, gateway.EnvAnthropicBaseURL: "SERVER", gateway.EnvBaseURL: "http://openai-proxy.invalid/v1"}, false, anthropicKey},
		{"-base-url is the endpoint, also when OPENAI_BASE_URL names it", map[string]string{gateway.EnvAnthropicKey: anthropicKey, gateway.EnvBaseURL: "SERVER"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, hello)
			for _, k := range []string{gateway.EnvAnthropicKey, gateway.EnvAnthropicBaseURL, gateway.EnvModelAPIKey, gateway.EnvBaseURL, gateway.EnvAPIKey} {
				t.Setenv(k, strings.ReplaceAll(tc.env[k], "SERVER", api.srv.URL))
			}
			cfg, err := gateway.ConfigFromEnv()
			if err != nil {
				t.Fatal(err)
			}
			if tc.flag {
				cfg.SetBaseURL(api.srv.URL)
			}
			cfg.HTTPClient = api.srv.Client()
			if _, err := ask(t, newAnthropic(t, cfg)); err != nil {
				t.Fatal(err)
			}
			h := api.requests()[0].header
			if got := h.Get("X-Api-Key"); got != tc.want {
				t.Errorf("x-api-key %q, want %q", got, tc.want)
			}
			if got := h.Get("Authorization"); got != "" {
				t.Errorf("Authorization %q: the key goes in x-api-key only", got)
			}
		})
	}

	// The Anthropic API, at its default base URL, gets ANTHROPIC_API_KEY.
	var got *http.Request
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(anthropicMessage("msg_1", "end_turn", "", textBlock("ok")))), Request: r}, nil
	})}
	if _, err := ask(t, newAnthropic(t, gateway.Config{AnthropicKey: anthropicKey, HTTPClient: client})); err != nil {
		t.Fatal(err)
	}
	if got.URL.String() != "https://api.anthropic.com/v1/messages" || got.Header.Get("X-Api-Key") != anthropicKey || got.Header.Get("Authorization") != "" {
		t.Errorf("request to %s with x-api-key set %v, Authorization %q", got.URL, got.Header.Get("X-Api-Key") == anthropicKey, got.Header.Get("Authorization"))
	}
	if _, err := gateway.NewAnthropic("claude-test", gateway.Config{}); err == nil || !strings.Contains(err.Error(), "set ANTHROPIC_API_KEY") {
		t.Errorf("no key for the Anthropic API: err = %v", err)
	}

	// An endpoint that wants the key it did not get says why, and a key it echoes is removed.
	api := newFakeAPI(t, exchange{status: http.StatusUnauthorized, body: `{"type":"error","error":{"type":"authentication_error","message":"x-api-key header is required"}}`})
	_, err := ask(t, newAnthropic(t, gateway.Config{AnthropicKey: anthropicKey, BaseURL: api.srv.URL, HTTPClient: api.srv.Client()}))
	want := "anthropic: HTTP 401: the endpoint wants an API key and none was sent (ANTHROPIC_API_KEY is sent only to api.anthropic.com and to ANTHROPIC_BASE_URL: give " +
		api.srv.URL + " its own key in TOOLBUS_MODEL_API_KEY or -api-key-file): authentication_error: x-api-key header is required"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant  %s", err, want)
	}
	api = newFakeAPI(t, exchange{body: anthropicMessage("msg_1", "end_turn", "", textBlock("Your key is "+anthropicKey))})
	resp, err := ask(t, newAnthropic(t, gateway.Config{AnthropicKey: anthropicKey, AnthropicBaseURL: api.srv.URL, HTTPClient: api.srv.Client()}))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(resp); strings.Contains(string(b), anthropicKey) || !strings.Contains(resp.Text(), "[redacted]") {
		t.Errorf("the key was not redacted: %s", b)
	}
}

// The tool-name rules of the API are checked before any request.
func TestAnthropicToolNames(t *testing.T) {
	t.Parallel()
	m := newAnthropic(t, gateway.Config{APIKey: testKey, BaseURL: "http://localhost:1"})
	ok := testTools(t)
	if err := m.CheckTools(ok); err != nil {
		t.Errorf("CheckTools(test tools) = %v", err)
	}
	bad := &toolbus.Spec{Name: "read.file", Params: ok[0].Params}
	if err := m.CheckTools(append(ok, bad)); err == nil || !strings.Contains(err.Error(), "only letters, digits") {
		t.Errorf("a dotted name: err = %v", err)
	}
	clash := rawTool(t, toolbusDef("crm__get_customer"))
	if err := m.CheckTools(append(ok, clash)); err == nil || !strings.Contains(err.Error(), `both go out as "crm__get_customer"`) {
		t.Errorf("a flat name clash: err = %v", err)
	}
	search := rawTool(t, toolbusDef("tool_search_tool_bm25"))
	if err := m.CheckTools(append(ok, search)); err == nil || !strings.Contains(err.Error(), "clashes") {
		t.Errorf("the tool search's name: err = %v", err)
	}
}

// A response the API paused (pause_turn, a long run of its hosted tools) is sent back
// as it is and continued within the same step; the step holds both parts.
func TestAnthropicPauseTurn(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t,
		exchange{body: anthropicMessage("msg_1", "pause_turn", "", textBlock("Searching."), futureBlock)},
		exchange{body: anthropicMessage("msg_2", "end_turn", "", textBlock("Found it."))},
	)
	resp, err := newAnthropic(t, anthropicConfig(api, io.Discard)).Respond(context.Background(),
		&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("Find a.md.")}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(resp.Items), []toolbus.ItemKind{toolbus.KindMessage, toolbus.KindOpaque, toolbus.KindMessage}; !slices.Equal(got, want) {
		t.Fatalf("items %v, want %v", got, want)
	}
	if resp.ID != "msg_2" || resp.Text() != "Searching.\nFound it." || resp.Usage.OutputTokens != 24 {
		t.Errorf("response %+v", resp)
	}
	if want := `{"content":[{"text":"Searching.","type":"text"},` + compact(t, []byte(futureBlock)) + `],"role":"assistant"}`; !strings.Contains(string(api.requests()[1].body), want) {
		t.Errorf("the paused content was not sent back; want %s in\n%s", want, api.requests()[1].body)
	}
}
