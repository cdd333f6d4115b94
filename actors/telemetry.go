package actors

import (
	"strings"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/telemetry"
)

// The turn's and host's calls into package telemetry, kept here so the loop in turn.go
// only says where a turn, a step and a call begin and end.

// startTelemetry begins the turn's telemetry (resumed: it goes on from a checkpoint) and
// has every way the turn ends (Done) end it too.
func (t *turn) startTelemetry(resumed bool) {
	s := t.cfg.Spec
	t.tel = t.cfg.telemetry.StartTurn(telemetry.TurnInfo{
		ID: s.ID, Kind: string(s.Kind), Agent: s.Agent, Node: t.cfg.Node,
		Parent: s.Parent, Workflow: s.Workflow, Task: s.Task, Model: t.modelSpec(),
		Resumed: resumed,
	})
	if t.tel == nil {
		return
	}
	done, tel := t.cfg.Done, t.tel
	t.cfg.Done = func(r TurnResult) {
		tel.End(telemetry.TurnEnd{State: string(r.State), Err: r.ErrorText(), Steps: r.Steps,
			Input: r.Usage.InputTokens, Output: r.Usage.OutputTokens, HandedBack: r.HandedBack || r.Unended, Fenced: r.Fenced})
		if done != nil {
			done(r)
		}
	}
}

// endTelemetry ends the telemetry of a turn stopped without an end of its own (a kept
// turn whose node stops: another node resumes it); a no-op after Done.
func (t *turn) endTelemetry() {
	t.tel.End(telemetry.TurnEnd{State: "queued", Steps: t.step, HandedBack: true})
}

// modelSpec is the turn's model spec for telemetry: a script is a script (its file or
// document is no label); a model the program gave without a spec is unknown.
func (t *turn) modelSpec() string {
	s := t.cfg.Spec
	_, scripted := t.cfg.Model.(*gateway.Scripted)
	switch {
	case len(s.Script) > 0 || strings.HasPrefix(s.Model, "script:") || (s.Model == "" && scripted):
		return "script:"
	case s.Model == "":
		return "unknown:unknown"
	}
	return s.Model
}

// stepEnded ends the current step's telemetry with the model's reply.
func (t *turn) stepEnded(m *modelReply) {
	if t.tel == nil {
		return
	}
	e := telemetry.StepEnd{Err: m.err}
	if r := m.info; m.err == nil {
		e.ResponseID, e.Input, e.Output, e.Truncated = r.id, r.usage.InputTokens, r.usage.OutputTokens, r.truncated
		e.CacheRead, e.CacheWritten = r.usage.CacheReadInputTokens, r.usage.CacheCreationInputTokens
		e.Calls = r.calls
	}
	t.tel.EndStep(e)
}

// callInfo names a call for its span.
func callInfo(pc *pendingCall) telemetry.CallInfo {
	c := telemetry.CallInfo{Tool: pc.item.Name, Namespace: pc.item.Namespace, ID: pc.wireID, Local: pc.local != nil}
	if pc.tool != nil {
		c.Tool, c.Category = pc.tool.Name, pc.tool.Category
	} else {
		// A tool the kit does not have: its name came from the model, and is no label.
		c.Tool = "unknown"
	}
	return c
}

// callStarted begins a dispatched call's span.
func (t *turn) callStarted(pc *pendingCall) {
	if t.tel != nil {
		pc.span = t.tel.StartCall(callInfo(pc))
	}
}

// callEnded counts a recorded call and ends its span (closeBatch: every call of a batch,
// dispatched or not, once).
func (t *turn) callEnded(pc *pendingCall) {
	if t.tel == nil {
		return
	}
	e := telemetry.CallEnd{CallInfo: callInfo(pc), Outcome: string(pc.record.Outcome), Error: pc.record.Error,
		Rungs: pc.record.Rungs, Truncated: pc.record.Truncated}
	if !pc.start.IsZero() {
		e.Start, e.End = pc.start, pc.start.Add(pc.record.Latency)
	}
	e.Args = pc.args
	out := pc.output.Content
	e.Result = func() string { return resultText(out) }
	t.tel.EndCall(pc.span, e)
	pc.span = nil
}

// resultText is the text of a result's content (images are named, not recorded).
func resultText(parts []toolbus.ContentPart) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('\n')
		}
		if p.Text != "" {
			b.WriteString(p.Text)
		} else {
			b.WriteString("[" + p.Type + "]")
		}
	}
	return b.String()
}
