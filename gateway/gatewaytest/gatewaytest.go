// Package gatewaytest serves the streaming wire of the model APIs for tests and the
// bench: an HTTP server on loopback that answers each request with the next scripted
// stream of server-sent events, written and flushed one event at a time, byte for byte as
// the provider documents them, each event paced or held as the script says, or with the
// same response as one JSON body to a request that does not stream. Responses builds
// the events of a Responses API response, Messages those of an Anthropic Messages API
// response.
package gatewaytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// Event is one server-sent event: "event: NAME" (left out when Name is empty, as Chat
// Completions sends them), "data: DATA", a blank line. Before it is written, the server
// waits Delay, then until Wait is closed (when set).
type Event struct {
	Name, Data string
	Delay      time.Duration
	Wait       <-chan struct{}
	// Writing, when set, is called just before the event is written (and flushed): the
	// moment it leaves, for a measurement (once written, the server's goroutine may
	// not run again before the client has read it).
	Writing func()
}

// Stream is the answer to one request: its events, then the end of the body, or a
// connection dropped without an end when Drop is set. Whole, when set, answers a request
// that did not ask to stream (no "stream": true): once every event's Delay has passed,
// the server sends it as one JSON body, as the API answers such a request.
type Stream struct {
	Events []Event
	Drop   bool
	Whole  string
}

// Request is a request a Server received.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	At           time.Time
}

// Server answers the requests it receives with its streams, in order.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	streams  []Stream
	requests []Request
	// Repeat, when set, answers every request past the last stream with it.
	repeat *Stream
}

// NewServer starts a server answering with streams. Close it when done.
func NewServer(streams ...Stream) *Server {
	s := &Server{streams: streams}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Repeat makes the server answer every request past its streams with st.
func (s *Server) Repeat(st Stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repeat = &st
}

// BaseURL is the API root to give an OpenAI gateway (Config.BaseURL).
func (s *Server) BaseURL() string { return s.srv.URL + "/v1" }

// URL is the server's root, the base URL of the Anthropic gateway (its SDK asks for
// v1/messages under it).
func (s *Server) URL() string { return s.srv.URL }

// Client is the HTTP client of the server (Config.HTTPClient).
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Close stops the server and its connections.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Arrivals returns when each request arrived, in order.
func (s *Server) Arrivals() []time.Time {
	var out []time.Time
	for _, r := range s.Requests() {
		out = append(out, r.At)
	}
	return out
}

// Bodies returns the request bodies received so far.
func (s *Server) Bodies() [][]byte {
	var out [][]byte
	for _, r := range s.Requests() {
		out = append(out, r.Body)
	}
	return out
}

// maxBody bounds the request body a server reads.
const maxBody = 64 << 20

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: at})
	var st *Stream
	switch {
	case n < len(s.streams):
		st = &s.streams[n]
	case s.repeat != nil:
		st = s.repeat
	}
	s.mu.Unlock()
	if st == nil {
		http.Error(w, fmt.Sprintf(`{"error":{"message":"unexpected request %d","type":"invalid_request_error"}}`, n+1), http.StatusBadRequest)
		return
	}
	st.serve(w, r, body)
}

// ServeHTTP answers one request with the stream (or its Whole), for a test server
// that checks requests its own way before it answers.
func (st Stream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	st.serve(w, r, body)
}

func (st *Stream) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	var asked struct {
		Stream bool `json:"stream"`
	}
	if _ = json.Unmarshal(body, &asked); !asked.Stream && st.Whole != "" {
		var total time.Duration
		for _, ev := range st.Events {
			total += ev.Delay
		}
		t := time.NewTimer(total)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, st.Whole)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	flush := func() {
		if f != nil {
			f.Flush()
		}
	}
	flush()
	for _, ev := range st.Events {
		if ev.Delay > 0 {
			t := time.NewTimer(ev.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if ev.Wait != nil {
			select {
			case <-ev.Wait:
			case <-r.Context().Done():
				return
			}
		}
		if ev.Writing != nil {
			ev.Writing()
		}
		if ev.Name != "" {
			fmt.Fprintf(w, "event: %s\n", ev.Name)
		}
		fmt.Fprintf(w, "data: %s\n\n", ev.Data)
		flush()
	}
	if st.Drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
			}
		}
	}
}

// Responses builds the events of one streamed Responses API response, in the order
// the API sends them: response.created and .in_progress, then for each output item its
// output_item.added, its deltas and .done events and its output_item.done, then the
// terminal event (Completed or Incomplete).
type Responses struct {
	id     string
	seq    int
	events []Event
	output []json.RawMessage
	next   *Event // the pacing of the next event
	whole  string // the terminal event's response
}

// responseHead is a response's fields before its status; details is its
// incomplete_details.
func responseHead(details string) string {
	return `"object":"response","created_at":1741476777,"error":null,"incomplete_details":` + details + `,` +
		`"instructions":null,"max_output_tokens":null,"model":"gpt-test","parallel_tool_calls":true,` +
		`"previous_response_id":null,"store":false,"temperature":1.0,"tool_choice":"auto","top_p":1.0,"truncation":"disabled"`
}

// NewResponses starts the events of response id.
func NewResponses(id string) *Responses {
	b := &Responses{id: id}
	for _, typ := range []string{"response.created", "response.in_progress"} {
		b.add(typ, fmt.Sprintf(`"response":{"id":%q,%s,"status":"in_progress","output":[],"usage":null}`, id, responseHead("null")))
	}
	return b
}

// Pace delays the next event by d and holds it until wait is closed (nil: no hold).
func (b *Responses) Pace(d time.Duration, wait <-chan struct{}) *Responses {
	b.next = &Event{Delay: d, Wait: wait}
	return b
}

// DelayLast delays the last event added so far by d more: with Call, its
// output_item.done, as a call's arguments take the model time to write.
func (b *Responses) DelayLast(d time.Duration) *Responses {
	b.events[len(b.events)-1].Delay += d
	return b
}

// OnWrite calls f just before the last event added so far is written.
func (b *Responses) OnWrite(f func()) *Responses {
	b.events[len(b.events)-1].Writing = f
	return b
}

func (b *Responses) add(typ, fields string) {
	data := fmt.Sprintf(`{"type":%q,"sequence_number":%d,%s}`, typ, b.seq, fields)
	b.seq++
	ev := Event{Name: typ, Data: data}
	if b.next != nil {
		ev.Delay, ev.Wait = b.next.Delay, b.next.Wait
		b.next = nil
	}
	b.events = append(b.events, ev)
}

func quote(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// Message adds an assistant message written in pieces.
func (b *Responses) Message(pieces ...string) *Responses {
	i := len(b.output)
	id := fmt.Sprintf("msg_%d", i)
	text := ""
	for _, p := range pieces {
		text += p
	}
	part := fmt.Sprintf(`{"type":"output_text","annotations":[],"logprobs":[],"text":%s}`, quote(text))
	b.add("response.output_item.added", fmt.Sprintf(`"output_index":%d,"item":{"id":%q,"type":"message","status":"in_progress","content":[],"role":"assistant"}`, i, id))
	b.add("response.content_part.added", fmt.Sprintf(`"item_id":%q,"output_index":%d,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}`, id, i))
	for _, p := range pieces {
		b.add("response.output_text.delta", fmt.Sprintf(`"item_id":%q,"output_index":%d,"content_index":0,"delta":%s,"logprobs":[]`, id, i, quote(p)))
	}
	b.add("response.output_text.done", fmt.Sprintf(`"item_id":%q,"output_index":%d,"content_index":0,"text":%s,"logprobs":[]`, id, i, quote(text)))
	b.add("response.content_part.done", fmt.Sprintf(`"item_id":%q,"output_index":%d,"content_index":0,"part":%s`, id, i, part))
	item := fmt.Sprintf(`{"id":%q,"type":"message","status":"completed","content":[%s],"role":"assistant"}`, id, part)
	b.add("response.output_item.done", fmt.Sprintf(`"output_index":%d,"item":%s`, i, item))
	b.output = append(b.output, json.RawMessage(item))
	return b
}

// Item adds an output item that comes whole (a reasoning item, a tool search call, a
// call with fields Call does not set): its output_item.added and output_item.done, both
// with item, a JSON object.
func (b *Responses) Item(item string) *Responses {
	i := len(b.output)
	b.add("response.output_item.added", fmt.Sprintf(`"output_index":%d,"item":%s`, i, item))
	b.add("response.output_item.done", fmt.Sprintf(`"output_index":%d,"item":%s`, i, item))
	b.output = append(b.output, json.RawMessage(item))
	return b
}

// Call adds a function call whose arguments come in the given pieces.
func (b *Responses) Call(callID, name string, pieces ...string) *Responses {
	return b.call(callID, name, true, pieces)
}

// CutCall adds a function call the output limit cut: its arguments stop after pieces,
// and it is done "incomplete". End the response with Incomplete("max_output_tokens").
func (b *Responses) CutCall(callID, name string, pieces ...string) *Responses {
	return b.call(callID, name, false, pieces)
}

func (b *Responses) call(callID, name string, whole bool, pieces []string) *Responses {
	i := len(b.output)
	id := fmt.Sprintf("fc_%d", i)
	args := ""
	for _, p := range pieces {
		args += p
	}
	b.add("response.output_item.added", fmt.Sprintf(`"output_index":%d,"item":{"id":%q,"type":"function_call","status":"in_progress","arguments":"","call_id":%q,"name":%q}`, i, id, callID, name))
	for _, p := range pieces {
		b.add("response.function_call_arguments.delta", fmt.Sprintf(`"item_id":%q,"output_index":%d,"delta":%s`, id, i, quote(p)))
	}
	status := "completed"
	if whole {
		b.add("response.function_call_arguments.done", fmt.Sprintf(`"item_id":%q,"output_index":%d,"arguments":%s`, id, i, quote(args)))
	} else {
		status = "incomplete"
	}
	item := fmt.Sprintf(`{"id":%q,"type":"function_call","status":%q,"arguments":%s,"call_id":%q,"name":%q}`, id, status, quote(args), callID, name)
	b.add("response.output_item.done", fmt.Sprintf(`"output_index":%d,"item":%s`, i, item))
	b.output = append(b.output, json.RawMessage(item))
	return b
}

func (b *Responses) usage(in, out int) string {
	return fmt.Sprintf(`"usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":0},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`, in, out, in+out)
}

func (b *Responses) final(typ, status, details string, in, out int) []Event {
	output, _ := json.Marshal(b.output)
	if b.output == nil {
		output = []byte("[]")
	}
	b.whole = fmt.Sprintf(`{"id":%q,%s,"status":%q,"output":%s,%s}`, b.id, responseHead(details), status, output, b.usage(in, out))
	b.add(typ, `"response":`+b.whole)
	return b.events
}

// Completed ends the response (response.completed) with its usage and returns its events.
func (b *Responses) Completed(inputTokens, outputTokens int) []Event {
	return b.final("response.completed", "completed", "null", inputTokens, outputTokens)
}

// Incomplete ends the response (response.incomplete) for reason, e.g. "max_output_tokens".
func (b *Responses) Incomplete(reason string, inputTokens, outputTokens int) []Event {
	return b.final("response.incomplete", "incomplete", fmt.Sprintf(`{"reason":%q}`, reason), inputTokens, outputTokens)
}

// Stream is the response as a Stream: its events, and once it ended (Completed,
// Incomplete), its response whole for a request that does not stream.
func (b *Responses) Stream() Stream { return Stream{Events: b.events, Whole: b.whole} }

// Events returns the events so far, without a terminal event (a stream that breaks).
func (b *Responses) Events() []Event { return b.events }
