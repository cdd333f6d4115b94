package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/gateway/gatewaytest"
)

type (
	sse       = gatewaytest.Event
	sseStream = gatewaytest.Stream
)

// sseServer is a gatewaytest server closed with its test.
type sseServer struct {
	t *testing.T
	*gatewaytest.Server
}

func newSSEServer(t *testing.T, streams ...sseStream) *sseServer {
	t.Helper()
	s := gatewaytest.NewServer(streams...)
	t.Cleanup(s.Close)
	return &sseServer{t: t, Server: s}
}

func (s *sseServer) config() gateway.Config {
	return gateway.Config{APIKey: testKey, BaseURL: s.BaseURL(), HTTPClient: s.Client()}
}

func (s *sseServer) body(i int) map[string]any {
	s.t.Helper()
	var v map[string]any
	if err := json.Unmarshal(s.Bodies()[i], &v); err != nil {
		s.t.Fatalf("request %d is not JSON: %v", i, err)
	}
	return v
}

// ev is an event of the Responses stream: its type names it, as the API sends it.
func ev(data string) sse {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal([]byte(data), &head); err != nil {
		panic(fmt.Sprintf("event %s: %v", data, err))
	}
	return sse{Name: head.Type, Data: data}
}

// Items of the Responses stream fakes.
const (
	respMsgDone = `{"id":"msg_1","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Reading both files."}],"role":"assistant"}`
	respFC1Done = `{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"path\":\"a.txt\"}","call_id":"call_a","name":"read_file"}`
	respFC2Done = `{"id":"fc_2","type":"function_call","status":"completed","arguments":"{\"path\":\"b.txt\"}","call_id":"call_b","name":"read_file"}`
	respHead    = `"object":"response","created_at":1741476777,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-test","parallel_tool_calls":true,"previous_response_id":null,"store":false,"temperature":1.0,"tool_choice":"auto","top_p":1.0,"truncation":"disabled"`
)

// responsesCallEvents are the events of one streamed function call at index i.
func responsesCallEvents(i int, seq *int, id, callID, args string, done string) []sse {
	next := func() int { *seq++; return *seq }
	half := len(args) / 2
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return []sse{
		ev(fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":%d,"output_index":%d,"item":{"id":%q,"type":"function_call","status":"in_progress","arguments":"","call_id":%q,"name":"read_file"}}`, next(), i, id, callID)),
		ev(fmt.Sprintf(`{"type":"response.function_call_arguments.delta","sequence_number":%d,"item_id":%q,"output_index":%d,"delta":%s}`, next(), id, i, q(args[:half]))),
		ev(fmt.Sprintf(`{"type":"response.function_call_arguments.delta","sequence_number":%d,"item_id":%q,"output_index":%d,"delta":%s}`, next(), id, i, q(args[half:]))),
		ev(fmt.Sprintf(`{"type":"response.function_call_arguments.done","sequence_number":%d,"item_id":%q,"output_index":%d,"arguments":%s}`, next(), id, i, q(args))),
		ev(fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":%d,"output_index":%d,"item":%s}`, next(), i, done)),
	}
}

// recorder collects what a gateway streams, and closes calls once it has seen n calls.
type recorder struct {
	mu     sync.Mutex
	events []gateway.StreamEvent
	want   int
	calls  chan struct{}
}

func newRecorder(calls int) *recorder {
	return &recorder{want: calls, calls: make(chan struct{})}
}

func (r *recorder) stream(e gateway.StreamEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	n := 0
	for _, e := range r.events {
		if e.Kind == gateway.StreamItem && e.Item.Kind == toolbus.KindFunctionCall {
			n++
		}
	}
	if n == r.want {
		close(r.calls)
	}
}

func (r *recorder) got() []gateway.StreamEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gateway.StreamEvent(nil), r.events...)
}

// checkStreamed checks a stream delivered the text pieces in order for item 0, then
// the message, then the calls, each item equal to the Response's at its index.
func checkStreamed(t *testing.T, got []gateway.StreamEvent, resp *gateway.Response, pieces []string) {
	t.Helper()
	var text []string
	items := 0
	for _, e := range got {
		switch e.Kind {
		case gateway.StreamText:
			if items > 0 || e.Index != 0 {
				t.Errorf("text piece %q at index %d after %d items", e.Text, e.Index, items)
			}
			text = append(text, e.Text)
		case gateway.StreamItem:
			if e.Index != items {
				t.Errorf("item %d delivered with index %d", items, e.Index)
			}
			if e.Index < len(resp.Items) {
				a, _ := json.Marshal(e.Item)
				b, _ := json.Marshal(resp.Items[e.Index])
				if string(a) != string(b) {
					t.Errorf("item %d streamed as %s, the response holds %s", e.Index, a, b)
				}
			}
			items++
		}
	}
	if strings.Join(text, "|") != strings.Join(pieces, "|") {
		t.Errorf("text pieces %q, want %q", text, pieces)
	}
	if items != len(resp.Items) {
		t.Errorf("%d items streamed, the response holds %d", items, len(resp.Items))
	}
}

// TestResponsesStreamWire: the Responses stream, event by event as the API documents it:
// text pieces in order, each item delivered once done (both calls before
// response.completed is even sent), the response whole with its usage. The turn's side
// (dispatch before the end, text on the bus) is actors' TestResponsesStream.
func TestResponsesStreamWire(t *testing.T) {
	t.Parallel()
	seen := make(chan struct{})
	seq := 0
	next := func() int { seq++; return seq }
	events := []sse{
		ev(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1",` + respHead + `,"status":"in_progress","output":[],"usage":null}}`),
		ev(fmt.Sprintf(`{"type":"response.in_progress","sequence_number":%d,"response":{"id":"resp_1",`+respHead+`,"status":"in_progress","output":[],"usage":null}}`, next())),
		ev(fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":%d,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`, next())),
		ev(fmt.Sprintf(`{"type":"response.content_part.added","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}`, next())),
		ev(fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Reading","logprobs":[]}`, next())),
		ev(fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" both","logprobs":[]}`, next())),
		ev(fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" files.","logprobs":[]}`, next())),
		ev(fmt.Sprintf(`{"type":"response.output_text.done","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"text":"Reading both files.","logprobs":[]}`, next())),
		ev(fmt.Sprintf(`{"type":"response.content_part.done","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":"Reading both files."}}`, next())),
		ev(fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":%d,"output_index":0,"item":%s}`, next(), respMsgDone)),
	}
	events = append(events, responsesCallEvents(1, &seq, "fc_1", "call_a", `{"path":"a.txt"}`, respFC1Done)...)
	events = append(events, responsesCallEvents(2, &seq, "fc_2", "call_b", `{"path":"b.txt"}`, respFC2Done)...)
	// The response ends only once both calls were delivered.
	done := ev(fmt.Sprintf(`{"type":"response.completed","sequence_number":%d,"response":{"id":"resp_1",`+respHead+`,"status":"completed","output":[%s,%s,%s],"usage":{"input_tokens":321,"input_tokens_details":{"cached_tokens":0},"output_tokens":45,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":366}}}`,
		next(), respMsgDone, respFC1Done, respFC2Done))
	done.Wait = seen
	events = append(events, done)
	srv := newSSEServer(t, sseStream{Events: events})

	m, err := gateway.NewResponses("gpt-test", srv.config())
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(2)
	go func() {
		<-rec.calls
		close(seen)
	}()
	tools := testTools(t)
	resp, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("read a and b")}, Tools: tools, ParallelToolCalls: true, Stream: rec.stream})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.body(0)["stream"]; got != true {
		t.Errorf(`request "stream" = %v, want true`, got)
	}
	checkStreamed(t, rec.got(), resp, []string{"Reading", " both", " files."})
	calls := resp.Calls()
	if len(calls) != 2 || calls[0].CallID != "call_a" || calls[0].Arguments != `{"path":"a.txt"}` || calls[1].CallID != "call_b" || calls[1].Arguments != `{"path":"b.txt"}` {
		t.Errorf("calls %+v", calls)
	}
	if resp.Text() != "Reading both files." || resp.Truncated {
		t.Errorf("text %q, truncated %v", resp.Text(), resp.Truncated)
	}
	if resp.Usage != (gateway.Usage{InputTokens: 321, OutputTokens: 45}) {
		t.Errorf("usage %+v", resp.Usage)
	}
	if resp.ID != "resp_1" {
		t.Errorf("id %q", resp.ID)
	}
}

// chunk is a Chat Completions stream chunk with one choice holding delta.
func chunk(delta, finish string) sse {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return sse{Data: `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741476777,"model":"gpt-test","system_fingerprint":"fp_1","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + f + `}],"usage":null}`}
}

func TestChatStream(t *testing.T) {
	t.Parallel()
	first := make(chan struct{})
	events := []sse{
		chunk(`{"role":"assistant","content":"","refusal":null}`, ""),
		chunk(`{"content":"Reading"}`, ""),
		chunk(`{"content":" both files."}`, ""),
		chunk(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"th\": \"a"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":".txt\"}"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"read_file","arguments":""}}]}`, ""),
		// The second call goes on only once the first was delivered whole.
		{Data: chunk(`{"tool_calls":[{"index":1,"function":{"arguments":"{\"path\""}}]}`, "").Data, Wait: first},
		chunk(`{"tool_calls":[{"index":1,"function":{"arguments":": \"b.txt\"}"}}]}`, ""),
		chunk(`{}`, "tool_calls"),
		{Data: `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741476777,"model":"gpt-test","system_fingerprint":"fp_1","choices":[],"usage":{"prompt_tokens":210,"completion_tokens":38,"total_tokens":248,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`},
		{Data: "[DONE]"},
	}
	srv := newSSEServer(t, sseStream{Events: events})
	m, err := gateway.NewChat("gpt-test", srv.config())
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(1)
	go func() {
		<-rec.calls
		close(first)
	}()
	tools := testTools(t)
	resp, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("read a and b")}, Tools: tools[:1], ParallelToolCalls: true, Stream: rec.stream})
	if err != nil {
		t.Fatal(err)
	}
	body := srv.body(0)
	if body["stream"] != true || jsonPath(t, body, "stream_options", "include_usage") != true {
		t.Errorf(`request "stream" = %v, "stream_options" = %v: want true and include_usage`, body["stream"], body["stream_options"])
	}
	checkStreamed(t, rec.got(), resp, []string{"Reading", " both files."})
	calls := resp.Calls()
	if len(calls) != 2 || calls[0].CallID != "call_a" || calls[0].Arguments != `{"path": "a.txt"}` || calls[1].CallID != "call_b" || calls[1].Arguments != `{"path": "b.txt"}` {
		t.Errorf("calls %+v", calls)
	}
	if calls[0].Truncated || calls[1].Truncated || resp.Truncated {
		t.Errorf("truncated: %+v", resp)
	}
	if resp.Text() != "Reading both files." {
		t.Errorf("text %q", resp.Text())
	}
	if resp.Usage != (gateway.Usage{InputTokens: 210, OutputTokens: 38}) {
		t.Errorf("usage %+v (include_usage's last chunk)", resp.Usage)
	}
}

// TestStreamCutLengthChat: a Chat answer that ends on its output limit in the middle of
// its second call delivers the first whole and only marks the second truncated.
func TestStreamCutLengthChat(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, sseStream{Events: []sse{
		chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"a.txt\"}"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"b."}}]}`, ""),
		chunk(`{}`, "length"),
		{Data: "[DONE]"},
	}})
	m, err := gateway.NewChat("gpt-test", srv.config())
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(1)
	resp, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("go")}, Tools: testTools(t)[:1], Stream: rec.stream})
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Calls()
	if !resp.Truncated || len(calls) != 2 || calls[0].Truncated || !calls[1].Truncated {
		t.Fatalf("want the second call alone truncated: %+v", resp)
	}
	var delivered []string
	for _, e := range rec.got() {
		if e.Kind == gateway.StreamItem {
			delivered = append(delivered, e.Item.CallID)
		}
	}
	if strings.Join(delivered, ",") != "call_a" {
		t.Errorf("delivered %v, want call_a alone", delivered)
	}
}

// TestStreamBreaks: a stream that breaks before anything of it was delivered is asked
// again; one that breaks after fails the step with ErrStreamCut.
func TestStreamBreaks(t *testing.T) {
	t.Parallel()
	created := ev(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1",` + respHead + `,"status":"in_progress","output":[],"usage":null}}`)
	text := ev(`{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel","logprobs":[]}`)
	completed := ev(`{"type":"response.completed","sequence_number":2,"response":{"id":"resp_1",` + respHead + `,"status":"completed","output":[` + respMsgDone + `],"usage":{"input_tokens":3,"output_tokens":4}}}`)

	t.Run("retried", func(t *testing.T) {
		t.Parallel()
		srv := newSSEServer(t, sseStream{Events: []sse{created}, Drop: true}, sseStream{Events: []sse{created, completed}})
		m, _ := gateway.NewResponses("gpt-test", srv.config())
		resp, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("hi")}, Stream: func(gateway.StreamEvent) {}})
		if err != nil || resp.Text() != "Reading both files." {
			t.Fatalf("got %+v, %v; want the second attempt's answer", resp, err)
		}
	})
	t.Run("cut", func(t *testing.T) {
		t.Parallel()
		srv := newSSEServer(t, sseStream{Events: []sse{created, text}, Drop: true})
		m, _ := gateway.NewResponses("gpt-test", srv.config())
		_, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("hi")}, Stream: func(gateway.StreamEvent) {}})
		if !errors.Is(err, gateway.ErrStreamCut) {
			t.Fatalf("err %v, want ErrStreamCut", err)
		}
	})
	// Events the stream's reader hands to ssestream.Stream rather than reading them by
	// hand: one with an error member, one that is no JSON. Each ends the step as Stream
	// makes it end (nothing of it was used: it is not asked again).
	for name, bad := range map[string]struct {
		event sse
		want  string
	}{
		"error member": {sse{Name: "error", Data: `{"type":"error","error":{"message":"overloaded"}}`}, "the response stream reported an error: received error while streaming: {\"message\":\"overloaded\"}"},
		"malformed":    {sse{Name: "response.output_text.delta", Data: `{"type":"response.output_text.delta","delta":`}, "unexpected end of JSON input"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newSSEServer(t, sseStream{Events: []sse{created, bad.event, completed}})
			cfg := srv.config()
			cfg.MaxRetries = -1
			m, _ := gateway.NewResponses("gpt-test", cfg)
			_, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("hi")}, Stream: func(gateway.StreamEvent) {}})
			if err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Fatalf("err %v, want one that says %q", err, bad.want)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		// NoStream: the same request is sent whole, and read as one JSON answer.
		api := newFakeAPI(t, exchange{body: `{"id":"resp_1",` + respHead + `,"status":"completed","output":[` + respMsgDone + `],"usage":{"input_tokens":3,"output_tokens":4}}`})
		cfg := api.config(io.Discard)
		cfg.NoStream = true
		m, _ := gateway.NewResponses("gpt-test", cfg)
		streamed := 0
		resp, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("hi")}, Stream: func(gateway.StreamEvent) { streamed++ }})
		if err != nil || resp.Text() != "Reading both files." || streamed != 0 {
			t.Fatalf("got %+v, %v, %d pieces streamed", resp, err, streamed)
		}
		if _, ok := api.body(0)["stream"]; ok {
			t.Errorf("NoStream sent stream: %v", api.body(0)["stream"])
		}
	})
}

// TestScriptedStream: a paced script streams its words, then its calls.
func TestScriptedStream(t *testing.T) {
	t.Parallel()
	m, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{{
		Text: "Reading both files.", StreamDelayMS: 1, Truncated: true,
		Calls: []gateway.ScriptCall{{Name: "read_file", Arguments: `{"path":"a"}`, DelayMS: 1}, {Name: "write_file", Arguments: `{"path":"b","con`}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(1)
	resp, err := m.Respond(context.Background(), &gateway.Request{Stream: rec.stream})
	if err != nil {
		t.Fatal(err)
	}
	got := rec.got()
	// The cut call is not delivered: the response's last item.
	checkStreamed(t, got, &gateway.Response{Items: resp.Items[:2]}, []string{"Reading ", "both ", "files."})
	calls := resp.Calls()
	if calls[0].Truncated || !calls[1].Truncated {
		t.Errorf("truncated flags %v %v, want the last call alone", calls[0].Truncated, calls[1].Truncated)
	}
}

// TestResponsesStreamToolSearch: a streamed step that searches for deferred tools first:
// the search call, the gateway's answer and the call of the second round are delivered
// in the order of the step's items, numbered across both rounds.
func TestResponsesStreamToolSearch(t *testing.T) {
	t.Parallel()
	search := `{"type":"tool_search_call","id":"ts_1","call_id":"call_ts","execution":"client","status":"completed","arguments":{"query":"crm"}}`
	call := `{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"customer_id\":\"C1\"}","call_id":"call_9","name":"list_open_orders","namespace":"crm"}`
	srv := newSSEServer(t,
		sseStream{Events: gatewaytest.NewResponses("resp_1").Item(search).Completed(100, 5)},
		sseStream{Events: gatewaytest.NewResponses("resp_2").Item(call).Completed(100, 7)})
	m, err := gateway.NewResponses("gpt-test", srv.config())
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(1)
	resp, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("Open orders of C1?")}, Tools: testTools(t), Stream: rec.stream})
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(resp.Items); !slices.Equal(got, []toolbus.ItemKind{toolbus.KindOpaque, toolbus.KindOpaque, toolbus.KindFunctionCall}) {
		t.Fatalf("items %v", got)
	}
	checkStreamed(t, rec.got(), resp, nil)
	if c := resp.Calls()[0]; c.Name != "list_open_orders" || c.Namespace != "crm" || resp.Usage.OutputTokens != 12 {
		t.Errorf("call %+v, usage %+v", c, resp.Usage)
	}
}

// TestStreamRedactsSplitKey: a key the model echoes split over text pieces never reaches
// Request.Stream, whole or in parts; the text around it does, in order.
func TestStreamRedactsSplitKey(t *testing.T) {
	t.Parallel()
	half := len(testKey) / 2
	b := gatewaytest.NewResponses("resp_1").Message("Your key is ", testKey[:half], testKey[half:], " — keep it.")
	srv := newSSEServer(t, sseStream{Events: b.Completed(5, 5)})
	m, err := gateway.NewResponses("gpt-test", srv.config())
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(1)
	resp, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("hi")}, Stream: rec.stream})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, e := range rec.got() {
		if e.Kind == gateway.StreamText {
			noKey(t, "a text piece", e.Text)
			if strings.Contains(testKey, strings.TrimSpace(e.Text)) && len(strings.TrimSpace(e.Text)) > 3 {
				t.Errorf("piece %q is part of the key", e.Text)
			}
			text.WriteString(e.Text)
		}
	}
	if want := "Your key is [redacted] — keep it."; text.String() != want || resp.Text() != want {
		t.Errorf("streamed %q, answered %q; want %q", text.String(), resp.Text(), want)
	}
}

// TestChatStreamWithoutIndex: a server that leaves tool_calls[].index out (two whole
// calls in one delta, each with its id) still gives two calls.
func TestChatStreamWithoutIndex(t *testing.T) {
	t.Parallel()
	srv := newSSEServer(t, sseStream{Events: []sse{
		chunk(`{"role":"assistant","tool_calls":[{"id":"call_a","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"a.txt\"}"}},{"id":"call_b","type":"function","function":{"name":"read_file","arguments":"{\"path\": \"b.txt\"}"}}]}`, ""),
		chunk(`{}`, "stop"),
		{Data: "[DONE]"},
	}})
	m, err := gateway.NewChat("gpt-test", srv.config())
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(2)
	resp, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("go")}, Tools: testTools(t)[:1], Stream: rec.stream})
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Calls()
	if len(calls) != 2 || calls[0].Arguments != `{"path": "a.txt"}` || calls[1].CallID != "call_b" || calls[1].Arguments != `{"path": "b.txt"}` {
		t.Fatalf("calls %+v", calls)
	}
	checkStreamed(t, rec.got(), resp, nil)
}

// TestStreamRefusedAdvises: an endpoint that refuses a streamed request as malformed is
// answered with how to turn streaming off.
func TestStreamRefusedAdvises(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, exchange{status: 400, body: `{"error":{"message":"Unsupported parameter: 'stream'","type":"invalid_request_error"}}`})
	m, err := gateway.NewChat("gpt-test", api.config(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("hi")}, Stream: func(gateway.StreamEvent) {}})
	var ge *gateway.Error
	if !errors.As(err, &ge) || ge.Status != 400 || !strings.Contains(err.Error(), "Unsupported parameter: 'stream'") || !strings.Contains(err.Error(), "-stream=false") {
		t.Fatalf("err %v, want the 400 with the advice to run with -stream=false", err)
	}
}
