package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
)

// chatBody is a Chat Completions answer.
func chatBody(id, finish, content string, calls ...string) string {
	msg := fmt.Sprintf(`{"role":"assistant","content":%q}`, content)
	if len(calls) > 0 {
		msg = fmt.Sprintf(`{"role":"assistant","content":%q,"tool_calls":[%s]}`, content, strings.Join(calls, ","))
	}
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion","created":1,"model":"llama3.1","choices":[{"index":0,"finish_reason":%q,"message":%s}],`+
		`"usage":{"prompt_tokens":50,"completion_tokens":7,"total_tokens":57}}`, id, finish, msg)
}

func chatCall(id, name, args string) string {
	return fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}`, id, name, args)
}

func newChat(t *testing.T, cfg gateway.Config) *gateway.Chat {
	t.Helper()
	m, err := gateway.NewChat("llama3.1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestChatRequestGolden(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, exchange{body: chatBody("chatcmpl-1", "stop", "Done.")})
	var logs bytes.Buffer
	cfg := api.config(&logs)
	cfg.MaxOutputTokens = 2048
	tools := testTools(t)
	input := goldenTranscript()
	// A software search done at an earlier step loaded get_shipping_eta.
	input = append(input,
		toolbus.Item{Kind: toolbus.KindOpaque, Provider: gateway.ProviderChat,
			Raw: json.RawMessage(`{"type":"tool_search_call","call_id":"call_s","arguments":"{\"query\":\"shipping\"}"}`)},
		toolbus.Item{Kind: toolbus.KindOpaque, Provider: gateway.ProviderChat,
			Raw: json.RawMessage(`{"type":"tool_search_output","call_id":"call_s","loaded":["get_shipping_eta"],"output":"Loaded: get_shipping_eta"}`)},
	)
	resp, err := newChat(t, cfg).Respond(context.Background(), &gateway.Request{
		Instructions: "You are a careful assistant.", Input: input, Tools: tools, ParallelToolCalls: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "Done." || resp.Usage.InputTokens != 50 || resp.Usage.OutputTokens != 7 {
		t.Errorf("response %+v", resp)
	}
	reqs := api.requests()
	if len(reqs) != 1 || reqs[0].path != "/v1/chat/completions" {
		t.Fatalf("requests %+v", reqs)
	}
	checkGolden(t, "chat_request", reqs[0].body)

	body := string(reqs[0].body)
	if want := `"parameters":` + compact(t, []byte(limitsSchema)); !strings.Contains(body, want) {
		t.Errorf("raw schema not sent byte for byte; want %s in\n%s", want, body)
	}
	var sent struct {
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(reqs[0].body, &sent); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range sent.Tools {
		names = append(names, tool.Function.Name)
	}
	// list_open_orders stays hidden: it is deferred and no search loaded it.
	// Chat Completions has no namespaces: crm's get_customer goes out flattened.
	if want := []string{"read_file", "set_limits", "tag", "crm__get_customer", "get_shipping_eta", "tool_search"}; !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
	noKey(t, "logs", logs.String())
}

func TestChatMultiStep(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t,
		exchange{body: chatBody("c1", "tool_calls", "Reading both.",
			chatCall("call_1", "read_file", `{"path":"a.md"}`), chatCall("call_2", "crm__get_customer", `{"customer_id":"C1"}`))},
		exchange{body: chatBody("c2", "tool_calls", "", chatCall("", "read_file", `{"path":"b.md"}`))},
		exchange{body: chatBody("c3", "stop", "All read.")},
	)
	m := newChat(t, api.config(&bytes.Buffer{}))
	req := &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("Read.")}, Tools: testTools(t), ParallelToolCalls: true}
	var all []toolbus.Item
	for step := range 3 {
		req.Step = step
		resp, err := m.Respond(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		all = append(all, resp.Calls()...)
		req.Input = append(req.Input, resp.Items...)
		req.Input = append(req.Input, outputsFor(resp)...)
		if step == 2 && resp.Text() != "All read." {
			t.Errorf("final text %q", resp.Text())
		}
	}
	if len(all) != 3 {
		t.Fatalf("%d calls, want 3", len(all))
	}
	if all[1].Name != "get_customer" || all[1].Namespace != "crm" {
		t.Errorf("crm__get_customer call came back as %q in namespace %q, want get_customer in crm", all[1].Name, all[1].Namespace)
	}
	if all[2].CallID == "" {
		t.Error("a call the server sent without id got none")
	}
	// The third request holds: user, assistant(text + 2 calls), 2 tool messages,
	// assistant(1 call), 1 tool message.
	msgs := jsonPath(t, api.body(2), "messages").([]any)
	var roles []string
	for _, msg := range msgs {
		roles = append(roles, msg.(map[string]any)["role"].(string))
	}
	if want := []string{"user", "assistant", "tool", "tool", "assistant", "tool"}; !slices.Equal(roles, want) {
		t.Errorf("roles %v, want %v", roles, want)
	}
	if got := jsonPath(t, msgs[1], "content"); got != "Reading both." {
		t.Errorf("assistant content %v", got)
	}
	if got := len(jsonPath(t, msgs[1], "tool_calls").([]any)); got != 2 {
		t.Errorf("first assistant message has %d tool calls, want 2", got)
	}
	if got, want := jsonPath(t, msgs[5], "tool_call_id"), all[2].CallID; got != want {
		t.Errorf("tool message answers %v, want %v", got, want)
	}
}

func TestChatSoftwareToolSearch(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t,
		exchange{body: chatBody("c1", "tool_calls", "", chatCall("call_s", "tool_search", `{"query":"shipping eta"}`))},
		exchange{body: chatBody("c2", "tool_calls", "", chatCall("call_e", "get_shipping_eta", `{"order_id":"o42"}`))},
		exchange{body: chatBody("c3", "stop", "Arrives Friday.")},
	)
	m := newChat(t, api.config(&bytes.Buffer{}))
	tools := testTools(t)
	req := &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("When does o42 arrive?")}, Tools: tools}
	resp, err := m.Respond(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(resp.Items), []toolbus.ItemKind{toolbus.KindOpaque, toolbus.KindOpaque, toolbus.KindFunctionCall}; !slices.Equal(got, want) {
		t.Fatalf("items %v, want %v: the search must not reach the turn as a call", got, want)
	}
	if c := resp.Calls()[0]; c.Name != "get_shipping_eta" || c.Arguments != `{"order_id":"o42"}` {
		t.Errorf("call %+v", c)
	}
	if n := len(api.requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
	toolNames := func(i int) []string {
		var names []string
		for _, tool := range jsonPath(t, api.body(i), "tools").([]any) {
			names = append(names, jsonPath(t, tool, "function", "name").(string))
		}
		return names
	}
	if slices.Contains(toolNames(0), "get_shipping_eta") {
		t.Error("deferred tool sent before it was searched for")
	}
	desc := jsonPath(t, api.body(0), "tools", 4, "function", "description").(string)
	if !strings.Contains(desc, "get_shipping_eta: Look up shipping ETA details for an order.") {
		t.Errorf("tool_search description does not list the deferred tools:\n%s", desc)
	}
	if !slices.Contains(toolNames(1), "get_shipping_eta") {
		t.Errorf("search did not load the tool: %v", toolNames(1))
	}
	msgs := jsonPath(t, api.body(1), "messages").([]any)
	if got := jsonPath(t, msgs[1], "tool_calls", 0, "function", "name"); got != "tool_search" {
		t.Errorf("assistant message does not hold the search call: %v", msgs[1])
	}
	if got := jsonPath(t, msgs[2], "content").(string); !strings.Contains(got, "get_shipping_eta") || jsonPath(t, msgs[2], "tool_call_id") != "call_s" {
		t.Errorf("search answer %v", msgs[2])
	}

	// The loaded tool stays loaded at the next step.
	req.Input = append(req.Input, resp.Items...)
	req.Input = append(req.Input, outputsFor(resp)...)
	req.Step = 1
	if _, err := m.Respond(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(toolNames(2), "get_shipping_eta") {
		t.Errorf("loaded tool dropped at the next step: %v", toolNames(2))
	}
}

func TestChatTruncation(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, exchange{body: chatBody("c1", "length", "", chatCall("call_1", "set_limits", `{"max": 1`))})
	resp, err := newChat(t, api.config(&bytes.Buffer{})).Respond(context.Background(),
		&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}, Tools: testTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Truncated || len(resp.Calls()) != 1 || !resp.Calls()[0].Truncated {
		t.Errorf("response %+v: want it and its call truncated", resp)
	}
}

func TestChatNoKey(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, exchange{body: chatBody("c1", "stop", "hi")})
	cfg := api.config(&bytes.Buffer{})
	cfg.APIKey = ""
	if _, err := newChat(t, cfg).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}}); err != nil {
		t.Fatal(err)
	}
	if auth := api.requests()[0].header.Get("Authorization"); auth != "" {
		t.Errorf("Authorization %q sent without a key", auth)
	}
}

func TestChatErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ex     exchange
		status int
		want   string
	}{
		{"unauthorized", exchange{status: http.StatusUnauthorized, body: `{"error":{"message":"bad key ` + testKey + `"}}`}, 401, "bad key [redacted]"},
		{"unknown model", exchange{status: http.StatusNotFound, body: `{"error":{"message":"model \"llama9\" not found, try pulling it first"}}`}, 404, "not found"},
		{"no choices", exchange{body: `{"id":"c1","choices":[]}`}, 0, "malformed response: no choices"},
		{"bad JSON", exchange{body: `{"id":"c1","choices":[{"message":`}, 0, "malformed response"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, tc.ex)
			_, err := newChat(t, api.config(&bytes.Buffer{})).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
			var gwErr *gateway.Error
			if !errors.As(err, &gwErr) || gwErr.Status != tc.status || !strings.Contains(gwErr.Message, tc.want) {
				t.Fatalf("err = %v, want a *gateway.Error with status %d and %q", err, tc.status, tc.want)
			}
			if gwErr.Provider != gateway.ProviderChat {
				t.Errorf("provider %q", gwErr.Provider)
			}
			noKey(t, "error", err.Error())
		})
	}
}

func TestChatToolSearchNameClash(t *testing.T) {
	t.Parallel()
	tools := append(testTools(t), rawTool(t, toolbusDef("tool_search")))
	api := newFakeAPI(t)
	_, err := newChat(t, api.config(&bytes.Buffer{})).Respond(context.Background(),
		&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}, Tools: tools})
	if err == nil || !strings.Contains(err.Error(), "clashes") {
		t.Fatalf("err = %v, want a name clash", err)
	}
	if len(api.requests()) != 0 {
		t.Error("request sent despite the clash")
	}
}
