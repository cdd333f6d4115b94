package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus"
)

func deferredTool(t *testing.T, name, namespace, description string) *toolbus.Spec {
	t.Helper()
	tool, err := toolbus.Define(toolbus.Def[map[string]any]{
		Spec:   toolbus.Spec{Name: name, Namespace: namespace, Description: description, DeferLoading: true, Category: "test"},
		Schema: json.RawMessage(`{"type":"object","properties":{}}`),
		Execute: func(_ context.Context, _ toolbus.Call, _ map[string]any) (toolbus.Result, error) {
			return toolbus.Result{}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &tool.Spec
}

func TestSearchDeferred(t *testing.T) {
	t.Parallel()
	eager, err := toolbus.Define(toolbus.Def[map[string]any]{
		Spec:   toolbus.Spec{Name: "list_open_orders_now", Description: "open orders", Category: "test"},
		Schema: json.RawMessage(`{"type":"object","properties":{}}`),
		Execute: func(context.Context, toolbus.Call, map[string]any) (toolbus.Result, error) {
			return toolbus.Result{}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tools := []*toolbus.Spec{
		&eager.Spec,
		deferredTool(t, "get_customer", "crm", "Fetch a customer profile."),
		deferredTool(t, "list_open_orders", "crm", "List open orders for a customer."),
		deferredTool(t, "get_shipping_eta", "", "Look up shipping ETA details for an order."),
		deferredTool(t, "send_mail", "mail", "Send an e-mail."),
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"get_shipping_eta", []string{"get_shipping_eta"}},
		{"crm", []string{"get_customer", "list_open_orders"}},
		{"CRM", []string{"get_customer", "list_open_orders"}},
		{"open orders", []string{"list_open_orders", "get_shipping_eta"}},
		{"shipping ETA for an order", []string{"get_shipping_eta", "list_open_orders"}},
		{"send_mail get_customer", []string{"send_mail", "get_customer"}}, // send_mail also names its namespace
		{"weather", nil},
		{"the a tool", nil},
		{"", nil},
	} {
		t.Run(tc.query, func(t *testing.T) {
			var got []string
			for _, tool := range searchDeferred(tools, tc.query) {
				got = append(got, tool.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("search %q = %v, want %v", tc.query, got, tc.want)
			}
		})
	}
}

func TestSearchQuery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ args, want string }{
		{`{"query":"open orders"}`, "open orders"},
		{`{"paths":["crm","mail"]}`, "crm mail"},
		{`{"goal":"ship","limit":3}`, "ship"},
		{`not json`, "not json"},
		{``, ""},
	} {
		if got := searchQuery(json.RawMessage(tc.args)); got != tc.want {
			t.Errorf("searchQuery(%s) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestAppendField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ obj, want string }{
		{`{}`, `{"p":{"a":1.50}}`},
		{`{"name":"x"}`, `{"name":"x","p":{"a":1.50}}`},
	} {
		if got := string(appendField([]byte(tc.obj), "p", json.RawMessage(`{"a":1.50}`))); got != tc.want {
			t.Errorf("appendField(%s) = %s, want %s", tc.obj, got, tc.want)
		}
	}
}

func TestRedactor(t *testing.T) {
	t.Parallel()
	const key = "sk-proj-abcdef123456"
	for _, tc := range []struct{ key, in, want string }{
		{key, "bad key " + key + ".", "bad key [redacted]."},
		{key, "nothing secret", "nothing secret"},
		// Placeholder keys of local servers are not secrets; text stays intact.
		{"ollama", "try ollama pull", "try ollama pull"},
		{"", "text", "text"},
	} {
		if got := newRedactor(tc.key).string(tc.in); got != tc.want {
			t.Errorf("redact %q with key %q = %q, want %q", tc.in, tc.key, got, tc.want)
		}
	}
	err := newRedactor(key).error(fmt.Errorf("wrap: %w", &redactedError{msg: key, err: context.Canceled}))
	if strings.Contains(err.Error(), key) || !errors.Is(err, context.Canceled) {
		t.Errorf("error %q: want the key gone and the chain kept", err)
	}
}
