package bus

import (
	"encoding/json"
	"time"
)

// Turn-level envelopes: starting a turn on a node, and the status a turn
// publishes on TurnStatusSubject while it runs.

// StartTurn asks a node to run a turn. It is sent as a request to
// NodeStartTurnSubject or AnyNodeStartTurn; the node answers with a
// StartTurnReply as soon as the turn exists, and the turn's progress follows
// on its status and event subjects. Subscribe to TurnSubjects(Turn) before
// sending, so nothing is missed.
type StartTurn struct {
	// Turn is the new turn's id, chosen by the caller so it can subscribe
	// first. It must satisfy ValidID; empty means the node picks one.
	Turn         string `json:"turn_id,omitempty"`
	Agent        string `json:"agent,omitempty"`
	Task         string `json:"task,omitempty"`
	Prompt       string `json:"prompt"`
	Instructions string `json:"instructions,omitempty"`
	// Model is a model spec such as "openai:gpt-5.4" or "chat:llama3.1",
	// resolved by the node with its own credentials.
	Model string `json:"model,omitempty"`
	// Script is an inline scripted-model document; it overrides Model.
	Script   json.RawMessage `json:"script,omitempty"`
	MaxSteps int             `json:"max_steps,omitempty"`
}

// StartTurnReply answers a StartTurn.
type StartTurnReply struct {
	Turn  string `json:"turn_id,omitempty"`
	Node  string `json:"node,omitempty"`
	Error string `json:"error,omitempty"`
}

// TurnState is how a turn ended, or that it is still running.
type TurnState string

const (
	TurnRunning    TurnState = "running"
	TurnCompleted  TurnState = "completed"  // the model stopped calling tools
	TurnTerminated TurnState = "terminated" // a tool result asked to end the turn
	TurnStepLimit  TurnState = "step_limit" // the step limit was reached
	TurnAborted    TurnState = "aborted"
	TurnFailed     TurnState = "failed" // the model gateway or the runtime failed
)

// CallRecord is the turn's account of one function call.
type CallRecord struct {
	Call      string  `json:"call_id"`
	Tool      string  `json:"tool"`
	Namespace string  `json:"namespace,omitempty"`
	Outcome   Outcome `json:"outcome"`
	// Rungs are the repair-ladder rungs the arguments needed.
	Rungs     []string `json:"rungs,omitempty"`
	Truncated bool     `json:"truncated,omitempty"`
	Error     string   `json:"error,omitempty"`
	// Label is the completed-activity label, when a host ran the call.
	Label string `json:"label,omitempty"`
	// Duration is how long execute ran, as the host measured it.
	Duration time.Duration `json:"duration_ns,omitempty"`
	// Latency is from the turn's dispatch to the reply it received.
	Latency time.Duration `json:"latency_ns,omitempty"`
}

// TurnStatus is published on TurnStatusSubject: StatusStarted when the turn
// starts, StatusStep after each model response and each batch of calls, and
// StatusDone once at the end.
type TurnStatus struct {
	Turn  string    `json:"turn_id"`
	Node  string    `json:"node,omitempty"`
	Agent string    `json:"agent,omitempty"`
	State TurnState `json:"state"`
	Step  int       `json:"step"`
	// Text is the model's text of the latest response (the answer, at the end).
	Text  string       `json:"text,omitempty"`
	Calls []CallRecord `json:"calls,omitempty"`
	Error string       `json:"error,omitempty"`
	Time  time.Time    `json:"time"`
}
