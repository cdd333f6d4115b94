package actors

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
)

// hold keeps a call that the agent's approval policy holds: it counts as in flight (a
// sequential one holds every call after it), its deadline runs, and the turn asks for a
// decision on the call's approval subject. An approval names the exact arguments it
// approves (their SHA-256); a decision for other arguments is turned down.
func (t *turn) hold(pc *pendingCall, timeout time.Duration) {
	sum := sha256.Sum256(pc.args)
	pc.held, pc.argsHash = true, hex.EncodeToString(sum[:])
	pc.state = callRunning
	t.running++
	t.seqRunning = pc.tool.Mode == toolbus.Sequential
	sys, self, id := t.sys, t.self, pc.wireID
	pc.timer = time.AfterFunc(timeout, func() { sys.Root.Send(self, &callExpired{wireID: id}) })
	b, err := json.Marshal(t.approvalRequest(pc))
	if err == nil {
		err = t.cfg.Conn.Publish(bus.ApprovalSubject(t.cfg.Spec.ID, pc.wireID), b)
	}
	if err != nil {
		t.log.Warn("publish approval request", "call", pc.wireID, "err", err)
	}
}

func (t *turn) approvalRequest(pc *pendingCall) bus.ApprovalRequest {
	return bus.ApprovalRequest{
		Turn: t.cfg.Spec.ID, Call: pc.wireID, Agent: t.cfg.Spec.Agent, Tool: pc.tool.Name, Namespace: pc.tool.Namespace,
		Args: pc.args, ArgsHash: pc.argsHash, Destructive: pc.tool.Destructive, ReadOnly: pc.tool.ReadOnly, Deadline: pc.deadline,
	}
}

// onApprove answers an operator: with the held call's request when asked, or by taking
// the decision.
func (t *turn) onApprove(wireID string, m *nats.Msg) {
	reply := func(r bus.ApprovalReply) {
		if m.Reply == "" {
			return
		}
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
	}
	pc := t.byWire[wireID]
	if pc == nil || !pc.held || pc.state != callRunning || t.aborted {
		reply(bus.ApprovalReply{Error: fmt.Sprintf("turn %s holds no call %s for approval", t.cfg.Spec.ID, wireID)})
		return
	}
	var a bus.Approval
	if err := json.Unmarshal(m.Data, &a); err != nil {
		reply(bus.ApprovalReply{Error: "malformed approval: " + err.Error()})
		return
	}
	req := t.approvalRequest(pc)
	switch a.Decision {
	case "":
		reply(bus.ApprovalReply{Request: &req})
		return
	case bus.ApprovalGrant, bus.ApprovalRefuse:
	default:
		reply(bus.ApprovalReply{Error: fmt.Sprintf("decision %q: want %s or %s", a.Decision, bus.ApprovalGrant, bus.ApprovalRefuse)})
		return
	}
	if a.ArgsHash != pc.argsHash {
		reply(bus.ApprovalReply{Request: &req, Error: "the decision is for other arguments than the call holds: look at them again and decide for these"})
		return
	}
	reply(bus.ApprovalReply{Request: &req})
	who := a.By
	if who == "" {
		who = "an operator"
	}
	if pc.timer != nil {
		pc.timer.Stop()
	}
	if a.Decision == bus.ApprovalRefuse {
		msg := fmt.Sprintf("call refused by %s before it ran", who)
		if a.Reason != "" {
			msg += ": " + a.Reason
		}
		t.settle(pc, bus.OutcomeRefused, msg, toolbus.Result{})
		return
	}
	pc.held, pc.approved = false, true
	t.running-- // send counts it again
	remaining := time.Until(pc.deadline)
	if remaining <= 0 {
		t.running++
		t.settle(pc, bus.OutcomeTimeout, fmt.Sprintf("tool %s was approved after its deadline; it did not run", pc.tool.QualifiedName()), toolbus.Result{})
		return
	}
	t.send(pc, remaining)
}
