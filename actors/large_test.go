package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// largeContent is n bytes of text in lines, as a model writes a file.
func largeContent(n int) string {
	var b strings.Builder
	b.Grow(n)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %07d: \"quoted\" text and a tab\tto escape\n", i)
	}
	return b.String()[:n]
}

// writeArgs are write_file's arguments for content.
func writeArgs(path, content string) string {
	b, _ := json.Marshal(map[string]string{"path": path, "content": content})
	return string(b)
}

// TestLargeArguments: a model's write_file of 1.2 MB, more than a message carries, goes
// through the object store and is written exactly, and the turn's transcript keeps it
// whole; one of 17 MiB, over the 16 MiB a call may carry, is an error result the model sees,
// and the turn goes on to its answer. Both for a turn run in the node's process
// (scripted model) and for a durable turn from the intake (a Chat Completions model).
func TestLargeArguments(t *testing.T) {
	t.Parallel()
	const (
		// Over the 1 MiB a message carries, checked below, with its JSON escapes.
		small = 1_200_000
		// Just over the bound, so that the message reads "17 MiB, over the 16 MiB"
		// (31 MiB cost 4 s of JSON under the race detector and tested no more).
		huge = 17 << 20
	)
	content := largeContent(small)
	bigArgs := writeArgs("big.txt", content)
	hugeArgs := writeArgs("huge.txt", strings.Repeat("x", huge))
	if len(bigArgs) <= 1<<20 || len(hugeArgs) <= bus.MaxCallPayload {
		t.Fatalf("arguments of %d and %d bytes", len(bigArgs), len(hugeArgs))
	}

	// The durable turn's model: a Chat Completions server that asks for the two writes,
	// one per step, then answers; it keeps what each request sent.
	var (
		mu       sync.Mutex
		requests [][]byte
	)
	chat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		requests = append(requests, body)
		mu.Unlock()
		outputs := 0
		for _, m := range req.Messages {
			if m.Role == "tool" {
				outputs++
			}
		}
		msg := map[string]any{"role": "assistant", "content": "done"}
		switch outputs {
		case 0:
			msg = toolCallMessage("call_big", bigArgs)
		case 1:
			msg = toolCallMessage("call_huge", hugeArgs)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "c", "object": "chat.completion", "created": 1, "model": "test",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": msg}},
			"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
		})
	}))
	t.Cleanup(chat.Close)

	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
		Gateway:    gateway.Config{BaseURL: chat.URL, APIKey: "EMPTY", MaxRetries: -1},
		Logger:     DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	if max := n.Conn().MaxPayload(); int64(len(bigArgs)) <= max {
		t.Fatalf("the server's max payload is %d: the test needs arguments over it", max)
	}
	js := n.JetStream()

	// check checks what a turn did: both calls accounted for, the file written, the model
	// told, and the transcript read back from its stream exact.
	check := func(t *testing.T, id, file string, calls []bus.CallRecord, local []toolbus.Item) {
		t.Helper()
		if got, want := callOutcomes(calls), []string{"write_file:ok", "write_file:invalid"}; !slices.Equal(got, want) {
			t.Fatalf("outcomes %v, want %v: %+v", got, want, calls)
		}
		if !strings.Contains(calls[1].Error, "the arguments of write_file are 17 MiB, over the 16 MiB a call may carry; the call did not run") {
			t.Errorf("the refused call's error: %s", calls[1].Error)
		}
		got, err := os.ReadFile(filepath.Join(home, file))
		if err != nil || string(got) != content {
			t.Fatalf("%s: %d bytes (want %d), %v", file, len(got), len(content), err)
		}
		if _, err := os.Stat(filepath.Join(home, "huge.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("huge.txt: %v", err)
		}
		items, err := durable.ReadTranscript(ctx, js, id)
		if err != nil {
			t.Fatal(err)
		}
		var fc []toolbus.Item
		outs := map[string]toolbus.Item{}
		for _, it := range items {
			switch it.Kind {
			case toolbus.KindFunctionCall:
				fc = append(fc, it)
			case toolbus.KindCallOutput:
				outs[it.CallID] = it
			}
		}
		if len(fc) != 2 || len(outs) != 2 {
			t.Fatalf("transcript: %d calls, %d outputs", len(fc), len(outs))
		}
		if fc[0].Arguments != strings.Replace(bigArgs, "big.txt", file, 1) {
			t.Errorf("the stored 1.2 MB call has %d bytes of arguments, not the model's", len(fc[0].Arguments))
		}
		if len(fc[1].Arguments) > 1024 || !strings.Contains(fc[1].Arguments, `"toolbus_omitted":{"bytes":`) {
			t.Errorf("the stored 17 MiB call: %.200s", fc[1].Arguments)
		}
		if o := outs[fc[1].CallID]; !o.IsError || !strings.Contains(outputText(o), "over the 16 MiB a call may carry") {
			t.Errorf("the refused call's output: %+v", o)
		}
		if local != nil {
			a, _ := json.Marshal(local)
			b, _ := json.Marshal(items)
			if !bytes.Equal(a, b) {
				t.Errorf("the transcript read back (%d bytes) is not the turn's (%d bytes)", len(b), len(a))
			}
		}
		// What was stored for the calls in flight is gone with them.
		bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			obs, err := js.ObjectStore(ctx, bus.ObjectPayloads)
			if err != nil {
				return err
			}
			list, err := obs.List(ctx)
			if errors.Is(err, jetstream.ErrNoObjectsFound) {
				return nil
			}
			return fmt.Errorf("%d objects left in %s (%v)", len(list), bus.ObjectPayloads, err)
		})
	}

	t.Run("ephemeral", func(t *testing.T) {
		model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
			{Calls: []gateway.ScriptCall{call("write_file", strings.Replace(bigArgs, "big.txt", "run.txt", 1))}},
			{Calls: []gateway.ScriptCall{call("write_file", hugeArgs)}},
			{Text: "done"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		set, err := toolbus.NewSet(computer.Specs(computer.Config{})...)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res, err := n.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Agent: "ann", Input: "write them"}, Model: model, Kit: toolsets.NewKit(set)})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("turn of 3 steps in %s; the 1.2 MB call took %s", time.Since(start).Round(time.Millisecond), res.Calls[0].Latency.Round(time.Millisecond))
		if res.State != bus.TurnCompleted || res.Text != "done" || res.Steps != 3 {
			t.Fatalf("turn %s after %d steps: %q %s", res.State, res.Steps, res.Text, res.ErrorText())
		}
		check(t, res.Turn, "run.txt", res.Calls, res.Transcript)
	})

	t.Run("durable", func(t *testing.T) {
		id := bus.NewID()
		done, err := n.Conn().SubscribeSync(bus.TurnStatusSubject(id, bus.StatusDone))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = done.Unsubscribe() }()
		if err := n.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := n.submit(ctx, bus.TurnSpec{ID: id, Agent: "ann", Input: "write them", Model: "chat:test"}, ""); err != nil {
			t.Fatal(err)
		}
		m, err := done.NextMsg(90 * time.Second)
		if err != nil {
			t.Fatalf("the turn did not end: %v", err)
		}
		var st bus.TurnStatus
		if err := json.Unmarshal(m.Data, &st); err != nil {
			t.Fatal(err)
		}
		t.Logf("durable turn of 3 steps in %s; the 1.2 MB call took %s", time.Since(start).Round(time.Millisecond), st.Calls[0].Latency.Round(time.Millisecond))
		if st.State != bus.TurnCompleted || st.Text != "done" {
			t.Fatalf("turn %s: %q %s", st.State, st.Text, st.Error)
		}
		check(t, id, "big.txt", st.Calls, nil)
		// The model was told, in the request of its last step.
		mu.Lock()
		last := requests[len(requests)-1]
		n := len(requests)
		mu.Unlock()
		if n != 3 || !bytes.Contains(last, []byte("over the 16 MiB a call may carry")) {
			t.Errorf("%d model requests; the last does not carry the refusal", n)
		}
	})
}

func toolCallMessage(id, args string) map[string]any {
	return map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
		"id": id, "type": "function", "function": map[string]any{"name": "write_file", "arguments": args},
	}}}
}

func callOutcomes(calls []bus.CallRecord) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Tool+":"+string(c.Outcome))
	}
	return out
}

// elideOversized keeps a provider's raw call item (its id) with the arguments replaced,
// leaves a response without such a call as it is, and prepare reads the size back.
func TestElideOversized(t *testing.T) {
	t.Parallel()
	huge := writeArgs("huge.txt", strings.Repeat("x", bus.MaxCallPayload))
	rawArgs, _ := json.Marshal(huge)
	raw := `{"type":"function_call","id":"fc_1","call_id":"c1","name":"write_file","arguments":` + string(rawArgs) + `}`
	items := []toolbus.Item{
		{Kind: toolbus.KindReasoning, Provider: gateway.ProviderResponses, Raw: json.RawMessage(`{"type":"reasoning","id":"rs_1"}`)},
		{Kind: toolbus.KindFunctionCall, CallID: "c0", Name: "read_file", Arguments: `{"path":"a"}`},
		{Kind: toolbus.KindFunctionCall, CallID: "c1", Name: "write_file", Arguments: huge, Provider: gateway.ProviderResponses, Raw: json.RawMessage(raw)},
	}
	if got := elideOversized(items[:2]); &got[0] != &items[0] {
		t.Error("a response without large calls was copied")
	}
	got := elideOversized(items)
	if items[2].Arguments != huge {
		t.Fatal("the model's response was changed in place")
	}
	c := got[2]
	n, ok := elidedSize(c.Arguments)
	if !ok || n != int64(len(huge)) || got[1].Arguments != `{"path":"a"}` {
		t.Fatalf("elided %q: %d %v", c.Arguments, n, ok)
	}
	var r map[string]any
	if err := json.Unmarshal(c.Raw, &r); err != nil || r["id"] != "fc_1" || r["arguments"] != c.Arguments || c.Provider != gateway.ProviderResponses {
		t.Errorf("raw item %s (%v)", c.Raw, err)
	}
	if _, ok := elidedSize(`{"toolbus_omitted":{"bytes":12,"note":"small"}}`); ok {
		t.Error("a forged note of a small size was taken for an elided call")
	}
}
