package actors

import (
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/actors/batch"
	"github.com/toolbus/toolbus/bus"
)

// A host answers a call once, on the connection the request came in on; when its
// connection is re-established while a call runs, the reply may be lost, and the host
// says so (bus.EventReplyLost; package host keeps the replies it sent). The turn of a
// call still waiting then asks for the reply again on bus.ResendSubject. When the turn's
// own connection is re-established, a reply sent meanwhile is lost without the host
// knowing: the turn asks again for the replies of all its calls in flight.

// replyResentMessage is what a turn logs when it asks again for a reply a host said may be
// lost (host.Host keeps the replies it sent; bus.ResendSubject).
const replyResentMessage = "a host said the reply to a running call may be lost; asked for it again"

// askResend asks the hosts of a running call's category for its reply again, after one
// of them said it may be lost.
func (t *turn) askResend(call string) {
	pc := t.byWire[call]
	if pc == nil || t.state(pc) != batch.Running {
		return // answered meanwhile, or not this turn's
	}
	if t.resend(pc) {
		t.log.Info(replyResentMessage, "call", call, "tool", pc.tool.QualifiedName())
	}
}

// resend asks the hosts of pc's category for its reply again (bus.ResendSubject).
func (t *turn) resend(pc *pendingCall) bool {
	m := &nats.Msg{
		Subject: bus.ResendSubject(pc.tool.Category, pc.tool.Name),
		Reply:   bus.ResultSubject(t.cfg.Spec.ID, pc.wireID),
		Header:  nats.Header{bus.HeaderTurn: {t.cfg.Spec.ID}, bus.HeaderCall: {pc.wireID}},
	}
	if err := t.cfg.Conn.PublishMsg(m); err != nil {
		t.log.Warn("ask for a lost reply again", "call", pc.wireID, "err", err)
		return false
	}
	return true
}

// askResendAll asks again for the replies of the turn's calls in flight on the bus, its
// connection having been re-established: a host that answered one meanwhile sent its
// reply to the old connection. A host still running a call has no reply to send again,
// and answers it as it would have. Each is marked connLost, for the outcome it gets if
// no answer comes (onExpired).
func (t *turn) askResendAll() {
	n := 0
	for _, pc := range t.batch {
		if pc.local != nil || t.state(pc) != batch.Running || pc.expires.IsZero() {
			continue
		}
		pc.connLost = true
		if t.resend(pc) {
			n++
		}
	}
	if n > 0 {
		t.log.Info("the turn's connection to the bus was re-established; asked for the replies of its calls in flight again", "calls", n)
	}
}
