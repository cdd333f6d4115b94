package toolbus

import (
	"encoding/json"
	"time"
)

// The transcript of a turn is a list of provider-neutral items: what the user and the
// model said, the calls the model made and their outputs, and toolbus's own notes. The
// gateways turn it into each provider's request, the turn journals it, durable stores
// and audits it, and clients read it back; it lives here, in the contract all of them
// import, so that none of them needs a provider's SDK to read a transcript.

// ItemKind is the kind of a transcript item.
type ItemKind string

const (
	KindMessage      ItemKind = "message"       // text from user, assistant or developer
	KindFunctionCall ItemKind = "function_call" // a call the model made
	KindCallOutput   ItemKind = "function_call_output"
	KindReasoning    ItemKind = "reasoning" // carried through verbatim in Raw
	KindOpaque       ItemKind = "opaque"    // any other provider item carried in Raw (tool search, ...)
	KindNote         ItemKind = "note"      // toolbus's own (a resume, a step's tokens) in Raw; never sent to a model
)

// KindFunctionCallOutput is KindCallOutput by the name the providers give it
// (Responses' function_call_output), the name a reader of a transcript looks for first.
const KindFunctionCallOutput = KindCallOutput

// Roles of message items.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleDeveloper = "developer"
)

// Item is one entry of a turn's transcript.
type Item struct {
	Kind ItemKind `json:"kind"`
	Role string   `json:"role,omitempty"`
	Text string   `json:"text,omitempty"`

	// Function calls and their outputs.
	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Arguments string `json:"arguments,omitempty"` // raw, exactly as the model sent them
	// Truncated marks a call whose arguments were cut by the output limit.
	Truncated bool          `json:"truncated,omitempty"`
	Output    []ContentPart `json:"output,omitempty"`
	IsError   bool          `json:"is_error,omitempty"`

	// What the turn made of a function call, recorded with it so that a resumed turn,
	// the console and `toolbus run -json` read it instead of deriving it again from the
	// tools of their day (gateways never send these to a model; transcripts of earlier
	// builds have none):
	//
	// Run is where the call was placed in its response's batch; nil for a call refused
	// as it was taken (unknown tool, invalid arguments: it never goes out).
	Run *CallRun `json:"run,omitempty"`
	// Repaired is the JSON object the tool got, when the repair ladder changed the
	// model's text to make it (Arguments keeps that text), and Rungs the ladder's
	// rungs that ran (as schema.Rung names them).
	Repaired json.RawMessage `json:"repaired,omitempty"`
	Rungs    []string        `json:"rungs,omitempty"`
	// Ran is how the call ended, on its output: what the call's record says, for
	// readers of the turn after its end (its watchers heard it live, in the statuses).
	Ran *CallRan `json:"ran,omitempty"`

	// Provider names the gateway that produced Raw; other gateways skip such items.
	Provider string          `json:"provider,omitempty"`
	Raw      json.RawMessage `json:"raw,omitempty"`
}

// CallRun places a function call in the batch of its response. The calls of one run go
// out together, once every call of the runs before it has settled: consecutive parallel
// calls share a run, and a sequential call has one of its own.
type CallRun struct {
	// Step is the model response the call belongs to, from 1.
	Step int `json:"step"`
	// N is the call's run in that response, from 1.
	N int `json:"n"`
	// Sequential and ReadOnly are its tool's mode and flag when the turn took the call:
	// what a resumed turn needs to know whether it may have gone out and whether running
	// it again is harmless.
	Sequential bool `json:"sequential,omitempty"`
	ReadOnly   bool `json:"read_only,omitempty"`
	// Namespace is the namespace of the tool that ran, when the call named none (a bare
	// name the assembly resolved to a namespaced tool).
	Namespace string `json:"namespace,omitempty"`
}

// CallRan is how a call ended, as its record says (bus.CallRecord): its outcome, its
// host's label, how long it ran (Duration, from the host's start to its reply) and how
// long the turn waited for it (Latency). Its error and output are the output item's.
type CallRan struct {
	Outcome  string        `json:"outcome"`
	Label    string        `json:"label,omitempty"`
	Duration time.Duration `json:"duration_ns,omitempty"`
	Latency  time.Duration `json:"latency_ns,omitempty"`
}

// UserMessage is a user text item.
func UserMessage(text string) Item { return Item{Kind: KindMessage, Role: RoleUser, Text: text} }

// Note is a note item: raw is a JSON object whose "type" names the note
// ("toolbus.resume", "toolbus.usage"). Gateways skip notes; people and tools reading the
// transcript see them.
func Note(raw json.RawMessage) Item { return Item{Kind: KindNote, Raw: raw} }
