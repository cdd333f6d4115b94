package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/internal/label"
	"github.com/toolbus/toolbus/schema"
)

type listArgs struct{}

type cancelArgs struct {
	ID string `json:"schedule_id" jsonschema:"minLength=1,maxLength=128" jsonschema_description:"The id schedule_create or schedule_list gave."`
}

// specs are the tools' specs; Tools adds the functions.
func specs(minInterval time.Duration) []*toolbus.Spec {
	return []*toolbus.Spec{
		{
			Name: "schedule_create",
			Description: "Schedule a turn of yours for later: once at a time, every interval, or on a cron schedule in a time zone. " +
				"Each time it fires, a new turn starts with the prompt as its user message, with your tools. " +
				fmt.Sprintf("Firings are at least %s apart. ", minInterval) +
				"If the turn it started last is still running when it fires again, that firing is skipped (or queued, as your profile says).",
			Mode:     toolbus.Sequential,
			Category: Category,
			Params:   schema.MustFor[CreateArgs](),
		},
		{
			Name:        "schedule_list",
			Description: "List your schedules: when each fires next, how often it has fired, and the turn it started last.",
			Mode:        toolbus.Parallel,
			ReadOnly:    true,
			Category:    Category,
			Params:      schema.MustFor[listArgs](),
		},
		{
			Name:        "schedule_cancel",
			Description: "Cancel one of your schedules: it fires no more. A turn it already started keeps running.",
			Mode:        toolbus.Sequential,
			Destructive: true,
			Category:    Category,
			Params:      schema.MustFor[cancelArgs](),
		},
	}
}

// Specs returns the specs of the schedule tools, in the order the model sees them;
// minInterval is the node's (zero: DefaultMinInterval).
func Specs(minInterval time.Duration) []*toolbus.Spec {
	if minInterval == 0 {
		minInterval = DefaultMinInterval
	}
	return specs(minInterval)
}

// Tools returns schedule_create, schedule_list and schedule_cancel over s. policy reads
// an agent's policy: schedule_create refuses an agent whose profile does not enable
// schedules (the others work on what exists).
func Tools(s *Store, policy func(ctx context.Context, agent string) (Policy, error)) []*toolbus.Tool {
	specs := specs(s.MinInterval())
	t := tools{s: s, policy: policy}
	return []*toolbus.Tool{
		toolbus.MustDefine(toolbus.Def[CreateArgs]{
			Spec:             *specs[0],
			DescribeActivity: func(CreateArgs) string { return "Creating a schedule" },
			DescribeCompletedActivity: func(a CreateArgs, res toolbus.Result) string {
				return label.Completed(res.IsError, "Scheduled: "+label.Truncate(a.Prompt, 60), "create the schedule")
			},
			Execute: t.create,
		}),
		toolbus.MustDefine(toolbus.Def[listArgs]{
			Spec:             *specs[1],
			DescribeActivity: func(listArgs) string { return "Listing schedules" },
			DescribeCompletedActivity: func(_ listArgs, res toolbus.Result) string {
				return label.Completed(res.IsError, "Listed the schedules", "list the schedules")
			},
			Execute: t.list,
		}),
		toolbus.MustDefine(toolbus.Def[cancelArgs]{
			Spec:             *specs[2],
			DescribeActivity: func(a cancelArgs) string { return "Cancelling schedule " + a.ID },
			DescribeCompletedActivity: func(a cancelArgs, res toolbus.Result) string {
				return label.Completed(res.IsError, "Cancelled schedule "+a.ID, "cancel schedule "+a.ID)
			},
			Execute: t.cancel,
		}),
	}
}

type tools struct {
	s      *Store
	policy func(ctx context.Context, agent string) (Policy, error)
}

var errNoAgent = errors.New("this call carries no agent id, and schedules belong to an agent")

func (t tools) create(ctx context.Context, call toolbus.Call, a CreateArgs) (toolbus.Result, error) {
	if call.Agent == "" {
		return toolbus.Result{}, errNoAgent
	}
	p, err := t.policy(ctx, call.Agent)
	if err != nil {
		return toolbus.Result{}, err
	}
	if !p.Enabled {
		return toolbus.Result{}, fmt.Errorf("agent %s may not create schedules: its profile does not enable them (schedules.enabled)", call.Agent)
	}
	sch, err := t.s.Create(ctx, call.Agent, call.Turn, a)
	if err != nil {
		return toolbus.Result{}, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Created schedule %s: %s.", sch.ID, sch.When())
	if sch.Kind == KindCron && strings.Join(strings.Fields(a.Cron), " ") != sch.Cron {
		fmt.Fprintf(&b, " (Read as the six-field cron %q.)", sch.Cron)
	}
	fmt.Fprintf(&b, " It fires first at %s.", formatIn(sch.First, sch.TimeZone))
	overlap := p.Overlap
	if overlap == "" {
		overlap = OverlapSkip
	}
	if sch.Kind != KindAt {
		fmt.Fprintf(&b, " A firing while its last turn still runs is %s.", map[string]string{OverlapSkip: "skipped", OverlapQueue: "queued until that turn ends"}[overlap])
	}
	return toolbus.TextResult(b.String()).WithDetails(sch), nil
}

func (t tools) list(ctx context.Context, call toolbus.Call, _ listArgs) (toolbus.Result, error) {
	if call.Agent == "" {
		return toolbus.Result{}, errNoAgent
	}
	all, err := t.s.List(ctx, call.Agent)
	if err != nil {
		return toolbus.Result{}, err
	}
	if len(all) == 0 {
		return toolbus.TextResult("You have no schedules.").WithDetails(all), nil
	}
	now := time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "Your schedules (%d):", len(all))
	for _, s := range all {
		fmt.Fprintf(&b, "\n- %s: %s; %q", s.ID, s.When(), label.Truncate(s.Prompt, 80))
		if next, ok := s.Next(now); ok {
			fmt.Fprintf(&b, "; next %s", formatIn(next, s.TimeZone))
		} else {
			b.WriteString("; fires no more")
		}
		fmt.Fprintf(&b, "; fired %d×", s.Fired)
		if s.LastTurn != "" {
			fmt.Fprintf(&b, " (last turn %s)", s.LastTurn)
		}
		if s.Skipped > 0 {
			fmt.Fprintf(&b, ", skipped %d×", s.Skipped)
		}
	}
	return toolbus.TextResult(b.String()).WithDetails(all), nil
}

func (t tools) cancel(ctx context.Context, call toolbus.Call, a cancelArgs) (toolbus.Result, error) {
	if call.Agent == "" {
		return toolbus.Result{}, errNoAgent
	}
	sch, err := t.s.Cancel(ctx, call.Agent, a.ID)
	if errors.Is(err, ErrNotFound) {
		return toolbus.Result{}, fmt.Errorf("you have no schedule %s (schedule_list shows yours)", a.ID)
	}
	if err != nil {
		return toolbus.Result{}, err
	}
	return toolbus.TextResult(fmt.Sprintf("Cancelled schedule %s (%s); it had fired %d×.", sch.ID, sch.When(), sch.Fired)).WithDetails(sch), nil
}

// formatIn renders t in the named zone (UTC when empty or unknown).
func formatIn(t time.Time, zone string) string {
	loc, err := loadZone(zone)
	if err != nil || loc == nil {
		loc = time.UTC
	}
	return t.In(loc).Format(time.RFC3339)
}
