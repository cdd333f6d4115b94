package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

func cmdTurns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("turns", "[flags]",
		"Lists the durable turns of a running bus, newest first: each with its state, the node\n"+
			"that runs it, its step and its age. A turn queued or running whose node is gone shows\n"+
			"here until a node takes it; `toolbus resume ID` queues one again.", stderr)
	var bf busFlags
	bf.register(fs)
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
	nc, err := bf.dialFor(ctx, "turns")
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := turnStore(ctx, nc)
	if err != nil {
		return err
	}
	recs, err := store.List(ctx)
	if err != nil {
		return err
	}
	for i, r := range recs {
		if r.State == bus.TurnRunning {
			// The record is written at the claim and the end: a running turn's step
			// is its transcript's.
			if live, err := store.Live(ctx, r.Spec.ID); err == nil {
				recs[i] = live
			}
		}
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

func cmdResume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("resume", "[flags] TURN",
		"Queues a turn again whose node was lost while no node could take it over (it was\n"+
			"started on a node that went down for good). A node that runs turns resumes it from its\n"+
			"transcript, as after a node failure. A turn that has ended, or whose node still beats,\n"+
			"is refused.", stderr)
	var bf busFlags
	bf.register(fs)
	listen := fs.Duration("listen", 6*time.Second, "how long to listen for the turn's heartbeat first: a turn whose node beats is running, not lost")
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
	nc, err := bf.dialFor(ctx, "resume")
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := turnStore(ctx, nc)
	if err != nil {
		return err
	}
	rec, _, err := store.Record(ctx, id)
	if errors.Is(err, durable.ErrNoRecord) {
		return fmt.Errorf("no turn %s on this bus", id)
	}
	if err != nil {
		return fmt.Errorf("read turn %s: %w", id, err)
	}
	if rec.State.Ended() {
		return fmt.Errorf("turn %s has ended (%s): nothing to resume", id, rec.State)
	}
	// A node that drives the turn beats three times a lease: queueing the turn again
	// would have two nodes drive it.
	beats, err := nc.SubscribeSync(bus.TurnStatusSubject(id, bus.StatusBeat))
	if err != nil {
		return err
	}
	defer func() { _ = beats.Unsubscribe() }()
	if m, err := beats.NextMsg(*listen); err == nil {
		var st bus.TurnStatus
		_ = json.Unmarshal(m.Data, &st)
		return fmt.Errorf("turn %s is running on node %s (it beats): nothing to resume", id, st.Node)
	}
	if rec, err = store.Requeue(ctx, id); err != nil {
		return fmt.Errorf("queue turn %s: %w", id, err)
	}
	fmt.Fprintf(stderr, "turn %s queued again (it was %s%s at step %d); follow it with toolbus watch\n", id, rec.State, ownerNote(rec.Owner), rec.Step)
	return nil
}

func ownerNote(owner string) string { return durable.OwnerNote(owner) }

// turnRecord reads a turn's record; nil when the bus has none (no durable turns, or
// no record: the turn is unknown, or runs outside the intake).
func turnRecord(ctx context.Context, nc *nats.Conn, id string) (*bus.TurnRecord, error) {
	store, err := turnStore(ctx, nc)
	if errors.Is(err, durable.ErrNoTurns) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec, _, err := store.Record(ctx, id)
	if errors.Is(err, durable.ErrNoRecord) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// turnStore opens the durable turns of the bus; a bus without any is durable.ErrNoTurns.
func turnStore(ctx context.Context, nc *nats.Conn) (*durable.Store, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	store, err := durable.Open(ctx, js, durable.Config{})
	if err != nil {
		return nil, err
	}
	if !store.HasTurns() {
		return nil, durable.ErrNoTurns
	}
	return store, nil
}

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
