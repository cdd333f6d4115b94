package node

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
)

func echoTool(t *testing.T, name, category string) *toolbus.Tool {
	t.Helper()
	tool, err := toolbus.Define(toolbus.Def[struct{}]{
		Spec: toolbus.Spec{Name: name, Category: category},
		Execute: func(context.Context, toolbus.Call, struct{}) (toolbus.Result, error) {
			return toolbus.TextResult(name), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

func TestConfigToolsRefused(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Node: NodeConfig{Categories: []string{"todo"}}, Tools: []*toolbus.Tool{echoTool(t, "x", "todo")}},
			"tool x: category todo is a built-in category the node hosts"},
		{Config{Tools: []*toolbus.Tool{echoTool(t, "x", "a"), echoTool(t, "x", "b")}}, `duplicate tool "x"`},
		{Config{Tools: []*toolbus.Tool{nil}}, "tool 0 is nil"},
		{Config{Server: "nats://127.0.0.1:1"}, "no name"},
	} {
		n, err := Start(ctx, c.cfg)
		if err == nil {
			n.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Start = %v, want %q", err, c.want)
		}
	}
}

// A node with tools of two categories hosts both and no built-in one; a turn calls
// the tools its Turn names, and a failed turn is Run's error.
func TestRunTools(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := echoTool(t, "a", "cat_a"), echoTool(t, "b", "cat_b")
	n, err := Start(ctx, Config{Bus: server.Config{Logger: slog.New(slog.DiscardHandler)}, Tools: []*toolbus.Tool{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	script := `{"responses": [{"calls": [{"name": "a", "arguments": "{}"}, {"name": "b", "arguments": "{}"}]}, {"text": "done"}]}`
	res, err := n.Run(ctx, Turn{Input: "go", Script: script})
	if err != nil || res.Text != "done" || len(res.Calls) != 2 || res.Calls[0].Outcome != bus.OutcomeOK || res.Calls[1].Outcome != bus.OutcomeOK {
		t.Fatalf("Run = %+v, %v", res.Calls, err)
	}
	// Only a: b is not among the turn's tools.
	res, err = n.Run(ctx, Turn{Input: "go", Script: script, Tools: []*toolbus.Tool{a}})
	if err != nil || len(res.Calls) != 2 || res.Calls[1].Outcome == bus.OutcomeOK {
		t.Fatalf("Run with a only = %+v, %v", res.Calls, err)
	}
	if _, err := n.Run(ctx, Turn{Input: "go"}); err == nil || !strings.Contains(err.Error(), "no model") {
		t.Fatalf("Run without a model = %v", err)
	}
	if _, err := n.Run(ctx, Turn{Input: "go", Script: "{\n  \"responses\": [}"}); err == nil || !strings.Contains(err.Error(), "script:2:17: invalid character") {
		t.Fatalf("Run with a broken script = %v", err)
	}
	res, err = n.Run(ctx, Turn{Input: "go", Script: script, MaxSteps: 1})
	if err == nil || res.State == bus.TurnCompleted {
		t.Fatalf("Run past its step limit = %s, %v", res.State, err)
	}
	if hosted := n.cfg.Node.Categories; len(hosted) != 0 {
		t.Fatalf("built-in categories hosted: %v", hosted)
	}
}
