package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/schema"
)

// replyGrace is how long past a call's deadline the command waits for the
// host, which enforces the deadline itself and then says so.
const replyGrace = 5 * time.Second

func cmdCall(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("call", "[flags] TOOL [JSON]",
		"Calls one tool through the bus, as a turn would: the tool's spec comes from the\n"+
			"catalog of the bus, so any category served there can be called (name a\n"+
			"namespaced tool as namespace.tool); the arguments go through the tool's repair\n"+
			"ladder and schema first, then one request goes to the tool's category host.\n"+
			"Without -server the host is an embedded node working in -home. Ctrl-C stops\n"+
			"the call.", stderr)
	var bf busFlags
	bf.register(fs)
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
	cat := catalog.New(bc.nc, catalog.Options{Logger: newLogger(stderr)})
	if err := cat.Refresh(ctx); err != nil {
		return err
	}
	tool, err := cat.Lookup(name)
	if errors.Is(err, catalog.ErrNotServed) {
		return fmt.Errorf("unknown tool %q; the tools served on %s are: %s", name, bc.where, strings.Join(servedNames(cat), ", "))
	}
	if err != nil {
		return err
	}
	parsed, err := tool.Params.Parse(raw, schema.ParseOptions{Destructive: tool.Destructive})
	if err != nil {
		return fmt.Errorf("invalid arguments for %s: %w", name, err)
	}
	if rungs := repairRungs(rungNames(parsed.Rungs)); len(rungs) > 0 {
		fmt.Fprintf(stderr, "arguments repaired (%s): %s\n", strings.Join(rungs, ", "), parsed.JSON)
	}
	reply, err := callTool(ctx, bc, tool, *agent, parsed)
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
		res := toolbus.Result{Content: toToolContent(reply.Content), Details: reply.Details, IsError: reply.Outcome != bus.OutcomeOK}
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

// callTool sends one tool request and waits for the host's reply. The call
// runs as a turn of its own, so a cancelled ctx can abort it like any turn's
// call; the reply then tells how it stopped.
func callTool(ctx context.Context, bc *busConn, tool *toolbus.Spec, agent string, args schema.Args) (bus.ToolReply, error) {
	timeout := tool.Timeout
	if timeout <= 0 {
		timeout = actors.DefaultCallTimeout
	}
	turn, call := bus.NewID(), bus.NewID()
	m := nats.NewMsg(bus.ToolSubject(tool.Category, tool.Name))
	m.Data = args.JSON
	bus.ToolRequest{
		Turn: turn, Call: call, Agent: agent,
		Deadline: time.Now().Add(timeout), Truncated: args.Truncated,
	}.SetHeaders(m.Header)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+replyGrace)
	defer cancel()
	// Arguments too large for one message go through the payload object store, as a
	// turn sends them (docs/protocol.md §4); so does a reply too large for one.
	payloads := sync.OnceValues(func() (*bus.Payloads, error) {
		js, err := jetstream.New(bc.nc)
		if err != nil {
			return nil, err
		}
		// A call's payload lives as long as the call: one replica is enough.
		return bus.NewPayloads(js, 1), nil
	})
	if size, limit := len(m.Data), bus.InlineLimit(bc.nc.MaxPayload()); size > limit {
		if size > bus.MaxCallPayload {
			return bus.ToolReply{}, fmt.Errorf("the arguments of %s are %s, over the %s a tool call may carry", tool.Name,
				bus.FormatBytes(int64(size)), bus.FormatBytes(bus.MaxCallPayload))
		}
		ref, err := offloadArgs(rctx, payloads, m, bus.PayloadName(turn, call, "args"))
		if err != nil {
			return bus.ToolReply{}, fmt.Errorf("the arguments of %s are %s, more than the %s the bus carries in one message (%s max_payload), "+
				"and could not be stored in the payload object store %s, through which larger ones go: %w", tool.Name,
				bus.FormatBytes(int64(size)), bus.FormatBytes(int64(limit)), bus.FormatBytes(bc.nc.MaxPayload()), bus.ObjectPayloads, err)
		}
		p, _ := payloads()
		defer deletePayload(p, ref)
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			// The host cancels the call and replies how it stopped. Should
			// the abort not get out, the call's deadline still ends it.
			_ = actors.Abort(bc.nc, turn, "interrupted")
		case <-rctx.Done():
		}
	}()
	resp, err := bc.nc.RequestMsgWithContext(rctx, m)
	cancel()
	<-watched
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return bus.ToolReply{}, fmt.Errorf("no host serves the %s category on %s: start a node with -categories %s", tool.Category, bc.where, tool.Category)
	case errors.Is(err, context.DeadlineExceeded):
		return bus.ToolReply{}, fmt.Errorf("%s: no reply within %s", tool.Name, timeout+replyGrace)
	case err != nil:
		return bus.ToolReply{}, fmt.Errorf("call %s: %w", tool.Name, err)
	}
	body := resp.Data
	if _, ok, _ := bus.PayloadOf(resp.Header); ok {
		// The host stored a reply too large for a message.
		p, err := payloads()
		var ref bus.PayloadRef
		if err == nil {
			body, ref, err = p.Resolve(rctx, resp.Header, resp.Data, bus.ObjectPayloads, bus.MaxCallPayload)
		}
		if err != nil {
			return bus.ToolReply{}, fmt.Errorf("call %s: the host sent its reply through the payload object store %s, which could not be read: %w", tool.Name, bus.ObjectPayloads, err)
		}
		defer deletePayload(p, ref)
	}
	var reply bus.ToolReply
	if err := json.Unmarshal(body, &reply); err != nil || !reply.Outcome.Valid() {
		return bus.ToolReply{}, fmt.Errorf("call %s: malformed reply from the host: %.200q", tool.Name, body)
	}
	return reply, nil
}

// offloadArgs stores a request's arguments in the payload object store, m then carrying
// their reference.
func offloadArgs(ctx context.Context, payloads func() (*bus.Payloads, error), m *nats.Msg, name string) (bus.PayloadRef, error) {
	p, err := payloads()
	if err != nil {
		return bus.PayloadRef{}, err
	}
	ctx, cancel := bus.WithPayloadTimeout(ctx)
	defer cancel()
	return p.Offload(ctx, m, bus.ObjectPayloads, name, -1)
}

// deletePayload deletes a call's payload once the call is over; one left behind expires
// on its own (bus.PayloadTTL).
func deletePayload(p *bus.Payloads, ref bus.PayloadRef) {
	if p == nil || ref.IsZero() {
		return
	}
	ctx, cancel := bus.WithPayloadTimeout(context.Background())
	defer cancel()
	_ = p.Delete(ctx, ref)
}

// servedNames lists the qualified names of the tools on the bus.
func servedNames(cat *catalog.Catalog) []string {
	var names []string
	for _, c := range cat.Categories() {
		for _, s := range c.Specs {
			names = append(names, s.QualifiedName())
		}
	}
	if len(names) == 0 {
		return []string{"none"}
	}
	return names
}

func rungNames(rungs []schema.Rung) []string {
	out := make([]string, len(rungs))
	for i, r := range rungs {
		out[i] = string(r)
	}
	return out
}

func toToolContent(parts []bus.ContentPart) []toolbus.ContentPart {
	out := make([]toolbus.ContentPart, len(parts))
	for i, p := range parts {
		out[i] = toolbus.ContentPart(p)
	}
	return out
}
