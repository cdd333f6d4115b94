package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/label"
)

// Category is the category of the workflow tools. Only main turns include it.
const Category = "workflow"

type startArgs = Definition

type viewArgs struct {
	ID   string `json:"workflow_id" jsonschema_description:"the workflow's id, as workflow_start or workflow_list gave it"`
	Task string `json:"task_id,omitempty" jsonschema_description:"only this task, with its whole result (a view of the whole workflow leaves out results past its size)"`
}

type listArgs struct {
	State string `json:"state,omitempty" jsonschema:"enum=running,enum=completed,enum=failed,enum=cancelled" jsonschema_description:"only the workflows in this state (default: all)"`
	Limit int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=100" jsonschema_description:"the most workflows to list (default 20)"`
	After string `json:"after,omitempty" jsonschema_description:"the workflow_id of the last workflow of the page before, as the listing names it: lists the ones after it"`
}

type cancelArgs struct {
	ID     string `json:"workflow_id" jsonschema_description:"the workflow to cancel"`
	Reason string `json:"reason,omitempty" jsonschema_description:"why, recorded with the workflow and its tasks"`
}

// startSchema is workflow_start's parameter schema: a title and the tasks.
const startSchema = `{
  "type": "object",
  "properties": {
    "title": {"type": "string", "description": "what the workflow is for, in a few words"},
    "model": {"type": "string", "description": "the model its task turns run with (openai:MODEL or chat:MODEL); default: yours"},
    "tasks": {
      "type": "array",
      "minItems": 1,
      "maxItems": 32,
      "description": "the tasks; each runs as its own isolated turn, which has web and knowledge tools only, and ends by submitting a result that passes its result_schema",
      "items": {
        "type": "object",
        "properties": {
          "id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$", "description": "a short id, unique in the workflow"},
          "instructions": {"type": "string", "description": "what the task must do and return, at most 256 KiB. {{tasks.<id>.result}} is replaced by the result of a task it depends on (as JSON), {{tasks.<id>.result.<field>}} by one field of it; a task whose instructions expand past 256 KiB fails without running, so refer to a large result once, or to the field it needs"},
          "result_schema": {"type": "object", "description": "the JSON Schema of the task's result: an object schema that can be made strict (every property typed; objects closed)"},
          "depends_on": {"type": "array", "items": {"type": "string"}, "description": "ids of the tasks whose results this one needs; it starts when they are done"},
          "max_attempts": {"type": "integer", "minimum": 1, "maximum": 5, "description": "how many turns the task may take to produce an accepted result (default 1)"},
          "script": {"type": "object", "description": "for offline runs and tests only: a scripted model the task's turns play instead of a model"}
        },
        "required": ["id", "instructions", "result_schema"],
        "additionalProperties": false
      }
    }
  },
  "required": ["title", "tasks"],
  "additionalProperties": false
}`

// Tools returns the workflow tools, executed by e.
func Tools(e *Engine) []*toolbus.Tool {
	return []*toolbus.Tool{
		toolbus.MustDefine(toolbus.Def[startArgs]{
			Spec:   specStart,
			Schema: json.RawMessage(startSchema),
			DescribeActivity: func(a startArgs) string {
				return fmt.Sprintf("Starting workflow %q (%s)", a.Title, label.Plural(len(a.Tasks), "task"))
			},
			DescribeCompletedActivity: func(a startArgs, res toolbus.Result) string {
				return label.Completed(res.IsError, fmt.Sprintf("Started workflow %q (%s)", a.Title, label.Plural(len(a.Tasks), "task")), fmt.Sprintf("start workflow %q", a.Title))
			},
			Execute: func(ctx context.Context, call toolbus.Call, a startArgs) (toolbus.Result, error) {
				wf, err := e.Start(ctx, call.Agent, call.Turn, a)
				if err != nil {
					return toolbus.Result{}, err
				}
				return toolbus.TextResult(startedText(wf)).WithDetails(wf), nil
			},
		}),
		toolbus.MustDefine(toolbus.Def[viewArgs]{
			Spec:             specView,
			DescribeActivity: func(a viewArgs) string { return "Viewing workflow " + a.ID },
			DescribeCompletedActivity: func(a viewArgs, res toolbus.Result) string {
				return label.Completed(res.IsError, "Viewed workflow "+a.ID, "view workflow "+a.ID)
			},
			Execute: func(ctx context.Context, call toolbus.Call, a viewArgs) (toolbus.Result, error) {
				wf, _, err := e.Get(ctx, call.Agent, a.ID)
				if err != nil {
					return toolbus.Result{}, err
				}
				if a.Task != "" && wf.Task(a.Task) == nil {
					ids := make([]string, len(wf.Tasks))
					for i, t := range wf.Tasks {
						ids[i] = t.ID
					}
					return toolbus.Result{}, fmt.Errorf("workflow %s has no task %q; its tasks: %s", wf.ID, a.Task, strings.Join(ids, ", "))
				}
				return toolbus.TextResult(view(wf, a.Task, maxViewBytes)).WithDetails(wf), nil
			},
		}),
		toolbus.MustDefine(toolbus.Def[listArgs]{
			Spec:                      specList,
			DescribeActivity:          func(listArgs) string { return "Listing workflows" },
			DescribeCompletedActivity: func(listArgs, toolbus.Result) string { return "Listed workflows" },
			Execute: func(ctx context.Context, call toolbus.Call, a listArgs) (toolbus.Result, error) {
				page, err := e.List(ctx, call.Agent, ListQuery{State: bus.WorkflowState(a.State), Limit: a.Limit, After: a.After})
				if err != nil {
					return toolbus.Result{}, err
				}
				if page.Workflows == nil {
					page.Workflows = []Summary{}
				}
				return toolbus.TextResult(listText(page, a)).WithDetails(page.Workflows), nil
			},
		}),
		toolbus.MustDefine(toolbus.Def[cancelArgs]{
			Spec:             specCancel,
			DescribeActivity: func(a cancelArgs) string { return "Cancelling workflow " + a.ID },
			DescribeCompletedActivity: func(a cancelArgs, res toolbus.Result) string {
				return label.Completed(res.IsError, "Cancelled workflow "+a.ID, "cancel workflow "+a.ID)
			},
			Execute: func(ctx context.Context, call toolbus.Call, a cancelArgs) (toolbus.Result, error) {
				wf, err := e.Cancel(ctx, call.Agent, a.ID, a.Reason)
				if err != nil {
					return toolbus.Result{}, err
				}
				return toolbus.TextResult("Cancelled.\n" + view(wf, "", maxViewBytes)).WithDetails(wf), nil
			},
		}),
	}
}

var (
	specStart = toolbus.Spec{Name: "workflow_start", Category: Category, Mode: toolbus.Sequential,
		Description: "Start a workflow: tasks that run as isolated turns of their own, in parallel where they do not " +
			"depend on each other, each ending with a result that matches its JSON Schema. Returns at once with the " +
			"workflow's id; follow it with workflow_view."}
	specView = toolbus.Spec{Name: "workflow_view", Category: Category, ReadOnly: true,
		Description: "Show one workflow: its state, each task's state, attempts (turn, outcome, reason), result and error. " +
			"Results that do not fit are left out with a note; with task_id, one task and its whole result."}
	specList = toolbus.Spec{Name: "workflow_list", Category: Category, ReadOnly: true,
		Description: "List your workflows, newest first, with their state and progress (no results: workflow_view shows them), " +
			"20 at a time unless limit says otherwise; after continues from the last one listed."}
	specCancel = toolbus.Spec{Name: "workflow_cancel", Category: Category, Mode: toolbus.Sequential,
		Description: "Cancel a running workflow: its running task turns are aborted and its unfinished tasks recorded as cancelled."}
)

// Specs returns the specs of the workflow tools, in order.
func Specs() []*toolbus.Spec { return toolbus.SpecsOf(specTools) }

// specTools are the tools as defined, for their specs; they execute nothing.
var specTools = Tools(nil)

func startedText(wf *bus.Workflow) string {
	var running, waiting []string
	for _, t := range wf.Tasks {
		switch t.State {
		case bus.TaskRunning:
			running = append(running, t.ID)
		case bus.TaskPending:
			waiting = append(waiting, fmt.Sprintf("%s (after %s)", t.ID, strings.Join(t.DependsOn, ", ")))
		}
	}
	s := fmt.Sprintf("Workflow %s started: %q, %s.\nRunning: %s.", wf.ID, wf.Title, label.Plural(len(wf.Tasks), "task"), strings.Join(running, ", "))
	if len(waiting) > 0 {
		s += "\nWaiting: " + strings.Join(waiting, ", ") + "."
	}
	return s + "\nFollow it with workflow_view."
}

// View describes a workflow for the model and for people: its state, then each task with
// its attempts, result and error, all of it.
func View(wf *bus.Workflow) string { return view(wf, "", 0) }

// view is View of only one task when only is set, within budget bytes when budget > 0:
// a result that would take the text past it is left out with a note that says how to
// see it (a task's view shows its whole result: at most MaxResultBytes), and what is
// still over it (reasons stored before they were bounded) is clipped.
func view(wf *bus.Workflow, only string, budget int) string {
	var b strings.Builder
	done := 0
	for _, t := range wf.Tasks {
		if t.State == bus.TaskDone {
			done++
		}
	}
	fmt.Fprintf(&b, "Workflow %s %q: %s (%d of %d tasks done)", wf.ID, wf.Title, wf.State, done, len(wf.Tasks))
	if wf.Error != "" {
		fmt.Fprintf(&b, " — %s", wf.Error)
	}
	b.WriteByte('\n')
	left := 0
	for _, t := range wf.Tasks {
		if only != "" && t.ID != only {
			continue
		}
		fmt.Fprintf(&b, "- %s: %s", t.ID, t.State)
		if t.State == bus.TaskPending && len(t.DependsOn) > 0 {
			fmt.Fprintf(&b, " (after %s)", strings.Join(t.DependsOn, ", "))
		}
		b.WriteByte('\n')
		for _, a := range t.Attempts {
			outcome := string(a.Outcome)
			if outcome == "" {
				outcome = "running"
			}
			fmt.Fprintf(&b, "  attempt %d of %d, turn %s: %s", a.N, t.MaxAttempts, a.Turn, outcome)
			if a.Reason != "" {
				fmt.Fprintf(&b, ": %s", a.Reason)
			}
			b.WriteByte('\n')
		}
		if t.Result != nil {
			// Room is kept for the lines of the tasks after this one.
			if budget > 0 && only == "" && b.Len()+len(t.Result) > budget-4<<10 {
				fmt.Fprintf(&b, "  result: %s, left out here; workflow_view with \"task_id\": %q shows it\n", sizeOf(len(t.Result)), t.ID)
				left++
			} else {
				fmt.Fprintf(&b, "  result: %s\n", t.Result)
			}
		}
		if t.Error != "" && t.State != bus.TaskCancelled {
			fmt.Fprintf(&b, "  error: %s\n", t.Error)
		}
	}
	if left > 0 {
		fmt.Fprintf(&b, "(%s left out: the view holds %s at most.)\n", label.Plural(left, "result"), sizeOf(budget))
	}
	out := strings.TrimRight(b.String(), "\n")
	if budget > 0 {
		out = clip(out, budget)
	}
	return out
}

// summaryLine is a workflow's line in workflow_list's text.
func summaryLine(s Summary) string {
	return fmt.Sprintf("%s %q: %s, %d of %d tasks done, started %s", s.ID, s.Title, s.State, s.Counts.Done, len(s.Tasks),
		s.Created.Format(time.RFC3339))
}

func listText(page ListPage, a listArgs) string {
	if len(page.Workflows) == 0 {
		what := "workflows"
		if a.State != "" {
			what = a.State + " workflows"
		}
		if a.After != "" {
			return fmt.Sprintf("No more %s after %s.", what, a.After)
		}
		return "No " + what + "."
	}
	var b strings.Builder
	for _, s := range page.Workflows {
		b.WriteString(summaryLine(s))
		b.WriteByte('\n')
	}
	if page.More > 0 {
		fmt.Fprintf(&b, "%s: workflow_list with \"after\": %q lists the next.\n", label.Plural(page.More, "more workflow"), page.Next)
	}
	return strings.TrimRight(b.String(), "\n")
}
