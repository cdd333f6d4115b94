package actors

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors/batch"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets"
)

// resume starts a turn from the transcript the claim read back (it ends with the
// claim's resume note): the batch the model asked for last is finished as
// durable.PlanBatch says (calls with a recorded output are not run again), then the
// turn goes on as usual.
func (t *turn) resume(from *resumePoint, lease time.Duration) {
	items := from.items
	t.phase = phaseCalls
	t.step = durable.Steps(items)
	t.transcript = append(t.transcript[:0], items...)
	for _, it := range items {
		// The repair instruction is given once per turn, wherever the turn runs.
		if p := t.cfg.Kit.Policy; p.Text == toolsets.TextRepairOnce && it.Kind == toolbus.KindMessage && it.Role == toolbus.RoleDeveloper && it.Text == p.RepairInstruction {
			t.repaired = true
		}
	}
	r := from.from
	t.status(bus.StatusStarted, bus.TurnStatus{State: bus.TurnRunning, Notes: t.cfg.Kit.Notes, Home: t.cfg.Kit.Home, Resumed: &r, Lease: lease})

	calls := durable.LastCalls(items)
	t.prepare(calls, false)
	plan := durable.PlanBatch(items, func(i int, _ toolbus.Item) durable.CallInfo {
		pc := t.batch[i]
		return durable.CallInfo{
			Refused:    t.state(pc) == batch.Done,
			Sequential: pc.tool != nil && pc.tool.Mode == toolbus.Sequential,
			ReadOnly:   pc.tool != nil && pc.tool.ReadOnly,
		}
	})
	if !plan.Open {
		// A task whose result was accepted before its node was lost ends here: the
		// accepted call is in the transcript, only the turn's end was not stored.
		for _, it := range plan.Calls {
			if args, ok := t.finalArgs(it); ok && outputOK(plan.Outputs, it.CallID) {
				t.batch = t.batch[:0]
				t.submitted = args
				t.finish(bus.TurnTerminated, nil)
				return
			}
		}
		t.batch = t.batch[:0]
		if plan.Answered {
			// The answer was stored, the end was not: the turn ends with it.
			t.text = plan.Text
			t.answeredWithText()
			return
		}
		t.callModel()
		return
	}
	var said []string
	for i, pc := range t.batch {
		said = append(said, pc.item.CallID+":"+plan.Actions[i].String())
		if plan.Actions[i] == durable.Refused {
			said[len(said)-1] += " (" + pc.record.Error + ")"
		}
	}
	t.log.Info("resuming the turn's batch", "step", t.step, "from", from.lost, "calls", strings.Join(said, ", "))
	for i, pc := range t.batch {
		switch plan.Actions[i] {
		case durable.Recorded:
			out := plan.Outputs[pc.item.CallID]
			t.b.Recorded(pc.i)
			pc.output = toolbus.Result{Content: out.Output, IsError: out.IsError}
			pc.record.Outcome = bus.OutcomeOK
			if out.IsError {
				pc.record.Outcome = bus.OutcomeError
			}
			pc.record.Label = "recorded before the turn was resumed"
			if pc.local != nil && pc.local.Final && !out.IsError && t.submitted == nil {
				// The task's result was accepted: the turn ends after this batch.
				pc.output.Terminate = true
				t.submitted = pc.args
			}
		case durable.Abandon:
			t.resolve(pc, bus.OutcomeAbandoned, fmt.Sprintf(
				"call abandoned: the node running the turn (%s) was lost while this call was in flight; it may have run. Check its effect before you call it again.",
				from.lost))
		}
	}
	t.schedule()
}

// finalArgs reads the arguments of a call of a final local tool (a task's submit_result)
// as the turn accepted them; false for any other call, or arguments that do not pass.
func (t *turn) finalArgs(it toolbus.Item) (json.RawMessage, bool) {
	local, ok := t.cfg.Kit.Local[it.Name]
	if it.Kind != toolbus.KindFunctionCall || !ok || !local.Final {
		return nil, false
	}
	p := local.Spec.Params
	args, err := p.Parse(it.Arguments, schema.ParseOptions{Strict: local.Spec.Strict && p.Strict().Err == nil})
	if err != nil {
		return nil, false
	}
	return args.JSON, true
}

// outputOK reports whether the call has a recorded output that is not an error.
func outputOK(outputs map[string]toolbus.Item, callID string) bool {
	o, ok := outputs[callID]
	return ok && !o.IsError
}
