package durable

import (
	"encoding/json"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
)

// Transcript notes are items of toolbus's own in a turn's transcript, of their own kind
// (toolbus.KindNote): gateways skip them, people and tools reading the transcript see them.

// ResumeNote is the note that says a node took the turn over.
func ResumeNote(r bus.Resume) toolbus.Item {
	raw, _ := json.Marshal(map[string]any{"type": "toolbus.resume", "node": r.Node, "from": r.From, "at": r.At, "why": r.Why})
	return toolbus.Note(raw)
}

// UsageNote is the note that holds one step's tokens.
func UsageNote(step int, u bus.Usage) toolbus.Item {
	note := map[string]any{"type": "toolbus.usage", "step": step, "input_tokens": u.InputTokens, "output_tokens": u.OutputTokens}
	if u.CacheCreationInputTokens != 0 || u.CacheReadInputTokens != 0 {
		note["cache_creation_input_tokens"], note["cache_read_input_tokens"] = u.CacheCreationInputTokens, u.CacheReadInputTokens
	}
	raw, _ := json.Marshal(note)
	return toolbus.Note(raw)
}

// CallsNote is the note that holds how each call of a batch ran, after the batch's
// outputs: its outcome, the repair rungs its arguments needed, its host's label, how long
// it ran and waited. A reader of a turn after its end (the console) shows from it what
// the turn's statuses told its watchers live; a call's error and output are in its
// output item already, its details are left out (unbounded, and for live watchers).
func CallsNote(step int, records []bus.CallRecord) toolbus.Item {
	type run struct {
		Call      string        `json:"call_id"`
		Outcome   bus.Outcome   `json:"outcome"`
		Rungs     []string      `json:"rungs,omitempty"`
		Truncated bool          `json:"truncated,omitempty"`
		Label     string        `json:"label,omitempty"`
		Duration  time.Duration `json:"duration_ns,omitempty"`
		Latency   time.Duration `json:"latency_ns,omitempty"`
	}
	runs := make([]run, len(records))
	for i, r := range records {
		runs[i] = run{Call: r.Call, Outcome: r.Outcome, Rungs: r.Rungs, Truncated: r.Truncated, Label: r.Label, Duration: r.Duration, Latency: r.Latency}
	}
	raw, _ := json.Marshal(map[string]any{"type": "toolbus.calls", "step": step, "calls": runs})
	return toolbus.Note(raw)
}

// legacyNoteProvider is the fake provider whose opaque items were the notes of
// transcripts written before notes had a kind of their own.
const legacyNoteProvider = "toolbus"

// IsNote reports a note of toolbus's own, also one of a transcript stored before notes had
// a kind of their own, so that such a turn still resumes as it should.
func IsNote(it toolbus.Item) bool {
	return it.Kind == toolbus.KindNote || (it.Kind == toolbus.KindOpaque && it.Provider == legacyNoteProvider)
}
