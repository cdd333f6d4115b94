package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// A node's part in workflows: it hosts the engine the workflow tools use (Handles), runs
// task turns from the intake like any durable turn, checks before it runs one that the
// turn is still its task's live attempt, and settles each task turn that ends before it
// acknowledges the turn's intake message (workflow/engine.go says why that moves a
// workflow on exactly once).

// workflowRunner is what the workflow engine needs of its node.
type workflowRunner struct{ n *Node }

// Check reports whether a task turn could be queued: a valid spec, and a model (or
// script) this node can open.
func (r workflowRunner) Check(spec bus.TurnSpec) error {
	if err := spec.Check(); err != nil {
		return err
	}
	_, err := r.n.model(spec)
	return err
}

// Queue queues a task turn: through this node's intake, or through a node that runs
// turns when this one does not. A turn id already used means the turn was queued before.
func (r workflowRunner) Queue(ctx context.Context, spec bus.TurnSpec) error {
	if r.n.intake != nil {
		_, err := r.n.Submit(ctx, spec, "")
		if errors.Is(err, ErrTurnExists) {
			return nil
		}
		return err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	m, err := r.n.nc.RequestWithContext(ctx, bus.AnyNodeStartTurn, b)
	if err != nil {
		return fmt.Errorf("ask a node that runs turns to queue %s: %w", spec.ID, err)
	}
	var reply bus.StartTurnReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return fmt.Errorf("queue %s: malformed reply: %w", spec.ID, err)
	}
	if reply.Error != "" && !strings.Contains(reply.Error, ErrTurnExists.Error()) {
		return fmt.Errorf("queue %s: node %s: %s", spec.ID, reply.Node, reply.Error)
	}
	return nil
}

// Abort asks a turn to stop.
func (r workflowRunner) Abort(turn, reason string) error { return Abort(r.n.nc, turn, reason) }

// Workflows is the node's workflow engine.
func (n *Node) Workflows() *workflow.Engine { return n.workflows }

// admitTask checks, before a node runs a task turn it took, that the turn is still its
// task's live attempt: a workflow cancelled (or a task ended) while the turn waited in
// the intake must not run it. It reports errTaskGone for such a turn.
func (n *Node) admitTask(ctx context.Context, spec bus.TurnSpec) error {
	if spec.Kind != bus.TurnTask {
		return nil
	}
	// Right after a node is lost, the workflows' stream may have no leader for a while:
	// each read is bounded and tried again, as settling is, rather than waited on for as
	// long as the node lives.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := bus.Retry(ctx, "read the workflow of task turn "+spec.ID, n.log, func(ctx context.Context) error {
		return n.workflows.Admit(ctx, spec)
	})
	if errors.Is(err, workflow.ErrNotLive) || errors.Is(err, workflow.ErrNotFound) {
		return fmt.Errorf("%w: %w", errTaskGone, err)
	}
	return err
}

// errTaskGone reports a task turn that is no longer its task's live attempt.
var errTaskGone = errors.New("the task no longer wants this turn")

// settleTask moves the workflow of an ended task turn on (workflow.Engine.Settle); other
// turns need nothing.
func (n *Node) settleTask(rec bus.TurnRecord) error {
	if rec.Spec.Kind != bus.TurnTask {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return bus.Retry(ctx, "settle task turn "+rec.Spec.ID, n.log, func(ctx context.Context) error {
		return n.workflows.Settle(ctx, rec)
	})
}
