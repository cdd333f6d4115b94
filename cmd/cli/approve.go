package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

func cmdApprove(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("approve", "[flags] TURN CALL",
		"Approves a call that a turn holds for approval (the agent's profile asks for it), or\n"+
			"refuses it with -refuse. The call's tool and arguments are shown first; the decision\n"+
			"names those exact arguments, so it cannot approve others. `toolbus run` prints the\n"+
			"command to run when a call waits.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var (
		refuse = fs.Bool("refuse", false, "refuse the call: the model is told, and the tool does not run")
		reason = fs.String("reason", "", "with -refuse: why, for the model")
		by     = fs.String("by", e.getenv("USER"), "who decides, for the record")
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("want a turn id and a call id")
	}
	turn, call := pos[0], pos[1]
	if !bus.ValidID(turn) || !bus.ValidID(call) {
		return usagef("%q %q are not a turn id and a call id", turn, call)
	}
	cl, err := bf.clientFor(ctx, "approve")
	if err != nil {
		return err
	}
	defer cl.Close()
	r, err := cl.Approve(ctx, turn, call, bus.Approval{})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s\n", describeApproval(*r.Request))
	decision := bus.Approval{Decision: bus.ApprovalGrant, ArgsHash: r.Request.ArgsHash, By: *by}
	if *refuse {
		decision.Decision, decision.Reason = bus.ApprovalRefuse, *reason
	}
	if _, err := cl.Approve(ctx, turn, call, decision); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "call %s of turn %s %sd\n", call, turn, decision.Decision)
	return nil
}

// describeApproval is what a person sees before deciding.
func describeApproval(req bus.ApprovalRequest) string {
	name := req.Tool
	if req.Namespace != "" {
		name = req.Namespace + "." + req.Tool
	}
	effect := "changes things"
	if req.Destructive {
		effect = "destructive"
	}
	what := ""
	if req.Label != "" && req.Label != req.Tool {
		what = ": " + req.Label
	}
	return fmt.Sprintf("%s (%s)%s, with %s — held for approval until %s", name, effect, what, req.Args, req.Deadline.Local().Format("15:04:05"))
}

// approver answers the approval requests of the turn `run` follows: on a terminal it
// asks y/N; otherwise it says how to decide from another shell.
type approver struct {
	cl          *client.Client
	r           *renderer
	out         io.Writer // where the hint goes when the live view is off
	by          string    // who decides at the prompt: $USER
	interactive bool
	in          *bufio.Reader
	// server is the bus's URL (no credentials) for the hint's approve command; "" for
	// an embedded bus, which has no port another shell could reach.
	server string
}

// newApprover asks on e's standard input when it is a terminal: an *os.File (the
// process's os.Stdin, in main) whose descriptor is one. Any other reader, as the tests
// give, makes the approver print the hint instead.
func newApprover(e *env, cl *client.Client, r *renderer, out io.Writer, asJSON bool) *approver {
	a := &approver{cl: cl, r: r, out: out, by: e.getenv("USER")}
	f, ok := e.stdin.(*os.File)
	if !ok || asJSON {
		return a
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
		a.interactive, a.in = true, bufio.NewReader(f)
	}
	return a
}

// held shows one approval request; on a terminal it then reads the answer off the
// run loop (the renderer is the loop's alone) and sends the decision.
func (a *approver) held(ctx context.Context, req bus.ApprovalRequest) {
	if !a.interactive {
		line := fmt.Sprintf("waiting for approval: %s\n  approve: toolbus approve -server %s %s %s   refuse: add -refuse (with the -user and password of this run)",
			describeApproval(req), a.server, req.Turn, req.Call)
		if a.server == "" {
			// No other shell reaches an embedded bus: say what would have let it.
			line = fmt.Sprintf("waiting for approval: %s\n  the embedded bus has no port, so no other shell can approve it: run on a terminal to be asked here, or run the turn on a node (toolbus node -listen, then run -server) and approve with toolbus approve -server; Ctrl-C aborts the turn",
				describeApproval(req))
		}
		if a.r.w == io.Discard {
			fmt.Fprintln(a.out, line)
		} else {
			a.r.println(line)
		}
		return
	}
	a.r.println("approve " + describeApproval(req) + "? [y/N] ")
	go func() {
		answer, _ := a.in.ReadString('\n')
		decision := bus.Approval{Decision: bus.ApprovalRefuse, ArgsHash: req.ArgsHash, By: a.by, Reason: "refused at the prompt"}
		if s := strings.ToLower(strings.TrimSpace(answer)); s == "y" || s == "yes" {
			decision = bus.Approval{Decision: bus.ApprovalGrant, ArgsHash: req.ArgsHash, By: a.by}
		}
		if _, err := a.cl.Approve(ctx, req.Turn, req.Call, decision); err != nil {
			fmt.Fprintln(a.out, "toolbus: approval:", err)
		}
	}()
}
