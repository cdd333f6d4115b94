package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/toolbus/toolbus"
)

// Turn-level envelopes: starting a turn on a node, and the status a turn
// publishes on TurnStatusSubject while it runs.

// TurnKind says what a turn is for; its policy and its tool catalog follow from it.
type TurnKind string

const (
	// TurnMain is an agent's main text turn: the full catalog, and the namespaces its
	// profile names.
	TurnMain TurnKind = "main"
	// TurnJob is a background job's turn: the main catalog without job or workflow tools.
	TurnJob TurnKind = "job"
	// TurnTask is a workflow task's isolated turn: its own fixed catalog, and it ends only
	// by submitting a result.
	TurnTask TurnKind = "task"
	// TurnMCP is the turn of an MCP client's session with `toolbus mcp`: the client's
	// model makes the calls, and `toolbus mcp` records them (durable.Session). No node
	// runs it and nothing queues it, so it is not a kind a spec may start (Valid is
	// false for it); it is recorded so that `toolbus turns` and the console show the
	// session's calls as any turn's.
	TurnMCP TurnKind = "mcp"
)

// SessionLease is the lease of the session of an MCP client with `toolbus mcp`: the
// process beats for it every third of it (StatusBeat, with Lease), as a node beats for
// a durable turn with the default lease, and a session without a beat for that long is
// taken for one whose process is gone (client.Resume ends its record).
const SessionLease = 15 * time.Second

// Ended reports whether a turn in state s has ended.
func (s TurnState) Ended() bool { return s != "" && s != TurnQueued && s != TurnRunning }

// Valid reports whether k is a defined kind. The empty kind is not valid; [TurnSpec.Normalize]
// makes it TurnMain.
func (k TurnKind) Valid() bool {
	switch k {
	case TurnMain, TurnJob, TurnTask:
		return true
	}
	return false
}

// MaxStepsLimit bounds the steps a turn spec may ask for.
const MaxStepsLimit = 256

// DefaultMaxSteps is the most model calls in a turn whose limits set none.
const DefaultMaxSteps = 32

// TurnLimits bound one turn. Zero values mean the node's defaults.
type TurnLimits struct {
	MaxSteps int `json:"max_steps,omitempty"`
}

// TurnSpec is what starts a turn, on the bus and in Go: who it is for, what kind it is,
// what it is asked, and within which limits. It is sent as a request to
// NodeStartTurnSubject or AnyNodeStartTurn; the node answers with a StartTurnReply as soon
// as the turn exists, and the turn's progress follows on its status and event subjects.
// Subscribe to TurnSubjects(ID) before sending, so nothing is missed.
type TurnSpec struct {
	// ID is the turn's id, chosen by the caller so it can subscribe first. It must be a
	// valid token; empty means the node picks one.
	ID   string   `json:"turn_id,omitempty"`
	Kind TurnKind `json:"kind,omitempty"` // empty means TurnMain
	// Parent is the turn that started this one (a job's or a task's main turn).
	Parent   string `json:"parent_turn_id,omitempty"`
	Agent    string `json:"agent,omitempty"`
	Workflow string `json:"workflow_id,omitempty"`
	Task     string `json:"task_id,omitempty"`
	// Model is a model spec such as "openai:gpt-5.4" or "chat:llama3.1", resolved by the
	// node with its own credentials.
	Model string `json:"model,omitempty"`
	// Script is an inline scripted-model document; it overrides Model.
	Script       json.RawMessage `json:"script,omitempty"`
	Instructions string          `json:"instructions,omitempty"`
	// Input is the user's message that starts the turn.
	Input  string     `json:"input"`
	Limits TurnLimits `json:"limits,omitzero"`
	// ResultSchema is a task turn's copy of its task's result schema, from which its
	// submit_result is built. The workflow keeps its own copy, against which the result
	// is validated again before it is written.
	ResultSchema json.RawMessage `json:"result_schema,omitempty"`
}

// Normalize fills the defaults a spec may leave out: the kind main.
func (s *TurnSpec) Normalize() {
	if s.Kind == "" {
		s.Kind = TurnMain
	}
}

// ChildModel is the model of a turn that s starts (a background job, or a turn one of
// its schedules fires): s's own model, or, for a scripted turn, its script's "child"
// script when it has one (gateway.Script), else the same script.
func (s *TurnSpec) ChildModel() (model string, script json.RawMessage) {
	if len(s.Script) == 0 {
		return s.Model, nil
	}
	var doc struct {
		Child json.RawMessage `json:"child"`
	}
	if json.Unmarshal(s.Script, &doc) == nil && len(doc.Child) > 0 && string(doc.Child) != "null" {
		return "", doc.Child
	}
	return "", s.Script
}

// Check reports the first thing that makes the spec unusable, naming the field as it is
// spelled on the wire.
func (s *TurnSpec) Check() error {
	switch {
	case s.ID != "" && !ValidID(s.ID):
		return fmt.Errorf("turn spec: turn_id %q is not a valid id (at most %d bytes, no '.', '*', '>', spaces or control characters)", s.ID, MaxIDLen)
	case s.Kind != "" && !s.Kind.Valid():
		return fmt.Errorf("turn spec: kind %q: want %s, %s or %s", s.Kind, TurnMain, TurnJob, TurnTask)
	case s.Parent != "" && !ValidID(s.Parent):
		return fmt.Errorf("turn spec: parent_turn_id %q is not a valid token", s.Parent)
	case s.Kind == TurnTask && s.Task == "":
		return errors.New("turn spec: a task turn needs a task_id")
	case s.Kind == TurnTask && s.Workflow == "":
		return errors.New("turn spec: a task turn needs a workflow_id")
	case s.Kind == TurnTask && len(s.ResultSchema) == 0:
		return errors.New("turn spec: a task turn needs a result_schema")
	case s.Kind != TurnTask && len(s.ResultSchema) > 0:
		return errors.New("turn spec: result_schema is for task turns only")
	case s.Input == "":
		return errors.New("turn spec: input is empty")
	case s.Limits.MaxSteps < 0 || s.Limits.MaxSteps > MaxStepsLimit:
		return fmt.Errorf("turn spec: limits.max_steps %d is out of range (0 for the default, up to %d)", s.Limits.MaxSteps, MaxStepsLimit)
	}
	if s.Agent != "" {
		if err := CheckAgent(s.Agent); err != nil {
			return fmt.Errorf("turn spec: agent: %w", err)
		}
	}
	return nil
}

// TurnRecord is the stored state of a durable turn, in the KV bucket BucketTurns under
// its id: what it is, who drives it, where it stands. Its revision is the turn's lease
// of record: a node writes it only with the revision it last read or wrote, so two
// nodes never drive one turn.
type TurnRecord struct {
	Spec  TurnSpec  `json:"spec"`
	State TurnState `json:"state"` // TurnQueued, TurnRunning or an end state
	// Owner is the node that drives the turn (empty while queued); Epoch counts the
	// claims, one per node that took the turn.
	Owner string `json:"owner,omitempty"`
	Epoch int    `json:"epoch"`
	Step  int    `json:"step"`
	// Stored is how many transcript messages the turn has stored (their Toolbus-Seq
	// runs from 1 to Stored).
	Stored int `json:"stored"`
	// Batch is the current batch of calls, in the model's order.
	Batch   []CallState `json:"batch,omitempty"`
	Resumes []Resume    `json:"resumes,omitempty"`
	Error   string      `json:"error,omitempty"`
	// Submitted holds, once the turn has ended, the arguments of the call that ended it
	// by being accepted (a task's submit_result: {"result": …}).
	Submitted json.RawMessage `json:"submitted,omitempty"`
	Created   time.Time       `json:"created"`
	Updated   time.Time       `json:"updated"`
}

// CallState is where one call of a turn's current batch stands.
type CallState struct {
	Call      string `json:"call_id"`
	Tool      string `json:"tool"`
	Namespace string `json:"namespace,omitempty"`
	// State is "pending" (not yet answered) or "done".
	State   string  `json:"state"`
	Outcome Outcome `json:"outcome,omitempty"`
}

// Call states of a CallState.
const (
	CallPending = "pending"
	CallDone    = "done"
)

// Resume records a node taking over a turn.
type Resume struct {
	Node string    `json:"node"`
	From string    `json:"from,omitempty"` // the previous owner
	At   time.Time `json:"at"`
	Why  string    `json:"why"`
}

// StartTurnReply answers a TurnSpec sent to start a turn. A refusal has Error, free
// text for people, and Code, for programs, when the refusal is one they act on.
type StartTurnReply struct {
	Turn  string `json:"turn_id,omitempty"`
	Node  string `json:"node,omitempty"`
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// Codes of a refused start (StartTurnReply.Code).
const (
	// StartTurnExists: the turn id is already queued, running or ended; a caller that
	// queues a turn once (a workflow's task) takes it as done.
	StartTurnExists = "turn_exists"
)

// TurnState is how a turn ended, or that it is still running.
type TurnState string

const (
	TurnQueued     TurnState = "queued" // waiting in the intake for a node
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
	// Details is the tool's structured output (ToolReply.Details), for logs and UIs;
	// the model never sees it.
	Details json.RawMessage `json:"details,omitempty"`
}

// TurnStatus is published on TurnStatusSubject: StatusStarted when the turn
// starts, StatusStep after each model response and each batch of calls, and
// StatusDone once at the end.
type TurnStatus struct {
	Turn  string    `json:"turn_id"`
	Node  string    `json:"node,omitempty"`
	Agent string    `json:"agent,omitempty"`
	Kind  TurnKind  `json:"kind,omitempty"`
	State TurnState `json:"state"`
	Step  int       `json:"step"`
	// Text is the model's text of the latest response (the answer, at the end).
	Text  string       `json:"text,omitempty"`
	Calls []CallRecord `json:"calls,omitempty"`
	// CallsOmitted counts the calls left out of Calls (the earliest) so that the status
	// fits in one message (EncodeStatus); the turn's transcript has every one.
	CallsOmitted int    `json:"calls_omitted,omitempty"`
	Error        string `json:"error,omitempty"`
	// Notes say what the turn's assembly left out (a namespace no host serves); sent
	// with StatusStarted.
	Notes []string `json:"notes,omitempty"`
	// Home is the agent's home on the node that runs the turn, where its file and
	// command tools work (sent with StatusStarted, when that node hosts computer): a
	// client of a remote node says where the turn works.
	Home string `json:"home,omitempty"`
	// Resumed is set on StatusStarted when a node took over a turn another drove.
	Resumed *Resume `json:"resumed,omitempty"`
	// Lease, on the StatusStarted and StatusBeat of a durable turn, is how long its node
	// may stay silent before the intake gives the turn to another node: a client that
	// hears nothing of the turn for that long knows its node is lost.
	Lease time.Duration `json:"lease_ns,omitempty"`
	// Usage counts the model's tokens: on a StatusStep, those of the step's response
	// (sent with the step's first status); on StatusDone, the whole turn's, as far as
	// this node ran it. Nil when the model reported none.
	Usage *Usage    `json:"usage,omitempty"`
	Time  time.Time `json:"time"`
}

// Usage counts a model's tokens: the root contract's [toolbus.Usage], the same type as
// gateway.Usage.
type Usage = toolbus.Usage

// NumCalls is how many calls the status accounts for: those it carries and those it left
// out to fit.
func (st *TurnStatus) NumCalls() int { return len(st.Calls) + st.CallsOmitted }

// EncodeStatus encodes a status in at most limit bytes (the connection's MaxPayload): a
// turn of many calls, or calls with large details, would otherwise make a status the
// server refuses (a done status of 2 000 calls was 1.3 MB), and its watchers would wait
// for an end they are never told. Over the limit, the calls lose their details first, then the
// earliest calls go (CallsOmitted), then the text is cut; the state, step and error stay.
func EncodeStatus(st TurnStatus, limit int) ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil || limit <= 0 || len(b) <= limit {
		return b, err
	}
	calls := make([]CallRecord, len(st.Calls))
	for i, c := range st.Calls {
		c.Details = nil
		calls[i] = c
	}
	st.Calls = calls
	for {
		if b, err = json.Marshal(st); err != nil || len(b) <= limit {
			return b, err
		}
		switch n := len(st.Calls); {
		case n > 0:
			drop := max(n/2, 1)
			st.Calls, st.CallsOmitted = st.Calls[drop:], st.CallsOmitted+drop
		case len(st.Text) > 0:
			cut := max(len(st.Text)-(len(b)-limit)-64, 0)
			for cut > 0 && !utf8.RuneStart(st.Text[cut]) {
				cut--
			}
			st.Text = st.Text[:cut] + " [cut: the whole text is in the transcript]"
			if cut == 0 {
				st.Text = ""
			}
		default:
			return b, nil // as small as it gets; the server says why if it refuses
		}
	}
}
