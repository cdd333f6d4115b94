package node

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus/server"
)

// A node joining a running bus without a name is refused with the field to set, the
// flag that sets it, and why it matters (issue 40: "start node: no name" said none).
func TestNoNameSaysWhich(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Config{Server: "nats://ops:secret@127.0.0.1:1"})
	if err == nil {
		t.Fatal("Start without a name joined a bus")
	}
	for _, want := range []string{"no name", "Config.Node.Name", "-name", "127.0.0.1:1", "take each other's turns"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("the error shows the URL's password: %v", err)
	}
	// An embedded node needs none: it is DefaultName.
	n, err := Start(context.Background(), Config{Bus: server.Config{Logger: slog.New(slog.DiscardHandler)}, Tools: []*toolbus.Tool{echoTool(t, "e", "cat_e")}})
	if err != nil {
		t.Fatalf("an embedded node without a name: %v", err)
	}
	defer n.Close()
	if n.Name() != DefaultName {
		t.Errorf("embedded node named %q, want %q", n.Name(), DefaultName)
	}
}

// Result.Outputs gives each call's output beside its record, in Calls' order: the text
// the tool returned, its error mark and its details, without walking the transcript.
func TestResultHasOutputs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type cityArgs struct {
		City string `json:"city"`
	}
	weather := toolbus.MustDefine(toolbus.Def[cityArgs]{
		Spec: toolbus.Spec{Name: "weather", Category: "forecast", ReadOnly: true},
		Execute: func(_ context.Context, _ toolbus.Call, a cityArgs) (toolbus.Result, error) {
			if a.City == "Atlantis" {
				return toolbus.Result{}, errors.New("no such city")
			}
			return toolbus.TextResult("Sunny in " + a.City).WithDetails(map[string]int{"celsius": 21}), nil
		},
	})
	n, err := Start(ctx, Config{Bus: server.Config{Logger: slog.New(slog.DiscardHandler)}, Tools: []*toolbus.Tool{weather}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	res, err := n.Run(ctx, Turn{Input: "weather?", Script: `{"responses": [
		{"calls": [{"id": "c1", "name": "weather", "arguments": "{\"city\": \"Oslo\"}"},
		           {"id": "c2", "name": "weather", "arguments": "{\"city\": \"Atlantis\"}"},
		           {"id": "c3", "name": "wether", "arguments": "{}"}]},
		{"text": "done"}]}`})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != len(res.Calls) || len(res.Calls) != 3 {
		t.Fatalf("%d outputs for %d calls", len(res.Outputs), len(res.Calls))
	}
	for i, want := range []struct {
		call, text string
		isError    bool
		details    string
	}{
		{"c1", "Sunny in Oslo", false, `{"celsius":21}`},
		{"c2", "no such city", true, ""},
		{"c3", `unknown tool "wether" (did you mean weather?)`, true, ""},
	} {
		c, o := res.Calls[i], res.Outputs[i]
		if c.Call != want.call || !strings.Contains(o.Text(), want.text) || o.IsError != want.isError || string(o.Details) != want.details {
			t.Errorf("call %d: %s %s: output %q, error %v, details %s; want %s %q %v %s",
				i, c.Call, c.Outcome, o.Text(), o.IsError, o.Details, want.call, want.text, want.isError, want.details)
		}
	}
	// The kind as the providers name it.
	if toolbus.KindFunctionCallOutput != "function_call_output" {
		t.Errorf("KindFunctionCallOutput is %q", toolbus.KindFunctionCallOutput)
	}
	var outputs int
	for _, it := range res.Transcript {
		if it.Kind == toolbus.KindFunctionCallOutput {
			outputs++
		}
	}
	if outputs != 3 {
		t.Errorf("the transcript has %d items of kind %s, want 3", outputs, toolbus.KindFunctionCallOutput)
	}
}
