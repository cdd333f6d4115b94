package gateway_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/gateway/gatewaytest"
)

// TestStreamReusesConnection: each wire's streamed steps go over one connection, as a
// provider's own SDK, which reads a stream to its end, sends them. A step that closed
// its stream at the terminal event, before the body's end, left the connection unusable:
// every step opened another, which over TLS to a provider is a handshake a step.
//
// Not parallel: it waits longer for a body's end than a step does (100 ms). Its server
// sends the end 5 ms after the last event, from a goroutine of this process, which a
// machine loaded by other tests (CI's, go test -race beside other packages) woke more
// than 100 ms later, twice: one more connection. What it checks is that Close reads
// the body to its end: without that, every step opens a connection, however long the
// wait.
func TestStreamReusesConnection(t *testing.T) {
	gateway.SetDrainPatience(t, 5*time.Second)
	const steps = 4
	usage := gatewaytest.Usage{Input: 10, Output: 2}
	for _, tc := range []struct {
		name   string
		stream func(i int) gatewaytest.Stream
		model  func(t *testing.T, cfg gateway.Config, root string) gateway.Model
	}{
		{"responses", func(int) gatewaytest.Stream {
			return gatewaytest.Stream{Events: gatewaytest.NewResponses("resp_1").Call("c1", "read_file", "{}").Message("done").Completed(10, 2)}
		}, func(t *testing.T, cfg gateway.Config, _ string) gateway.Model {
			m, err := gateway.NewResponses("gpt-test", cfg)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
		{"chat", func(int) gatewaytest.Stream {
			return gatewaytest.Stream{Events: []gatewaytest.Event{
				chunk(`{"role":"assistant","content":"done"}`, ""), chunk(`{}`, "stop"),
				{Data: `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1741476777,"model":"gpt-test","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`},
				{Data: "[DONE]"},
			}}
		}, func(t *testing.T, cfg gateway.Config, _ string) gateway.Model {
			m, err := gateway.NewChat("gpt-test", cfg)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
		{"anthropic", func(int) gatewaytest.Stream {
			return gatewaytest.NewMessages("msg_1", usage).Text("done").End("end_turn").Stream()
		}, func(t *testing.T, cfg gateway.Config, root string) gateway.Model {
			cfg.BaseURL = root
			return newAnthropic(t, cfg)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var conns atomic.Int32
			var mu sync.Mutex
			served := 0
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				i := served
				served++
				mu.Unlock()
				tc.stream(i).ServeHTTP(w, r)
				// The body's end comes a moment after the last event, as over a network:
				// a client that stops reading at the terminal event has not seen it.
				time.Sleep(5 * time.Millisecond) // the server's pace, not a wait for an event
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			m := tc.model(t, gateway.Config{APIKey: testKey, BaseURL: srv.URL + "/v1", HTTPClient: srv.Client()}, srv.URL)
			tools := testTools(t)[:1]
			for i := range steps {
				resp, err := m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("go")},
					Tools: tools, Stream: func(gateway.StreamEvent) {}})
				if err != nil {
					t.Fatalf("step %d: %v", i+1, err)
				}
				if resp.Text() != "done" {
					t.Fatalf("step %d: text %q", i+1, resp.Text())
				}
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("%d steps opened %d connections, want 1", steps, n)
			}
		})
	}
}
