package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/schedule"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// What an operator reads and changes across the agents of a bus: every workflow, the
// live catalog, and the cancels of jobs, schedules and workflows, which go through the
// categories' own tools on the owning agent's behalf (as the agent's turns would ask),
// so that the host that owns each record changes it.

// MaxWorkflows bounds a listing of Workflows: the newest so many.
const MaxWorkflows = 500

// Workflows lists the workflows kept on the bus, newest first: of agent, or of every
// agent when agent is empty; at most MaxWorkflows. None yet is an empty list.
func (c *Client) Workflows(ctx context.Context, agent string) ([]bus.Workflow, error) {
	kv, err := c.bucket(ctx, bus.BucketWorkflows)
	if errors.Is(err, ErrNoRecords) {
		return []bus.Workflow{}, nil
	}
	if err != nil {
		return nil, err
	}
	filter := ">"
	if agent != "" {
		filter = bus.AgentWorkflows(agent)
	}
	keys, err := bus.ListKeys(ctx, kv, filter)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	out := []bus.Workflow{}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read workflow %s: %w", k, err)
		}
		var wf bus.Workflow
		if json.Unmarshal(e.Value(), &wf) == nil {
			out = append(out, wf)
		}
	}
	slices.SortFunc(out, func(a, b bus.Workflow) int { return b.Created.Compare(a.Created) })
	if len(out) > MaxWorkflows {
		out = out[:MaxWorkflows]
	}
	return out, nil
}

// Workflow reads one workflow's document; ErrNoRecords when the bus has none.
func (c *Client) Workflow(ctx context.Context, agent, id string) (*bus.Workflow, error) {
	if !bus.ValidToken(agent) || !bus.ValidToken(id) {
		return nil, fmt.Errorf("workflow %q of agent %q: not valid ids", id, agent)
	}
	kv, err := c.bucket(ctx, bus.BucketWorkflows)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, bus.WorkflowKey(agent, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("workflow %s of agent %s: %w", id, agent, ErrNoRecords)
	}
	if err != nil {
		return nil, fmt.Errorf("read workflow %s: %w", id, err)
	}
	var wf bus.Workflow
	if err := json.Unmarshal(e.Value(), &wf); err != nil {
		return nil, fmt.Errorf("workflow %s: malformed document: %w", id, err)
	}
	return &wf, nil
}

// Categories reads the bus's live catalog: each category with its hosts (the nodes and
// workers that serve it, from their $SRV info) and its tools.
func (c *Client) Categories(ctx context.Context) ([]catalog.Category, error) {
	cat := catalog.New(c.nc, catalog.Options{Logger: c.log})
	if err := cat.Refresh(ctx); err != nil {
		return nil, err
	}
	return cat.Categories(), nil
}

// onBehalfTimeout bounds a cancel that goes through a category's tool.
const onBehalfTimeout = 30 * time.Second

// onBehalf calls a category's tool as agent; a reply that is not ok is an error, its
// text the tool's.
func (c *Client) onBehalf(ctx context.Context, spec *toolbus.Spec, agent string, args any) (bus.ToolReply, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return bus.ToolReply{}, err
	}
	reply, err := c.Call(ctx, spec, agent, schema.Args{JSON: b})
	if err != nil {
		return reply, err
	}
	if reply.Outcome != bus.OutcomeOK {
		return reply, fmt.Errorf("%s: %s", spec.Name, cmp.Or(reply.Error, toolbus.Result{Content: reply.Content}.Text()))
	}
	return reply, nil
}

// CancelJob cancels a background job through the jobs category's job_cancel, on its
// agent's behalf: a queued job never starts, a running one is stopped. It returns the
// tool's answer.
func (c *Client) CancelJob(ctx context.Context, id, reason string) (string, error) {
	j, err := c.Job(ctx, id)
	if err != nil {
		return "", err
	}
	spec := &toolbus.Spec{Name: "job_cancel", Category: jobs.Category, Timeout: onBehalfTimeout}
	reply, err := c.onBehalf(ctx, spec, j.Agent, map[string]string{"job_id": j.ID, "reason": reason})
	return toolbus.Result{Content: reply.Content}.Text(), err
}

// RemoveSchedule removes a schedule through the schedule category's schedule_cancel,
// on its agent's behalf: it fires no more; a turn it started keeps running.
func (c *Client) RemoveSchedule(ctx context.Context, id string) (string, error) {
	s, err := c.Schedule(ctx, id)
	if err != nil {
		return "", err
	}
	spec := &toolbus.Spec{Name: "schedule_cancel", Category: schedule.Category, Timeout: onBehalfTimeout}
	reply, err := c.onBehalf(ctx, spec, s.Agent, map[string]string{"schedule_id": s.ID})
	return toolbus.Result{Content: reply.Content}.Text(), err
}

// CancelWorkflow cancels a running workflow of agent through workflow_cancel: its
// running task turns are aborted and its unfinished tasks recorded as cancelled. It
// returns the workflow's document after the cancel.
func (c *Client) CancelWorkflow(ctx context.Context, agent, id, reason string) (*bus.Workflow, error) {
	var spec *toolbus.Spec
	for _, s := range workflow.Specs() {
		if s.Name == "workflow_cancel" {
			spec = s
		}
	}
	reply, err := c.onBehalf(ctx, spec, agent, map[string]string{"workflow_id": id, "reason": reason})
	if err != nil {
		return nil, err
	}
	var wf bus.Workflow
	if err := json.Unmarshal(reply.Details, &wf); err != nil {
		return nil, fmt.Errorf("workflow_cancel: malformed details: %w", err)
	}
	return &wf, nil
}
