package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/schedule"
)

// The jobs and schedules commands read the records the bus keeps (bus.BucketJobs,
// bus.BucketSchedules) and stop a job or remove a schedule through the category's own
// tool (job_cancel, schedule_cancel) on the record's agent's behalf: one way to do it,
// whoever asks, and no more permissions than calling a tool.

const jobsAbout = "Lists, shows and cancels the background jobs of the bus: turns an agent's main\n" +
	"turns started with job_start (docs/background.md). They live on the\n" +
	"bus: every command needs -server (or NATS_URL).\n" +
	"  toolbus jobs list [-agent A] [-json]   newest first\n" +
	"  toolbus jobs show [-json] JOB          its record, final text included\n" +
	"  toolbus jobs cancel [-reason R] JOB    through the jobs category's job_cancel"

func cmdJobs(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, e, "jobs", "list|show|cancel [flags] [JOB]", jobsAbout, "list, show, cancel", subcommands{
		"list": jobsList, "ls": jobsList, "show": jobsShow, "cancel": jobsCancel,
	}, args, stdout, stderr)
}

const schedulesAbout = "Lists, shows and removes the schedules of the bus: turns an agent's main turns\n" +
	"scheduled with schedule_create, fired by JetStream message schedules in the turn\n" +
	"intake (docs/background.md). They live on the bus: every command needs\n" +
	"-server (or NATS_URL).\n" +
	"  toolbus schedules list [-agent A] [-json]   oldest first\n" +
	"  toolbus schedules show [-json] SCHEDULE\n" +
	"  toolbus schedules rm SCHEDULE               through the schedule category's schedule_cancel"

func cmdSchedules(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, e, "schedules", "list|show|rm [flags] [SCHEDULE]", schedulesAbout, "list, show, rm", subcommands{
		"list": schedulesList, "ls": schedulesList, "show": schedulesShow,
		"rm": schedulesRm, "delete": schedulesRm, "remove": schedulesRm,
	}, args, stdout, stderr)
}

// subcommands are a command's subcommands, by name and by alias.
type subcommands map[string]func(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error

// dispatch runs the subcommand args start with; want names the subcommands in its usage
// errors. -h before one prints the command's usage.
func dispatch(ctx context.Context, e *env, name, synopsis, about, want string, subs subcommands, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs := newFlagSet(name, synopsis, about, stderr)
		// The group has no flags of its own: its usage names the subcommands instead.
		fs.Usage = func() {
			fmt.Fprintf(fs.Output(), "Usage: toolbus %s %s\n\n%s\n\n", name, synopsis, about)
			if ex := examples[name]; ex != "" {
				fmt.Fprintf(fs.Output(), "Example:\n  %s\n\n", ex)
			}
			fmt.Fprintf(fs.Output(), "Subcommands: %s.\nRun 'toolbus %s SUBCOMMAND -h' for a subcommand's flags.\n", want, name)
		}
		if _, err := parseArgs(fs, args); err != nil {
			return err
		}
		return usagef("want a subcommand: %s", want)
	}
	run, ok := subs[args[0]]
	if !ok {
		return usagef("unknown subcommand %q: want %s", args[0], want)
	}
	return run(ctx, e, args[1:], stdout, stderr)
}

// recordFlags are the flags of the subcommands that read records.
type recordFlags struct {
	bf     busFlags
	agent  string
	asJSON bool
}

// parseRecordCmd parses a subcommand's flags and wants ids positional arguments (0 or
// 1); withAgent adds -agent, withJSON -json.
func parseRecordCmd(e *env, name, synopsis, about string, args []string, stderr io.Writer, ids int, withAgent, withJSON bool) (recordFlags, []string, error) {
	var f recordFlags
	fs := newFlagSet(name, synopsis, about, stderr)
	f.bf.register(fs, e)
	if withAgent {
		fs.StringVar(&f.agent, "agent", "", "only this agent's")
	}
	if withJSON {
		fs.BoolVar(&f.asJSON, "json", false, "print the records as JSON")
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return f, nil, err
	}
	switch {
	case ids == 0 && len(pos) > 0:
		return f, nil, usagef("unexpected arguments %q", pos)
	case ids == 1 && len(pos) != 1:
		return f, nil, usagef("want one id")
	case ids == 1 && !bus.ValidID(pos[0]):
		return f, nil, usagef("%q is not an id", pos[0])
	}
	if f.agent != "" {
		if err := checkAgentArg(f.agent); err != nil {
			return f, nil, err
		}
	}
	return f, pos, nil
}

func printJSON(stdout io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

// recordKind is one kind of record the bus keeps in a bucket, as the list, show and
// removal subcommands read it.
type recordKind[T any] struct {
	noun, plural string
	list         func(c *client.Client, ctx context.Context, agent string) ([]T, error)
	find         func(c *client.Client, ctx context.Context, id string) (T, error)
	notFound     error  // find's error for no such record
	gone         string // why a record may be missing, after "no job X on this bus"
}

var (
	jobRecords = recordKind[jobs.Job]{noun: "job", plural: "jobs",
		list: (*client.Client).Jobs, find: (*client.Client).Job, notFound: jobs.ErrNotFound,
		gone: " (an ended job is kept only for its agent's keep time)"}
	scheduleRecords = recordKind[schedule.Schedule]{noun: "schedule", plural: "schedules",
		list: (*client.Client).Schedules, find: (*client.Client).Schedule, notFound: schedule.ErrNotFound}
)

// listCmd runs `<plural> list`: the records, as JSON or as a table of header and row's lines.
func (k recordKind[T]) listCmd(ctx context.Context, e *env, args []string, stdout, stderr io.Writer, about, header string, row func(r *T, now time.Time) string) error {
	f, _, err := parseRecordCmd(e, k.plural+" list", "[flags]", about, args, stderr, 0, true, true)
	if err != nil {
		return err
	}
	nc, err := f.bf.dialFor(ctx, k.plural+" list")
	if err != nil {
		return err
	}
	defer nc.Close()
	all, err := k.list(client.New(nc), ctx, f.agent)
	if err != nil {
		return fmt.Errorf("%s: %w", k.plural, err)
	}
	if f.asJSON {
		if all == nil {
			all = []T{}
		}
		return printJSON(stdout, all)
	}
	if len(all) == 0 {
		fmt.Fprintln(stderr, "no "+k.plural)
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for i := range all {
		fmt.Fprintln(tw, row(&all[i], now))
	}
	return tw.Flush()
}

// showCmd runs `<plural> show`: the record as JSON, or print's table of it.
func (k recordKind[T]) showCmd(ctx context.Context, e *env, args []string, stdout, stderr io.Writer, about string, print func(r *T, line func(name, value string)) string) error {
	f, pos, err := parseRecordCmd(e, k.plural+" show", "[flags] "+strings.ToUpper(k.noun), about, args, stderr, 1, false, true)
	if err != nil {
		return err
	}
	nc, err := f.bf.dialFor(ctx, k.plural+" show")
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := k.findOn(ctx, nc, pos[0])
	if err != nil {
		return err
	}
	if f.asJSON {
		return printJSON(stdout, r)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	text := print(&r, func(name, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s\t%s\n", name, value)
		}
	})
	if err := tw.Flush(); err != nil {
		return err
	}
	if text != "" {
		fmt.Fprintf(stdout, "\n%s\n", strings.TrimRight(text, "\n"))
	}
	return nil
}

// findOn reads one record of the bus by id.
func (k recordKind[T]) findOn(ctx context.Context, nc *nats.Conn, id string) (T, error) {
	r, err := k.find(client.New(nc), ctx, id)
	switch {
	case errors.Is(err, client.ErrNoRecords):
		return r, fmt.Errorf("no %s %s on this bus (it has no %s)", k.noun, id, k.plural)
	case errors.Is(err, k.notFound):
		return r, fmt.Errorf("no %s %s on this bus%s", k.noun, id, k.gone)
	case err != nil:
		return r, fmt.Errorf("%s: %w", k.plural, err)
	}
	return r, nil
}

func jobsList(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	return jobRecords.listCmd(ctx, e, args, stdout, stderr,
		"Lists the background jobs kept on the bus, newest first: those running and those ended\nwithin their agents' keep time.",
		"JOB\tAGENT\tSTATE\tNODE\tSTEPS\tAGE\tPARENT\tPROMPT",
		func(j *jobs.Job, now time.Time) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s", j.ID, j.Agent, j.State, dash(j.Node), j.Steps,
				formatElapsed(now.Sub(j.Created)), j.Parent, truncate(j.Prompt, 40))
		})
}

func jobsShow(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	return jobRecords.showCmd(ctx, e, args, stdout, stderr, "Shows a background job: where it stands or how it ended, its calls, and its final text.",
		func(j *jobs.Job, line func(string, string)) string {
			line("job", j.ID)
			line("agent", j.Agent)
			line("parent turn", j.Parent)
			line("state", string(j.State))
			line("node", j.Node)
			line("created", stamp(j.Created))
			line("started", stamp(j.Started))
			line("ended", stamp(j.Ended))
			line("kept until", stamp(j.Expires))
			if j.State.Ended() {
				line("steps", fmt.Sprint(j.Steps))
				line("calls", j.Summary())
			}
			line("error", firstLineOf(j.Error))
			line("prompt", truncate(j.Prompt, 100))
			return j.Text
		})
}

func jobsCancel(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("jobs cancel", "[flags] JOB",
		"Cancels a background job through the jobs category's job_cancel, on its agent's\n"+
			"behalf: a queued job never starts, a running one is stopped (the command waits a\n"+
			"few seconds for it to end).", stderr)
	var bf busFlags
	bf.register(fs, e)
	reason := fs.String("reason", "cancelled from the command line", "why, as the job's record will say")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || !bus.ValidID(pos[0]) {
		return usagef("want one job id")
	}
	nc, err := bf.dialFor(ctx, "jobs cancel")
	if err != nil {
		return err
	}
	defer nc.Close()
	j, err := jobRecords.findOn(ctx, nc, pos[0])
	if err != nil {
		return err
	}
	text, err := client.New(nc).CancelJob(ctx, j.ID, *reason)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, text)
	return nil
}

func schedulesList(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	return scheduleRecords.listCmd(ctx, e, args, stdout, stderr,
		"Lists the schedules of the bus, oldest first, with their next firing.",
		"SCHEDULE\tAGENT\tWHEN\tNEXT\tFIRED\tSKIPPED\tLAST TURN\tPROMPT",
		func(s *schedule.Schedule, now time.Time) string {
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s", s.ID, s.Agent, s.When(), nextOf(s, now), s.Fired, s.Skipped,
				dash(s.LastTurn), truncate(s.Prompt, 40))
		})
}

// nextOf is a schedule's next firing, in its zone.
func nextOf(s *schedule.Schedule, now time.Time) string {
	next, ok := s.Next(now)
	if !ok {
		return "-"
	}
	if loc, err := time.LoadLocation(s.TimeZone); err == nil && s.TimeZone != "" {
		return next.In(loc).Format(time.RFC3339)
	}
	return next.UTC().Format(time.RFC3339)
}

func schedulesShow(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	return scheduleRecords.showCmd(ctx, e, args, stdout, stderr, "Shows a schedule: when it fires, what it asks, and how its firings went.",
		func(s *schedule.Schedule, line func(string, string)) string {
			line("schedule", s.ID)
			line("agent", s.Agent)
			line("when", s.When())
			line("pattern", s.Pattern)
			line("next", nextOf(s, time.Now()))
			line("created", stamp(s.Created)+" by turn "+s.CreatedBy)
			line("fired", fmt.Sprint(s.Fired))
			line("last turn", s.LastTurn)
			line("last fired", stamp(s.LastFired))
			line("skipped", fmt.Sprint(s.Skipped))
			line("last skip", s.LastSkip)
			line("prompt", s.Prompt)
			line("instructions", truncate(s.Instructions, 100))
			return ""
		})
}

func schedulesRm(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	f, pos, err := parseRecordCmd(e, "schedules rm", "[flags] SCHEDULE",
		"Removes a schedule through the schedule category's schedule_cancel, on its agent's\n"+
			"behalf: it fires no more; a turn it started keeps running.", args, stderr, 1, false, false)
	if err != nil {
		return err
	}
	nc, err := f.bf.dialFor(ctx, "schedules rm")
	if err != nil {
		return err
	}
	defer nc.Close()
	s, err := scheduleRecords.findOn(ctx, nc, pos[0])
	if err != nil {
		return err
	}
	text, err := client.New(nc).RemoveSchedule(ctx, s.ID)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, text)
	return nil
}

// stamp is a time for people, UTC; "" for none.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
