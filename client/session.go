package client

import (
	"context"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// OpenSession records a turn that the caller drives itself, outside the intake (an MCP
// client's session with `toolbus mcp`): its record, running and held by owner, and
// first as its transcript's first message (durable.Store.OpenSession). A bus on which
// no node runs turns has no records: ErrNoTurns. Writing records and transcripts takes
// a user that may (the turn role, or admin; an operator may not).
func (c *Client) OpenSession(ctx context.Context, spec bus.TurnSpec, owner string, first ...toolbus.Item) (*durable.Session, error) {
	store, err := c.turnStore(ctx)
	if err != nil {
		return nil, err
	}
	return store.OpenSession(ctx, spec, owner, first)
}
