package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolbus/toolbus/bus"
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
		_, err := r.n.submit(ctx, spec, "")
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
	if reply.Error != "" && reply.Code != bus.StartTurnExists {
		return fmt.Errorf("queue %s: node %s: %s", spec.ID, reply.Node, reply.Error)
	}
	return nil
}

// Abort asks a turn to stop.
func (r workflowRunner) Abort(turn, reason string) error { return publishAbort(r.n.nc, turn, reason) }
