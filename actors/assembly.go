package actors

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// assembly returns what assembling turns needs, the profile store and the catalog of the
// bus, opening them on first use: a node that takes turns over the bus opens them when
// it starts; one whose turns come only through Spawn, when the first needs them.
func (n *Node) assembly(ctx context.Context) (*toolsets.Profiles, *catalog.Catalog, error) {
	n.assemblyMu.Lock()
	defer n.assemblyMu.Unlock()
	if err := n.openProfiles(ctx); err != nil {
		return nil, nil, err
	}
	if n.catalog == nil {
		c := catalog.New(n.nc, n.cfg.Catalog)
		if err := c.Watch(); err != nil {
			return nil, nil, err
		}
		n.catalog = c
	}
	return n.profiles, n.catalog, nil
}

// openProfiles opens the profile store unless it is open; assemblyMu is held.
func (n *Node) openProfiles(ctx context.Context) error {
	if n.profiles != nil {
		return nil
	}
	return bus.Retry(ctx, "open the agent profiles", n.log, func(ctx context.Context) error {
		p, err := toolsets.OpenProfiles(ctx, n.js, n.cfg.Replicas)
		n.profiles = p
		return err
	})
}

// Assemble builds the kit of a turn: its agent's profile (none: built-in tools only) and
// the node's catalog of the bus decide which external namespaces it includes.
func (n *Node) Assemble(ctx context.Context, spec bus.TurnSpec) (kit *toolsets.Kit, err error) {
	return n.assemble(ctx, spec, nil, 0)
}

// assemble is Assemble for a turn that calls the tools of calls next (a resumed turn's
// last batch): it waits up to patience for the catalog to serve their namespaces that
// the profile names.
func (n *Node) assemble(ctx context.Context, spec bus.TurnSpec, calls []toolbus.Item, patience time.Duration) (kit *toolsets.Kit, err error) {
	// A category creator that panics (a bug, or a profile, skill or spec nobody foresaw)
	// fails this turn, with the reason, and not the node with every turn it runs.
	defer func() {
		if r := recover(); r != nil {
			n.log.Error("assemble tools: panic; the turn fails", "turn", spec.ID, "agent", spec.Agent, "panic", r, "stack", string(debug.Stack()))
			kit, err = nil, fmt.Errorf("assemble tools: panic: %v", r)
		}
	}()
	profiles, cat, err := n.assembly(ctx)
	if err != nil {
		return nil, fmt.Errorf("assemble turn: %w", err)
	}
	// An agent without a profile gets the built-in tools (profile stays nil).
	var profile *toolsets.Profile
	if spec.Agent != "" {
		err := bus.Retry(ctx, "read profile "+spec.Agent, n.log, func(ctx context.Context) error {
			p, err := profiles.Get(ctx, spec.Agent)
			if errors.Is(err, toolsets.ErrNoProfile) {
				return nil
			}
			profile = p
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("assemble turn: %w", err)
		}
	}
	n.freshenCatalog(ctx, cat, spec.ID, profile, calls, patience)
	kit, err = toolsets.Assemble(spec, profile, cat, toolsets.Options{Computer: n.cfg.Tools.Computer, Home: n.cfg.Home, HomeRoot: n.cfg.HomeRoot,
		ScheduleMinInterval: n.cfg.Tools.ScheduleMinInterval})
	if kit != nil && !slices.Contains(n.cfg.Categories, computer.Category) {
		// The agent's files are where a computer host works: a node that runs turns
		// beside tool nodes of their own homes would name a home no tool of the turn uses.
		kit.Home = ""
	}
	return kit, err
}

// freshenCatalog refreshes the catalog when the profile names a namespace it lacks.
// With a patience, it then waits up to that long, refreshing every catalogPatience,
// until the catalog serves the namespaces of calls (a resumed turn's last batch) that
// the profile names. A node restarted with its embedded server resumes its turns at
// once, while the hosts that were connected to it are still reconnecting: without the
// wait, a resumed call of theirs is refused as an unknown tool (seen: the turn taken
// 0.3 s after the node was ready, before its host had reconnected).
func (n *Node) freshenCatalog(ctx context.Context, cat *catalog.Catalog, turn string, profile *toolsets.Profile, calls []toolbus.Item, patience time.Duration) {
	if profile == nil || len(profile.Namespaces) == 0 {
		return
	}
	names := make([]string, len(profile.Namespaces))
	for i, ns := range profile.Namespaces {
		names[i] = ns.Name
	}
	if err := cat.Ensure(ctx, catalogPatience, names...); err != nil {
		n.log.Warn("catalog refresh before a turn failed", "err", err)
	}
	var awaited []string
	for _, c := range calls {
		if slices.Contains(names, c.Namespace) && !slices.Contains(awaited, c.Namespace) {
			awaited = append(awaited, c.Namespace)
		}
	}
	if patience <= 0 || len(awaited) == 0 || cat.Serves(awaited...) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	tick := time.NewTicker(catalogPatience)
	defer tick.Stop()
	for !cat.Serves(awaited...) {
		select {
		case <-ctx.Done():
			n.log.Warn("resuming a turn without the hosts of its last calls", "turn", turn, "namespaces", strings.Join(awaited, ","), "waited", patience)
			return
		case <-tick.C:
			_ = cat.Ensure(ctx, catalogPatience, awaited...)
		}
	}
}

// Profiles is the agent profile store, opened on first use.
func (n *Node) Profiles(ctx context.Context) (*toolsets.Profiles, error) {
	p, _, err := n.assembly(ctx)
	return p, err
}
