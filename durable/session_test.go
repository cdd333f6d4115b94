package durable

import (
	"errors"
	"strings"
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

// TestEndLostSession: the session of a process that is gone is ended as failed, with a
// note in its transcript, under the next epoch, and the process is fenced out: its
// appends and its end are refused. A session of another owner, or ended, is left alone.
func TestEndLostSession(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	s := openStore(t, bustest.JetStream(t, srv, "mcp"), "n1", 1)
	spec := bus.TurnSpec{ID: bus.NewID(), Kind: bus.TurnMCP, Agent: "ann", Input: "MCP session of a client"}
	x, err := s.OpenSession(ctx, spec, "toolbus-mcp@h/1", []toolbus.Item{toolbus.UserMessage(spec.Input)})
	if err != nil {
		t.Fatal(err)
	}
	call := toolbus.Item{Kind: toolbus.KindFunctionCall, CallID: "c1", Name: "echo", Arguments: `{}`}
	if err := x.Append(ctx, 1, call); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndLostSession(ctx, spec.ID, "toolbus-mcp@h/2", "gone"); !errors.Is(err, ErrSessionAlive) {
		t.Errorf("another owner's session: %v", err)
	}
	const why = "its toolbus mcp stopped beating"
	rec, err := s.EndLostSession(ctx, spec.ID, "toolbus-mcp@h/1", why)
	if err != nil {
		t.Fatal(err)
	}
	stored, _, err := s.Record(ctx, spec.ID)
	for _, r := range []bus.TurnRecord{rec, stored} {
		if err != nil || r.State != bus.TurnFailed || r.Error != why || r.Epoch != 2 || r.Step != 1 || r.Stored != 3 {
			t.Errorf("ended record %+v %v", r, err)
		}
	}
	items, err := s.ReadTranscript(ctx, spec.ID)
	if err != nil || len(items) != 3 || items[2].Kind != toolbus.KindNote || !strings.Contains(string(items[2].Raw), "toolbus.session_lost") {
		t.Errorf("transcript %+v %v", items, err)
	}
	// The process, woken: neither its transcript nor its record takes its writes.
	if err := x.Append(ctx, 2, call); !errors.Is(err, ErrFenced) {
		t.Errorf("the fenced process's append: %v", err)
	}
	if err := x.End(ctx, bus.TurnCompleted, "", 2); !errors.Is(err, ErrFenced) {
		t.Errorf("the fenced process's end: %v", err)
	}
	if _, err := s.EndLostSession(ctx, spec.ID, "toolbus-mcp@h/1", why); !errors.Is(err, ErrTurnOver) {
		t.Errorf("an ended session again: %v", err)
	}
	if after, _, err := s.Record(ctx, spec.ID); err != nil || after.State != bus.TurnFailed || after.Stored != 3 {
		t.Errorf("record after the fenced writes: %+v %v", after, err)
	}
}
