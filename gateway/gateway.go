// Package gateway is the model side of a turn: it turns the turn's transcript and tool set
// into a provider request and the provider's answer into transcript items and function calls.
//
// The transcript is provider-neutral ([Item]); items a provider needs carried through
// verbatim between steps (reasoning, tool search) travel in Item.Raw.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/toolbus/toolbus"
)

// Model answers one step of a turn.
type Model interface {
	// Respond sends the transcript and tools and returns the model's output items. It
	// returns when ctx is done, with ctx's error.
	Respond(ctx context.Context, req *Request) (*Response, error)
}

// Request is one step of a turn.
type Request struct {
	Instructions string
	Input        []Item
	Tools        []*toolbus.Spec
	// ParallelToolCalls lets the model emit several calls in one response.
	ParallelToolCalls bool
	// Step counts model calls in this turn, from 0.
	Step int
	// Stream, when set, asks for the response as it arrives. A gateway that streams calls
	// it with each piece in the order the provider sent it, on Respond's goroutine, before
	// Respond returns; the Response Respond returns still holds every item whole. A gateway
	// that does not stream (or is told not to) never calls it. It must not block for long:
	// the provider's connection waits on it.
	//
	// The items delivered (StreamItem) are, in order, the first items of the Response:
	// item k delivered is Response.Items[k], and Index is k. Items the gateway adds itself
	// (the answers of a client-executed tool search) are delivered too, so that the order
	// holds; nothing after an item that was not delivered (a call cut by the output limit)
	// is. A stream that broke before anything was delivered is asked again; one that broke
	// after fails the step with an error wrapping ErrStreamCut.
	Stream func(StreamEvent)
}

// StreamEventKind names a piece of a streamed response.
type StreamEventKind string

const (
	// StreamText is a piece of assistant text (Text), in order; Index is the position of
	// the message item it belongs to (in Response.Items).
	StreamText StreamEventKind = "text"
	// StreamItem is an item that is complete (Item): a function call whose arguments are
	// whole and may be dispatched at once, a message, a reasoning or opaque item. A call
	// cut by the output limit never arrives as a StreamItem; it is only in the Response,
	// marked Truncated.
	StreamItem StreamEventKind = "item"
)

// StreamEvent is one piece of a streamed response.
type StreamEvent struct {
	Kind StreamEventKind
	// Index is the item's position in the step's Response.Items.
	Index int
	Text  string
	Item  *Item
}

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
	Truncated bool                  `json:"truncated,omitempty"`
	Output    []toolbus.ContentPart `json:"output,omitempty"`
	IsError   bool                  `json:"is_error,omitempty"`

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

// Usage counts tokens of one response: the root contract's [toolbus.Usage], the same type
// as bus.Usage, which a turn's statuses carry.
type Usage = toolbus.Usage

// Response is the model's answer to one step.
type Response struct {
	ID    string `json:"id,omitempty"`
	Items []Item `json:"items"`
	// Truncated reports that the model stopped on its output limit.
	Truncated bool  `json:"truncated,omitempty"`
	Usage     Usage `json:"usage"`
}

// Calls returns the function-call items in the order the model emitted them.
func (r *Response) Calls() []Item {
	var calls []Item
	for _, it := range r.Items {
		if it.Kind == KindFunctionCall {
			calls = append(calls, it)
		}
	}
	return calls
}

// Text joins the assistant messages of the response.
func (r *Response) Text() string {
	var parts []string
	for _, it := range r.Items {
		if it.Kind == KindMessage && it.Role == RoleAssistant && it.Text != "" {
			parts = append(parts, it.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// Error is a provider failure that retrying will not mend (bad key, unknown model,
// malformed response). The turn ends with its message.
type Error struct {
	Provider string
	Status   int // HTTP status, 0 when there was none
	Message  string
	err      error // what it is, for errors.Is (ErrStreamCut)
}

func (e *Error) Unwrap() error { return e.err }

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s: HTTP %d: %s", e.Provider, e.Status, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Provider, e.Message)
}

// ErrUnknownModel reports a -model spec no gateway understands.
var ErrUnknownModel = errors.New("unknown model spec")
