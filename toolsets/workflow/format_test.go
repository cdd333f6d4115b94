package workflow_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// TestTaskResultFormatAsserted: submit_result asserts the formats of its result schema,
// as a strict provider would: a value that breaks its format is refused, in the turn
// (Parse, what the model's call meets) and when the engine checks the stored submission
// again (Validate), with a leaf naming the field and the format. A format the validator
// does not know stays an annotation. End to end: actors' TestTaskResultFormatInTheTurn.
func TestTaskResultFormatAsserted(t *testing.T) {
	t.Parallel()
	cases := []struct {
		format, good, bad string
	}{
		{"date-time", "2025-01-31T09:30:00Z", "yesterday"},
		{"date", "2025-01-31", "31/01/2025"},
		{"time", "09:30:00Z", "half past nine"},
		{"email", "ops@example.com", "ops at example"},
		{"uri", "https://example.com/a", "not a uri"},
		{"uuid", "123e4567-e89b-12d3-a456-426614174000", "123"},
		{"ipv4", "192.0.2.1", "192.0.2.300"},
		{"ipv6", "2001:db8::1", "2001:db8:::1"},
		{"hostname", "api.example.com", "-bad-.example..com"},
		{"sku", "anything", ""}, // unknown: an annotation, nothing is refused
	}
	for _, c := range cases {
		t.Run(c.format, func(t *testing.T) {
			result := fmt.Sprintf(`{"type":"object","properties":{"v":{"type":"string","format":%q}},"required":["v"]}`, c.format)
			spec, err := workflow.SubmitSpec(json.RawMessage(result))
			if err != nil {
				t.Fatal(err)
			}
			args := func(v string) string { return fmt.Sprintf(`{"result":{"v":%q}}`, v) }
			if _, err := spec.Params.Parse(args(c.good), schema.ParseOptions{Strict: true}); err != nil {
				t.Errorf("%q refused: %v", c.good, err)
			}
			if err := workflow.Validate(json.RawMessage(result), json.RawMessage(args(c.good))); err != nil {
				t.Errorf("Validate %q: %v", c.good, err)
			}
			if c.bad == "" {
				return
			}
			_, err = spec.Params.Parse(args(c.bad), schema.ParseOptions{Strict: true})
			var ae *schema.ArgumentError
			if !errors.As(err, &ae) || ae.Kind != schema.KindSchema {
				t.Fatalf("%q: %v, want a schema error", c.bad, err)
			}
			want := fmt.Sprintf("/result/v: value does not match format '%s'", c.format)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q: %q lacks %q", c.bad, err, want)
			}
			if err := workflow.Validate(json.RawMessage(result), json.RawMessage(args(c.bad))); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate %q: %v, want %q", c.bad, err, want)
			}
		})
	}
	// Tool arguments keep format an annotation (docs/protocol.md §15).
	plain := schema.MustFromJSON([]byte(`{"type":"object","properties":{"v":{"type":"string","format":"date-time"}}}`))
	if err := plain.Validate(json.RawMessage(`{"v":"yesterday"}`)); err != nil {
		t.Errorf("a tool's arguments: %v; format is an annotation there", err)
	}
}
