package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
)

// A call's path through its host: begin takes it from the micro handler, work runs it
// on a worker (Config.Go), run checks and executes it and publishes its events, reply
// answers it (through the object store when large) and keeps the reply (resend.go).

// hostCall is a tool request taken from the micro handler.
type hostCall struct {
	tool  *toolbus.Tool
	req   micro.Request
	trace string // the request's traceparent, passed on with the call's events
	vouch string // the request's Toolbus-Vouch
	// payload names the object that holds the arguments (Toolbus-Payload), when they were
	// too large for the message.
	payload bus.PayloadRef
	tel     CallSpan // its span on this node, and its count; nil: none
	turn    string   // the request's Toolbus-Turn
	conn    uint64   // Host.connGen when the request came: see keep

	// What running it takes, in the same allocation (begin, work, run): the call as the
	// tool sees it, the host and the contexts it runs under. One object a call where the
	// closures of begin and run, the call and the reply they captured made six.
	h              *Host
	call           toolbus.Call
	st             *endpointStats
	ctx            context.Context
	cancel         context.CancelCauseFunc
	cancelDeadline context.CancelFunc
}

// begin registers a call and starts it on its own goroutine.
func (h *Host) begin(m *hostCall) {
	req, badHeader := bus.ParseToolRequest(nats.Header(m.req.Headers()))
	m.trace, m.vouch, m.payload, m.turn, m.conn = req.Traceparent, req.Vouch, req.Payload, req.Turn, h.connGen.Load()
	if h.cfg.Telemetry != nil {
		m.tel = h.cfg.Telemetry.StartCall(req.Traceparent, CallInfo{Category: h.cfg.Category, Tool: m.tool.Name, ID: req.Call, Turn: req.Turn, Node: h.cfg.Node})
	}
	m.call = toolbus.Call{Turn: req.Turn, ID: req.Call, Tool: m.tool.Name, Agent: req.Agent, Task: req.Task}
	call := &m.call
	timeout := m.tool.Timeout
	if timeout <= 0 {
		timeout = h.cfg.DefaultTimeout
	}
	call.Deadline = time.Now().Add(timeout)
	if !req.Deadline.IsZero() && req.Deadline.Before(call.Deadline) {
		call.Deadline = req.Deadline
	}
	if call.ID == "" {
		call.ID = bus.NewID() // a direct request, e.g. `nats req`
	}
	st := h.stats[m.tool.Name]
	m.h, m.st = h, st
	if badHeader != nil {
		st.errors.Add(1)
		h.replyCall(m, bus.ToolReply{Call: call.ID, Tool: call.Tool, Outcome: bus.OutcomeInvalid, Error: badHeader.Error()})
		return
	}
	// A turn refuses these itself; a direct request must not get past either.
	// Any Toolbus-Truncated but "false" counts (bus.ParseToolRequest).
	if req.Truncated && m.tool.Destructive {
		st.errors.Add(1)
		h.replyCall(m, bus.ToolReply{Call: call.ID, Tool: call.Tool, Outcome: bus.OutcomeInvalid,
			Error: "arguments were cut off (truncated); re-issue the call with the complete arguments"})
		return
	}
	// A request that waited out its deadline on the way (a slow route, a lost host's
	// redelivery) is not run: its caller has given up on it.
	if !req.Deadline.IsZero() && !req.Deadline.After(time.Now()) {
		st.errors.Add(1)
		h.replyCall(m, bus.ToolReply{Call: call.ID, Tool: call.Tool, Outcome: bus.OutcomeTimeout,
			Error: "deadline already past on arrival (" + bus.FormatDeadline(req.Deadline) + "); the tool did not run"})
		return
	}
	// Aborts cancel with their reason as the cause; the deadline sits below.
	actx, cancel := context.WithCancelCause(context.Background())
	cctx, cancelDeadline := context.WithDeadline(actx, call.Deadline)
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		cancelDeadline()
		cancel(nil)
		h.replyCall(m, bus.ToolReply{Call: call.ID, Tool: call.Tool, Outcome: bus.OutcomeUnavailable, Error: "the category host is stopping"})
		return
	}
	if call.Turn != "" {
		k := inflightKey{call.Turn, call.ID}
		if _, dup := h.inflight[k]; !dup {
			h.turns[call.Turn]++
		}
		h.inflight[k] = cancel
	}
	h.wg.Add(1)
	h.mu.Unlock()
	m.ctx, m.cancel, m.cancelDeadline = cctx, cancel, cancelDeadline
	h.cfg.Go(m.work)
}

// work runs a call begin registered, on a worker, and forgets it.
func (m *hostCall) work() {
	h, call := m.h, &m.call
	defer h.wg.Done()
	defer m.cancel(nil)
	defer m.cancelDeadline()
	if err := h.identify(m.ctx, call); err != nil {
		outcome := bus.OutcomeUnavailable
		if errors.Is(err, ErrAgentMismatch) {
			outcome = bus.OutcomeInvalid
		}
		m.st.errors.Add(1)
		h.replyCall(m, bus.ToolReply{Call: call.ID, Tool: call.Tool, Outcome: outcome, Error: err.Error()})
	} else {
		h.run(m.ctx, m)
	}
	if call.Turn != "" {
		h.mu.Lock()
		k := inflightKey{call.Turn, call.ID}
		if _, ok := h.inflight[k]; ok {
			delete(h.inflight, k)
			if h.turns[call.Turn]--; h.turns[call.Turn] <= 0 {
				delete(h.turns, call.Turn)
			}
		}
		h.mu.Unlock()
	}
}

// identify settles whose call it is (the turn's stored agent, see turnAgents) and so
// the home it runs in. The home never comes from the bus.
func (h *Host) identify(ctx context.Context, call *toolbus.Call) error {
	agent, err := h.agents.resolve(ctx, call.Turn, call.Agent)
	if err != nil {
		return err
	}
	call.Agent = agent
	switch {
	case h.cfg.Home != "":
		call.Home = h.cfg.Home
	case h.cfg.HomeRoot != "":
		if agent == "" {
			agent = "default"
		}
		call.Home = filepath.Join(h.cfg.HomeRoot, agent)
	}
	return nil
}

// run executes one call and replies. It never panics.
func (h *Host) run(ctx context.Context, m *hostCall) {
	tool, call := m.tool, &m.call
	st := m.st
	reply := bus.ToolReply{Call: call.ID, Tool: tool.Name}

	args := m.req.Data()
	if !m.payload.IsZero() {
		// Too large for the message: the turn stored them in the object store.
		var outcome bus.Outcome
		if args, outcome, reply.Error = h.arguments(ctx, tool, m.payload); reply.Error != "" {
			reply.Outcome = outcome
			st.errors.Add(1)
			h.replyCall(m, reply)
			return
		}
	}
	if len(args) == 0 {
		args = []byte("{}")
	}
	// Anyone on the bus can publish here: validate again, and never repair; unless a
	// turn of this deployment vouches for these exact arguments against this schema.
	if !h.cfg.Voucher.Vouched(m.vouch, h.cfg.Category, tool.Name, tool.Params.Sum(), args) {
		if err := tool.Params.Validate(args); err != nil {
			reply.Outcome, reply.Error = bus.OutcomeInvalid, "invalid arguments for "+tool.Name+": "+err.Error()
			st.errors.Add(1)
			h.replyCall(m, reply)
			return
		}
	}
	call.Args = args

	// A free slot is taken without asking for ctx.Done, which makes the context a channel
	// (an allocation, and a close when the call ends) that a call that never waits for
	// it does not need.
	select {
	case h.slots <- struct{}{}:
	default:
		select {
		case h.slots <- struct{}{}:
		case <-ctx.Done():
			reply.Outcome, reply.Error = h.cancelOutcome(ctx), "cancelled while waiting for an execution slot: "+context.Cause(ctx).Error()
			st.errors.Add(1)
			h.replyCall(m, reply)
			return
		}
	}
	defer func() { <-h.slots }()

	call.Progress = m.progress
	m.emit(bus.EventStarted, func() string { return tool.ActivityLabel(args) })

	st.inflight.Add(1)
	start := time.Now()
	res, err, panicked := execute(ctx, tool, *call)
	reply.Duration = time.Since(start)
	st.inflight.Add(-1)
	st.nanos.Add(int64(reply.Duration))
	if ctx.Err() != nil {
		// An abort wakes every call of the turn at once. Let the others see
		// their cancellation (and stop their work) before this one spends
		// the processor on its reply.
		runtime.Gosched()
	}

	switch {
	case panicked != nil:
		h.log.Error("tool panicked", "tool", tool.Name, "turn", call.Turn, "call", call.ID, "panic", panicked.value, "stack", string(panicked.stack))
		reply.Outcome, reply.Error = bus.OutcomePanic, fmt.Sprintf("tool %s failed internally: %v", tool.Name, panicked.value)
	case ctx.Err() != nil:
		// Whatever execute returned, its context ended first: say why.
		reply.Outcome = h.cancelOutcome(ctx)
		if ta, ok := errors.AsType[*turnAborted](context.Cause(ctx)); ok {
			reply.Abort = &ta.abort
		}
		reply.Error = "call " + string(reply.Outcome) + ": " + context.Cause(ctx).Error()
		if err != nil {
			reply.Error += " (" + err.Error() + ")"
		}
		fillReply(&reply, call.Turn, res)
	case err != nil:
		reply.Outcome, reply.Error = bus.OutcomeError, err.Error()
		fillReply(&reply, call.Turn, res)
	default:
		reply.Outcome = bus.OutcomeOK
		if res.IsError {
			reply.Outcome = bus.OutcomeError
		}
		fillReply(&reply, call.Turn, res)
	}
	if reply.Outcome == bus.OutcomeOK {
		st.ok.Add(1)
	} else {
		st.errors.Add(1)
	}
	reply.Label = completedLabel(tool, args, res, reply)
	// The caller waits for the reply, not for the event: reply first.
	h.replyCall(m, reply)
	// The presentation events travel in the reply for the turn, and on the
	// event subject for whoever watches the turn.
	for _, ev := range reply.Events {
		m.publish(ev, nil)
	}
	m.emit(bus.EventCompleted, func() string { return reply.Label })
}

// progress is the call's toolbus.Call.Progress: a progress event.
func (m *hostCall) progress(label string) {
	m.emit(bus.EventProgress, func() string { return label })
}

// emit sends an event of a kind of the call; label makes its label (publish).
func (m *hostCall) emit(kind bus.EventKind, label func() string) {
	m.publish(bus.Event{Turn: m.call.Turn, Call: m.call.ID, Tool: m.tool.Name, Kind: kind, Time: time.Now()}, label)
}

// publish sends an event of the call on its event subject, for watchers; label makes its
// label, only when someone is to receive it (a label decodes the arguments).
func (m *hostCall) publish(ev bus.Event, label func() string) {
	h, call := m.h, &m.call
	if call.Turn == "" {
		return
	}
	kind := ev.Kind
	subject := bus.EventSubject(call.Turn, call.ID, kind)
	if h.cfg.Interest != nil && !h.cfg.Interest(subject) {
		return // nobody watches this turn
	}
	if label != nil {
		ev.Label = label()
	}
	b, err := ev.AppendJSON(make([]byte, 0, 256))
	if err == nil {
		msg := &nats.Msg{Subject: subject, Data: b}
		if m.trace != "" {
			msg.Header = nats.Header{bus.HeaderTraceparent: {m.trace}}
		}
		err = h.cfg.Conn.PublishMsg(msg)
	}
	if err != nil {
		h.log.Warn("publish event", "turn", call.Turn, "call", call.ID, "kind", kind, "err", err)
	}
}

// arguments reads a call's arguments from the object store (bus.HeaderPayload); on failure
// the outcome and error of the reply instead.
func (h *Host) arguments(ctx context.Context, tool *toolbus.Tool, ref bus.PayloadRef) ([]byte, bus.Outcome, string) {
	if ref.Bucket != bus.ObjectPayloads {
		return nil, bus.OutcomeInvalid, fmt.Sprintf("the arguments of %s are in object store %q; a host reads them only from %s", tool.Name, ref.Bucket, bus.ObjectPayloads)
	}
	if ref.Size > bus.MaxCallPayload {
		return nil, bus.OutcomeInvalid, bus.ArgsTooLarge(tool.Name, ref.Size)
	}
	p, err := h.payloads()
	if err == nil {
		var args []byte
		if args, err = p.Get(ctx, ref); err == nil {
			return args, "", ""
		}
	}
	outcome := bus.OutcomeUnavailable
	if errors.Is(err, bus.ErrPayloadMissing) || errors.Is(err, bus.ErrPayloadMismatch) {
		outcome = bus.OutcomeInvalid
	}
	if ctx.Err() != nil {
		outcome = h.cancelOutcome(ctx)
	}
	return nil, outcome, fmt.Sprintf("could not read the arguments of %s (%s) from the object store: %v; the tool did not run", tool.Name, bus.FormatBytes(ref.Size), err)
}

// payloads is the host's store of large payloads: the node's, or one of its own
// connection.
func (h *Host) payloads() (*bus.Payloads, error) {
	if h.cfg.Payloads != nil {
		return h.cfg.Payloads, nil
	}
	h.payloadsMu.Lock()
	defer h.payloadsMu.Unlock()
	if h.payloadsOf == nil {
		js, err := jetstream.New(h.cfg.Conn)
		if err != nil {
			return nil, err
		}
		h.payloadsOf = bus.NewPayloads(js, 1)
	}
	return h.payloadsOf, nil
}

// cancelOutcome tells a deadline from an abort.
func (h *Host) cancelOutcome(ctx context.Context) bus.Outcome {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return bus.OutcomeTimeout
	}
	return bus.OutcomeStopped
}

func completedLabel(t *toolbus.Tool, args json.RawMessage, res toolbus.Result, reply bus.ToolReply) string {
	if reply.Outcome == bus.OutcomePanic {
		return t.ActivityLabel(args) + " (failed)"
	}
	if reply.Outcome != bus.OutcomeOK && !res.IsError {
		// Tell the label the outcome: an error returned by Execute, a timeout or a
		// stop is a failed call too, whatever result came with it.
		res.IsError = true
		if len(res.Content) == 0 {
			res.Content = []toolbus.ContentPart{toolbus.Text(reply.Error)}
		}
	}
	label := t.CompletedLabel(args, res)
	if reply.Outcome != bus.OutcomeOK {
		label += " (" + string(reply.Outcome) + ")"
	}
	return label
}

type panicValue struct {
	value any
	stack []byte
}

// execute runs the tool, turning a panic into a value.
func execute(ctx context.Context, t *toolbus.Tool, call toolbus.Call) (res toolbus.Result, err error, p *panicValue) {
	defer func() {
		if r := recover(); r != nil {
			p = &panicValue{value: r, stack: debug.Stack()}
		}
	}()
	res, err = t.Execute(ctx, call)
	return res, err, nil
}

// replyCall replies to a call and ends its telemetry.
func (h *Host) replyCall(m *hostCall, reply bus.ToolReply) {
	h.reply(m, reply)
	if m.tel != nil {
		m.tel.End(string(reply.Outcome), reply.Error)
	}
}

func (h *Host) reply(m *hostCall, reply bus.ToolReply) {
	r := m.req
	if r.Reply() == "" {
		return // published without a reply subject: nobody to tell
	}
	b, err := reply.AppendJSON(make([]byte, 0, 256))
	if err != nil {
		b, _ = json.Marshal(bus.ToolReply{Call: reply.Call, Tool: reply.Tool, Outcome: bus.OutcomeError, Error: "encode reply: " + err.Error()})
	}
	// A reply too large for a message goes through the object store, up to what a call
	// may carry; past that, or if it cannot be stored, the caller is told instead of
	// waiting for its deadline. (Tools that produce more cap their own output, as
	// run_command and read_file do.)
	var opts []micro.RespondOpt
	var payload string
	if limit := bus.InlineLimit(h.cfg.Conn.MaxPayload()); len(b) > limit {
		b, payload = h.largeReply(reply, b)
		if payload != "" {
			opts = []micro.RespondOpt{func(m *nats.Msg) {
				if m.Header == nil {
					m.Header = nats.Header{}
				}
				m.Header[bus.HeaderPayload] = []string{payload}
			}}
		}
	}
	h.keep(m, reply, b, payload)
	if err := r.Respond(b, opts...); err != nil {
		h.log.Warn("reply", "tool", reply.Tool, "call", reply.Call, "err", err)
	}
}

// largeReply is what a host sends for an encoded reply too large for a message: the
// reply stored in the object store, up to what a call may carry, and a message that names
// it (bus.PayloadNote, with the reference for bus.HeaderPayload); past that, or if it
// cannot be stored, an error reply that says so.
func (h *Host) largeReply(reply bus.ToolReply, b []byte) ([]byte, string) {
	why := fmt.Sprintf("over the %s a call may carry", bus.FormatBytes(bus.MaxCallPayload))
	if len(b) <= bus.MaxCallPayload {
		ref, err := h.storeReply(reply, b)
		if err == nil {
			return bus.PayloadNote, ref.String()
		}
		h.log.Warn("store a large reply", "tool", reply.Tool, "call", reply.Call, "size", len(b), "err", err)
		why = fmt.Sprintf("more than a message carries, and it could not be stored: %v", err)
	}
	out, _ := json.Marshal(bus.ToolReply{
		Call: reply.Call, Tool: reply.Tool, Outcome: bus.OutcomeError, Duration: reply.Duration, Label: reply.Label,
		Error: fmt.Sprintf("tool %s produced a result of %s, %s; the result was dropped: ask for less output", reply.Tool, bus.FormatBytes(int64(len(b))), why),
	})
	return out, ""
}

// storeReply stores an encoded reply too large for a message in bus.ObjectPayloads; the
// turn that reads it deletes it.
func (h *Host) storeReply(reply bus.ToolReply, b []byte) (bus.PayloadRef, error) {
	p, err := h.payloads()
	if err != nil {
		return bus.PayloadRef{}, err
	}
	ctx, cancel := bus.WithPayloadTimeout(context.Background())
	defer cancel()
	return p.Put(ctx, bus.ObjectPayloads, bus.PayloadName(reply.Call, "reply"), b)
}

// fillReply copies a result into a reply.
func fillReply(reply *bus.ToolReply, turn string, res toolbus.Result) {
	reply.Content = res.Content
	reply.Details = res.Details
	reply.Terminate = res.Terminate
	now := time.Now()
	for _, e := range res.Events {
		reply.Events = append(reply.Events, bus.Event{Turn: turn, Call: reply.Call, Tool: reply.Tool, Kind: bus.EventPresentation, Label: e.Label, Data: e.Data, Time: now})
	}
	if c := res.Completion; c != nil {
		reply.Completion = &bus.Event{Turn: turn, Call: reply.Call, Tool: reply.Tool, Kind: bus.EventCompleted, Label: c.Label, Data: c.Data, Time: now}
	}
}
