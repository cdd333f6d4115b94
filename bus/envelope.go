package bus

import (
	"encoding/json"
	"time"

	"github.com/toolbus/toolbus"
)

// The JSON envelopes exchanged on the bus. They are the wire contract that
// tool workers in any language implement, so field names are snake_case and
// stable. A tool request carries the validated arguments object as its body
// and its identity in headers (HeaderTurn, HeaderCall, HeaderDeadline, ...);
// the replies and events below carry the rest.

// Outcome is how a tool call ended.
type Outcome string

const (
	OutcomeOK          Outcome = "ok"          // the tool returned a result
	OutcomeError       Outcome = "error"       // the tool returned an error or an error result
	OutcomeInvalid     Outcome = "invalid"     // the arguments were refused; the tool did not run
	OutcomeNotStarted  Outcome = "not_started" // aborted before the call was dispatched
	OutcomeStopped     Outcome = "stopped"     // execute returned after its context was cancelled
	OutcomeAbandoned   Outcome = "abandoned"   // execute did not return within the grace period; it may still run
	OutcomeTimeout     Outcome = "timeout"     // the call's deadline passed
	OutcomeUnavailable Outcome = "unavailable" // no host serves the tool's category
	OutcomePanic       Outcome = "panic"       // execute panicked
	OutcomeRefused     Outcome = "refused"     // held for approval and refused; the tool did not run
)

// Valid reports whether o is one of the defined outcomes. Replies come from
// anyone on the bus, so receivers check before trusting one.
func (o Outcome) Valid() bool {
	switch o {
	case OutcomeOK, OutcomeError, OutcomeInvalid, OutcomeNotStarted, OutcomeStopped,
		OutcomeAbandoned, OutcomeTimeout, OutcomeUnavailable, OutcomePanic, OutcomeRefused:
		return true
	}
	return false
}

// ContentPart is one piece of what the model sees: the root contract's type
// ([toolbus.ContentPart]), so a tool's result goes on the wire as it is.
type ContentPart = toolbus.ContentPart

// Content part types, as in the root contract.
const (
	ContentText  = toolbus.ContentText
	ContentImage = toolbus.ContentImage
)

// EventKind is the kind of a tool call's activity event, and the last token
// of its [EventSubject].
type EventKind string

const (
	EventStarted      EventKind = "started"      // Label: the tool's DescribeActivity
	EventProgress     EventKind = "progress"     // intermediate progress reported by execute
	EventCompleted    EventKind = "completed"    // Label: the tool's DescribeCompletedActivity
	EventPresentation EventKind = "presentation" // something for a UI to show, never sent to the model
	// EventReplyLost is a host's word that the reply it sent may not have reached the
	// caller: its connection to the bus was re-established meanwhile (see [ResendSubject]).
	EventReplyLost EventKind = "reply_lost"
)

// Event is an activity event of one tool call, published on [EventSubject]
// and also carried in a [ToolReply] (presentations and completion).
type Event struct {
	Turn  string          `json:"turn_id"`
	Call  string          `json:"call_id"`
	Tool  string          `json:"tool"`
	Kind  EventKind       `json:"kind"`
	Label string          `json:"label,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
	Time  time.Time       `json:"time"`
}

// TextDelta is a piece of the text a model writes in a streaming step, published by the
// turn on [TextSubject] as it arrives, only when anyone listens. The pieces of a step come
// in order; joined, those of one item are the text of that item in the transcript, which
// keeps whole items, never pieces. A piece larger than [MaxTextDelta] goes in several.
type TextDelta struct {
	Turn string `json:"turn_id"`
	// Step is the model step, counted from 1 as in statuses; Item the position of the
	// message in the step's response.
	Step int `json:"step"`
	Item int `json:"item"`
	// Seq numbers the turn's pieces from 1, so a follower notices one it missed.
	Seq  int    `json:"seq"`
	Text string `json:"text"`
}

// MaxTextDelta bounds the text of one TextDelta message.
const MaxTextDelta = 16 << 10

// ToolReply is the result of one tool call, sent by a category host to the
// request's reply subject ([ResultSubject]).
type ToolReply struct {
	Call    string        `json:"call_id"`
	Tool    string        `json:"tool"`
	Outcome Outcome       `json:"outcome"`
	Content []ContentPart `json:"content,omitempty"`
	// Details is structured output for logs and UIs; it is never sent to the model.
	Details json.RawMessage `json:"details,omitempty"`
	// Events are the presentation events the tool attached to its result.
	Events []Event `json:"events,omitempty"`
	// Completion is the tool's completion event, if it made one.
	Completion *Event `json:"completion,omitempty"`
	// Terminate asks the turn to end after the current batch of calls.
	Terminate bool `json:"terminate,omitempty"`
	// Error explains a non-ok outcome.
	Error string `json:"error,omitempty"`
	// Abort is the abort of the turn that stopped the call, when one did. The reply may
	// reach the turn before the abort does; the turn takes it as the abort.
	Abort *Abort `json:"abort,omitempty"`
	// Label is the completed-activity label of the call.
	Label string `json:"label,omitempty"`
	// Duration is how long execute ran, in nanoseconds on the wire.
	Duration time.Duration `json:"duration_ns"`
}

// DefaultAbortGrace is how long an aborted turn waits for its running calls to stop
// before it abandons them: longer than the computer tools take to kill a command that
// ignores SIGTERM (their kill grace of 2 s, then a few milliseconds), with room for the
// abort to reach the host and the reply to come back on a loaded machine, so that an
// aborted command ends stopped, not abandoned. A caller waiting for an aborted turn's
// end waits longer than this.
const DefaultAbortGrace = 5 * time.Second

// DefaultCallTimeout is a call's deadline when its tool sets no timeout.
const DefaultCallTimeout = 2 * time.Minute

// ReplyGrace is how long past a call's deadline a caller (the turn, toolbus call)
// waits for the host's reply before it settles the call timeout itself: the host
// enforces the deadline and needs a moment to say so.
const ReplyGrace = 500 * time.Millisecond

// AnswerMayBeLost ends the error of a call given up at its deadline (OutcomeTimeout)
// whose caller's connection to the bus went down while it ran: the host's reply may
// have been lost on its way, and the tool may have run.
const AnswerMayBeLost = "; the connection to the bus went down while it ran, so its answer may have been lost: it may have run"

// ReplyKeep is how long a host keeps a reply it sent, to send it again when asked on
// [ResendSubject]: when its connection is re-established, it announces ([EventReplyLost])
// every reply it sent this long before. It covers the time a client of [Dial] takes to
// notice that its server stopped answering, DialPingInterval*(DialMaxPingsOut+1) (6 s),
// and then some for a loaded machine: a reply written to a connection that is already
// dead is lost without an error.
const ReplyKeep = 20 * time.Second

// Abort asks a turn to stop; it is published on [AbortSubject].
type Abort struct {
	Turn   string `json:"turn_id"`
	Reason string `json:"reason,omitempty"`
	By     string `json:"by,omitempty"`
	// Call, when set, cancels only that call of the turn (its id on the bus, or the
	// model's): its host stops it, and the turn ends it with an honest outcome and goes
	// on. The session of `toolbus mcp`, a turn id without a turn behind it, stops its
	// calls one by one this way.
	Call string `json:"call_id,omitempty"`
}

// CatalogChange is published on [CatalogChanged] by a category host that started
// ("up") or is stopping ("down").
type CatalogChange struct {
	Category string `json:"category"`
	Node     string `json:"node,omitempty"`
	State    string `json:"state"` // "up" or "down"
}

// States of a CatalogChange.
const (
	CatalogUp   = "up"
	CatalogDown = "down"
)

// ApprovalRequest is published on [ApprovalSubject] when a turn holds a call for
// approval, and is the reply to an [Approval] without a decision.
type ApprovalRequest struct {
	Turn      string          `json:"turn_id"`
	Call      string          `json:"call_id"`
	Agent     string          `json:"agent,omitempty"`
	Tool      string          `json:"tool"`
	Namespace string          `json:"namespace,omitempty"`
	Args      json.RawMessage `json:"arguments"`
	// ArgsHash is the hex SHA-256 of Args (canonical JSON): an approval names it, so it
	// approves these arguments and no others.
	ArgsHash    string    `json:"arguments_sha256"`
	Destructive bool      `json:"destructive,omitempty"`
	ReadOnly    bool      `json:"read_only,omitempty"`
	Deadline    time.Time `json:"deadline"`
	// Label is the activity label the tool's host gives the call ("Deleting notes.txt"),
	// when the host answers a describe request (see [DescribeSubject]) in time.
	Label string `json:"label,omitempty"`
}

// Description answers a describe request: the call's activity label, or why there is none.
type Description struct {
	Label string `json:"label,omitempty"`
	Error string `json:"error,omitempty"`
}

// Approval answers a held call, as a request on [ApproveSubject]. Without Decision it
// asks for the call's ApprovalRequest; with one it must carry the ArgsHash of the
// arguments it approves. The turn replies with an ApprovalReply.
type Approval struct {
	Decision string `json:"decision,omitempty"` // ApprovalGrant or ApprovalRefuse; empty asks
	ArgsHash string `json:"arguments_sha256,omitempty"`
	By       string `json:"by,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Decisions of an Approval.
const (
	ApprovalGrant  = "approve"
	ApprovalRefuse = "refuse"
)

// ApprovalReply answers an Approval: the request when it asked, or whether the decision
// was taken.
type ApprovalReply struct {
	Request *ApprovalRequest `json:"request,omitempty"`
	Error   string           `json:"error,omitempty"`
}
