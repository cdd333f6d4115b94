//go:build linux

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/schedule"
)

// TestJobsAndSchedulesSurviveNodeLoss runs a background job and a schedule on three
// nodes with three replicas of everything, and kills the node that runs the job: another
// node resumes the job to its end, and the schedule goes on firing, its turns taken by
// the nodes left.
func TestJobsAndSchedulesSurviveNodeLoss(t *testing.T) {
	t.Parallel()
	nodes := threeNodes(t, "-categories=jobs,schedule", "-schedule-min-interval", "1s")
	urls := urlsOf(nodes)
	server := strings.Join(urls, ",")
	nc := connect(t, server)
	host := startSlowhost(t, nc, urls...)
	dir := t.TempDir()
	write := func(name, doc string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	profile := write("bg.json", `{"version":3,"agent":"bg","jobs":{"spawn":true},"schedules":{"enabled":true},"namespaces":[{"name":"slow","load":"upfront"}]}`)
	if out, errOut, err := runCLI(t, "agent", "set", "-server", server, "-f", profile, "bg"); err != nil {
		t.Fatalf("agent set: %v\n%s%s", err, out, errOut)
	}
	scheduleScript := write("schedule.json", `{"responses":[
	  {"calls":[{"name":"schedule_create","arguments":"{\"prompt\":\"Tick.\",\"every\":\"1s\"}"}]},
	  {"text":"Scheduled."}],
	 "child":{"responses":[{"text":"Tock."}]}}`)
	jobScript := write("job.json", `{"responses":[
	  {"calls":[{"name":"job_start","arguments":"{\"prompt\":\"Wait a while.\"}"}]},
	  {"text":"Started."}],
	 "child":{"responses":[{"calls":[{"id":"j1","name":"wait","namespace":"slow","arguments":"{\"id\":\"j1\",\"seconds\":-1}"}]},{"text":"Waited."}]}}`) // held: see releaseHeld
	for _, script := range []string{scheduleScript, jobScript} {
		if out, errOut, err := runCLI(t, "run", "-server", server, "-agent", "bg", "-model", "script:"+script, "go"); err != nil {
			t.Fatalf("run %s: %v\n%s%s", filepath.Base(script), err, out, errOut)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*waitLimit)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket := func(name string) jetstream.KeyValue {
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	jobsKV, schedKV := bucket(bus.BucketJobs), bucket(bus.BucketSchedules)

	var job jobs.Job
	checkFor(t, "the job runs", func() error {
		all, err := jobs.List(ctx, jobsKV, "bg")
		if err != nil || len(all) != 1 || all[0].State != bus.TurnRunning {
			return fmt.Errorf("jobs %+v, %v", all, err)
		}
		job = all[0]
		return nil
	})
	host.waitStarted(t, "j1")
	scheds, err := schedule.List(ctx, schedKV, "bg")
	if err != nil || len(scheds) != 1 {
		t.Fatalf("schedules %+v %v", scheds, err)
	}
	sid := scheds[0].ID
	fired := func() int {
		s, err := schedule.Find(ctx, schedKV, sid)
		if err != nil {
			return -1
		}
		return s.Fired
	}
	checkFor(t, "the schedule fires", func() error {
		if n := fired(); n < 2 {
			return fmt.Errorf("fired %d", n)
		}
		return nil
	})

	lost := byName(nodes, job.Node)
	if lost == nil {
		t.Fatalf("the job runs on unknown node %q", job.Node)
	}
	lost.proc.kill()
	before := fired()
	host.releaseHeld(t) // the job's call, in flight on the lost node and run again

	// The job: resumed elsewhere, to its end; its read-only call in flight ran again.
	checkFor(t, "the job ends on another node", func() error {
		j, err := jobs.Find(ctx, jobsKV, job.ID)
		if err != nil || j.State != bus.TurnCompleted || j.Node == lost.name || j.Text != "Waited." {
			return fmt.Errorf("job %+v, %v", j, err)
		}
		return nil
	})
	if n := host.count("start j1"); n != 2 {
		t.Errorf("the job's call started %d times, want 2 (again on the node that resumed it)", n)
	}
	// The schedule: it goes on firing, and its turns complete on the nodes left.
	checkFor(t, "the schedule goes on firing", func() error {
		if n := fired(); n < before+3 {
			return fmt.Errorf("fired %d, %d before the node was lost", n, before)
		}
		return nil
	})
	s, err := schedule.Find(ctx, schedKV, sid)
	if err != nil {
		t.Fatal(err)
	}
	checkFor(t, "the last fired turn completes", func() error {
		rec := turnRecordOf(ctx, js, s.LastTurn)
		if rec == nil || rec.State != bus.TurnCompleted || rec.Owner == lost.name {
			return fmt.Errorf("turn %s: %+v", s.LastTurn, rec)
		}
		return nil
	})
	if out, errOut, err := runCLI(t, "schedules", "rm", "-server", otherURLs(nodes, lost), sid); err != nil || !strings.Contains(out, "Cancelled schedule "+sid) {
		t.Errorf("schedules rm: %v\n%s%s", err, out, errOut)
	}
}

// turnRecordOf reads a turn's record; nil when it cannot.
func turnRecordOf(ctx context.Context, js jetstream.JetStream, id string) *bus.TurnRecord {
	store, err := durable.Open(ctx, js, durable.Config{})
	if err != nil {
		return nil
	}
	rec, _, err := store.Record(ctx, id)
	if err != nil {
		return nil
	}
	return &rec
}
