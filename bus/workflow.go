package bus

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Workflow envelopes: what a workflow is, as the KV bucket BucketWorkflows stores it
// and the workflow tools return it. One document holds the workflow, its tasks and
// every attempt of each task, so that one compare-and-set write moves the workflow
// on: a task's result, the start of the tasks that waited for it, the workflow's end.

// BucketWorkflows holds one document per workflow (Workflow), under WorkflowKey.
const BucketWorkflows = "toolbus_workflows"

// WorkflowHistory is how many revisions of each workflow document the bucket keeps: each
// is one step of the workflow (a start, an attempt's end, a cancel), so its history is
// the workflow's log.
const WorkflowHistory = 32

// WorkflowsBucketConfig is the configuration of BucketWorkflows.
func WorkflowsBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      BucketWorkflows,
		Description: "toolbus workflows: one document per workflow, its tasks and their attempts",
		History:     WorkflowHistory,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
}

// WorkflowKey is the key of a workflow's document: "<agent>.<workflow>", so one agent's
// workflows are listed with the filter "<agent>.>".
func WorkflowKey(agent, workflow string) string { return agent + "." + workflow }

// AgentWorkflows is the key filter of one agent's workflows.
func AgentWorkflows(agent string) string { return agent + ".>" }

// WorkflowUpdates is the subject on which every write of one agent's workflow documents
// passes (JetStream KV's "$KV.<bucket>.<key>"), with the body the document as written.
// It carries the writes the stream refused too (a compare-and-set write that lost): a
// follower watches the bucket (jetstream.KeyValue.Watch), which delivers stored
// revisions only, rather than subscribe to it.
func WorkflowUpdates(agent string) string {
	return "$KV." + BucketWorkflows + "." + AgentWorkflows(agent)
}

// WorkflowState is where a workflow stands.
type WorkflowState string

const (
	WorkflowRunning   WorkflowState = "running"
	WorkflowCompleted WorkflowState = "completed" // every task is done
	WorkflowFailed    WorkflowState = "failed"    // every task ended, and one or more failed
	WorkflowCancelled WorkflowState = "cancelled"
)

// Ended reports whether a workflow in state s has ended.
func (s WorkflowState) Ended() bool { return s != WorkflowRunning }

// Valid reports whether s is a defined state.
func (s WorkflowState) Valid() bool {
	switch s {
	case WorkflowRunning, WorkflowCompleted, WorkflowFailed, WorkflowCancelled:
		return true
	}
	return false
}

// TaskState is where a task stands.
type TaskState string

const (
	TaskPending   TaskState = "pending" // waits for the tasks it depends on
	TaskRunning   TaskState = "running" // an attempt is queued or running
	TaskDone      TaskState = "done"    // a result was accepted
	TaskFailed    TaskState = "failed"  // its last attempt failed, or a task it depends on did not finish
	TaskCancelled TaskState = "cancelled"
)

// Ended reports whether a task in state s has ended.
func (s TaskState) Ended() bool { return s == TaskDone || s == TaskFailed || s == TaskCancelled }

// AttemptOutcome is how one attempt of a task ended; empty while its turn runs.
type AttemptOutcome string

const (
	AttemptAccepted  AttemptOutcome = "accepted"  // its result passed the persisted schema and was written
	AttemptFailed    AttemptOutcome = "failed"    // the turn ended without an acceptable result (Reason says why)
	AttemptCancelled AttemptOutcome = "cancelled" // the workflow was cancelled while it ran
)

// Workflow is a workflow's document.
type Workflow struct {
	ID    string        `json:"workflow_id"`
	Agent string        `json:"agent"`
	Title string        `json:"title"`
	State WorkflowState `json:"state"`
	// Parent is the turn that started the workflow, when a turn did.
	Parent string `json:"parent_turn_id,omitempty"`
	// Model is the model spec its task turns run with (a task with a script plays that
	// instead).
	Model string `json:"model,omitempty"`
	Tasks []Task `json:"tasks"`
	// Error says why the workflow did not complete, once it has ended.
	Error   string    `json:"error,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Ended is when the workflow ended (its state left running); zero while it runs.
	Ended time.Time `json:"ended,omitzero"`
}

// Task is one task of a workflow, with the schema its result must pass (as persisted
// when the workflow started: the control plane validates every result against it).
type Task struct {
	ID           string          `json:"task_id"`
	Instructions string          `json:"instructions"`
	ResultSchema json.RawMessage `json:"result_schema"`
	DependsOn    []string        `json:"depends_on,omitempty"`
	MaxAttempts  int             `json:"max_attempts"`
	// Script is an inline scripted model its turns play instead of the workflow's model
	// (offline demos and tests).
	Script   json.RawMessage `json:"script,omitempty"`
	State    TaskState       `json:"state"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
	Attempts []Attempt       `json:"attempts,omitempty"`
}

// Attempt is one turn a task ran (or runs).
type Attempt struct {
	N    int    `json:"attempt"`
	Turn string `json:"turn_id"`
	// Outcome is empty while the attempt's turn is queued or runs.
	Outcome AttemptOutcome `json:"outcome,omitempty"`
	// TurnState is how the attempt's turn ended.
	TurnState TurnState `json:"turn_state,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Started   time.Time `json:"started"`
	Ended     time.Time `json:"ended,omitzero"`
}

// Task returns the task with the given id, or nil.
func (w *Workflow) Task(id string) *Task {
	for i := range w.Tasks {
		if w.Tasks[i].ID == id {
			return &w.Tasks[i]
		}
	}
	return nil
}

// Attempt returns the attempt that ran as turn, or nil.
func (t *Task) Attempt(turn string) *Attempt {
	for i := range t.Attempts {
		if t.Attempts[i].Turn == turn {
			return &t.Attempts[i]
		}
	}
	return nil
}

// Current is the task's latest attempt, or nil before its first.
func (t *Task) Current() *Attempt {
	if len(t.Attempts) == 0 {
		return nil
	}
	return &t.Attempts[len(t.Attempts)-1]
}

// AttemptTurn is the turn id of attempt n of a task: "<workflow>-<task>-<n>". It is
// deterministic, so a node that starts an attempt again (after a crash) starts the same
// turn, which the intake refuses as a duplicate. Task ids hold no '.', and the attempt
// number after the last '-' makes the id unambiguous.
func AttemptTurn(workflow, task string, n int) string {
	return workflow + "-" + task + "-" + strconv.Itoa(n)
}

// MaxTaskIDLen bounds a task id.
const MaxTaskIDLen = 32

// CheckTaskID refuses a task id that cannot be part of a turn id and a header: 1 to
// MaxTaskIDLen ASCII letters, digits, '_' or '-'.
func CheckTaskID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("task id is empty")
	case len(id) > MaxTaskIDLen:
		return fmt.Errorf("task id %q is longer than %d characters", id, MaxTaskIDLen)
	}
	if i := strings.IndexFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}); i >= 0 {
		return fmt.Errorf("task id %q has %q at position %d; only ASCII letters, digits, '_' and '-' are allowed", id, id[i], i+1)
	}
	return nil
}
