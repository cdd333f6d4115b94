package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/label"
	"github.com/toolbus/toolbus/schema"
)

type statusArgs struct {
	ID string `json:"job_id,omitempty" jsonschema:"maxLength=128" jsonschema_description:"The job to check; leave it out to list your jobs."`
}

type resultArgs struct {
	ID string `json:"job_id" jsonschema:"minLength=1,maxLength=128" jsonschema_description:"The id job_start gave."`
}

type cancelArgs struct {
	ID     string `json:"job_id" jsonschema:"minLength=1,maxLength=128" jsonschema_description:"The id job_start gave."`
	Reason string `json:"reason,omitempty" jsonschema:"maxLength=500" jsonschema_description:"Why, as the job's record will say (optional)."`
}

// specs are the tools' specs for an agent's policy; Tools adds the functions.
func specs(p Policy) []*toolbus.Spec {
	p = p.WithDefaults()
	return []*toolbus.Spec{
		{
			Name: "job_start",
			Description: "Start a background job: another turn of yours that works on the prompt on its own, with your tools " +
				"(but no jobs of its own), while you go on. It sees only the prompt and instructions you give it. " +
				fmt.Sprintf("At most %d of your jobs run at once, and at most %d start in an hour. ", p.MaxRunning, p.MaxPerHour) +
				"Returns the job's id: check it with job_status and read what it found with job_result.",
			Mode:     toolbus.Sequential,
			Category: Category,
			Params:   schema.MustFor[StartArgs](),
		},
		{
			Name:        "job_status",
			Description: "Check one background job (queued, running at which step, or how it ended), or list your jobs when no id is given.",
			Mode:        toolbus.Parallel,
			ReadOnly:    true,
			Category:    Category,
			Params:      schema.MustFor[statusArgs](),
		},
		{
			Name: "job_result",
			Description: "Read what a background job that has ended found: its final text and a summary of its tool calls. " +
				fmt.Sprintf("Results are kept for %s after a job ends.", formatDuration(p.Keep)),
			Mode:     toolbus.Parallel,
			ReadOnly: true,
			Category: Category,
			Params:   schema.MustFor[resultArgs](),
		},
		{
			Name:        "job_cancel",
			Description: "Cancel a background job: a queued one never starts, a running one is stopped (its calls in flight are cancelled).",
			Mode:        toolbus.Sequential,
			Destructive: true,
			Category:    Category,
			Params:      schema.MustFor[cancelArgs](),
		},
	}
}

// Specs returns the specs of the job tools for an agent's policy (its limits are in
// job_start's description), in the order the model sees them.
func Specs(p Policy) []*toolbus.Spec {
	return specs(p)
}

// Tools returns job_start, job_status, job_result and job_cancel over s. policy reads an
// agent's job policy; job_start refuses an agent whose profile does not allow jobs, and
// keeps to its limits.
func Tools(s *Store, policy func(ctx context.Context, agent string) (Policy, error)) []*toolbus.Tool {
	specs := specs(Policy{})
	t := tools{s: s, policy: policy}
	return []*toolbus.Tool{
		toolbus.MustDefine(toolbus.Def[StartArgs]{
			Spec:             *specs[0],
			DescribeActivity: func(a StartArgs) string { return "Starting a background job: " + label.Truncate(a.Prompt, 60) },
			DescribeCompletedActivity: func(a StartArgs, res toolbus.Result) string {
				return label.Completed(res.IsError, "Started a background job: "+label.Truncate(a.Prompt, 60), "start the background job")
			},
			Execute: t.start,
		}),
		toolbus.MustDefine(toolbus.Def[statusArgs]{
			Spec: *specs[1],
			DescribeActivity: func(a statusArgs) string {
				if a.ID == "" {
					return "Listing background jobs"
				}
				return "Checking job " + a.ID
			},
			DescribeCompletedActivity: func(a statusArgs, res toolbus.Result) string {
				switch {
				case res.IsError && a.ID == "":
					return "Could not list the background jobs"
				case res.IsError:
					return "Could not check job " + a.ID
				case a.ID == "":
					return "Listed the background jobs"
				}
				return "Checked job " + a.ID
			},
			Execute: t.status,
		}),
		toolbus.MustDefine(toolbus.Def[resultArgs]{
			Spec:             *specs[2],
			DescribeActivity: func(a resultArgs) string { return "Reading the result of job " + a.ID },
			DescribeCompletedActivity: func(a resultArgs, res toolbus.Result) string {
				return label.Completed(res.IsError, "Read the result of job "+a.ID, "read the result of job "+a.ID)
			},
			Execute: t.result,
		}),
		toolbus.MustDefine(toolbus.Def[cancelArgs]{
			Spec:             *specs[3],
			DescribeActivity: func(a cancelArgs) string { return "Cancelling job " + a.ID },
			DescribeCompletedActivity: func(a cancelArgs, res toolbus.Result) string {
				return label.Completed(res.IsError, "Cancelled job "+a.ID, "cancel job "+a.ID)
			},
			Execute: t.cancel,
		}),
	}
}

type tools struct {
	s      *Store
	policy func(ctx context.Context, agent string) (Policy, error)
}

var errNoAgent = errors.New("this call carries no agent id, and jobs belong to an agent")

func (t tools) start(ctx context.Context, call toolbus.Call, a StartArgs) (toolbus.Result, error) {
	if call.Agent == "" {
		return toolbus.Result{}, errNoAgent
	}
	p, err := t.policy(ctx, call.Agent)
	if err != nil {
		return toolbus.Result{}, err
	}
	j, err := t.s.Start(ctx, call.Agent, call.Turn, a, p)
	if err != nil {
		return toolbus.Result{}, err
	}
	return toolbus.TextResult(fmt.Sprintf("Started job %s in the background. Check it with job_status; when it has ended, job_result gives what it found.", j.ID)).WithDetails(j), nil
}

func (t tools) status(ctx context.Context, call toolbus.Call, a statusArgs) (toolbus.Result, error) {
	if call.Agent == "" {
		return toolbus.Result{}, errNoAgent
	}
	now := time.Now()
	if a.ID == "" {
		all, err := List(ctx, t.s.kv, call.Agent)
		if err != nil {
			return toolbus.Result{}, err
		}
		if len(all) == 0 {
			return toolbus.TextResult("You have no background jobs (ended ones are kept only for a while).").WithDetails(all), nil
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Your jobs (%d, newest first):", len(all))
		for _, j := range all {
			fmt.Fprintf(&b, "\n- %s: %s; %q", j.ID, t.standing(ctx, j, now), label.Truncate(j.Prompt, 80))
		}
		return toolbus.TextResult(b.String()).WithDetails(all), nil
	}
	j, _, err := t.s.Get(ctx, call.Agent, a.ID)
	if errors.Is(err, ErrNotFound) {
		return toolbus.Result{}, fmt.Errorf("you have no job %s (job_status without an id lists yours; ended jobs are kept only for a while)", a.ID)
	}
	if err != nil {
		return toolbus.Result{}, err
	}
	text := fmt.Sprintf("Job %s: %s.", j.ID, t.standing(ctx, j, now))
	if j.State.Ended() {
		text += " Read its result with job_result."
	}
	return toolbus.TextResult(text).WithDetails(j), nil
}

// standing says where a job stands, with its turn's step while it runs.
func (t tools) standing(ctx context.Context, j Job, now time.Time) string {
	switch {
	case j.State.Ended():
		s := fmt.Sprintf("%s %s ago after %s (%s)", j.State, formatDuration(now.Sub(j.Ended)), label.Plural(j.Steps, "step"), j.Summary())
		if j.Error != "" {
			s += ": " + firstLine(j.Error)
		}
		return s
	case j.State == bus.TurnRunning:
		s := fmt.Sprintf("running for %s", formatDuration(now.Sub(j.Started)))
		if rec, err := t.s.Turn(ctx, j.ID); err == nil && rec != nil {
			s += fmt.Sprintf(", at step %d", rec.Step)
			if rec.Owner != "" {
				s += " on node " + rec.Owner
			}
		}
		return s
	}
	return fmt.Sprintf("queued for %s, waiting for a node", formatDuration(now.Sub(j.Created)))
}

func (t tools) result(ctx context.Context, call toolbus.Call, a resultArgs) (toolbus.Result, error) {
	if call.Agent == "" {
		return toolbus.Result{}, errNoAgent
	}
	j, _, err := t.s.Get(ctx, call.Agent, a.ID)
	if errors.Is(err, ErrNotFound) {
		return toolbus.Result{}, fmt.Errorf("you have no job %s (its result may have expired; job_status lists yours)", a.ID)
	}
	if err != nil {
		return toolbus.Result{}, err
	}
	if !j.State.Ended() {
		return toolbus.TextResult(fmt.Sprintf("Job %s has not ended yet: it is %s. Check again later.", j.ID, t.standing(ctx, j, time.Now()))).WithDetails(j), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Job %s %s after %s (%s).", j.ID, j.State, label.Plural(j.Steps, "step"), j.Summary())
	if j.Error != "" {
		fmt.Fprintf(&b, "\nError: %s", j.Error)
	}
	if j.Text != "" {
		fmt.Fprintf(&b, "\nIts final text:\n\n%s", j.Text)
	} else {
		b.WriteString("\nIt ended without a final text.")
	}
	return toolbus.TextResult(b.String()).WithDetails(j), nil
}

func (t tools) cancel(ctx context.Context, call toolbus.Call, a cancelArgs) (toolbus.Result, error) {
	if call.Agent == "" {
		return toolbus.Result{}, errNoAgent
	}
	p, err := t.policy(ctx, call.Agent)
	if err != nil {
		return toolbus.Result{}, err
	}
	reason := a.Reason
	if reason == "" {
		reason = "cancelled"
		if call.Turn != "" {
			reason += " by turn " + call.Turn
		}
	}
	j, err := t.s.Cancel(ctx, call.Agent, a.ID, reason, p.WithDefaults().Keep)
	if errors.Is(err, ErrNotFound) {
		return toolbus.Result{}, fmt.Errorf("you have no job %s (job_status lists yours)", a.ID)
	}
	if err != nil {
		return toolbus.Result{}, err
	}
	if j.State.Ended() {
		return toolbus.TextResult(fmt.Sprintf("Job %s is cancelled (%s).", j.ID, j.State)).WithDetails(j), nil
	}
	return toolbus.TextResult(fmt.Sprintf("Job %s is being stopped; job_status shows when it has.", j.ID)).WithDetails(j), nil
}

func formatDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return d.Truncate(time.Second).String()
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
