package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
)

// sentTools is the raw "tools" value of request i, exactly as it crossed the wire.
func sentTools(t *testing.T, api *fakeAPI, i int) json.RawMessage {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(api.requests()[i].body, &fields); err != nil {
		t.Fatal(err)
	}
	return fields["tools"]
}

// The exported definitions are the bytes the gateways send, for every feature of the
// test tool set: namespaces, deferred tools, strict projections, a strict fallback and
// a raw schema with HTML-like characters and odd number spellings.
func TestToolDefinitionsAreWhatIsSent(t *testing.T) {
	t.Parallel()
	tools := testTools(t)
	for _, tc := range []struct {
		name   string
		hosted bool
	}{{"client search", false}, {"hosted search", true}} {
		t.Run("responses "+tc.name, func(t *testing.T) {
			api := newFakeAPI(t, exchange{body: responseBody("resp_1", messageOut("Done."))})
			cfg := api.config(&bytes.Buffer{})
			cfg.HostedToolSearch = tc.hosted
			if _, err := newResponses(t, cfg).Respond(context.Background(), &gateway.Request{
				Input: []toolbus.Item{toolbus.UserMessage("hi")}, Tools: tools,
			}); err != nil {
				t.Fatal(err)
			}
			defs, err := gateway.ResponsesToolDefinitions(tools, tc.hosted)
			if err != nil {
				t.Fatal(err)
			}
			if sent := sentTools(t, api, 0); !bytes.Equal(defs, sent) {
				t.Errorf("definitions differ from the request's tools\ndefs: %s\nsent: %s", defs, sent)
			}
		})
	}
	t.Run("chat", func(t *testing.T) {
		api := newFakeAPI(t, exchange{body: chatBody("c1", "stop", "Done.")})
		if _, err := newChat(t, api.config(&bytes.Buffer{})).Respond(context.Background(), &gateway.Request{
			Input: []toolbus.Item{toolbus.UserMessage("hi")}, Tools: tools,
		}); err != nil {
			t.Fatal(err)
		}
		defs, err := gateway.ChatToolDefinitions(tools)
		if err != nil {
			t.Fatal(err)
		}
		if sent := sentTools(t, api, 0); !bytes.Equal(defs, sent) {
			t.Errorf("definitions differ from the request's tools\ndefs: %s\nsent: %s", defs, sent)
		}
	})
}

func TestResponsesToolDefinitionsShape(t *testing.T) {
	t.Parallel()
	tools := testTools(t)
	for _, tc := range []struct {
		hosted    bool
		execution any // of the tool_search tool
	}{{false, "client"}, {true, nil}} {
		raw, err := gateway.ResponsesToolDefinitions(tools, tc.hosted)
		if err != nil {
			t.Fatal(err)
		}
		var defs []any
		if err := json.Unmarshal(raw, &defs); err != nil {
			t.Fatalf("not a JSON array: %v\n%s", err, raw)
		}
		var top []string
		for _, d := range defs {
			top = append(top, jsonPath(t, d, "type").(string)+":"+defName(d))
		}
		// crm is placed where its first tool stood, holding both its tools.
		want := []string{"function:read_file", "function:set_limits", "function:tag", "namespace:crm", "function:get_shipping_eta", "tool_search:"}
		if !slices.Equal(top, want) {
			t.Errorf("hosted %v: top level %v, want %v", tc.hosted, top, want)
		}
		crm := defs[3]
		if got := jsonPath(t, crm, "description"); got != "CRM tools for customer lookup and order management." {
			t.Errorf("namespace description %v", got)
		}
		if n := len(jsonPath(t, crm, "tools").([]any)); n != 2 {
			t.Errorf("crm holds %d tools, want 2", n)
		}
		if got := jsonPath(t, crm, "tools", 1, "defer_loading"); got != true {
			t.Errorf("list_open_orders defer_loading = %v", got)
		}
		if got := jsonPath(t, defs[5], "execution"); got != tc.execution {
			t.Errorf("hosted %v: tool_search execution = %v, want %v", tc.hosted, got, tc.execution)
		}
		// uniqueItems cannot be strict: tag goes out non-strict.
		if got := jsonPath(t, defs[2], "strict"); got != false {
			t.Errorf("tag strict = %v", got)
		}
	}
}

func defName(def any) string {
	if m, ok := def.(map[string]any); ok {
		if s, ok := m["name"].(string); ok {
			return s
		}
	}
	return ""
}

func TestChatToolDefinitionsShape(t *testing.T) {
	t.Parallel()
	raw, err := gateway.ChatToolDefinitions(testTools(t))
	if err != nil {
		t.Fatal(err)
	}
	var defs []any
	if err := json.Unmarshal(raw, &defs); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, raw)
	}
	var names []string
	for _, d := range defs {
		if typ := jsonPath(t, d, "type"); typ != "function" {
			t.Errorf("tool of type %v", typ)
		}
		names = append(names, jsonPath(t, d, "function", "name").(string))
	}
	// Deferred tools wait behind the software search; namespaces are flattened.
	if want := []string{"read_file", "set_limits", "tag", "crm__get_customer", "tool_search"}; !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
}

func TestToolDefinitionsEmpty(t *testing.T) {
	t.Parallel()
	for name, get := range map[string]func([]*toolbus.Spec) (json.RawMessage, error){
		"responses": func(ts []*toolbus.Spec) (json.RawMessage, error) { return gateway.ResponsesToolDefinitions(ts, false) },
		"chat":      gateway.ChatToolDefinitions,
	} {
		got, err := get(nil)
		if err != nil || string(got) != "[]" {
			t.Errorf("%s: %s, %v; want [] and no error", name, got, err)
		}
	}
}

// Chat Completions has no namespaces: two namespaces may each have a tool of one name,
// and both go out flattened, distinct from a built-in of that name; a flattened name
// that would pass the providers' 64 characters is shortened, stably.
func TestChatFlatteningIsCollisionFree(t *testing.T) {
	t.Parallel()
	spec := func(name, namespace string) *toolbus.Spec {
		return rawTool(t, toolbus.Def[map[string]any]{Spec: toolbus.Spec{Name: name, Namespace: namespace}, Schema: json.RawMessage(`{"type":"object","properties":{}}`)})
	}
	long := "a_namespace_with_a_name_long_enough_to_matter"
	tools := []*toolbus.Spec{spec("read_file", ""), spec("read_file", "crm"), spec("read_file", "mail"), spec("fetch_every_record_there_is", long)}
	defs, err := gateway.ChatToolDefinitions(tools)
	if err != nil {
		t.Fatal(err)
	}
	var sent []struct{ Function struct{ Name string } }
	if err := json.Unmarshal(defs, &sent); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range sent {
		names = append(names, d.Function.Name)
	}
	if len(names) != 4 || names[0] != "read_file" || names[1] != "crm__read_file" || names[2] != "mail__read_file" {
		t.Fatalf("names %q", names)
	}
	if n := names[3]; len(n) != 64 || !strings.HasPrefix(n, long[:40]) {
		t.Errorf("long name %q (%d characters)", n, len(n))
	}
	again, _ := gateway.ChatToolDefinitions(tools)
	if !bytes.Equal(defs, again) {
		t.Error("flattened names differ between requests")
	}

	// A tool without a namespace whose name looks flattened clashes, and says so.
	_, err = gateway.ChatToolDefinitions([]*toolbus.Spec{spec("crm__read_file", ""), spec("read_file", "crm")})
	if err == nil || !strings.Contains(err.Error(), `tools crm__read_file and crm.read_file both go out as "crm__read_file"`) {
		t.Errorf("clash: %v", err)
	}
}
