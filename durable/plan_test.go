package durable

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
)

// TestPlanResume is the table of what a resumed turn does with the calls of its last
// batch, from the transcript alone.
func TestPlanResume(t *testing.T) {
	t.Parallel()
	user := toolbus.UserMessage("go")
	call := func(id, name string) toolbus.Item {
		return toolbus.Item{Kind: toolbus.KindFunctionCall, CallID: id, Name: name, Arguments: "{}"}
	}
	out := func(id string) toolbus.Item {
		return toolbus.Item{Kind: toolbus.KindCallOutput, CallID: id, Output: nil}
	}
	// ran is a call that records how the turn took it (toolbus.CallRun): the plan goes
	// by that, not by today's tool of that name.
	ran := func(id, name string, n int, seq, ro bool) toolbus.Item {
		c := call(id, name)
		c.Run = &toolbus.CallRun{Step: 1, N: n, Sequential: seq, ReadOnly: ro}
		return c
	}
	text := func(s string) toolbus.Item {
		return toolbus.Item{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: s}
	}
	usage := UsageNote(1, bus.Usage{InputTokens: 3})
	resumed := ResumeNote(bus.Resume{Node: "n2", From: "n1"})
	// Tools by name: p parallel and destructive, r read-only, s sequential and
	// destructive, x refused (unknown, or invalid arguments).
	info := func(_ int, c toolbus.Item) CallInfo {
		switch c.Name {
		case "r":
			return CallInfo{ReadOnly: true}
		case "s":
			return CallInfo{Sequential: true}
		case "x":
			return CallInfo{Refused: true}
		}
		return CallInfo{}
	}
	cases := []struct {
		name     string
		items    []toolbus.Item
		actions  []Action
		open     bool
		answered string
		steps    int
	}{
		{name: "fresh turn", items: []toolbus.Item{user, resumed}, steps: 0},
		{name: "answer stored, end not", items: []toolbus.Item{user, usage, text("done"), resumed}, answered: "done", steps: 1},
		{name: "every output recorded", items: []toolbus.Item{user, call("a", "p"), call("b", "p"), out("b"), out("a"), resumed},
			actions: []Action{Recorded, Recorded}, steps: 1},
		{name: "destructive in flight may have run", items: []toolbus.Item{user, call("a", "p"), call("b", "p"), out("a")},
			actions: []Action{Recorded, Abandon}, open: true, steps: 1},
		{name: "read-only in flight runs again", items: []toolbus.Item{user, call("a", "r"), call("b", "p"), out("b"), resumed},
			actions: []Action{Run, Recorded}, open: true, steps: 1},
		{name: "sequential after an open call was held back", items: []toolbus.Item{user, call("a", "p"), call("b", "s"), call("c", "p")},
			actions: []Action{Abandon, Run, Run}, open: true, steps: 1},
		{name: "open sequential call holds every later one", items: []toolbus.Item{user, call("a", "s"), call("b", "p"), call("c", "r")},
			actions: []Action{Abandon, Run, Run}, open: true, steps: 1},
		{name: "sequential after recorded calls may have gone out", items: []toolbus.Item{user, call("a", "p"), call("b", "s"), out("a")},
			actions: []Action{Recorded, Abandon}, open: true, steps: 1},
		{name: "refused call holds nothing back", items: []toolbus.Item{user, call("a", "x"), call("b", "s")},
			actions: []Action{Refused, Abandon}, open: true, steps: 1},
		{name: "a refused call alone still needs its output", items: []toolbus.Item{user, call("a", "x"), call("b", "p"), out("b")},
			actions: []Action{Refused, Recorded}, open: true, steps: 1},
		{name: "only the last batch counts", items: []toolbus.Item{user, usage, call("a", "p"), out("a"), usage, text("now b"), call("b", "p"), resumed, resumed},
			actions: []Action{Abandon}, open: true, steps: 2},
		{name: "recorded parallel run: today's sequential tool holds nothing", items: []toolbus.Item{user, ran("a", "p", 1, false, false), ran("b", "s", 1, false, false), ran("c", "p", 1, false, false)},
			actions: []Action{Abandon, Abandon, Abandon}, open: true, steps: 1},
		{name: "recorded sequential call holds the run after it", items: []toolbus.Item{user, ran("a", "p", 1, true, false), ran("b", "p", 2, false, false)},
			actions: []Action{Abandon, Run}, open: true, steps: 1},
		{name: "recorded read-only call runs again, today's flag aside", items: []toolbus.Item{user, ran("a", "p", 1, false, true), ran("b", "r", 1, false, false)},
			actions: []Action{Run, Abandon}, open: true, steps: 1},
		{name: "repair instruction then no answer yet", items: []toolbus.Item{user, text("plain"),
			{Kind: toolbus.KindMessage, Role: toolbus.RoleDeveloper, Text: "call submit_result"}}, steps: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := PlanBatch(c.items, info)
			if !slices.Equal(p.Actions, c.actions) {
				t.Errorf("actions %v, want %v", p.Actions, c.actions)
			}
			if p.Open != c.open {
				t.Errorf("open %v, want %v", p.Open, c.open)
			}
			if p.Answered != (c.answered != "") || p.Text != c.answered {
				t.Errorf("answered %v %q, want %q", p.Answered, p.Text, c.answered)
			}
			if n := Steps(c.items); n != c.steps {
				t.Errorf("steps %d, want %d", n, c.steps)
			}
			if got := LastCalls(c.items); len(got) != len(c.actions) {
				t.Errorf("last calls %d, want %d", len(got), len(c.actions))
			}
		})
	}
}

func TestNotesAreNotes(t *testing.T) {
	t.Parallel()
	for _, it := range []toolbus.Item{ResumeNote(bus.Resume{Node: "n1"}), UsageNote(2, bus.Usage{OutputTokens: 1})} {
		if !IsNote(it) {
			t.Errorf("%s is not a note", it.Raw)
		}
		var m map[string]any
		if err := json.Unmarshal(it.Raw, &m); err != nil || m["type"] == nil {
			t.Errorf("note %s: %v", it.Raw, err)
		}
	}
}

// TestLegacyNotesAreNotes: a transcript stored before notes had a kind of their own holds
// them as opaque items of provider "toolbus"; they are still notes, other opaque items not.
func TestLegacyNotesAreNotes(t *testing.T) {
	raw := json.RawMessage(`{"type":"toolbus.resume","node":"n2"}`)
	if it := (toolbus.Item{Kind: toolbus.KindOpaque, Provider: "toolbus", Raw: raw}); !IsNote(it) {
		t.Errorf("legacy note %+v is not a note", it)
	}
	if it := (toolbus.Item{Kind: toolbus.KindOpaque, Provider: "chat", Raw: raw}); IsNote(it) { // gateway.ProviderChat
		t.Errorf("opaque item %+v of a gateway is a note", it)
	}
	if it := ResumeNote(bus.Resume{Node: "n2"}); it.Kind != toolbus.KindNote || it.Provider != "" {
		t.Errorf("resume note %+v: want kind %q and no provider", it, toolbus.KindNote)
	}
}
