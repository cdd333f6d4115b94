package durable

import (
	"encoding/json"

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

// legacyNoteProvider is the fake provider whose opaque items were the notes of
// transcripts written before notes had a kind of their own.
const legacyNoteProvider = "toolbus"

// IsNote reports a note of toolbus's own, also one of a transcript stored before notes had
// a kind of their own, so that such a turn still resumes as it should.
func IsNote(it toolbus.Item) bool {
	return it.Kind == toolbus.KindNote || (it.Kind == toolbus.KindOpaque && it.Provider == legacyNoteProvider)
}
