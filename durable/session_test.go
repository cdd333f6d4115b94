package durable

import (
	"errors"
	"testing"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

// TestSessionRecordsATurn: a session's turn is a record, running and held by its
// owner, with its first message, its appends at their positions, and its end; its id
// cannot be used twice; a client store of a bus without records says so; nothing is
// queued in the intake, so no node would ever claim it.
func TestSessionRecordsATurn(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := bustest.JetStream(t, srv, "mcp")

	bare, err := Open(ctx, js, Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	spec := bus.TurnSpec{ID: bus.NewID(), Kind: bus.TurnMCP, Agent: "ann", Input: "MCP session of a client"}
	if _, err := bare.OpenSession(ctx, spec, "toolbus-mcp@h/1", []toolbus.Item{toolbus.UserMessage(spec.Input)}); !errors.Is(err, ErrNoTurns) {
		t.Fatalf("a bus without records: %v", err)
	}

	s := openStore(t, js, "n1", 1)
	x, err := s.OpenSession(ctx, spec, "toolbus-mcp@h/1", []toolbus.Item{toolbus.UserMessage(spec.Input)})
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := s.Record(ctx, spec.ID)
	if err != nil || rec.State != bus.TurnRunning || rec.Owner != "toolbus-mcp@h/1" || rec.Epoch != 1 || rec.Spec.Kind != bus.TurnMCP {
		t.Fatalf("record %+v %v", rec, err)
	}
	if _, err := s.OpenSession(ctx, spec, "toolbus-mcp@h/2", nil); !errors.Is(err, ErrTurnExists) {
		t.Errorf("the same id again: %v", err)
	}
	call := toolbus.Item{Kind: toolbus.KindFunctionCall, CallID: "c1", Name: "echo", Arguments: `{}`}
	out := toolbus.Item{Kind: toolbus.KindCallOutput, CallID: "c1", Name: "echo", Output: []toolbus.ContentPart{toolbus.Text("hi")}}
	if err := x.Append(ctx, 1, call); err != nil {
		t.Fatal(err)
	}
	if err := x.Append(ctx, 1, out); err != nil {
		t.Fatal(err)
	}
	if live, err := s.Live(ctx, spec.ID); err != nil || live.Step != 1 {
		t.Errorf("live step: %+v %v", live, err)
	}
	if err := x.End(ctx, bus.TurnCompleted, "", 1); err != nil {
		t.Fatal(err)
	}
	rec, _, err = s.Record(ctx, spec.ID)
	if err != nil || rec.State != bus.TurnCompleted || rec.Step != 1 || rec.Stored != 3 {
		t.Errorf("ended record %+v %v", rec, err)
	}
	items, err := s.ReadTranscript(ctx, spec.ID)
	if err != nil || len(items) != 3 || items[1].CallID != "c1" || items[2].Kind != toolbus.KindCallOutput {
		t.Errorf("transcript %+v %v", items, err)
	}
	if n, err := s.IntakeMessages(ctx); err != nil || n != 0 {
		t.Errorf("intake holds %d messages (%v): a session is never queued", n, err)
	}
}
