//go:build linux

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// readWorkflow reads a workflow's document and its history from the workflows bucket.
// A stream electing a leader answers nothing for a while: each read is short, and the
// caller tries again.
func readWorkflow(nc *nats.Conn, agent, id string) (bus.Workflow, []bus.Workflow, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return bus.Workflow{}, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bus.BucketWorkflows)
	if err != nil {
		return bus.Workflow{}, nil, err
	}
	entries, err := kv.History(ctx, bus.WorkflowKey(agent, id))
	if err != nil {
		return bus.Workflow{}, nil, err
	}
	var hist []bus.Workflow
	for _, e := range entries {
		var wf bus.Workflow
		if err := json.Unmarshal(e.Value(), &wf); err != nil {
			return bus.Workflow{}, nil, err
		}
		hist = append(hist, wf)
	}
	return hist[len(hist)-1], hist, nil
}

// startWorkflow calls workflow_start over the bus as agent, as a turn's call would go.
func startWorkflow(t testing.TB, nc *nats.Conn, agent string, def any) bus.Workflow {
	t.Helper()
	b, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(bus.ToolSubject("workflow", "workflow_start"))
	m.Data = b
	bus.ToolRequest{Turn: bus.NewID(), Call: bus.NewID(), Agent: agent, Deadline: time.Now().Add(time.Minute)}.SetHeaders(m.Header)
	resp, err := nc.RequestMsg(m, waitLimit)
	if err != nil {
		t.Fatalf("workflow_start: %v", err)
	}
	var r bus.ToolReply
	if err := json.Unmarshal(resp.Data, &r); err != nil || r.Outcome != bus.OutcomeOK {
		t.Fatalf("workflow_start: %v %s", err, resp.Data)
	}
	var wf bus.Workflow
	if err := json.Unmarshal(r.Details, &wf); err != nil {
		t.Fatal(err)
	}
	return wf
}

// TestTaskSurvivesNodeLoss kills, with -9, the node that runs a workflow's task turn
// while its model thinks: another node resumes the turn (the same attempt, not a retry),
// the task finishes there, and its result is written once.
func TestTaskSurvivesNodeLoss(t *testing.T) {
	t.Parallel()
	nodes := threeNodes(t, "-categories=workflow")
	urls := urlsOf(nodes)
	nc := connect(t, strings.Join(urls, ","))
	started := startedTurns(t, nc)
	waitForResponders(t, nc, bus.ToolSubject("workflow", "workflow_view"), `{"workflow_id":"none"}`, true)

	const agent = "survivor"
	schema := json.RawMessage(`{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}`)
	script := json.RawMessage(`{"responses":[{"delay_ms":1500,"calls":[{"name":"submit_result","arguments":"{\"result\":{\"answer\":42}}"}]}]}`)
	wf := startWorkflow(t, nc, agent, map[string]any{"title": "survive", "tasks": []map[string]any{
		{"id": "think", "instructions": "Think hard, then answer.", "result_schema": schema, "script": script},
	}})
	turn := bus.AttemptTurn(wf.ID, "think", 1)
	first := nextStarted(t, started)
	if first.Turn != turn {
		t.Fatalf("started turn %s, want the task's %s", first.Turn, turn)
	}
	owner := byName(nodes, first.Node)
	owner.proc.kill()

	rest := connect(t, otherURLs(nodes, owner))
	var got bus.Workflow
	var hist []bus.Workflow
	checkFor(t, "the workflow completes on another node", func() error {
		var err error
		if got, hist, err = readWorkflow(rest, agent, wf.ID); err != nil {
			return err
		}
		if got.State != bus.WorkflowCompleted {
			return fmt.Errorf("workflow %s: %+v", got.State, got.Tasks)
		}
		return nil
	})
	task := got.Task("think")
	if string(task.Result) != `{"answer":42}` || len(task.Attempts) != 1 || task.Attempts[0].Outcome != bus.AttemptAccepted {
		t.Errorf("task %s, result %s, attempts %+v", task.State, task.Result, task.Attempts)
	}
	rec := turnRecord(t, rest, turn)
	if rec.State != bus.TurnTerminated || rec.Owner == owner.name || len(rec.Resumes) != 1 || rec.Resumes[0].From != owner.name {
		t.Errorf("turn record: %s on %s, resumes %+v; want terminated on another node, resumed once from %s", rec.State, rec.Owner, rec.Resumes, owner.name)
	}
	// Written once: of the document's revisions, one sets the result, and no later one
	// changes the task again.
	writes := 0
	var last json.RawMessage
	for _, rev := range hist {
		r := rev.Task("think").Result
		if string(r) != string(last) {
			writes++
			last = r
		}
	}
	if writes != 1 || len(hist) != 2 {
		t.Errorf("the result was written %d times in %d revisions, want once in 2 (started, settled)", writes, len(hist))
	}
}
