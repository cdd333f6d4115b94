package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/jsonpos"
	"github.com/toolbus/toolbus/toolsets"
)

// Turn is a turn for [Node.Run] to run: who asks what, of which model, with which
// tools.
type Turn struct {
	// ID is the turn's id; empty picks one.
	ID string
	// Agent is the agent the turn works for (its home, its profile).
	Agent        string
	Instructions string
	Input        string
	// Model names the model: "openai:MODEL", "chat:MODEL", "anthropic:MODEL" (with the node's
	// Node.Gateway) or "script:FILE". Script, when set, is used instead.
	Model string
	// Script is a scripted model as JSON (gateway.Script: {"responses": [...]}), which
	// runs offline: for examples and tests.
	Script string
	// Tools are the tools the model may call. Nil: the node's own Config.Tools; on a
	// node that hosts none, what the agent's profile assembles (the built-in
	// categories and the external namespaces it names, docs/tools.md). The tools run
	// in their category's host, on this node or another of the bus.
	Tools []*toolbus.Tool
	// MaxSteps bounds the model calls (0: the node's default).
	MaxSteps int
}

// Result is how a turn ended: its State, the model's final Text, each call with its
// tool and outcome (Calls: bus.CallRecord), the steps, the tokens and the transcript;
// and what each call returned (Outputs), so that a program reads a tool's output
// without walking the transcript.
type Result struct {
	actors.TurnResult
	// Outputs[i] is the output of Calls[i] as the model read it: its Content and
	// IsError from the transcript, its Details from the call's record. A call with no
	// output in the transcript (a turn that failed under it) has a zero Result.
	Outputs []toolbus.Result
}

// newResult pairs each call of res with its output in res's transcript.
func newResult(res actors.TurnResult) Result {
	out := Result{TurnResult: res}
	if len(res.Calls) == 0 {
		return out
	}
	byCall := make(map[string]toolbus.Item, len(res.Calls))
	for _, it := range res.Transcript {
		if it.Kind == toolbus.KindFunctionCallOutput {
			byCall[it.CallID] = it
		}
	}
	out.Outputs = make([]toolbus.Result, len(res.Calls))
	for i, c := range res.Calls {
		it := byCall[c.Call]
		out.Outputs[i] = toolbus.Result{Content: it.Output, IsError: it.IsError, Details: c.Details}
	}
	return out
}

// Run runs a turn on this node, outside the durable intake, and returns once it has
// ended. The error is non-nil when the turn could not start, or when it did not
// complete: then it is Result.Err (match it with errors.Is against actors.ErrModel,
// actors.ErrStepLimit, …), and the result says how far the turn got. Cancelling ctx
// aborts the turn, which still ends with an honest outcome for every call.
func (n *Node) Run(ctx context.Context, t Turn) (Result, error) {
	spec := bus.TurnSpec{ID: t.ID, Kind: bus.TurnMain, Agent: t.Agent, Instructions: t.Instructions,
		Input: t.Input, Model: t.Model, Limits: bus.TurnLimits{MaxSteps: t.MaxSteps}}
	model, err := n.model(t)
	if err != nil {
		return Result{}, fmt.Errorf("run turn: %w", err)
	}
	cfg := actors.TurnConfig{Spec: spec, Model: model}
	tools := t.Tools
	if tools == nil {
		tools = n.cfg.Tools
	}
	if tools != nil {
		set, err := toolbus.NewSet(toolbus.SpecsOf(tools)...)
		if err != nil {
			return Result{}, fmt.Errorf("run turn: %w", err)
		}
		cfg.Kit = toolsets.NewKit(set)
	}
	ar, err := n.an.Run(ctx, cfg)
	res := newResult(ar)
	if err != nil {
		return res, fmt.Errorf("run turn: %w", err)
	}
	return res, res.Err
}

// model resolves a turn's model: its script, else its model spec with the node's
// gateway configuration.
func (n *Node) model(t Turn) (gateway.Model, error) {
	switch {
	case t.Script != "":
		var s gateway.Script
		if err := jsonpos.Decode("script", []byte(t.Script), &s, true); err != nil {
			return nil, err
		}
		return gateway.OpenScript(s, n.cfg.Node.Gateway)
	case t.Model == "":
		return nil, errors.New("no model: set Turn.Model or Turn.Script")
	}
	return gateway.Open(t.Model, n.cfg.Node.Gateway)
}
