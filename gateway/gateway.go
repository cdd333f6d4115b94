// Package gateway is the model side of a turn: it turns the turn's transcript and tool set
// into a provider request and the provider's answer into transcript items and function calls.
//
// The transcript is provider-neutral ([toolbus.Item]); items a provider needs carried through
// verbatim between steps (reasoning, tool search) travel in Item.Raw.
package gateway

import (
	"context"
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
	Input        []toolbus.Item
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
	Item  *toolbus.Item
}

// Usage counts tokens of one response: the root contract's [toolbus.Usage], the same type
// as bus.Usage, which a turn's statuses carry.
type Usage = toolbus.Usage

// Response is the model's answer to one step.
type Response struct {
	ID    string         `json:"id,omitempty"`
	Items []toolbus.Item `json:"items"`
	// Truncated reports that the model stopped on its output limit.
	Truncated bool  `json:"truncated,omitempty"`
	Usage     Usage `json:"usage"`
}

// Calls returns the function-call items in the order the model emitted them.
func (r *Response) Calls() []toolbus.Item {
	var calls []toolbus.Item
	for _, it := range r.Items {
		if it.Kind == toolbus.KindFunctionCall {
			calls = append(calls, it)
		}
	}
	return calls
}

// Text joins the assistant messages of the response.
func (r *Response) Text() string {
	// A step's response holds one message or none, most often: its text is returned as it
	// is, with no slice of parts (the turn asks for it at every step).
	var text string
	var parts []string
	for i := range r.Items {
		it := &r.Items[i]
		if it.Kind != toolbus.KindMessage || it.Role != toolbus.RoleAssistant || it.Text == "" {
			continue
		}
		switch {
		case text == "":
			text = it.Text
		case parts == nil:
			parts = []string{text, it.Text}
		default:
			parts = append(parts, it.Text)
		}
	}
	if parts != nil {
		return strings.Join(parts, "\n")
	}
	return text
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
