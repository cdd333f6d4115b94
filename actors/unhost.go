package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"
)

// Unhost stops the host of category that Host started on this node, and closes its
// connections: the category is served from here no more, and its catalogs hear so (the
// host announces it as it stops). Its calls in flight are cancelled and answered as a
// stopping host answers them. A category this node does not host is no error.
//
// It is for a category whose tools change while the node runs: an MCP server that
// offers other tools after a restart, or says its list changed (package mcp), is
// unhosted and hosted again with its new tools, as a host's tools are fixed.
func (n *Node) Unhost(ctx context.Context, category string) error {
	if n.pid == nil {
		return errors.New("unhost: the node is closed")
	}
	// The node actor spawned it as its child "host-<category>" (spawnHost).
	pid := actor.NewPID(n.pid.Address, n.pid.Id+"/host-"+category)
	f := n.sys.Root.StopFuture(pid)
	done := make(chan error, 1)
	go func() { done <- f.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("unhost %s: %w", category, err)
		}
	case <-ctx.Done():
		return fmt.Errorf("unhost %s: %w", category, context.Cause(ctx))
	}
	// Its connections (the first, and any it made again after losing one) go with it;
	// the node would close them only when it closes.
	name := "toolbus-host-" + category + "@" + n.cfg.Name
	n.connMu.Lock()
	var gone []*nats.Conn
	n.conns = slices.DeleteFunc(n.conns, func(nc *nats.Conn) bool {
		if nc.Opts.Name == name {
			gone = append(gone, nc)
			return true
		}
		return false
	})
	n.connMu.Unlock()
	for _, nc := range gone {
		// What the host published as it stopped (its announcement) must reach the server.
		_ = nc.FlushTimeout(time.Second)
		nc.Close()
	}
	return nil
}
