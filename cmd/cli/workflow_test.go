package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

const workflowExample = "../../examples/workflow/compare.json"

// TestWorkflowStartOffline runs the example workflow on an embedded bus with its scripted
// task turns, as the README shows: the live view, then the workflow at its end.
func TestWorkflowStartOffline(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	code, stdout, stderr := cli(ctx, "workflow", "start", workflowExample)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// In order: the tasks that need nothing start; bleve is told once to submit, fts5's
	// first submission is refused leaf by leaf; verdict starts when both are done.
	at := 0
	for _, want := range []string{
		"▶ task bleve: attempt 1 of 1",
		"bleve#1: bleve is Apache-2.0 licensed",
		"bleve#1 ↺ answered with text alone: told once to end with its call",
		"✓ task bleve done: {",
		"▶ task verdict: attempt 1 of 1",
		"verdict#1 ✓ submit_result",
		"verdict#1 submitted after 1 step",
		`✓ task verdict done: {"choice":"bleve"`,
		"completed (3 of 3 tasks done)",
		"completed · 3 of 3 tasks done",
	} {
		i := strings.Index(stdout[at:], want)
		if i < 0 {
			t.Fatalf("the output lacks %q after byte %d:\n%s", want, at, stdout)
		}
		at += i + len(want)
	}
	for _, want := range []string{
		"fts5#1 ✗ submit_result: invalid arguments for submit_result: arguments do not match the schema:",
		"      - /result: required property 'strength' is missing",
		"      - /result/on_disk: value is string but should be boolean",
		"fts5#1 ✓ submit_result",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the output lacks %q:\n%s", want, stdout)
		}
	}

	code, stdout, stderr = cli(ctx, "workflow", "start", "-json", workflowExample)
	var wf bus.Workflow
	if code != exitOK || json.Unmarshal([]byte(stdout), &wf) != nil {
		t.Fatalf("-json: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var result bytes.Buffer
	_ = json.Compact(&result, wf.Task("verdict").Result)
	if wf.State != bus.WorkflowCompleted || result.String() != `{"choice":"bleve","reasons":["pure Go: no C compiler, unlike SQLite","Apache-2.0 and on disk, like FTS5"]}` {
		t.Errorf("-json: %+v", wf)
	}
}

// TestTaskTurnEndsSubmitted: a task turn that its accepted submit_result ended is a
// success and says so; a main turn a tool ended is still "terminated".
func TestTaskTurnEndsSubmitted(t *testing.T) {
	r := &renderer{w: new(bytes.Buffer)}
	task := bus.TurnStatus{Kind: bus.TurnTask, State: bus.TurnTerminated, Step: 2, Calls: make([]bus.CallRecord, 1)}
	if got, want := taskTurnLine(r, "plan-1", bus.StatusDone, task), "  plan#1 submitted after 2 steps"; got != want {
		t.Errorf("workflow view: %q, want %q", got, want)
	}
	if got, want := statusText(bus.StatusDone, task), "submitted after 2 steps, 1 call"; got != want {
		t.Errorf("log view: %q, want %q", got, want)
	}
	task.Kind = bus.TurnMain
	if got, want := statusText(bus.StatusDone, task), "terminated after 2 steps, 1 call"; got != want {
		t.Errorf("main turn: %q, want %q", got, want)
	}
}

// writeWorkflow writes a workflow file.
func writeWorkflow(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "workflow.json")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWorkflowCommands starts, follows, lists and cancels workflows on a remote bus, and
// shows the refusals.
func TestWorkflowCommands(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	wfCLI := func(sub string, args ...string) (int, string, string) {
		return cli(ctx, append([]string{"workflow"}, rb.args(sub, args...)...)...)
	}

	code, stdout, stderr := wfCLI("start", "-detach", "-json", workflowExample)
	var started bus.Workflow
	if code != exitOK || json.Unmarshal([]byte(stdout), &started) != nil || started.ID == "" {
		t.Fatalf("start -detach -json: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = wfCLI("view", "-follow", started.ID)
	followed := stdout
	if code != exitOK || !strings.Contains(stdout, "completed · 3 of 3 tasks done") {
		t.Errorf("view -follow: exit %d\n%s%s", code, stdout, stderr)
	}
	// The time shown is the workflow's own, from its record, not the follower's.
	code, stdout, stderr = wfCLI("view", "-json", started.ID)
	var ended bus.Workflow
	if code != exitOK || json.Unmarshal([]byte(stdout), &ended) != nil || ended.Ended.Before(ended.Created) || ended.Ended.IsZero() {
		t.Fatalf("view -json: exit %d\n%s%s", code, stdout, stderr)
	}
	if want := "completed · 3 of 3 tasks done · " + formatElapsed(ended.Ended.Sub(ended.Created)) + "\n"; !strings.Contains(followed, want) {
		t.Errorf("view -follow lacks %q:\n%s", want, followed)
	}
	code, stdout, stderr = wfCLI("view", started.ID)
	if code != exitOK || !strings.Contains(stdout, "- verdict: done\n  attempt 1 of 1, turn "+started.ID+"-verdict-1: accepted") {
		t.Errorf("view: exit %d\n%s%s", code, stdout, stderr)
	}

	slow := writeWorkflow(t, `{"title":"slow","tasks":[{"id":"wait","instructions":"Wait.",
		"result_schema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]},
		"script":{"responses":[{"delay_ms":60000},{"calls":[{"name":"submit_result","arguments":"{\"result\":{\"ok\":true}}"}]}]}}]}`)
	code, stdout, stderr = wfCLI("start", "-detach", slow)
	if code != exitOK || !strings.Contains(stdout, "started: 1 task") {
		t.Fatalf("start -detach: exit %d\n%s%s", code, stdout, stderr)
	}
	slowID := strings.Fields(stdout)[1]
	code, stdout, stderr = wfCLI("list")
	lines := strings.Split(stdout, "\n")
	if code != exitOK || len(lines) < 3 || !strings.HasPrefix(lines[0], "ID ") ||
		strings.Join(strings.Fields(lines[1])[:4], " ") != slowID+" running 0/1 done" ||
		strings.Join(strings.Fields(lines[2])[:4], " ") != started.ID+" completed 3/3 done" {
		t.Errorf("list: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = wfCLI("list", "-json", "-state", "completed")
	var done []bus.Workflow
	if code != exitOK || json.Unmarshal([]byte(stdout), &done) != nil || len(done) != 1 || done[0].ID != started.ID {
		t.Errorf("list -json -state completed: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = wfCLI("cancel", "-reason", "not needed", slowID)
	if code != exitOK || !strings.Contains(stdout, "\"slow\": cancelled (0 of 1 tasks done) — not needed\n") ||
		!strings.Contains(stdout, "- wait: cancelled\n  attempt 1 of 1, turn "+slowID+"-wait-1: cancelled: the workflow was cancelled: not needed") {
		t.Errorf("cancel: exit %d\n%s%s", code, stdout, stderr)
	}
	code, _, stderr = wfCLI("cancel", started.ID)
	if code != exitFailed || !strings.Contains(stderr, "workflow_cancel: workflow "+started.ID+" has ended already (completed)") {
		t.Errorf("cancel of an ended workflow: exit %d\n%s", code, stderr)
	}
	code, _, stderr = wfCLI("view", "nope")
	if code != exitFailed || !strings.Contains(stderr, "no such workflow") {
		t.Errorf("view of no workflow: exit %d\n%s", code, stderr)
	}

	// A workflow whose tasks have no model: the start names what is missing.
	noModel := writeWorkflow(t, `{"title":"t","tasks":[{"id":"a","instructions":"A.","result_schema":{"type":"object","properties":{"x":{"type":"string"}}}}]}`)
	code, _, stderr = wfCLI("start", noModel)
	if code != exitFailed || !strings.Contains(stderr, "no model for the tasks: give the workflow a model") {
		t.Errorf("start without a model: exit %d\n%s", code, stderr)
	}
}

func TestWorkflowRefusals(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	bad := writeWorkflow(t, `{"title":"t","tasks":[
		{"id":"a","instructions":"A.","result_schema":{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},"uniqueItems":true}}},"script":{"responses":[{"text":"x"}]}},
		{"id":"b","instructions":"B after {{tasks.a.result}}.","result_schema":{"type":"array"},"script":{"responses":[{"text":"x"}]}}]}`)
	// A task without a script: its turn needs the model.
	const unscriptedDoc = `{"title":"t","tasks":[{"id":"a","instructions":"Say hi.","result_schema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}}]}`
	unscripted := writeWorkflow(t, unscriptedDoc)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"bad schemas", []string{"start", bad}, exitFailed, []string{
			"toolbus: workflow refused:",
			`- task a: result_schema: cannot be sent strict: at /properties/tags: strict mode does not support "uniqueItems"`,
			"- task b: instructions use the result of a, which b does not depend on",
			`- task b: result_schema: at /: a result schema's root must be an object schema ("type": "object")`,
		}},
		{"unknown field", []string{"start", writeWorkflow(t, `{"title":"t","tasks":[],"prio":1}`)}, exitFailed, []string{`workflow.json:1:25: unknown field "prio"`}},
		{"no subcommand", nil, exitUsage, []string{"want a subcommand: start, view, list or cancel"}},
		{"view without server", []string{"view", "x"}, exitUsage, []string{"this needs -server"}},
		{"detach without server", []string{"start", "-detach", bad}, exitUsage, []string{"-detach leaves the workflow to a running bus"}},
		{"script model", []string{"start", "-model", "script:x.json", bad}, exitUsage, []string{"a workflow plays scripts per task"}},
		// A bad model is refused before the embedded node starts (not by workflow_start).
		{"unknown model", []string{"start", "-model", "nope", unscripted}, exitUsage, []string{`toolbus workflow: -model unknown model spec "nope"`}},
		{"model without key", []string{"start", "-model", "openai:gpt-5", unscripted}, exitFailed, []string{"toolbus: -model openai:gpt-5: responses gateway for gpt-5: no API key: set OPENAI_API_KEY\n"}},
		{"file's model without key", []string{"start", writeWorkflow(t, strings.Replace(unscriptedDoc, `"title"`, `"model":"openai:gpt-5","title"`, 1))}, exitFailed,
			[]string{"toolbus: workflow file: model openai:gpt-5: responses gateway for gpt-5: no API key"}},
		{"bad state", []string{"list", "-server", "nats://127.0.0.1:1", "-state", "done"}, exitUsage, []string{`-state "done": want running`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No OPENAI_API_KEY in the run's environment.
			code, _, stderr := cliEnv(ctx, testEnv(nil, ""), append([]string{"workflow"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, stderr)
			}
			if strings.Contains(stderr, "workflow_start:") {
				t.Errorf("refused by a node, not before one started:\n%s", stderr)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}
