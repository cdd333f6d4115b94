package actors

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
)

// TestOneItemPath runs the same two-step turn with a model that streams its first
// response (and a gateway that breaks its contract on the way: an item sent twice, one
// sent out of order) and with one that does not stream at all. Each item reaches the
// turn once, in order: the transcripts are the same, item for item (a message, two
// calls and a message after them, then the outputs in the model's order), and each call
// ran once. The streamed items are the response's first ones; what did not stream comes
// with the response, as its last chunk.
func TestOneItemPath(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	runs := map[string]int{}
	echo := toolbus.MustDefine(toolbus.Def[idArgs]{
		Spec: toolbus.Spec{Name: "echo", Category: "test", Mode: toolbus.Parallel, Timeout: 10 * time.Second},
		Execute: func(_ context.Context, _ toolbus.Call, a idArgs) (toolbus.Result, error) {
			mu.Lock()
			runs[a.ID]++
			mu.Unlock()
			return toolbus.TextResult("echo " + a.ID), nil
		},
	})
	h := newHarness(t, echo)
	first := []toolbus.Item{
		{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: "Two echoes."},
		{Kind: toolbus.KindFunctionCall, CallID: "c_a", Name: "echo", Arguments: `{"id":"a"}`},
		{Kind: toolbus.KindFunctionCall, CallID: "c_b", Name: "echo", Arguments: `{"id":"b"}`},
		{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: "Sent."},
	}
	last := []toolbus.Item{{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: "done"}}

	run := func(stream bool) TurnResult {
		t.Helper()
		step := 0
		model := modelFunc(func(ctx context.Context, req *gateway.Request) (*gateway.Response, error) {
			step++
			if step > 1 {
				return &gateway.Response{Items: last}, nil
			}
			if stream && req.Stream != nil {
				item := func(i int) {
					it := first[i]
					req.Stream(gateway.StreamEvent{Kind: gateway.StreamItem, Index: i, Item: &it})
				}
				item(0)
				item(1)
				item(1) // sent again: not the next item
				item(3) // ahead of 2: not the next item; the response has both
				req.Stream(gateway.StreamEvent{Kind: gateway.StreamText, Index: 0, Text: "Two echoes."})
			}
			return &gateway.Response{Items: first}, nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := h.node.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Agent: "tester", Input: "go"}, Model: model, Kit: kitOf(t, echo)})
		if err != nil {
			t.Fatal(err)
		}
		if res.State != bus.TurnCompleted || res.Text != "done" {
			t.Fatalf("stream %v: turn %s, text %q, err %q", stream, res.State, res.Text, res.ErrorText())
		}
		return res
	}
	shape := func(res TurnResult) []string {
		var out []string
		for _, it := range res.Transcript {
			switch it.Kind {
			case toolbus.KindMessage:
				out = append(out, fmt.Sprintf("%s:%s", it.Role, it.Text))
			case toolbus.KindFunctionCall:
				out = append(out, "call:"+it.CallID)
			case toolbus.KindCallOutput:
				out = append(out, "output:"+it.CallID+":"+outputText(it))
			default:
				out = append(out, string(it.Kind))
			}
		}
		return out
	}
	want := []string{"user:go", "assistant:Two echoes.", "call:c_a", "call:c_b", "assistant:Sent.",
		"output:c_a:echo a", "output:c_b:echo b", "assistant:done"}
	for _, stream := range []bool{true, false} {
		got := shape(run(stream))
		if strings.Join(got, " | ") != strings.Join(want, " | ") {
			t.Errorf("stream %v: transcript\n  %s\nwant\n  %s", stream, strings.Join(got, " | "), strings.Join(want, " | "))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["a"] != 2 || runs["b"] != 2 {
		t.Errorf("runs %v: want each call once a turn (twice in all)", runs)
	}
}
