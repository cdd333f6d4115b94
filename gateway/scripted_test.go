package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
)

// TestScriptIfError: a step's if_error is played instead of it once a call of the turn
// failed, at any step after it, and never before; a bad if_error is refused by name.
func TestScriptIfError(t *testing.T) {
	t.Parallel()
	m, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{{Name: "run_command", Arguments: `{"command":"sh check.sh"}`}}},
		{Text: "The checks pass.", IfError: &gateway.ScriptStep{Text: "The checks could not run."}},
		{Text: "All done, all green.", IfError: &gateway.ScriptStep{Text: "Done; the checks did not run."}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	call := toolbus.Item{Kind: toolbus.KindFunctionCall, CallID: "c1", Name: "run_command", Arguments: `{"command":"sh check.sh"}`}
	output := func(isError bool) toolbus.Item {
		return toolbus.Item{Kind: toolbus.KindCallOutput, CallID: "c1", IsError: isError, Output: []toolbus.ContentPart{{Type: "text", Text: "…"}}}
	}
	for _, tt := range []struct {
		name  string
		step  int
		input []toolbus.Item
		want  string
	}{
		{"the call succeeded", 1, []toolbus.Item{toolbus.UserMessage("go"), call, output(false)}, "The checks pass."},
		{"the call failed", 1, []toolbus.Item{toolbus.UserMessage("go"), call, output(true)}, "The checks could not run."},
		{"a step after the failure", 2, []toolbus.Item{toolbus.UserMessage("go"), call, output(true), {Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: "The checks could not run."}}, "Done; the checks did not run."},
		{"a step with no if_error", 0, []toolbus.Item{toolbus.UserMessage("go"), call, output(true)}, ""},
	} {
		resp, err := m.Respond(context.Background(), &gateway.Request{Step: tt.step, Input: tt.input})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := resp.Text(); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	_, err = gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{
		{Text: "ok", IfError: &gateway.ScriptStep{Calls: []gateway.ScriptCall{{Arguments: "{}"}}}},
	}})
	if err == nil || !strings.Contains(err.Error(), "script response 0, if_error: call 0: name is empty") {
		t.Errorf("a call without a name in if_error: %v", err)
	}
}
