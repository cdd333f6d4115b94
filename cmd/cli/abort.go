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
			"With -call, cancels that one call and the turn goes on: a call not yet sent\n"+
			"does not start, a running one is stopped by its host; then waits for the\n"+
			"call's outcome. A turn the bus has no record of (one run outside the intake)\n"+
			"counts as unknown unless it ends within -wait; an unknown or ended turn exits\n"+
			"with status 1.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var (
		reason = fs.String("reason", "aborted from the command line", "why, as the turn records it")
		wait   = fs.Duration("wait", client.AbortGrace+3*time.Second, "how long to wait for the turn to confirm; 0 does not wait")
		call   = fs.String("call", "", "cancel only this `call` (its id as the turn's records or events show it); the turn goes on")
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
	if *call != "" {
		if !bus.ValidToken(*call) {
			return usagef("%q is not a call id", *call)
		}
		return cancelCall(ctx, cl, w, turn, *call, *reason, *wait, stdout)
	}
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

// cancelCall cancels one call of a turn and waits up to wait for its outcome, which comes
// with its batch (the turn's step status) or the turn's end.
func cancelCall(ctx context.Context, cl *client.Client, w *client.Watch, turn, call, reason string, wait time.Duration, stdout io.Writer) error {
	if err := cl.CancelCall(ctx, turn, call, reason); err != nil {
		return err
	}
	if wait <= 0 {
		fmt.Fprintf(stdout, "cancel sent to call %s of turn %s\n", call, turn)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintf(stdout, "cancel sent to call %s of turn %s; its outcome did not come within %s (it comes with its batch)\n", call, turn, wait)
			return nil
		case m := <-w.C:
			if m.Status == nil {
				continue
			}
			for _, c := range m.Status.Calls {
				if c.Call == call {
					fmt.Fprintf(stdout, "call %s (%s) of turn %s: %s", call, c.Tool, turn, c.Outcome)
					if c.Error != "" {
						fmt.Fprintf(stdout, ": %s", indentRest(c.Error))
					}
					fmt.Fprintln(stdout)
					return nil
				}
			}
			if m.Subject.Status == bus.StatusDone {
				return fmt.Errorf("turn %s ended (%s) with no call %s", turn, m.Status.State, call)
			}
		}
	}
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
