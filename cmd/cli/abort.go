package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"

	"github.com/toolbus/toolbus/internal/label"
)

func cmdAbort(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("abort", "-server URL [flags] TURN",
		"Asks a turn on a running bus to stop: it calls the model no more, starts no\n"+
			"new call and cancels the calls in flight. Then waits for the turn's final status.\n"+
			"A turn the bus has no record of (one run outside the intake) counts as unknown\n"+
			"unless it ends within -wait; an unknown or ended turn exits with status 1.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var (
		reason = fs.String("reason", "aborted from the command line", "why, as the turn records it")
		wait   = fs.Duration("wait", client.AbortGrace+3*time.Second, "how long to wait for the turn to confirm; 0 does not wait")
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if bf.server == "" {
		return usagef("abort needs -server (or NATS_URL): an embedded bus lives only as long as its own `run`, where Ctrl-C aborts the turn")
	}
	if len(pos) != 1 {
		return usagef("want one turn id")
	}
	turn := pos[0]
	if !bus.ValidToken(turn) {
		return usagef("%q is not a turn id", turn)
	}
	cl, err := bf.clientFor(ctx, "abort")
	if err != nil {
		return err
	}
	defer cl.Close()

	rec, err := cl.Record(ctx, turn)
	if err != nil {
		return err
	}
	if rec != nil && rec.State.Ended() {
		return fmt.Errorf("turn %s has ended (%s)", turn, rec.State)
	}
	w, err := cl.Watch(turn)
	if err != nil {
		return fmt.Errorf("abort %s: %w", turn, err)
	}
	defer w.Stop()
	if err := cl.Abort(ctx, turn, *reason); err != nil {
		return err
	}
	if *wait <= 0 {
		if rec == nil {
			return fmt.Errorf("no turn %s on this bus (no record of it; abort sent in case it runs outside the intake)", turn)
		}
		fmt.Fprintf(stdout, "abort sent to turn %s\n", turn)
		return nil
	}
	st, err := waitDone(ctx, w, *wait)
	if err != nil {
		if rec == nil {
			return fmt.Errorf("no turn %s on this bus (no record of it, and no turn answered the abort within %s)", turn, *wait)
		}
		fmt.Fprintf(stdout, "abort sent to turn %s; it did not end within %s\n", turn, *wait)
		return nil
	}
	fmt.Fprintf(stdout, "turn %s %s after %s\n", turn, endedAs(st), label.Plural(st.Step, "step"))
	for _, c := range st.Calls {
		if c.Outcome != bus.OutcomeOK {
			fmt.Fprintf(stdout, "  %s %s: %s\n", c.Tool, c.Outcome, indentRest(c.Error))
		}
	}
	return nil
}

// waitDone waits up to wait for the done status of the turn w watches.
func waitDone(ctx context.Context, w *client.Watch, wait time.Duration) (bus.TurnStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return bus.TurnStatus{}, ctx.Err()
		case m := <-w.C:
			if m.Status != nil && m.Subject.Status == bus.StatusDone {
				return *m.Status, nil
			}
		}
	}
}
