package durable

import (
	"encoding/json"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
)

// Transcript notes are items of toolbus's own in a turn's transcript: gateways skip
// them, people and tools reading the transcript see them.

// NoteProvider is the provider of the transcript's notes.
const NoteProvider = "toolbus"

// ResumeNote is the note that says a node took the turn over.
func ResumeNote(r bus.Resume) gateway.Item {
	raw, _ := json.Marshal(map[string]any{"type": "toolbus.resume", "node": r.Node, "from": r.From, "at": r.At, "why": r.Why})
	return gateway.Item{Kind: gateway.KindOpaque, Provider: NoteProvider, Raw: raw}
}

// UsageNote is the note that holds one step's tokens.
func UsageNote(step int, u bus.Usage) gateway.Item {
	raw, _ := json.Marshal(map[string]any{"type": "toolbus.usage", "step": step, "input_tokens": u.InputTokens, "output_tokens": u.OutputTokens})
	return gateway.Item{Kind: gateway.KindOpaque, Provider: NoteProvider, Raw: raw}
}

// IsNote reports a note of toolbus's own.
func IsNote(it gateway.Item) bool {
	return it.Kind == gateway.KindOpaque && it.Provider == NoteProvider
}
