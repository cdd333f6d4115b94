package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
)

// TestFollowWorkflowShowsStoredRevisions follows a workflow whose document two writers
// race for: the write that loses its compare-and-set, refused by the stream, still
// passes on the bucket's subject, and a follower that read that subject showed a task
// ending twice. The follower shows the revisions the bucket stored, each change once.
func TestFollowWorkflowShowsStoredRevisions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	srv, err := server.Start(ctx, server.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	nc, err := srv.Connect("follow")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := bus.EnsureKeyValue(ctx, js, bus.WorkflowsBucketConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC()
	doc := func(after time.Duration, state bus.WorkflowState, a, b bus.TaskState) *bus.Workflow {
		wf := &bus.Workflow{ID: "wf1", Agent: defaultAgent, Title: "race", State: state, Created: t0, Updated: t0.Add(after)}
		for _, task := range []struct {
			id    string
			state bus.TaskState
		}{{"a", a}, {"b", b}} {
			tk := bus.Task{ID: task.id, MaxAttempts: 1, State: task.state,
				Attempts: []bus.Attempt{{N: 1, Turn: "wf1-" + task.id + "-1", Started: t0}}}
			if task.state == bus.TaskDone {
				tk.Result = json.RawMessage(`{"ok":true}`)
				tk.Attempts[0].Outcome = bus.AttemptAccepted
			}
			wf.Tasks = append(wf.Tasks, tk)
		}
		return wf
	}
	encode := func(wf *bus.Workflow) []byte {
		b, err := json.Marshal(wf)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	key := bus.WorkflowKey(defaultAgent, "wf1")
	start := doc(0, bus.WorkflowRunning, bus.TaskRunning, bus.TaskRunning)
	rev1, err := kv.Create(ctx, key, encode(start))
	if err != nil {
		t.Fatal(err)
	}

	bc := newBusConn(nc, nil)
	watch, err := bc.cl.WatchWorkflows()
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	var out bytes.Buffer
	r := &renderer{w: &out, now: time.Now}
	type result struct {
		wf  *bus.Workflow
		err error
	}
	done := make(chan result, 1)
	go func() {
		wf, err := followWorkflow(ctx, bc, start, watch, r)
		done <- result{wf, err}
	}()

	// b ends first; a's end, written at the revision before, is refused; a's end again,
	// on what b's writer stored, ends the workflow.
	rev2, err := kv.Update(ctx, key, encode(doc(time.Second, bus.WorkflowRunning, bus.TaskRunning, bus.TaskDone)), rev1)
	if err != nil {
		t.Fatal(err)
	}
	lost := nats.NewMsg("$KV." + bus.BucketWorkflows + "." + key)
	lost.Data = encode(doc(2*time.Second, bus.WorkflowRunning, bus.TaskDone, bus.TaskRunning))
	lost.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev1, 10))
	if _, err := js.PublishMsg(ctx, lost); err == nil {
		t.Fatal("the stream stored a write at a stale revision")
	}
	if _, err := kv.Update(ctx, key, encode(doc(3*time.Second, bus.WorkflowCompleted, bus.TaskDone, bus.TaskDone)), rev2); err != nil {
		t.Fatal(err)
	}

	select {
	case res := <-done:
		if res.err != nil || res.wf == nil || res.wf.State != bus.WorkflowCompleted {
			t.Fatalf("follow: %+v %v\n%s", res.wf, res.err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not see the workflow end")
	}
	for _, line := range []string{"✓ task a done", "✓ task b done"} {
		if n := strings.Count(out.String(), line); n != 1 {
			t.Errorf("%q %d times, want once:\n%s", line, n, out.String())
		}
	}
}
