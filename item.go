package toolbus

import "encoding/json"

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

	// Provider names the gateway that produced Raw; other gateways skip such items.
	Provider string          `json:"provider,omitempty"`
	Raw      json.RawMessage `json:"raw,omitempty"`
}

// UserMessage is a user text item.
func UserMessage(text string) Item { return Item{Kind: KindMessage, Role: RoleUser, Text: text} }

// Note is a note item: raw is a JSON object whose "type" names the note
// ("toolbus.resume", "toolbus.usage"). Gateways skip notes; people and tools reading the
// transcript see them.
func Note(raw json.RawMessage) Item { return Item{Kind: KindNote, Raw: raw} }
