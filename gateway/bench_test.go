package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/openai/openai-go/v3/responses"

	"github.com/toolbus/toolbus"
)

// benchStep is a mid-turn step: 40 tools (a third in namespaces, some deferred) and a
// transcript of 41 items.
func benchStep(b *testing.B) *Request {
	b.Helper()
	var tools []*toolbus.Spec
	for i := range 40 {
		d := toolbus.Def[map[string]any]{
			Spec: toolbus.Spec{Name: fmt.Sprintf("tool_%d", i), Description: "Does thing number " + fmt.Sprint(i) + ".", Category: "bench", Strict: i%2 == 0},
			Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"a path"},` +
				`"limit":{"type":"integer","minimum":1,"maximum":1000},"mode":{"type":"string","enum":["read","write"]}},"required":["path"]}`),

			Execute: func(context.Context, toolbus.Call, map[string]any) (toolbus.Result, error) {
				return toolbus.Result{}, nil
			},
		}
		if i%3 == 0 {
			d.Namespace, d.NamespaceDescription, d.DeferLoading = fmt.Sprintf("ns%d", i%9), "A namespace.", true
		}
		t, err := toolbus.Define(d)
		if err != nil {
			b.Fatal(err)
		}
		tools = append(tools, &t.Spec)
	}
	input := []toolbus.Item{toolbus.UserMessage("Do the things.")}
	for i := range 20 {
		id := fmt.Sprintf("call_%d", i)
		input = append(input,
			toolbus.Item{Kind: toolbus.KindFunctionCall, CallID: id, Name: fmt.Sprintf("tool_%d", i), Arguments: `{"path":"a/b/c.txt","limit":10}`},
			toolbus.Item{Kind: toolbus.KindCallOutput, CallID: id, Output: []toolbus.ContentPart{toolbus.Text("line one\nline two\nline three")}})
	}
	return &Request{Instructions: "Be brief.", Input: input, Tools: tools, ParallelToolCalls: true}
}

// BenchmarkRequestEncoding measures what a gateway adds to every step before the HTTP
// request: translating tools and transcript through the SDK's types and encoding them.
// The baseline encodes the very same body, held as plain Go values, with encoding/json.
func BenchmarkRequestEncoding(b *testing.B) {
	req := benchStep(b)
	m, err := NewResponses("gpt-5.4", Config{APIKey: "sk-bench-key-0123456789"})
	if err != nil {
		b.Fatal(err)
	}
	c, err := NewChat("llama3.1", Config{BaseURL: "http://localhost:1/v1"})
	if err != nil {
		b.Fatal(err)
	}
	responsesBody := func() ([]byte, error) {
		tools, err := m.tools(req.Tools)
		if err != nil {
			return nil, err
		}
		return m.params(req, m.input(req.Input), tools).MarshalJSON()
	}
	chatBody := func() ([]byte, error) {
		p, err := c.params(req, req.Input)
		if err != nil {
			return nil, err
		}
		return p.MarshalJSON()
	}
	for _, bc := range []struct {
		name string
		body func() ([]byte, error)
	}{{"responses", responsesBody}, {"chat", chatBody}} {
		body, err := bc.body()
		if err != nil {
			b.Fatal(err)
		}
		var plain any
		if err := json.Unmarshal(body, &plain); err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name+"/baseline-encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(plain); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/gateway", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.body(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStreamEvent decodes a Responses stream's output_item.done of a function call
// as streamOnce does (by hand, streamEvent.read, then the item's few fields), as it did
// before (encoding/json into streamEvent, as ssestream.Stream hands it an event, without
// the gjson scan Stream adds), and through the SDK's event union, which it used first:
// on the path from the event's arrival to the call's dispatch.
func BenchmarkStreamEvent(b *testing.B) {
	data := []byte(`{"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":{"id":"fc_0","type":"function_call","status":"completed","arguments":"{\"path\":\"a/b/c.txt\",\"limit\":10}","call_id":"call_0","name":"tool_0"}}`)
	m := &Responses{}
	b.Run("streamEvent", func(b *testing.B) {
		for b.Loop() {
			var ev streamEvent
			if _, ok := ev.read(data); !ok {
				b.Fatal("not read by hand")
			}
			if it, _, _, err := m.streamedItem(int(ev.OutputIndex), ev.Item, nil); err != nil || it.Arguments == "" {
				b.Fatal(it, err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		type plain streamEvent
		for b.Loop() {
			var ev streamEvent
			if err := json.Unmarshal(data, (*plain)(&ev)); err != nil {
				b.Fatal(err)
			}
			var head callHead
			var args string
			if json.Unmarshal(ev.Item, &head) != nil || json.Unmarshal(head.Arguments, &args) != nil {
				b.Fatal("not decoded")
			}
			if it := m.callItem(ev.Item, head.CallID, head.Name, head.Namespace, args, nil); it.Arguments == "" {
				b.Fatal(it)
			}
		}
	})
	b.Run("sdk-union", func(b *testing.B) {
		for b.Loop() {
			var ev responses.ResponseStreamEventUnion
			if err := json.Unmarshal(data, &ev); err != nil {
				b.Fatal(err)
			}
			if it, _, err := m.item(int(ev.OutputIndex), ev.Item, nil); err != nil || it.Arguments == "" {
				b.Fatal(it, err)
			}
		}
	})
}
