package actors

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors/batch"
	"github.com/toolbus/toolbus/bus"
)

// A call on the bus: its request to the category's hosts (by reference when large),
// the replies and what else the turn receives on its subjects.

// send publishes a call's request to its category: arguments too large for a message go
// to the object store first, off the mailbox (sendLarge).
func (t *turn) send(pc *pendingCall, timeout time.Duration) {
	deadline := pc.deadline
	req := bus.ToolRequest{
		Turn: t.cfg.Spec.ID, Call: pc.wireID, Agent: t.cfg.Spec.Agent, Task: t.cfg.Spec.Task,
		Deadline:    deadline,
		Traceparent: t.traceparent(pc),
		Truncated:   pc.record.Truncated,
		Vouch:       t.vouch(pc),
	}
	var err error
	if len(pc.args) > bus.InlineLimit(t.cfg.Conn.MaxPayload()) {
		err = t.sendLarge(pc, req)
	} else {
		// Built here, not by request: the message, its subjects and headers stay on the
		// stack of the common call.
		m := &nats.Msg{
			Subject: bus.ToolSubject(pc.tool.Category, pc.tool.Name),
			Reply:   bus.ResultSubject(t.cfg.Spec.ID, pc.wireID),
			Data:    pc.args,
			Header:  make(nats.Header, 8),
		}
		req.SetHeaders(m.Header)
		err = t.cfg.Conn.PublishMsg(m)
	}
	if err != nil {
		// Within schedule's loop, which moves the batch on.
		t.settled(pc, bus.OutcomeUnavailable, fmt.Sprintf("dispatch %s: %v", pc.tool.Name, err), toolbus.Result{})
		return
	}
	pc.expires = deadline.Add(replyGrace)
	t.armExpiry(pc.expires)
}

// request is a call's request message, with req's headers (as send builds it).
func (t *turn) request(pc *pendingCall, req bus.ToolRequest) *nats.Msg {
	m := &nats.Msg{
		Subject: bus.ToolSubject(pc.tool.Category, pc.tool.Name),
		Reply:   bus.ResultSubject(t.cfg.Spec.ID, pc.wireID),
		Data:    pc.args,
		Header:  make(nats.Header, 8),
	}
	req.SetHeaders(m.Header)
	return m
}

// sendLarge stores a call's arguments, too large for a message, in the object store and
// then publishes its request with their reference (req.Payload), on a goroutine: the call
// counts as running from now, and largeSent says how it went. An abort or the call's
// deadline stops it before the request goes out.
func (t *turn) sendLarge(pc *pendingCall, req bus.ToolRequest) error {
	p, err := t.payloads()
	if err != nil {
		return err
	}
	m := t.request(pc, req)
	ctx, nc, sys, self := t.modelCtx, t.cfg.Conn, t.sys, t.self
	name := bus.PayloadName(t.cfg.Spec.ID, pc.wireID, "args")
	go func() {
		ctx, cancel := context.WithDeadline(ctx, req.Deadline)
		defer cancel()
		ref, err := p.Offload(ctx, m, bus.ObjectPayloads, name, -1)
		if err == nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err == nil {
			err = nc.PublishMsg(m)
		}
		sys.Root.Send(self, &largeSent{pc: pc, ref: ref, err: err})
	}()
	return nil
}

// onLargeSent settles a call whose arguments could not be stored or sent by reference.
func (t *turn) onLargeSent(m *largeSent) {
	pc := m.pc
	if !m.ref.IsZero() {
		pc.argsRef = m.ref
	}
	if t.over() || t.byWire[pc.wireID] != pc || t.state(pc) != batch.Running {
		t.deleteArgs(pc) // settled meanwhile (an abort, the turn's end)
		return
	}
	if m.err == nil {
		return
	}
	if errors.Is(m.err, context.Canceled) || t.phase == phaseAborting {
		t.settle(pc, bus.OutcomeNotStarted, fmt.Sprintf("call not started: the turn was aborted while the %s of arguments were stored", bus.FormatBytes(int64(len(pc.args)))), toolbus.Result{})
		return
	}
	t.settle(pc, bus.OutcomeUnavailable, fmt.Sprintf("dispatch %s: its %s of arguments could not be sent through the object store: %v",
		pc.tool.Name, bus.FormatBytes(int64(len(pc.args))), m.err), toolbus.Result{})
}

// deleteArgs deletes, off the mailbox, the object that held a settled call's arguments.
func (t *turn) deleteArgs(pc *pendingCall) {
	ref := pc.argsRef
	if ref.IsZero() {
		return
	}
	pc.argsRef = bus.PayloadRef{}
	t.deletePayload(ref)
}

// deletePayload deletes a payload of ObjectPayloads off the mailbox; one that stays
// expires after bus.PayloadTTL.
func (t *turn) deletePayload(ref bus.PayloadRef) {
	p, log := t.pl, t.log
	if p == nil {
		return
	}
	go func() {
		ctx, cancel := bus.WithPayloadTimeout(context.Background())
		defer cancel()
		if err := p.Delete(ctx, ref); err != nil {
			log.Info("delete a call's payload (it expires on its own)", "object", ref.Name, "err", err)
		}
	}()
}

// payloads is the turn's store of large payloads, opened on first use.
func (t *turn) payloads() (*bus.Payloads, error) {
	if t.pl != nil {
		return t.pl, nil
	}
	switch {
	case t.cfg.payloads != nil:
		t.pl = t.cfg.payloads
	case t.cfg.JS != nil:
		t.pl = bus.NewPayloads(t.cfg.JS, 1)
	default:
		js, err := jetstream.New(t.cfg.Conn)
		if err != nil {
			return nil, err
		}
		t.pl = bus.NewPayloads(js, 1)
	}
	return t.pl, nil
}

// traceparent is a new call's W3C trace context: its execute_tool span's when the turn
// traces, else the turn's trace id and a span id of its own.
func (t *turn) traceparent(pc *pendingCall) string {
	if tp := pc.span.Traceparent(); tp != "" {
		return tp
	}
	// Written into one buffer: one allocation for the string, where concatenating the
	// span id's hex made two.
	var b [64]byte
	s := append(b[:0], "00-"...)
	s = append(s, t.trace...)
	s = append(s, '-')
	s = appendSpanID(s)
	if t.cfg.sampled {
		s = append(s, "-01"...)
	} else {
		s = append(s, "-00"...)
	}
	return string(s)
}

// vouch is the turn's vouch for a call's validated arguments, or "" without a key.
func (t *turn) vouch(pc *pendingCall) string {
	return t.cfg.voucher.Vouch(pc.tool.Category, pc.tool.Name, pc.tool.Params.Sum(), pc.args)
}

func (t *turn) onMsg(m *nats.Msg) {
	tm, err := bus.DecodeTurnMessage(m)
	if tm.Subject.Turn != t.cfg.Spec.ID {
		return
	}
	switch tm.Subject.Kind {
	case bus.KindAbort:
		if tm.Abort != nil && tm.Abort.Call != "" {
			t.cancelCall(tm.Abort) // one call; the turn goes on
			return
		}
		t.abort(tm.Abort) // a malformed abort still aborts, with no reason
	case bus.KindResult:
		t.onResult(tm, err)
	case bus.KindApprove:
		t.onApprove(tm.Subject.Call, m, tm.Approve, err)
	}
}

func (t *turn) onResult(tm bus.TurnMessage, err error) {
	pc := t.byWire[tm.Subject.Call]
	if pc == nil || t.state(pc) != batch.Running {
		return // late or duplicate reply
	}
	switch {
	case tm.NoResponders:
		if t.cfg.Unavailable != nil {
			t.cfg.Unavailable(pc.tool.Category)
		}
		t.settle(pc, bus.OutcomeUnavailable, fmt.Sprintf(
			"tool %s is unavailable: no host serves category %q (no responders)", pc.tool.QualifiedName(), pc.tool.Category), toolbus.Result{})
	case tm.Payload != nil:
		// Too large for a message: the host stored the reply in the object store.
		t.fetchReply(pc, *tm.Payload)
	default:
		t.onReply(pc, tm.Reply, err)
	}
}

// fetchReply reads a reply sent by reference off the mailbox, and deletes it; replyFetched
// brings it back.
func (t *turn) fetchReply(pc *pendingCall, ref bus.PayloadRef) {
	p, err := t.payloads()
	if err != nil {
		t.settle(pc, bus.OutcomeError, fmt.Sprintf("tool %s sent its reply through the object store, which this turn cannot open: %v", pc.tool.Name, err), toolbus.Result{})
		return
	}
	sys, self := t.sys, t.self
	go func() {
		ctx, cancel := bus.WithPayloadTimeout(context.Background())
		defer cancel()
		data, err := p.Get(ctx, ref)
		sys.Root.Send(self, &replyFetched{pc: pc, ref: ref, data: data, err: err})
		_ = p.Delete(ctx, ref) // read once; one that stays expires after bus.PayloadTTL
	}()
}

func (t *turn) onReplyFetched(m *replyFetched) {
	pc := m.pc
	if t.over() || t.byWire[pc.wireID] != pc || t.state(pc) != batch.Running {
		return // expired or abandoned meanwhile
	}
	if m.err != nil {
		t.settle(pc, bus.OutcomeError, fmt.Sprintf("the reply of tool %s (%s) could not be read from the object store: %v", pc.tool.Name, bus.FormatBytes(m.ref.Size), m.err), toolbus.Result{})
		return
	}
	r, err := bus.DecodeReplyBody(m.data)
	t.onReply(pc, r, err)
}

// onReply settles a call with its host's reply, as bus.DecodeReplyBody read it.
func (t *turn) onReply(pc *pendingCall, r *bus.ToolReply, err error) {
	if err != nil {
		t.settle(pc, bus.OutcomeError, fmt.Sprintf("tool %s sent a malformed reply", pc.tool.Name), toolbus.Result{})
		return
	}
	if r.Abort != nil && r.Abort.Turn == t.cfg.Spec.ID && r.Abort.Call == "" && t.phase != phaseAborting {
		// The host stopped the call for this turn's abort, which the reply overtook:
		// the turn is aborted from here, as if the abort had come first.
		t.abort(r.Abort)
	}
	res := toolbus.Result{
		Content:   r.Content,
		Details:   r.Details,
		Terminate: r.Terminate,
		IsError:   r.Outcome != bus.OutcomeOK,
	}
	pc.record.Duration = r.Duration
	pc.record.Label = r.Label
	pc.record.Details = r.Details
	if r.Completion != nil && r.Completion.Label != "" {
		pc.record.Label = r.Completion.Label
	}
	t.settle(pc, r.Outcome, r.Error, res)
}

// appendSpanID appends a call's span id in hex when no span was started for it (untraced): random
// and never zero, as W3C Trace Context asks, from the runtime's generator, as
// OpenTelemetry's own ID generator does. crypto/rand cost a system call per call for an
// id that is no secret.
func appendSpanID(dst []byte) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], mrand.Uint64()|1)
	return hex.AppendEncode(dst, b[:])
}
