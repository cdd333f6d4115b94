package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/needs"
)

// TestWatchStepNumbers watches the demo over the bus: each model step has one number,
// counted from 1, on its streamed text, on the status of its words before its calls and
// on the status of its calls (the streamed words' status said the step before, 0 for the
// first); and its text comes a whole line at a time, not a piece a line.
func TestWatchStepNumbers(t *testing.T) {
	needs.Bwrap(t) // the demo runs sh check.sh, in the sandbox
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var watched, watchErr output
	watchDone := make(chan int, 1)
	go func() { watchDone <- run(watchCtx, rb.args("watch"), &watched, &watchErr) }()
	// Probe until watch shows a message, so that it sees the whole turn.
	probeConn, err := rb.srv.Connect("probe")
	if err != nil {
		t.Fatal(err)
	}
	defer probeConn.Close()
	probeCtx, probed := context.WithCancel(ctx)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = probeConn.Publish(bus.AbortSubject("probe"), []byte(`{"turn_id":"probe","reason":"probe"}`))
			select {
			case <-probeCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	watched.waitFor(t, ctx, "probe abort")
	probed()

	code, stdout, stderr := cli(ctx, rb.args("run", "-model", "script:"+demoScript, demoPrompt)...)
	if code != exitOK || !strings.Contains(stdout, "completed · 4 steps · 5 calls") {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
	}
	watched.waitFor(t, ctx, "status.done     completed after 4 steps, 5 calls")
	stopWatch()
	if c := <-watchDone; c != exitOK {
		t.Fatalf("watch: exit %d\n%s", c, watchErr.String())
	}
	out := watched.String()

	// kind, step, what: of every line that names a step.
	re := regexp.MustCompile(`(?m)^\S+ \S+ (text|status\.step) +step (\d+): (.*)$`)
	type line struct {
		kind string
		step int
		what string
	}
	var lines []line
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		lines = append(lines, line{m[1], n, m[3]})
	}
	// The demo's steps: the words before the calls of steps 1-3, streamed, then the
	// step's status with them, then its calls' status; step 4 is the answer.
	want := []line{
		{"text", 1, "Let me look around the project first."},
		{"status.step", 1, "Let me look around the project first."},
		{"status.step", 1, "list_files ok, read_file ok, read_file ok"},
		{"text", 2, "The README says check.sh runs the project's checks. Running them."},
		{"status.step", 2, "The README says check.sh runs the project's checks. Running them."},
		{"status.step", 2, "run_command ok"},
		{"text", 3, "The checks pass. I'll put the open items from notes.txt on the todo list."},
		{"status.step", 3, "The checks pass. I'll put the open items from notes.txt on the todo list."},
		{"status.step", 3, "todo_write ok"},
		{"text", 4, "tinycalc is a small shell calculator: calc.sh adds its arguments, and check.sh checks it. All checks pass: the three sums are right and every file ends with a newline."},
		{"text", 4, ""},
		{"text", 4, "notes.txt lists three open items, now on the todo list:"},
		{"text", 4, "1. calc.sh fails with a shell error on a word instead of a number; it should print a usage line."},
		{"text", 4, "2. Subtraction and multiplication are missing."},
		{"text", 4, "3. README.md does not describe the checks yet."},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines name a step, want %d:\n%s", len(lines), len(want), out)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, lines[i], want[i])
		}
	}
	if strings.Contains(out, "step 0") {
		t.Errorf("a step numbered 0:\n%s", out)
	}
}
