package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

func TestWatchSaysWhenATurnsNodeGoesSilent(t *testing.T) {
	t.Parallel()
	status := func(kind string, st bus.TurnStatus) bus.TurnMessage {
		b, _ := json.Marshal(st)
		return decoded(t, &nats.Msg{Subject: bus.TurnStatusSubject("turn-1", kind), Data: b})
	}
	l := newLostWatch()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l.heard(status(bus.StatusStarted, bus.TurnStatus{Node: "n1", Lease: time.Second}), t0)
	if lines := l.check(t0.Add(900 * time.Millisecond)); len(lines) != 0 {
		t.Fatalf("within the lease: %q", lines)
	}
	l.heard(status(bus.StatusBeat, bus.TurnStatus{Node: "n1", Lease: time.Second}), t0.Add(900*time.Millisecond))
	if lines := l.check(t0.Add(1500 * time.Millisecond)); len(lines) != 0 {
		t.Fatalf("a beat came: %q", lines)
	}
	lines := l.check(t0.Add(2 * time.Second))
	if len(lines) != 1 || !strings.Contains(lines[0], "node n1 silent for 1s: it seems lost") {
		t.Fatalf("after a silent lease: %q", lines)
	}
	if lines := l.check(t0.Add(3 * time.Second)); len(lines) != 0 {
		t.Fatalf("said twice: %q", lines)
	}
	l.heard(status(bus.StatusDone, bus.TurnStatus{State: bus.TurnCompleted}), t0.Add(4*time.Second))
	if lines := l.check(t0.Add(10 * time.Second)); len(lines) != 0 || len(l.turns) != 0 {
		t.Fatalf("an ended turn is still watched: %q", lines)
	}
	// A turn run in Go has no lease: it is never said to be lost.
	l.heard(status(bus.StatusStarted, bus.TurnStatus{Node: "n1"}), t0)
	if lines := l.check(t0.Add(time.Hour)); len(lines) != 0 {
		t.Fatalf("a turn without a lease: %q", lines)
	}
}

// TestWatchPresentation: watch shows a presentation event's label and data.
func TestWatchPresentation(t *testing.T) {
	t.Parallel()
	ev := bus.Event{Turn: "T1", Call: "c1", Tool: "show", Kind: bus.EventPresentation, Label: "3 rows", Data: json.RawMessage(`[1,2,3]`)}
	b, _ := json.Marshal(ev)
	line, ok := watchLine(decoded(t, &nats.Msg{Subject: bus.EventSubject("T1", "c1", bus.EventPresentation), Data: b}), time.Now())
	if !ok || !strings.Contains(line, "evt.presentation") || !strings.Contains(line, "show         3 rows [1,2,3]") {
		t.Errorf("watch line %q", line)
	}
}

// decoded is m as client.Watch delivers it.
func decoded(t *testing.T, m *nats.Msg) bus.TurnMessage {
	t.Helper()
	tm, err := bus.DecodeTurnMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}
