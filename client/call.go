package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/internal/suggest"
	"github.com/toolbus/toolbus/schema"
)

// lookAgainQuiet is the quiet of Tool's second look for a name the first did not find.
const lookAgainQuiet = time.Second

// Tool looks up a tool served on the bus by its name (namespace.name for a namespaced
// one) in the bus's live catalog. A name nobody serves is catalog.ErrNotServed
// (errors.Is), its text naming the tools that are served.
func (c *Client) Tool(ctx context.Context, name string) (*toolbus.Spec, error) {
	var cat *catalog.Catalog
	// A host's answer can come more than the quiet after the others' on a loaded machine
	// (seen: toolbus call on an embedded node heard 2 of its 7 categories under
	// go test -race ./...), so a name missing from the first answers is looked up once
	// more, with a longer quiet, before it is refused: a mistyped name costs a second.
	for _, quiet := range []time.Duration{catalog.DefaultQuiet, lookAgainQuiet} {
		cat = catalog.New(c.nc, catalog.Options{Logger: c.log, Quiet: quiet})
		if err := cat.Refresh(ctx); err != nil {
			return nil, err
		}
		if spec, err := cat.Lookup(name); !errors.Is(err, catalog.ErrNotServed) {
			return spec, err
		}
	}
	served := servedNames(cat)
	list := strings.Join(served, ", ")
	if list == "" {
		list = "none"
	}
	return nil, &refusal{msg: fmt.Sprintf("unknown tool %q%s; the tools served on %s are: %s", name, suggest.DidYouMean(name, served), c.where, list), is: catalog.ErrNotServed}
}

// servedNames are the qualified names of the tools the catalog serves.
func servedNames(cat *catalog.Catalog) []string {
	var names []string
	for _, cs := range cat.Categories() {
		for _, s := range cs.Specs {
			names = append(names, s.QualifiedName())
		}
	}
	return names
}

// Args parses and validates raw, the JSON arguments of a call of tool, as a turn does
// (schema.Schema.Parse, with its repairs), for Call. Arguments over the most a call may
// carry (bus.MaxCallPayload) are refused before they are parsed. A refusal names the
// tool by its Name; ArgsAs names it as the caller gave it.
func Args(tool *toolbus.Spec, raw string) (schema.Args, error) {
	return ArgsAs(tool.Name, tool, raw)
}

// ArgsAs is Args for a tool a person named: its refusals say name, as typed
// (`toolbus call crm.add_note …` refuses "invalid arguments for crm.add_note"), so
// that two tools of one name in different namespaces are never confused in them.
func ArgsAs(name string, tool *toolbus.Spec, raw string) (schema.Args, error) {
	if err := checkArgsSize(name, len(raw)); err != nil {
		return schema.Args{}, err
	}
	args, err := tool.Params.Parse(raw, schema.ParseOptions{Destructive: tool.Destructive})
	if err != nil {
		return args, fmt.Errorf("invalid arguments for %s: %w", name, err)
	}
	return args, nil
}

// checkArgsSize refuses arguments of size bytes over bus.MaxCallPayload for the tool
// named name.
func checkArgsSize(name string, size int) error {
	if size > bus.MaxCallPayload {
		return fmt.Errorf("the arguments of %s are %s, over the %s a tool call may carry", name,
			bus.FormatBytes(int64(size)), bus.FormatBytes(bus.MaxCallPayload))
	}
	return nil
}

// Call sends one call of a tool and waits for its host's reply, as a turn's call goes:
// the arguments parsed and validated already (Args), the call's deadline
// the tool's timeout (bus.DefaultCallTimeout when it sets none). The call runs as a
// turn of its own: when ctx ends first, Call aborts it and returns the host's word on
// how it stopped. A host that says nothing within the deadline and bus.ReplyGrace gets
// a timeout reply, as a turn gives it. Arguments too large for one message go through
// the payload object store, as a turn sends them (docs/protocol.md §4); so does a
// large reply.
func (c *Client) Call(ctx context.Context, tool *toolbus.Spec, agent string, args schema.Args) (bus.ToolReply, error) {
	return c.CallWith(ctx, tool, agent, args, CallIDs{})
}

// CallIDs name a call Call sends: its turn and its id. Empty ones are new ids
// (bus.NewID). A caller that names them can watch the call's events and answer its
// approval subjects before it is sent; calls sent under one turn (an MCP session's) are
// stopped one by one (CancelCall) when their ctx ends, not by aborting the turn.
type CallIDs struct{ Turn, Call string }

// CallWith is Call with the call's turn and id given.
func (c *Client) CallWith(ctx context.Context, tool *toolbus.Spec, agent string, args schema.Args, ids CallIDs) (bus.ToolReply, error) {
	timeout := tool.Timeout
	if timeout <= 0 {
		timeout = bus.DefaultCallTimeout
	}
	turn, call := ids.Turn, ids.Call
	ownTurn := turn == ""
	if ownTurn {
		turn = bus.NewID()
	}
	if call == "" {
		call = bus.NewID()
	}
	m := nats.NewMsg(bus.ToolSubject(tool.Category, tool.Name))
	m.Data = args.JSON
	bus.ToolRequest{
		Turn: turn, Call: call, Agent: agent,
		Deadline: time.Now().Add(timeout), Truncated: args.Truncated,
	}.SetHeaders(m.Header)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+bus.ReplyGrace)
	defer cancel()
	if size, limit := len(m.Data), bus.InlineLimit(c.nc.MaxPayload()); size > limit {
		if err := checkArgsSize(tool.Name, size); err != nil {
			return bus.ToolReply{}, err
		}
		ref, err := c.offload(rctx, m, bus.PayloadName(turn, call, "args"))
		if err != nil {
			return bus.ToolReply{}, fmt.Errorf("the arguments of %s are %s, more than the %s the bus carries in one message (%s max_payload), "+
				"and could not be stored in the payload object store %s, through which larger ones go: %w", tool.Name,
				bus.FormatBytes(int64(size)), bus.FormatBytes(int64(limit)), bus.FormatBytes(c.nc.MaxPayload()), bus.ObjectPayloads, err)
		}
		defer c.deletePayload(ref)
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			// The host cancels the call and replies how it stopped. Should the
			// abort not get out, the call's deadline still ends it.
			if ownTurn {
				_ = c.Abort(context.Background(), turn, "interrupted")
			} else {
				_ = c.CancelCall(context.Background(), turn, call, "interrupted")
			}
		case <-rctx.Done():
		}
	}()
	// The reply goes to the call's result subject, as a turn's does: a host keeps it
	// there, and sends it again when asked (protocol.md §14), should this connection
	// be re-established before it arrives or the host say it may be lost.
	m.Reply = bus.ResultSubject(turn, call)
	resend := &nats.Msg{
		Subject: bus.ResendSubject(tool.Category, tool.Name), Reply: m.Reply,
		Header: nats.Header{bus.HeaderTurn: {turn}, bus.HeaderCall: {call}},
	}
	resp, lost, err := c.ask(rctx, m, asking{resend: resend, lostOn: bus.EventSubject(turn, call, bus.EventReplyLost)})
	cancel()
	<-watched
	switch {
	case errors.Is(err, ErrRefused):
		return bus.ToolReply{}, fmt.Errorf("call %s: %w", tool.Name, err)
	case errors.Is(err, nats.ErrNoResponders):
		return bus.ToolReply{}, fmt.Errorf("no host serves the %s category on %s: start a node with -categories %s", tool.Category, c.where, tool.Category)
	case errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("tool %s did not answer before its deadline", tool.Name)
		if lost {
			msg += bus.AnswerMayBeLost
		}
		return bus.ToolReply{Call: call, Tool: tool.Name, Outcome: bus.OutcomeTimeout, Error: msg}, nil
	case err != nil:
		return bus.ToolReply{}, fmt.Errorf("call %s: %w", tool.Name, err)
	}
	body := resp.Data
	if _, ok, _ := bus.PayloadOf(resp.Header); ok {
		// The host stored a reply too large for a message.
		p, err := c.payloadStore()
		var ref bus.PayloadRef
		if err == nil {
			rctx, cancel := bus.WithPayloadTimeout(context.WithoutCancel(ctx))
			body, ref, err = p.Resolve(rctx, resp.Header, resp.Data, bus.ObjectPayloads, bus.MaxCallPayload)
			cancel()
		}
		if err != nil {
			return bus.ToolReply{}, fmt.Errorf("call %s: the host sent its reply through the payload object store %s, which could not be read: %w", tool.Name, bus.ObjectPayloads, err)
		}
		defer c.deletePayload(ref)
	}
	reply, err := bus.DecodeReplyBody(body)
	if err != nil {
		return bus.ToolReply{}, fmt.Errorf("call %s: malformed reply from the host: %.200q", tool.Name, body)
	}
	return *reply, nil
}

// offload stores a request's arguments in the payload object store, m then carrying
// their reference.
func (c *Client) offload(ctx context.Context, m *nats.Msg, name string) (bus.PayloadRef, error) {
	p, err := c.payloadStore()
	if err != nil {
		return bus.PayloadRef{}, err
	}
	ctx, cancel := bus.WithPayloadTimeout(ctx)
	defer cancel()
	return p.Offload(ctx, m, bus.ObjectPayloads, name, -1)
}

// deletePayload deletes a call's payload once the call is over; one left behind
// expires on its own (bus.PayloadTTL).
func (c *Client) deletePayload(ref bus.PayloadRef) {
	p, err := c.payloadStore()
	if err != nil || ref.IsZero() {
		return
	}
	ctx, cancel := bus.WithPayloadTimeout(context.Background())
	defer cancel()
	_ = p.Delete(ctx, ref)
}
