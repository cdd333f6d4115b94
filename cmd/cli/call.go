package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets"
)

func cmdCall(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("call", "[flags] TOOL [JSON]",
		"Calls one tool through the bus, as a turn would: the tool's spec comes from the\n"+
			"catalog of the bus, so any category served there can be called (name a\n"+
			"namespaced tool as namespace.tool); the arguments go through the tool's repair\n"+
			"ladder and schema first, then one request goes to the tool's category host.\n"+
			"Without -server the host is an embedded node working in -home. Ctrl-C stops\n"+
			"the call.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var (
		agent   = fs.String("agent", defaultAgent, "call as this agent: it selects the agent's home under a node's home root, and its todo list")
		home    = fs.String("home", ".", "embedded node: the agent home, where the file and command tools work")
		asJSON  = fs.Bool("json", false, "print the tool's reply envelope (bus.ToolReply) as JSON")
		sandbox = sandboxFlag(fs)
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || len(pos) > 2 {
		return usagef("want a tool name and its arguments as one JSON argument")
	}
	for _, f := range []string{"home", "sandbox"} {
		if bf.server != "" && flagsSet(fs)[f] {
			return usagef("-%s configures the embedded node; with -server the remote node uses its own", f)
		}
	}
	if err := checkAgent(*agent); err != nil {
		return err
	}
	name, raw := pos[0], ""
	if len(pos) == 2 {
		raw = pos[1]
	}

	bc, err := connect(ctx, bf, embedOptions{home: *home, sandbox: *sandbox}, newLogger(stderr))
	if err != nil {
		return err
	}
	defer bc.Close()
	tool, err := bc.cl.Tool(ctx, name)
	if err != nil {
		return err
	}
	if note := gatingNote(ctx, bc.nc, *agent, tool); note != "" {
		fmt.Fprintln(stderr, "toolbus: note:", note)
	}
	// The refusal names the tool as given (crm.add_note), not by its bare name.
	parsed, err := client.ArgsAs(name, tool, raw)
	if err != nil {
		return err
	}
	if rungs := repairRungs(rungNames(parsed.Rungs)); len(rungs) > 0 {
		fmt.Fprintf(stderr, "arguments repaired (%s): %s\n", strings.Join(rungs, ", "), parsed.JSON)
	}
	reply, err := bc.cl.Call(ctx, tool, *agent, parsed)
	if err != nil {
		return err
	}

	interrupted := ctx.Err() != nil
	if *asJSON {
		b, err := json.MarshalIndent(reply, "", "  ")
		if err != nil {
			return fmt.Errorf("encode reply: %w", err)
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		res := toolbus.Result{Content: reply.Content, Details: reply.Details, IsError: reply.Outcome != bus.OutcomeOK}
		if text := res.Text(); text != "" {
			fmt.Fprint(stdout, text)
			if !strings.HasSuffix(text, "\n") {
				fmt.Fprintln(stdout)
			}
		}
		mark := "✓"
		if reply.Outcome != bus.OutcomeOK {
			mark = "✗"
		}
		label := cmp.Or(reply.Label, tool.QualifiedName())
		if reply.Completion != nil && reply.Completion.Label != "" {
			label = reply.Completion.Label
		}
		fmt.Fprintf(stderr, "%s %s (%s)\n", mark, label, formatElapsed(reply.Duration))
	}
	switch {
	case interrupted:
		return &exitError{code: exitInterrupted, err: fmt.Errorf("%s %s: %s", name, reply.Outcome, reply.Error)}
	case reply.Outcome != bus.OutcomeOK && reply.Error == "":
		// An error result: its text is the output printed above.
		return &exitError{code: exitFailed, err: fmt.Errorf("%s: %s (the tool's message is above)", name, reply.Outcome)}
	case reply.Outcome != bus.OutcomeOK:
		return &exitError{code: exitFailed, err: fmt.Errorf("%s: %s: %s", name, reply.Outcome, reply.Error)}
	}
	return nil
}

// gatingNote says, when the agent's main turns would not have the tool, that call runs
// it anyway: a direct call skips the profile's gating. A profile that cannot be read
// gives no note; the call does not depend on it.
func gatingNote(ctx context.Context, nc *nats.Conn, agent string, tool *toolbus.Spec) string {
	profile, err := readProfile(ctx, nc, agent)
	if err != nil || toolsets.Includes(bus.TurnMain, profile, tool) {
		return ""
	}
	what := "the " + tool.Category + " category"
	switch {
	case toolsets.Builtin(tool.Category):
	case tool.Namespace != "":
		what = "namespace " + tool.Namespace
	default:
		what = "category " + tool.Category
	}
	why := "its profile leaves out " + what
	if profile == nil {
		why = "it has no profile, so not " + what
	}
	return fmt.Sprintf("agent %s's turns would not have %s (%s); call runs it anyway: a direct call skips the profile's gating", agent, tool.QualifiedName(), why)
}

func rungNames(rungs []schema.Rung) []string {
	out := make([]string, len(rungs))
	for i, r := range rungs {
		out[i] = string(r)
	}
	return out
}
