package actors

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors/batch"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/suggest"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/telemetry"
	"github.com/toolbus/toolbus/toolsets"
)

// The calls of a batch: resolving each call's tool and arguments, letting them go as
// the scheduler (batch.Batch) says, settling them, and closing the batch in the model's
// order.

// ready marks calls stored (a durable journal wrote them) and dispatches what the
// modes allow.
func (t *turn) ready(calls []*pendingCall) {
	for _, pc := range calls {
		if t.byWire[pc.wireID] == pc { // not of a batch closed meanwhile (an abort)
			t.b.Stored(pc.i)
		}
	}
	t.schedule()
}

// storeOutputs stores the outputs of settled calls (those that finished while their
// response streamed), unless the batch was closed meanwhile.
func (t *turn) storeOutputs(calls []int) {
	for _, i := range calls {
		if i < len(t.batch) && t.b.State(i) == batch.Done {
			t.storeOutput(t.batch[i])
		}
	}
}

// storeOutput hands a settled call's output to the journal, which may store it at once.
func (t *turn) storeOutput(pc *pendingCall) {
	if t.j.afterCall(pc.outputItem()) {
		t.b.OutputStored(pc.i)
	}
}

// state is where a call of the batch stands.
func (t *turn) state(pc *pendingCall) batch.State { return t.b.State(pc.i) }

// prepare resolves each call's tool and arguments, in the model's order, as a new batch
// of calls that are stored already (a resumed turn's).
func (t *turn) prepare(calls []toolbus.Item, truncated bool) {
	t.beginBatch(false)
	for _, pc := range t.addCalls(calls, truncated) {
		t.b.Stored(pc.i)
	}
}

// beginBatch empties the batch for a new response; open says it streams.
func (t *turn) beginBatch(open bool) {
	t.batch = t.batch[:0]
	clear(t.byWire)
	t.b.Reset(open)
}

// addCalls adds the function calls among items to the batch, in the model's order,
// resolving each one's tool and arguments, and writes into each call's item what the
// turn made of it (its run, the arguments as repaired: toolbus.Item.Run, Repaired), so
// that the journal stores it with the call. A call refused here is settled at once; the
// others go out once ready.
func (t *turn) addCalls(items []toolbus.Item, truncated bool) []*pendingCall {
	var added []*pendingCall
	for k := range items {
		it := &items[k]
		if it.Kind != toolbus.KindFunctionCall {
			continue
		}
		pc := &pendingCall{item: *it, wireID: it.CallID}
		added = append(added, pc)
		if !bus.ValidID(pc.wireID) {
			pc.wireID = bus.NewID()
		}
		if _, dup := t.byWire[pc.wireID]; dup {
			pc.wireID = bus.NewID()
		}
		t.byWire[pc.wireID] = pc
		pc.record = bus.CallRecord{Call: it.CallID, Tool: it.Name, Namespace: it.Namespace}
		refusal := t.resolveCall(pc, *it, truncated)
		if refusal != "" {
			pc.i = t.b.AddRefused()
			it.Run = nil
		} else {
			mode, readOnly := pc.tool.Mode, pc.tool.ReadOnly
			if r := it.Run; r != nil {
				// Taken before the turn was resumed: as it was then, whatever the tool
				// says now.
				mode, readOnly = toolbus.Parallel, r.ReadOnly
				if r.Sequential {
					mode = toolbus.Sequential
				}
			}
			// A turn-local tool is the turn's own: no person approves it.
			pc.i = t.b.Add(mode, pc.local == nil && t.cfg.Kit.NeedsApproval(pc.tool), pc.tool.Category)
			it.Run = &toolbus.CallRun{Step: t.stepStored(), N: t.b.Run(pc.i),
				Sequential: mode == toolbus.Sequential, ReadOnly: readOnly}
			if it.Namespace == "" {
				it.Run.Namespace = pc.tool.Namespace
			}
			it.Repaired, it.Rungs = nil, nil
			if pc.repaired {
				it.Repaired, it.Rungs = pc.args, pc.record.Rungs
			}
		}
		pc.item = *it
		t.batch = append(t.batch, pc)
		if refusal != "" {
			t.resolve(pc, bus.OutcomeInvalid, refusal)
		}
	}
	return added
}

// resolveCall finds a call's tool and parses its arguments as the tool's schema and the
// repair ladder say; it returns why the call is refused, or "". Arguments a turn
// repaired before it was resumed are taken as it recorded them (toolbus.Item.Repaired),
// not repaired again.
func (t *turn) resolveCall(pc *pendingCall, it toolbus.Item, truncated bool) (refusal string) {
	tool, ok := t.lookup(it)
	if !ok {
		return t.unknownTool(it)
	}
	pc.tool = tool
	// The model may name a namespaced tool by its bare name (lookup); the record says
	// which tool ran, so its namespace is the tool's, not the model's.
	pc.record.Namespace = tool.Namespace
	if n, ok := elidedSize(it.Arguments); ok {
		return bus.ArgsTooLarge(it.Name, n)
	}
	if local, ok := t.cfg.Kit.Local[tool.Name]; ok && tool.Category == toolsets.LocalCategory {
		pc.local = &local
	}
	if admit := t.cfg.Kit.Policy.Admit; admit != nil {
		if d, why := admit(tool); d != toolsets.Run {
			return "call refused: " + why
		}
	}
	strict := tool.Strict && tool.Params.Strict().Err == nil
	text := it.Arguments
	if len(it.Repaired) > 0 {
		text = string(it.Repaired)
		pc.record.Rungs = append(pc.record.Rungs, it.Rungs...)
	}
	args, err := tool.Params.Parse(text, schema.ParseOptions{
		Strict:      strict,
		Truncated:   truncated || it.Truncated,
		Destructive: tool.Destructive,
	})
	if len(it.Repaired) == 0 {
		for _, r := range args.Rungs {
			pc.record.Rungs = append(pc.record.Rungs, string(r))
		}
	}
	pc.record.Truncated = args.Truncated
	if err != nil {
		var ae *schema.ArgumentError
		if errors.As(err, &ae) {
			for _, r := range ae.Rungs {
				pc.record.Rungs = append(pc.record.Rungs, string(r))
			}
		}
		return fmt.Sprintf("invalid arguments for %s: %v", it.Name, err)
	}
	if n := len(args.JSON); n > bus.MaxCallPayload && pc.local == nil {
		return bus.ArgsTooLarge(it.Name, int64(n))
	}
	pc.args = args.JSON
	pc.repaired = len(it.Repaired) > 0 || args.Repaired()
	return ""
}

// lookup finds a call's tool. A call without a namespace may name a namespaced tool whose
// name no other tool has (models drop the namespace now and then).
func (t *turn) lookup(it toolbus.Item) (*toolbus.Spec, bool) {
	set := t.cfg.Kit.Tools
	if spec, ok := set.Lookup(it.Namespace, it.Name); ok || it.Namespace != "" {
		return spec, ok
	}
	var found *toolbus.Spec
	for _, s := range set.Specs() {
		if s.Name == it.Name {
			if found != nil {
				return nil, false
			}
			found = s
		}
	}
	return found, found != nil
}

func (t *turn) unknownTool(it toolbus.Item) string {
	name := it.Name
	if it.Namespace != "" {
		name = it.Namespace + "." + it.Name
	}
	names := t.cfg.Kit.Tools.Names()
	return fmt.Sprintf("unknown tool %q%s; the tools available are: %s", name, suggest.DidYouMean(name, names), strings.Join(names, ", "))
}

// resolve settles a call that did not run (refused, not started, or given up on as the
// turn failed) with its outcome; its output is stored with the batch.
func (t *turn) resolve(pc *pendingCall, o bus.Outcome, msg string) {
	if held := t.state(pc) == batch.Held; !t.b.Refuse(pc.i) && t.b.Settle(pc.i) && held {
		t.tel.Approval(pc.span, pc.wireID, telemetry.ApprovalGone, "")
	}
	pc.record.Outcome, pc.record.Error = o, msg
	pc.output = toolbus.ErrorResult(msg)
}

// schedule dispatches what the batch's rules allow (batch.Batch.Next: a run of parallel
// calls goes out together; a sequential call waits until nothing is in flight and holds
// every call after it; a call goes out once stored), and completes the batch once its
// response has ended and every call is settled.
func (t *turn) schedule() {
	for {
		ds := t.b.Next()
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			t.dispatch(t.batch[d.Call], d.Hold)
		}
	}
	if t.b.Complete() {
		t.completeBatch()
	}
}

// dispatch starts a call the batch let go: the turn answers a local one itself, a held
// one waits for approval, the others go to their category's hosts.
func (t *turn) dispatch(pc *pendingCall, hold bool) {
	t.callStarted(pc)
	if pc.local != nil {
		t.answerLocal(pc)
		return
	}
	timeout := pc.tool.Timeout
	if timeout <= 0 {
		timeout = t.cfg.CallTimeout
	}
	pc.start = time.Now()
	deadline := pc.start.Add(timeout)
	pc.deadline = deadline
	if hold {
		t.hold(pc, timeout)
		return
	}
	t.send(pc, timeout)
}

// armExpiry has the turn woken at `at`, unless it is to be woken earlier already.
func (t *turn) armExpiry(at time.Time) {
	if !t.expiryAt.IsZero() && !at.Before(t.expiryAt) {
		return
	}
	t.expiryAt = at
	if t.expiry == nil {
		sys, self := t.sys, t.self
		t.expiry = time.AfterFunc(time.Until(at), func() { sys.Root.Send(self, &expiryDue{}) })
		return
	}
	t.expiry.Reset(time.Until(at))
}

// onExpiryDue gives up on the calls in flight whose expiry has come, and has the turn
// woken for the next one.
func (t *turn) onExpiryDue() {
	t.expiryAt = time.Time{}
	if t.leaseLost() {
		return // woken past the lease: the calls are another node's to settle now
	}
	now := time.Now()
	var due []string
	var next time.Time
	for _, pc := range t.batch {
		if t.state(pc) != batch.Running || pc.expires.IsZero() {
			continue
		}
		if !now.Before(pc.expires) {
			due = append(due, pc.wireID)
		} else if next.IsZero() || pc.expires.Before(next) {
			next = pc.expires
		}
	}
	for _, id := range due {
		t.onExpired(id)
	}
	if !next.IsZero() && !t.over() {
		t.armExpiry(next)
	}
}

// settle records a call that was in flight and moves the batch on.
func (t *turn) settle(pc *pendingCall, o bus.Outcome, msg string, res toolbus.Result) {
	t.settled(pc, o, msg, res)
	t.schedule()
}

// settled gives a call in flight its outcome and output, and hands the output to the
// journal unless its response still streams (then it waits for the response's items,
// onModelReply); it does not move the batch on.
func (t *turn) settled(pc *pendingCall, o bus.Outcome, msg string, res toolbus.Result) {
	if pc.timer != nil {
		pc.timer.Stop()
	}
	t.deleteArgs(pc)
	held := t.state(pc) == batch.Held
	if !t.b.Settle(pc.i) {
		return // settled already
	}
	if held && o != bus.OutcomeRefused {
		t.tel.Approval(pc.span, pc.wireID, telemetry.ApprovalGone, "")
	}
	pc.record.Outcome, pc.record.Error = o, msg
	pc.record.Latency = time.Since(pc.start)
	if pc.record.Duration == 0 {
		pc.record.Duration = time.Since(pc.start)
	}
	if o != bus.OutcomeOK && msg != "" {
		// The model must learn why; keep whatever the tool produced after it.
		res.Content = append([]toolbus.ContentPart{toolbus.Text(msg)}, res.Content...)
		res.IsError = true
	}
	pc.output = res
	if t.state(pc) == batch.Done {
		t.storeOutput(pc)
	}
}

// answerLocal runs a turn-local tool off the mailbox; its answer comes back as localDone.
func (t *turn) answerLocal(pc *pendingCall) {
	if pc.local.Final && t.submitted != nil {
		// Final calls are sequential: the first accepted one is the turn's.
		t.resolve(pc, bus.OutcomeInvalid, fmt.Sprintf("%s was accepted already in this response; the turn ends with that one", pc.tool.Name))
		return
	}
	pc.start = time.Now()
	ctx, answer, args := t.modelCtx, pc.local.Answer, pc.args
	sys, self, id := t.sys, t.self, pc.wireID
	go func() {
		res, err := answer(ctx, args)
		sys.Root.Send(self, &localDone{wireID: id, res: res, err: err})
	}()
}

func (t *turn) onLocalDone(m *localDone) {
	pc := t.byWire[m.wireID]
	if pc == nil || t.state(pc) != batch.Running {
		return
	}
	// A local tool labels its call as a host's completion event would.
	if c := m.res.Completion; c != nil && c.Label != "" {
		pc.record.Label = c.Label
	}
	pc.record.Details = m.res.Details
	switch {
	case m.err != nil:
		t.settle(pc, bus.OutcomeError, m.err.Error(), m.res)
	case m.res.IsError:
		t.settle(pc, bus.OutcomeError, "", m.res)
	default:
		if pc.local.Final {
			t.submitted = pc.args
		}
		t.settle(pc, bus.OutcomeOK, "", m.res)
	}
}

func (t *turn) onExpired(wireID string) {
	pc := t.byWire[wireID]
	if pc == nil || !t.state(pc).InFlight() {
		return
	}
	if pc.cancelled != "" {
		t.settle(pc, bus.OutcomeAbandoned, fmt.Sprintf("call abandoned: it was %s and did not stop within %s; it may still be running", pc.cancelled, t.cfg.AbortGrace), toolbus.Result{})
		return
	}
	if t.state(pc) == batch.Held {
		t.settle(pc, bus.OutcomeTimeout, fmt.Sprintf("tool %s waited for an approval that did not come before its deadline; it did not run", pc.tool.QualifiedName()), toolbus.Result{})
		return
	}
	if t.phase == phaseAborting {
		t.settle(pc, bus.OutcomeAbandoned, abandonedMsg(t.cfg.AbortGrace), toolbus.Result{})
		return
	}
	msg := fmt.Sprintf("tool %s did not answer before its deadline", pc.tool.Name)
	if pc.connLost || !t.cfg.Conn.IsConnected() {
		msg += bus.AnswerMayBeLost
	}
	t.settle(pc, bus.OutcomeTimeout, msg, toolbus.Result{})
}

// completeBatch appends every call's output in the model's order and moves
// the turn on.
func (t *turn) completeBatch() {
	if len(t.batch) == 0 {
		if t.phase == phaseAborting {
			t.finish(bus.TurnAborted, t.abortErr)
		}
		return
	}
	terminate := t.closeBatch()
	switch {
	case t.phase == phaseAborting:
		t.finish(bus.TurnAborted, t.abortErr)
	case terminate:
		t.finish(bus.TurnTerminated, nil)
	case t.phase == phaseHandingBack:
		t.handOver()
	default:
		t.callModel()
	}
}

// closeBatch records every call of the batch and appends their outputs, in
// the model's order. It reports whether a result asked to end the turn.
func (t *turn) closeBatch() (terminate bool) {
	first := len(t.records)
	var outputs []toolbus.Item
	for _, pc := range t.batch {
		out := pc.outputItem()
		switch t.state(pc) {
		case batch.Recorded: // in the transcript it resumed from, and stored
		case batch.Stored:
			t.transcript = append(t.transcript, out)
		default:
			t.transcript = append(t.transcript, out)
			outputs = append(outputs, out)
		}
		terminate = terminate || pc.output.Terminate
		t.records = append(t.records, pc.record)
		t.callEnded(pc)
	}
	// A late answer of one of these calls finds none (byWire): the batch is over.
	t.beginBatch(false)
	records := t.records[first:len(t.records):len(t.records)]
	t.j.afterBatch(outputs)
	t.status(bus.StatusStep, bus.TurnStatus{State: bus.TurnRunning, Calls: records})
	return terminate
}

// outputItem is the call's output as the transcript holds it.
func (pc *pendingCall) outputItem() toolbus.Item {
	return toolbus.Item{
		Kind:      toolbus.KindCallOutput,
		CallID:    pc.item.CallID,
		Name:      pc.item.Name,
		Namespace: pc.item.Namespace,
		Output:    pc.output.Content,
		IsError:   pc.output.IsError,
		// How it ran, with it: a reader of the stored turn sees what its watchers heard,
		// and it costs no message of its own (a durable turn stores each output as it
		// arrives, two writes a step).
		Ran: &toolbus.CallRan{Outcome: string(pc.record.Outcome), Label: pc.record.Label,
			Duration: pc.record.Duration, Latency: pc.record.Latency},
	}
}
