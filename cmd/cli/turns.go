package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

func cmdTurns(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("turns", "[flags]",
		"Lists the durable turns of a running bus, newest first: each with its state, the node\n"+
			"that runs it, its step and its age. A turn queued or running whose node is gone shows\n"+
			"here until a node takes it; `toolbus resume ID` queues one again.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var (
		all   = fs.Bool("all", false, "list ended turns too (default: queued and running ones, and those ended in the last hour)")
		limit = fs.Int("n", 50, "list at most this many turns")
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments %q", pos)
	}
	cl, err := bf.clientFor(ctx, "turns")
	if err != nil {
		return err
	}
	defer cl.Close()
	recs, err := cl.Turns(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	recs = slices.DeleteFunc(recs, func(r bus.TurnRecord) bool {
		return !*all && r.State.Ended() && now.Sub(r.Updated) > time.Hour
	})
	if len(recs) > *limit {
		recs = recs[:*limit]
	}
	if len(recs) == 0 {
		fmt.Fprintln(stderr, "no turns")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TURN\tKIND\tAGENT\tSTATE\tNODE\tSTEP\tAGE\tUPDATED\tNOTE")
	for _, r := range recs {
		note := r.Error
		if n := len(r.Resumes); n > 0 && note == "" {
			last := r.Resumes[n-1]
			note = fmt.Sprintf("resumed %d× (last on %s: %s)", n, last.Node, last.Why)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s ago\t%s\n", r.Spec.ID, r.Spec.Kind, dash(r.Spec.Agent), r.State, dash(r.Owner), r.Step,
			formatElapsed(now.Sub(r.Created)), formatElapsed(now.Sub(r.Updated)), truncate(firstLineOf(note), 60))
	}
	return tw.Flush()
}

func cmdResume(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("resume", "[flags] TURN",
		"Queues a turn again whose node was lost while no node could take it over (it was\n"+
			"started on a node that went down for good). A node that runs turns resumes it from its\n"+
			"transcript, as after a node failure. A turn that has ended, or whose node still beats,\n"+
			"is refused. The session of an MCP client whose toolbus mcp no longer beats (killed\n"+
			"without ending it) cannot be resumed: its record is ended as failed.", stderr)
	var bf busFlags
	bf.register(fs, e)
	listen := fs.Duration("listen", 6*time.Second, "how long to listen for the turn's heartbeat first: a turn whose node beats is running, not lost (for an MCP session, 6s at least)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one turn id")
	}
	id := pos[0]
	if !bus.ValidID(id) {
		return usagef("%q is not a turn id", id)
	}
	cl, err := bf.clientFor(ctx, "resume")
	if err != nil {
		return err
	}
	defer cl.Close()
	rec, err := cl.Resume(ctx, id, *listen)
	if err != nil {
		return err
	}
	if rec.Spec.Kind == bus.TurnMCP {
		fmt.Fprintf(stderr, "turn %s is the session of an MCP client with %s, which no longer beats: its record is ended as %s at step %d (no node can resume a session)\n",
			id, rec.Owner, rec.State, rec.Step)
		return nil
	}
	fmt.Fprintf(stderr, "turn %s queued again (it was %s%s at step %d); follow it with toolbus watch\n", id, rec.State, ownerNote(rec.Owner), rec.Step)
	return nil
}

func ownerNote(owner string) string { return durable.OwnerNote(owner) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
