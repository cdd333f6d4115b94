package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/schedule"
)

// TestJobsAndSchedulesCommands runs a turn that starts a job and creates a schedule, then
// lists, shows, cancels and removes them with the command line.
func TestJobsAndSchedulesCommands(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	dir := t.TempDir()
	write := func(name, doc string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// run runs `toolbus WORD [SUB] <bus flags> ARGS...`.
	run := func(words ...string) (int, string, string) {
		n := 2
		if words[0] == "run" {
			n = 1
		}
		args := append(append(append([]string{}, words[:n]...), "-server", rb.url, "-user", "ops", "-pass-file", rb.passFile), words[n:]...)
		return cli(ctx, args...)
	}
	profile := write("ann.json", `{"version":3,"agent":"ann","jobs":{"spawn":true},"schedules":{"enabled":true}}`)
	if code, out, errOut := run("agent", "set", "-f", profile, "ann"); code != exitOK {
		t.Fatalf("agent set: %d %s %s", code, out, errOut)
	}
	script := write("script.json", `{"responses":[
	  {"calls":[{"name":"job_start","arguments":"{\"prompt\":\"Count the notes.\"}"},
	            {"name":"schedule_create","arguments":"{\"prompt\":\"Check the notes.\",\"cron\":\"0 0 9 * * mon-fri\",\"time_zone\":\"Europe/Amsterdam\"}"}]},
	  {"text":"Started."}],
	 "child":{"responses":[{"text":"There are 3 notes."}]}}`)
	if code, out, errOut := run("run", "-agent", "ann", "-model", "script:"+script, "go"); code != exitOK {
		t.Fatalf("run: %d\n%s\n%s", code, out, errOut)
	}

	// jobs list -json, then the job's end.
	var all []jobs.Job
	code, out, errOut := run("jobs", "list", "-json")
	if code != exitOK || json.Unmarshal([]byte(out), &all) != nil || len(all) != 1 || all[0].Agent != "ann" {
		t.Fatalf("jobs list -json: %d %s %s", code, out, errOut)
	}
	id := all[0].ID
	bustest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		code, out, errOut := run("jobs", "show", id)
		if code != exitOK || !strings.Contains(out, "completed") {
			return fmt.Errorf("jobs show: %d %s %s", code, out, errOut)
		}
		return nil
	})
	code, out, _ = run("jobs", "show", id)
	for _, want := range []string{"job " + id, "agent ann", "state completed", "node remote1", "calls no tool calls", "prompt Count the notes. There are 3 notes."} {
		if !strings.Contains(squeeze(out), want) {
			t.Errorf("jobs show lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run("jobs", "list")
	if code != exitOK || !strings.Contains(out, "JOB") || !strings.Contains(squeeze(out), id+" ann completed remote1 1 ") {
		t.Errorf("jobs list: %d\n%s", code, out)
	}
	code, _, errOut = run("jobs", "cancel", id)
	if code != exitFailed || !strings.Contains(errOut, "job_cancel: job "+id+" has already ended (completed)") {
		t.Errorf("jobs cancel of an ended job: %d %s", code, errOut)
	}

	// schedules list, show, rm.
	var scheds []schedule.Schedule
	code, out, errOut = run("schedules", "list", "-json", "-agent", "ann")
	if code != exitOK || json.Unmarshal([]byte(out), &scheds) != nil || len(scheds) != 1 {
		t.Fatalf("schedules list -json: %d %s %s", code, out, errOut)
	}
	sid := scheds[0].ID
	code, out, _ = run("schedules", "list")
	if code != exitOK || !strings.Contains(out, sid) || !strings.Contains(out, `cron "0 0 9 * * mon-fri" (Europe/Amsterdam)`) {
		t.Errorf("schedules list: %d\n%s", code, out)
	}
	code, out, _ = run("schedules", "show", sid)
	if out := squeeze(out); code != exitOK || !strings.Contains(out, "pattern 0 0 9 * * mon-fri") || !strings.Contains(out, "T09:00:00+0") || !strings.Contains(out, "prompt Check the notes.") {
		t.Errorf("schedules show: %d\n%s", code, out)
	}
	code, out, errOut = run("schedules", "rm", sid)
	if code != exitOK || !strings.Contains(out, "Cancelled schedule "+sid) {
		t.Errorf("schedules rm: %d %s %s", code, out, errOut)
	}
	code, _, errOut = run("schedules", "list")
	if code != exitOK || !strings.Contains(errOut, "no schedules") {
		t.Errorf("schedules list after rm: %d %s", code, errOut)
	}
	code, _, errOut = run("schedules", "rm", sid)
	if code != exitFailed || !strings.Contains(errOut, "no schedule "+sid+" on this bus") {
		t.Errorf("schedules rm twice: %d %s", code, errOut)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs"}, "want a subcommand: list, show, cancel"},
		{[]string{"schedules", "pause", "x"}, `unknown subcommand "pause": want list, show, rm`},
		{[]string{"jobs", "show", "x"}, "jobs show works on a running bus: pass -server URL"},
		{[]string{"jobs", "show", "-server", rb.url}, "want one id"},
		{[]string{"schedules", "show", "-server", rb.url, "a.b"}, `"a.b" is not an id`},
	} {
		code, out, errOut := cli(ctx, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want usage error %q (stdout %q)", tc.args, code, errOut, tc.want, out)
		}
	}
}

// squeeze makes every run of white space one space, so columns do not matter.
func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }
