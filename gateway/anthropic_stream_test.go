package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/gateway/gatewaytest"
)

// anthropicSSEConfig points the Anthropic gateway at a gatewaytest server: the root,
// under which the SDK asks for v1/messages.
func anthropicSSEConfig(s *sseServer) gateway.Config {
	cfg := s.config()
	cfg.BaseURL = s.URL()
	return cfg
}

// TestAnthropicStreamBreaks: the Messages stream follows the rule of the other wires
// (streamRetry): a stream that breaks, or ends before message_stop, before anything of it
// was delivered is asked again, the same request; one that breaks after a piece of it was
// delivered fails the step with ErrStreamCut and is not asked again. The answer that
// comes whole is delivered in the order of the Response's items, an empty text block
// taking no index.
func TestAnthropicStreamBreaks(t *testing.T) {
	t.Parallel()
	usage := gatewaytest.Usage{Input: 20, Output: 7}
	answer := func() gatewaytest.Stream {
		return gatewaytest.NewMessages("msg_2", usage).Text().Text("Read", "ing a.md.").ToolUse("toolu_1", "read_file", `{"path":`, `"a.md"}`).End("tool_use").Stream()
	}
	// The stream's head: nothing of it can be used.
	head := gatewaytest.NewMessages("msg_1", usage).Events()
	for _, tc := range []struct {
		name  string
		first gatewaytest.Stream
	}{
		{"dropped", gatewaytest.Stream{Events: head, Drop: true}},
		{"dropped in an empty block", gatewaytest.Stream{Events: gatewaytest.NewMessages("msg_1", usage).Text().Events()[:3], Drop: true}},
		{"ended before message_stop", gatewaytest.Stream{Events: head}},
	} {
		t.Run("retried/"+tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newSSEServer(t, tc.first, answer())
			var logs bytes.Buffer
			cfg := anthropicSSEConfig(srv)
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			rec := newRecorder(1)
			resp, err := newAnthropic(t, cfg).Respond(context.Background(), &gateway.Request{
				Input: []toolbus.Item{toolbus.UserMessage("Read a.md.")}, Tools: testTools(t), Stream: rec.stream})
			if err != nil {
				t.Fatal(err)
			}
			if resp.ID != "msg_2" || resp.Text() != "Reading a.md." || len(resp.Calls()) != 1 || resp.Usage.InputTokens != 20 || resp.Usage.OutputTokens != 7 {
				t.Fatalf("response %+v, want the second attempt's", resp)
			}
			checkStreamed(t, rec.got(), resp, []string{"Read", "ing a.md."})
			bodies := srv.Bodies()
			if len(bodies) != 2 || !bytes.Equal(bodies[0], bodies[1]) || !bytes.Contains(bodies[0], []byte(`"stream":true`)) {
				t.Errorf("%d requests, want the same streamed request twice:\n%s", len(bodies), bytes.Join(bodies, []byte("\n")))
			}
			for _, r := range srv.Requests() {
				if r.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != testKey {
					t.Errorf("request to %s, x-api-key set %v", r.Path, r.Header.Get("X-Api-Key") != "")
				}
			}
			if !strings.Contains(logs.String(), "model stream broke before anything of it was used; asking again") {
				t.Errorf("the retry was not logged:\n%s", logs.String())
			}
		})
	}
	t.Run("cut", func(t *testing.T) {
		t.Parallel()
		used := gatewaytest.NewMessages("msg_1", usage).Text("Read", "ing a.md.").Events()
		srv := newSSEServer(t, gatewaytest.Stream{Events: used[:len(used)-1], Drop: true}, answer())
		rec := newRecorder(1)
		_, err := newAnthropic(t, anthropicSSEConfig(srv)).Respond(context.Background(), &gateway.Request{
			Input: []toolbus.Item{toolbus.UserMessage("Read a.md.")}, Tools: testTools(t), Stream: rec.stream})
		var gwErr *gateway.Error
		if !errors.Is(err, gateway.ErrStreamCut) || !errors.As(err, &gwErr) || gwErr.Provider != gateway.ProviderAnthropic {
			t.Fatalf("err %v, want an anthropic ErrStreamCut", err)
		}
		if !strings.Contains(err.Error(), "after 2 pieces of it were used") {
			t.Errorf("err %q does not say what was used", err)
		}
		if n := len(srv.Bodies()); n != 1 {
			t.Errorf("%d requests: a stream cut after it was used is not asked again", n)
		}
		var text string
		for _, e := range rec.got() {
			text += e.Text
		}
		if text != "Reading a.md." {
			t.Errorf("delivered %q", text)
		}
	})
	t.Run("retries spent", func(t *testing.T) {
		t.Parallel()
		broken := gatewaytest.Stream{Events: head, Drop: true}
		srv := newSSEServer(t, broken, broken)
		cfg := anthropicSSEConfig(srv)
		cfg.MaxRetries = 1
		_, err := newAnthropic(t, cfg).Respond(context.Background(), &gateway.Request{
			Input: []toolbus.Item{toolbus.UserMessage("Read a.md.")}, Stream: func(gateway.StreamEvent) {}})
		if err == nil || !strings.Contains(err.Error(), "anthropic: the stream broke") || !strings.Contains(err.Error(), "(2 attempts)") || errors.Is(err, gateway.ErrStreamCut) {
			t.Fatalf("err %v, want the break after 2 attempts", err)
		}
		if n := len(srv.Bodies()); n != 2 {
			t.Errorf("%d requests, want 2", n)
		}
	})
}
