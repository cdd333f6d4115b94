package actors

import "errors"

// How turns end, for callers and tests to match with errors.Is on TurnResult.Err. The
// state (bus.TurnState) says the same on the wire; these carry the cause.
var (
	// ErrStepLimit ends a turn that reached its step limit.
	ErrStepLimit = errors.New("step limit reached")
	// ErrAborted ends a turn that was aborted.
	ErrAborted = errors.New("turn aborted")
	// ErrModel ends a turn whose model gateway failed.
	ErrModel = errors.New("model failed")
	// ErrNodeStopped ends a turn whose node stopped it.
	ErrNodeStopped = errors.New("the node stopped the turn")
	// ErrNoToolCall ends a turn whose policy wants a call (a task's submit_result) after
	// the model answered twice with text alone.
	ErrNoToolCall = errors.New("the model answered without the call the turn needs")
	// ErrRuntime ends a turn that the runtime failed (subscriptions, the transcript).
	ErrRuntime = errors.New("runtime failure")
)
