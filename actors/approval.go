package actors

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors/batch"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/telemetry"
)

// hold keeps a call that the agent's approval policy holds: it counts as in flight (a
// sequential one holds every call after it), its deadline runs, and the turn asks for a
// decision on the call's approval subject. An approval names the exact arguments it
// approves (their SHA-256); a decision for other arguments is turned down.
func (t *turn) hold(pc *pendingCall, timeout time.Duration) {
	sum := sha256.Sum256(pc.args)
	pc.argsHash = hex.EncodeToString(sum[:])
	sys, self, id := t.sys, t.self, pc.wireID
	pc.timer = time.AfterFunc(timeout, func() { sys.Root.Send(self, &callExpired{wireID: id}) })
	t.tel.Approval(pc.span, id, telemetry.ApprovalRequested, "")
	// The person deciding should see what the call would do in the host's own words; the
	// host answers that off the mailbox, and the request goes out with what it said.
	req, nc, log := t.approvalRequest(pc), t.cfg.Conn, t.log
	wait := min(describePatience, time.Until(pc.deadline))
	go func() {
		req.Label = askLabel(nc, pc.tool.Category, req.Tool, req.Args, wait)
		if req.Label != "" {
			sys.Root.Send(self, &callLabelled{wireID: id, label: req.Label})
		}
		b, err := json.Marshal(req)
		if err == nil {
			err = nc.Publish(bus.ApprovalSubject(req.Turn, req.Call), b)
		}
		if err != nil {
			log.Warn("publish approval request", "call", req.Call, "err", err)
		}
	}()
}

// describePatience bounds how long a held call's approval request waits for its host's
// label; past it the request goes out without one.
const describePatience = 2 * time.Second

// callLabelled gives a held call the label its host described it with.
type callLabelled struct {
	wireID, label string
}

// askLabel asks the tool's host for the call's activity label; "" when no host answers
// in time (a foreign host that does not describe, or none at all).
func askLabel(nc *nats.Conn, category, tool string, args json.RawMessage, wait time.Duration) string {
	if wait <= 0 {
		return ""
	}
	msg, err := nc.Request(bus.DescribeSubject(category, tool), args, wait)
	if err != nil {
		return ""
	}
	var d bus.Description
	if json.Unmarshal(msg.Data, &d) != nil || d.Error != "" {
		return ""
	}
	return d.Label
}

func (t *turn) approvalRequest(pc *pendingCall) bus.ApprovalRequest {
	return bus.ApprovalRequest{
		Turn: t.cfg.Spec.ID, Call: pc.wireID, Agent: t.cfg.Spec.Agent, Tool: pc.tool.Name, Namespace: pc.tool.Namespace,
		Args: pc.args, ArgsHash: pc.argsHash, Destructive: pc.tool.Destructive, ReadOnly: pc.tool.ReadOnly, Deadline: pc.deadline,
		Label: pc.label,
	}
}

// onApprove answers an operator: with the held call's request when asked, or by taking
// the decision.
func (t *turn) onApprove(wireID string, m *nats.Msg, a *bus.Approval, decodeErr error) {
	reply := func(r bus.ApprovalReply) {
		if m.Reply == "" {
			return
		}
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
	}
	pc := t.byWire[wireID]
	if pc == nil || t.state(pc) != batch.Held || t.phase == phaseAborting {
		reply(bus.ApprovalReply{Error: fmt.Sprintf("turn %s holds no call %s for approval", t.cfg.Spec.ID, wireID)})
		return
	}
	if decodeErr != nil {
		// The decoder's own words, without the subject it adds.
		why := decodeErr
		if u := errors.Unwrap(decodeErr); u != nil {
			why = u
		}
		reply(bus.ApprovalReply{Error: "malformed approval: " + why.Error()})
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
		t.tel.Approval(pc.span, wireID, telemetry.ApprovalRefused, who)
		msg := fmt.Sprintf("call refused by %s before it ran", who)
		if a.Reason != "" {
			msg += ": " + a.Reason
		}
		t.settle(pc, bus.OutcomeRefused, msg, toolbus.Result{})
		return
	}
	t.b.Approved(pc.i)
	t.tel.Approval(pc.span, wireID, telemetry.ApprovalGranted, who)
	remaining := time.Until(pc.deadline)
	if remaining <= 0 {
		t.settle(pc, bus.OutcomeTimeout, fmt.Sprintf("tool %s was approved after its deadline; it did not run", pc.tool.QualifiedName()), toolbus.Result{})
		return
	}
	t.send(pc, remaining)
}
