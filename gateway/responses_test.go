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
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// responseBody is a Responses API answer with the given output items.
func responseBody(id string, output ...string) string {
	return fmt.Sprintf(`{"id":%q,"object":"response","status":"completed","output":[%s],`+
		`"usage":{"input_tokens":100,"output_tokens":20,"total_tokens":120}}`, id, strings.Join(output, ","))
}

func messageOut(text string) string {
	return fmt.Sprintf(`{"type":"message","id":"msg_1","status":"completed","role":"assistant",`+
		`"content":[{"type":"output_text","text":%q,"annotations":[]}]}`, text)
}

func callOut(callID, name, namespace, args string) string {
	ns := ""
	if namespace != "" {
		ns = fmt.Sprintf(`"namespace":%q,`, namespace)
	}
	return fmt.Sprintf(`{"type":"function_call","id":"fc_%s","call_id":%q,"name":%q,%s"arguments":%q,"status":"completed"}`,
		callID, callID, name, ns, args)
}

const reasoningOut = `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Thinking about files."}],"encrypted_content":"gAAAAB-opaque=="}`

func newResponses(t *testing.T, cfg gateway.Config) *gateway.Responses {
	t.Helper()
	m, err := gateway.NewResponses("gpt-5.4", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// goldenTranscript holds every kind of item the Responses gateway translates: a user
// message, items it returned earlier (carried verbatim), a namespaced call whose output
// does not repeat the namespace, neutral items from a scripted model, an image output,
// and items of another provider that must be skipped.
func goldenTranscript() []toolbus.Item {
	return []toolbus.Item{
		toolbus.UserMessage("List the open orders of CUST-1, then read notes.md."),
		{Kind: toolbus.KindReasoning, Provider: gateway.ProviderResponses, Raw: json.RawMessage(reasoningOut), Text: "Thinking about files."},
		{Kind: toolbus.KindFunctionCall, Provider: gateway.ProviderResponses, CallID: "call_a", Name: "get_customer", Namespace: "crm",
			Arguments: `{"customer_id":"CUST-1"}`, Raw: json.RawMessage(callOut("call_a", "get_customer", "crm", `{"customer_id":"CUST-1"}`))},
		{Kind: toolbus.KindFunctionCall, CallID: "call_b", Name: "read_file", Arguments: `{"path":"notes.md"}`},
		outputItem("call_a", "CUST-1: Ada"),
		{Kind: toolbus.KindCallOutput, CallID: "call_b", Output: []toolbus.ContentPart{
			toolbus.Text("notes.md holds a chart:"), toolbus.Image("image/png", []byte{0x89, 'P', 'N', 'G'})}},
		{Kind: toolbus.KindReasoning, Provider: "anthropic", Raw: json.RawMessage(`{"type":"thinking"}`)},
		{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: "Ada has no open orders."},
		{Kind: toolbus.KindMessage, Role: toolbus.RoleDeveloper, Text: "Answer briefly."},
		toolbus.Note(json.RawMessage(`{"type":"toolbus.usage","step":1,"input_tokens":3,"output_tokens":1}`)),
	}
}

func TestResponsesRequestGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		hosted bool
	}{
		{"responses_request", false},
		{"responses_request_hosted_search", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, exchange{body: responseBody("resp_1", messageOut("Done."))})
			var logs bytes.Buffer
			cfg := api.config(&logs)
			cfg.HostedToolSearch = tc.hosted
			cfg.MaxOutputTokens = 4096
			cfg.ReasoningEffort = "low"
			tools := testTools(t)
			resp, err := newResponses(t, cfg).Respond(context.Background(), &gateway.Request{
				Instructions:      "You are a careful assistant.",
				Input:             goldenTranscript(),
				Tools:             tools,
				ParallelToolCalls: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Text(); got != "Done." {
				t.Errorf("text = %q, want Done.", got)
			}
			reqs := api.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			if reqs[0].path != "/v1/responses" {
				t.Errorf("path = %s", reqs[0].path)
			}
			if got := reqs[0].header.Get("Authorization"); got != "Bearer "+testKey {
				t.Errorf("Authorization = %q", got)
			}
			checkGolden(t, tc.name, reqs[0].body)

			body := string(reqs[0].body)
			// A raw schema reaches the wire as given: key order, 1.50, 1e3, < and &.
			if want := `"parameters":` + compact(t, []byte(limitsSchema)); !strings.Contains(body, want) {
				t.Errorf("raw schema not sent byte for byte; want %s in\n%s", want, body)
			}
			// A Strict tool is sent with its strict projection.
			strict := toolByName(t, tools, "read_file").Params.Strict()
			if strict.Err != nil {
				t.Fatalf("read_file schema not strictable: %v", strict.Err)
			}
			if want := `"strict":true,"name":"read_file","description":"Read a file.","type":"function","parameters":` + compact(t, strict.JSON); !strings.Contains(body, want) {
				t.Errorf("strict projection not sent; want %s in\n%s", want, body)
			}
			// A Strict tool whose schema cannot be strict goes out non-strict, and says so.
			if want := `"strict":false,"name":"tag","description":"Tag things.","type":"function","parameters":` + compact(t, []byte(tagsSchema)); !strings.Contains(body, want) {
				t.Errorf("fallback schema not sent non-strict; want %s in\n%s", want, body)
			}
			if !strings.Contains(logs.String(), "strict tool sent non-strict") || !strings.Contains(logs.String(), "tool=tag") {
				t.Errorf("no log of the strict fallback:\n%s", logs.String())
			}
			noKey(t, "logs", logs.String())
		})
	}
}

func TestResponsesMultiStepParallelCalls(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t,
		exchange{body: responseBody("resp_1", reasoningOut,
			callOut("call_1", "read_file", "", `{"path":"a.md"}`),
			callOut("call_2", "get_customer", "crm", `{"customer_id":"C1"}`))},
		exchange{body: responseBody("resp_2", callOut("call_3", "read_file", "", `{"path":"b.md"}`))},
		exchange{body: responseBody("resp_3", messageOut("All read."))},
	)
	var logs bytes.Buffer
	m := newResponses(t, api.config(&logs))
	tools := testTools(t)
	req := &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("Read a.md and b.md.")}, Tools: tools, ParallelToolCalls: true}

	var wantCalls = [][]string{{"read_file", "get_customer"}, {"read_file"}, nil}
	var last *gateway.Response
	for step := range 3 {
		req.Step = step
		resp, err := m.Respond(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		noKeyInResponse(t, resp)
		var names []string
		for _, c := range resp.Calls() {
			names = append(names, c.Name)
		}
		if !slices.Equal(names, wantCalls[step]) {
			t.Errorf("step %d: calls %v, want %v", step, names, wantCalls[step])
		}
		if resp.Usage.InputTokens != 100 || resp.Usage.OutputTokens != 20 {
			t.Errorf("step %d: usage %+v", step, resp.Usage)
		}
		req.Input = append(req.Input, resp.Items...)
		req.Input = append(req.Input, outputsFor(resp)...)
		last = resp
	}
	if last.Text() != "All read." {
		t.Errorf("final text %q", last.Text())
	}

	first := newResponsesItems(t, api, 0)
	if len(first) != 1 {
		t.Errorf("step 0 sent %d input items, want 1", len(first))
	}
	// Step 2 carries the reasoning verbatim, both calls, and both outputs, the
	// namespaced one with its namespace.
	second := newResponsesItems(t, api, 1)
	if len(second) != 6 {
		t.Fatalf("step 1 sent %d input items, want 6: %s", len(second), second)
	}
	if got, want := string(second[1]), compact(t, []byte(reasoningOut)); got != want {
		t.Errorf("reasoning not carried verbatim:\n got %s\nwant %s", got, want)
	}
	for i, want := range []string{
		`"type":"function_call","id":"fc_call_1","call_id":"call_1"`,
		`"type":"function_call","id":"fc_call_2","call_id":"call_2","name":"get_customer","namespace":"crm"`,
		`{"output":"result of read_file","call_id":"call_1","type":"function_call_output"}`,
		`{"output":"result of get_customer","call_id":"call_2","namespace":"crm","type":"function_call_output"}`,
	} {
		if !strings.Contains(string(second[i+2]), want) {
			t.Errorf("step 1 item %d = %s, want it to hold %s", i+2, second[i+2], want)
		}
	}
	if len(newResponsesItems(t, api, 2)) != 8 {
		t.Errorf("step 2 input has %d items, want 8", len(newResponsesItems(t, api, 2)))
	}
	for i := range 3 {
		if got := api.body(i)["parallel_tool_calls"]; got != true {
			t.Errorf("request %d: parallel_tool_calls = %v", i, got)
		}
	}
	noKey(t, "logs", logs.String())
}

// newResponsesItems returns the raw input items of request i.
func newResponsesItems(t *testing.T, api *fakeAPI, i int) []json.RawMessage {
	t.Helper()
	var body struct {
		Input []json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(api.requests()[i].body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Input
}

func TestResponsesClientToolSearch(t *testing.T) {
	t.Parallel()
	searchCall := `{"type":"tool_search_call","id":"ts_1","call_id":"call_ts","execution":"client","status":"completed","arguments":{"query":"crm"}}`
	api := newFakeAPI(t,
		exchange{body: responseBody("resp_1", searchCall)},
		exchange{body: responseBody("resp_2", callOut("call_9", "list_open_orders", "crm", `{"customer_id":"C1"}`))},
		exchange{body: responseBody("resp_3", messageOut("C1 has two open orders."))},
	)
	var logs bytes.Buffer
	m := newResponses(t, api.config(&logs))
	tools := testTools(t)
	req := &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("Open orders of C1?")}, Tools: tools}

	resp, err := m.Respond(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(resp.Items), []toolbus.ItemKind{toolbus.KindOpaque, toolbus.KindOpaque, toolbus.KindFunctionCall}; !slices.Equal(got, want) {
		t.Fatalf("items %v, want %v", got, want)
	}
	call := resp.Calls()[0]
	if call.Name != "list_open_orders" || call.Namespace != "crm" || call.CallID != "call_9" {
		t.Errorf("call %+v", call)
	}
	if resp.ID != "resp_2" || resp.Usage.InputTokens != 200 {
		t.Errorf("id %s usage %+v: want the last id and the usage of both rounds", resp.ID, resp.Usage)
	}
	if n := len(api.requests()); n != 2 {
		t.Fatalf("%d requests in the search round trip, want 2", n)
	}

	// The second request answers the search with the deferred tool's definition in
	// its namespace.
	items := newResponsesItems(t, api, 1)
	if len(items) != 3 {
		t.Fatalf("second request has %d input items, want 3", len(items))
	}
	if got, want := string(items[1]), compact(t, []byte(searchCall)); got != want {
		t.Errorf("search call not carried verbatim:\n got %s\nwant %s", got, want)
	}
	list := toolByName(t, tools, "list_open_orders").Params.Strict()
	wantOutput := `{"tools":[{"description":"CRM tools for customer lookup and order management.","name":"crm","tools":[` +
		`{"strict":true,"name":"list_open_orders","description":"List open orders for a customer ID.","defer_loading":true,"type":"function","parameters":` +
		compact(t, list.JSON) + `}],"type":"namespace"}],"call_id":"call_ts","status":"completed","execution":"client","type":"tool_search_output"}`
	if got := string(items[2]); got != wantOutput {
		t.Errorf("search output:\n got %s\nwant %s", got, wantOutput)
	}

	// Next step: the loaded tool stays loaded because the search travels with the
	// transcript.
	req.Input = append(req.Input, resp.Items...)
	req.Input = append(req.Input, outputsFor(resp)...)
	req.Step = 1
	resp, err = m.Respond(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "C1 has two open orders." {
		t.Errorf("text %q", resp.Text())
	}
	third := newResponsesItems(t, api, 2)
	if len(third) != 5 || string(third[2]) != wantOutput {
		t.Errorf("third request does not keep the search output: %s", third)
	}
	noKey(t, "logs", logs.String())
}

func TestResponsesToolSearchFindsNothing(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t,
		exchange{body: responseBody("resp_1", `{"type":"tool_search_call","call_id":"c1","execution":"client","status":"completed","arguments":{"query":"weather forecast"}}`)},
		exchange{body: responseBody("resp_2", messageOut("I have no weather tool."))},
	)
	resp, err := newResponses(t, api.config(&bytes.Buffer{})).Respond(context.Background(),
		&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("Weather?")}, Tools: testTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "I have no weather tool." {
		t.Errorf("text %q", resp.Text())
	}
	got := jsonPath(t, api.body(1), "input", 2)
	if tools := jsonPath(t, got, "tools"); tools == nil || len(tools.([]any)) != 0 {
		t.Errorf("search output %v, want an empty tools list", got)
	}
}

func TestResponsesSearchRoundsBounded(t *testing.T) {
	t.Parallel()
	search := func(i int) exchange {
		return exchange{body: responseBody(fmt.Sprint("resp_", i), fmt.Sprintf(
			`{"type":"tool_search_call","call_id":"c%d","execution":"client","status":"completed","arguments":{"query":"crm"}}`, i))}
	}
	api := newFakeAPI(t, search(1), search(2), search(3), search(4))
	_, err := newResponses(t, api.config(&bytes.Buffer{})).Respond(context.Background(),
		&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}, Tools: testTools(t)})
	var gwErr *gateway.Error
	if !errors.As(err, &gwErr) || !strings.Contains(gwErr.Message, "searched for tools 4 times") {
		t.Fatalf("err = %v, want a *gateway.Error about endless searching", err)
	}
	if n := len(api.requests()); n != 4 {
		t.Errorf("%d requests, want 4", n)
	}
}

func TestResponsesHostedToolSearch(t *testing.T) {
	t.Parallel()
	// A hosted search comes back already answered: the gateway carries both items
	// through and answers nothing itself.
	hostedCall := `{"type":"tool_search_call","execution":"server","call_id":null,"status":"completed","arguments":{"paths":["crm"]}}`
	hostedOutput := `{"type":"tool_search_output","execution":"server","call_id":null,"status":"completed","tools":[]}`
	api := newFakeAPI(t, exchange{body: responseBody("resp_1", hostedCall, hostedOutput,
		callOut("call_1", "list_open_orders", "crm", `{"customer_id":"C1"}`))})
	cfg := api.config(&bytes.Buffer{})
	cfg.HostedToolSearch = true
	resp, err := newResponses(t, cfg).Respond(context.Background(),
		&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}, Tools: testTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(resp.Items), []toolbus.ItemKind{toolbus.KindOpaque, toolbus.KindOpaque, toolbus.KindFunctionCall}; !slices.Equal(got, want) {
		t.Errorf("items %v, want %v", got, want)
	}
	if n := len(api.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if got := jsonPath(t, api.body(0), "tools", 5); fmt.Sprint(got) != "map[type:tool_search]" {
		t.Errorf("hosted tool_search tool = %v", got)
	}
}

func TestResponsesTruncation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		status    string
		reason    string
		truncated bool
	}{
		{"max_output_tokens", "incomplete", "max_output_tokens", true},
		{"content_filter", "incomplete", "content_filter", false},
		{"completed", "completed", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"id":"resp_1","status":%q,"incomplete_details":{"reason":%q},"output":[%s,%s]}`,
				tc.status, tc.reason, callOut("call_1", "read_file", "", `{"path":"a"}`),
				`{"type":"function_call","id":"fc_2","call_id":"call_2","name":"set_limits","arguments":"{\"max\": 1","status":"incomplete"}`)
			api := newFakeAPI(t, exchange{body: body})
			resp, err := newResponses(t, api.config(&bytes.Buffer{})).Respond(context.Background(),
				&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}, Tools: testTools(t)})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Truncated != tc.truncated {
				t.Errorf("Truncated = %v, want %v", resp.Truncated, tc.truncated)
			}
			calls := resp.Calls()
			if len(calls) != 2 {
				t.Fatalf("%d calls, want 2", len(calls))
			}
			for _, c := range calls {
				if c.Truncated != tc.truncated {
					t.Errorf("call %s Truncated = %v, want %v", c.CallID, c.Truncated, tc.truncated)
				}
			}
			if calls[1].Arguments != `{"max": 1` {
				t.Errorf("arguments %q, want them raw as sent", calls[1].Arguments)
			}
		})
	}
}

func TestResponsesRetryAfter(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t,
		exchange{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "1"},
			body: `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`},
		exchange{body: responseBody("resp_1", messageOut("ok"))},
	)
	var logs bytes.Buffer
	resp, err := newResponses(t, api.config(&logs)).Respond(context.Background(),
		&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "ok" {
		t.Errorf("text %q", resp.Text())
	}
	reqs := api.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if gap := reqs[1].at.Sub(reqs[0].at); gap < time.Second {
		t.Errorf("retried after %v, before the Retry-After of 1s", gap)
	}
	if !strings.Contains(logs.String(), "status=429 retry_after=1\n") {
		t.Errorf("the refused attempt was not logged with its Retry-After:\n%s", logs.String())
	}
}

// TestRetryWarningOmitsEmptyRetryAfter: a refusal without a Retry-After is logged without
// the attribute, not with an empty one; Retry-After-Ms is logged as such.
func TestRetryWarningOmitsEmptyRetryAfter(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t,
		exchange{status: http.StatusServiceUnavailable, body: `{"error":{"message":"busy"}}`},
		exchange{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After-Ms": "5"}, body: `{"error":{"message":"busy"}}`},
		exchange{body: responseBody("resp_1", messageOut("ok"))},
	)
	var logs bytes.Buffer
	cfg := api.config(&logs)
	if _, err := newResponses(t, cfg).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}}); err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "model request refused") {
			refused = append(refused, l)
		}
	}
	if len(refused) != 2 || strings.Contains(logs.String(), "retry_after=") ||
		!strings.HasSuffix(refused[0], "status=503") || !strings.HasSuffix(refused[1], "status=503 retry_after_ms=5") {
		t.Errorf("warnings:\n%s", strings.Join(refused, "\n"))
	}
}

func TestResponsesRetriesExhausted(t *testing.T) {
	t.Parallel()
	// Retry-After-Ms keeps the test short; the attempt count is what is checked.
	fail := exchange{status: http.StatusInternalServerError, header: map[string]string{"Retry-After-Ms": "5"},
		body: `{"error":{"message":"The server had an error while processing your request."}}`}
	for _, tc := range []struct {
		retries  int
		attempts int
	}{{-1, 1}, {1, 2}, {0, 1 + gateway.DefaultMaxRetries}} {
		t.Run(fmt.Sprint("retries=", tc.retries), func(t *testing.T) {
			script := make([]exchange, tc.attempts)
			for i := range script {
				script[i] = fail
			}
			api := newFakeAPI(t, script...)
			cfg := api.config(&bytes.Buffer{})
			cfg.MaxRetries = tc.retries
			_, err := newResponses(t, cfg).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
			var gwErr *gateway.Error
			if !errors.As(err, &gwErr) || gwErr.Status != http.StatusInternalServerError {
				t.Fatalf("err = %v, want a *gateway.Error with status 500", err)
			}
			if n := len(api.requests()); n != tc.attempts {
				t.Errorf("%d attempts, want %d", n, tc.attempts)
			}
		})
	}
}

func TestResponsesRetriesNetworkError(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, exchange{drop: true}, exchange{body: responseBody("resp_1", messageOut("ok"))})
	resp, err := newResponses(t, api.config(&bytes.Buffer{})).Respond(context.Background(),
		&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "ok" || len(api.requests()) != 2 {
		t.Errorf("text %q after %d requests, want ok after 2", resp.Text(), len(api.requests()))
	}
}

func TestResponsesFatalStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		body   string
		want   []string
	}{
		{http.StatusUnauthorized, `{"error":{"message":"Incorrect API key provided: ` + testKey + `.","type":"invalid_request_error","code":"invalid_api_key"}}`,
			[]string{"HTTP 401", "the API key was refused (check TOOLBUS_MODEL_API_KEY or the -api-key-file)", "Incorrect API key provided: [redacted]"}},
		{http.StatusForbidden, `{"error":{"message":"Project does not have access to model gpt-5.4"}}`,
			[]string{"HTTP 403", "access denied", "does not have access"}},
		{http.StatusNotFound, `{"error":{"message":"The model 'gpt-9' does not exist","code":"model_not_found"}}`,
			[]string{"HTTP 404", "unknown model", "does not exist"}},
		{http.StatusBadRequest, `{"error":{"message":"Invalid schema for function 'x'"}}`,
			[]string{"HTTP 400", "Invalid schema"}},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			api := newFakeAPI(t, exchange{status: tc.status, body: tc.body})
			var logs bytes.Buffer
			_, err := newResponses(t, api.config(&logs)).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
			var gwErr *gateway.Error
			if !errors.As(err, &gwErr) {
				t.Fatalf("err = %v (%T), want *gateway.Error", err, err)
			}
			if gwErr.Status != tc.status || gwErr.Provider != gateway.ProviderResponses {
				t.Errorf("error %+v", gwErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if n := len(api.requests()); n != 1 {
				t.Errorf("%d attempts, want 1: this status is not retried", n)
			}
			noKey(t, "error", err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", gwErr))
			noKey(t, "logs", logs.String())
		})
	}
}

func TestResponsesMalformed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body string }{
		{"truncated JSON", `{"id":"resp_1","output":[{"type":"mess`},
		{"not JSON", `<html>gateway error</html>`},
		{"no output", `{"id":"resp_1","status":"completed"}`},
		{"item without type", `{"id":"resp_1","status":"completed","output":[{"id":"x"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, exchange{body: tc.body})
			_, err := newResponses(t, api.config(&bytes.Buffer{})).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
			var gwErr *gateway.Error
			if !errors.As(err, &gwErr) || !strings.Contains(gwErr.Message, "malformed response") {
				t.Fatalf("err = %v, want a *gateway.Error about a malformed response", err)
			}
		})
	}
}

func TestResponsesFailedStatus(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, exchange{body: `{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"The model crashed."},"output":[]}`})
	_, err := newResponses(t, api.config(&bytes.Buffer{})).Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
	var gwErr *gateway.Error
	if !errors.As(err, &gwErr) || !strings.Contains(gwErr.Message, "The model crashed.") {
		t.Fatalf("err = %v, want the response's error", err)
	}
}

func TestResponsesAbort(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, exchange{hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-api.arrived // the request is at the server, which will never answer
		cancel()
	}()
	_, err := newResponses(t, api.config(&bytes.Buffer{})).Respond(ctx, &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// A done context never reaches the server.
	_, err = newResponses(t, api.config(&bytes.Buffer{})).Respond(ctx, &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
	if !errors.Is(err, context.Canceled) || len(api.requests()) != 1 {
		t.Errorf("err = %v after %d requests, want context.Canceled after 1", err, len(api.requests()))
	}
}

func TestResponsesKeyNeverLeaks(t *testing.T) {
	t.Parallel()
	// A server that echoes the key everywhere it can: in model text, in arguments, in
	// reasoning and in an error.
	echo := "your key is " + testKey
	api := newFakeAPI(t,
		exchange{body: responseBody("resp_1",
			`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"`+echo+`"}]}`,
			messageOut(echo),
			callOut("call_1", "read_file", "", `{"path":"`+testKey+`"}`))},
		exchange{status: http.StatusUnauthorized, body: `{"error":{"message":"bad key ` + testKey + `"}}`},
		exchange{drop: true},
	)
	var logs bytes.Buffer
	cfg := api.config(&logs)
	cfg.MaxRetries = -1
	m := newResponses(t, cfg)
	req := &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}, Tools: testTools(t)}
	resp, err := m.Respond(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	noKeyInResponse(t, resp)
	if !strings.Contains(resp.Text(), "[redacted]") {
		t.Errorf("text %q: the echoed key was not redacted", resp.Text())
	}
	for range 2 {
		_, err = m.Respond(context.Background(), req)
		if err == nil {
			t.Fatal("want an error")
		}
		noKey(t, "error", err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err))
	}
	noKey(t, "logs", logs.String())
}

func TestResponsesCallNamespace(t *testing.T) {
	t.Parallel()
	// A top-level tool loaded by a client search comes back namespaced by its own name;
	// the turn must see it as the top-level tool it is.
	api := newFakeAPI(t, exchange{body: responseBody("resp_1",
		callOut("call_1", "get_shipping_eta", "get_shipping_eta", `{"order_id":"o1"}`),
		callOut("call_2", "list_open_orders", "crm", `{"customer_id":"C1"}`),
		callOut("call_3", "read_file", "", `{"path":"a"}`))})
	resp, err := newResponses(t, api.config(&bytes.Buffer{})).Respond(context.Background(),
		&gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}, Tools: testTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range resp.Calls() {
		got = append(got, c.Name+"@"+c.Namespace)
	}
	if want := []string{"get_shipping_eta@", "list_open_orders@crm", "read_file@"}; !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if raw := string(resp.Calls()[0].Raw); !strings.Contains(raw, `"namespace":"get_shipping_eta"`) {
		t.Errorf("raw call %s lost what the model sent", raw)
	}
}

// TestSubmitResultGolden: a task turn's submit_result goes out on the Responses wire
// strict, with the strict projection of the task's result schema wrapped as the one
// required property "result" of a closed parameters object.
func TestSubmitResultGolden(t *testing.T) {
	t.Parallel()
	result := `{"type":"object","description":"One library compared.",` +
		`"properties":{"name":{"type":"string"},"stars":{"type":"integer","minimum":0},` +
		`"license":{"enum":["MIT","Apache-2.0","BSD-3-Clause"]},"notes":{"type":"string","default":""},` +
		`"links":{"type":"array","items":{"$ref":"#/$defs/link"}}},"required":["name","stars"],` +
		`"$defs":{"link":{"type":"object","properties":{"url":{"type":"string","format":"uri"},"title":{"type":"string"}},"required":["url"]}}}`
	submit, err := workflow.SubmitSpec(json.RawMessage(result))
	if err != nil {
		t.Fatal(err)
	}
	submit.Category = "turn"
	api := newFakeAPI(t, exchange{body: responseBody("resp_1", callOut("call_1", "submit_result", "",
		`{"result":{"name":"bleve","stars":10,"license":null,"notes":null,"links":null}}`))})
	var logs bytes.Buffer
	resp, err := newResponses(t, api.config(&logs)).Respond(context.Background(), &gateway.Request{
		Instructions:      "You work on task \"facts\" of the workflow \"Compare\" (attempt 1 of 1).",
		Input:             []toolbus.Item{toolbus.UserMessage("Find the facts about bleve.")},
		Tools:             []*toolbus.Spec{submit},
		ParallelToolCalls: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := api.requests()
	checkGolden(t, "responses_submit_result", reqs[0].body)
	strict := submit.Params.Strict()
	if strict.Err != nil {
		t.Fatal(strict.Err)
	}
	body := string(reqs[0].body)
	if want := `"strict":true,"name":"submit_result","description":`; !strings.Contains(body, want) {
		t.Errorf("submit_result not sent strict:\n%s", body)
	}
	if want := `"parameters":` + compact(t, strict.JSON); !strings.Contains(body, want) {
		t.Errorf("not the strict projection of the wrapped schema; want %s in\n%s", want, body)
	}
	if !strings.HasPrefix(compact(t, strict.JSON), `{"type":"object","properties":{"result":{"type":"object","description":"One library compared.","properties":{"name":`) ||
		!strings.Contains(compact(t, strict.JSON), `"required":["result"],"additionalProperties":false,"$defs":{"link":`) {
		t.Errorf("the result schema is not wrapped as the property result:\n%s", strict.JSON)
	}
	// The call comes back as the turn reads it: the nulls of optional fields are what the
	// strict projection made nullable, and the ladder strips them before validation.
	args, err := submit.Params.Parse(resp.Calls()[0].Arguments, schema.ParseOptions{Strict: true})
	if err != nil || string(args.JSON) != `{"result":{"name":"bleve","stars":10}}` {
		t.Errorf("the submission read back: %s, %v", args.JSON, err)
	}
}
