package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets"
)

// The model's side of a turn: asking for a step, and taking its response, streamed
// or whole, item by item into the transcript, the journal and the batch.

// callModel asks the model for the next step without blocking the mailbox.
func (t *turn) callModel() {
	if t.phase == phaseAborting || t.over() || t.leaseLost() {
		return
	}
	if t.step >= t.cfg.Spec.Limits.MaxSteps {
		t.finish(bus.TurnStepLimit, fmt.Errorf("%w: %d steps", ErrStepLimit, t.cfg.Spec.Limits.MaxSteps))
		return
	}
	mc := &modelCall{
		req: gateway.Request{
			Instructions: t.instructions,
			// Capped, so the turn's later appends never write where the model reads.
			Input:             t.transcript[:len(t.transcript):len(t.transcript)],
			Tools:             t.cfg.Kit.Tools.Specs(),
			ParallelToolCalls: true,
			Step:              t.step,
		},
		step: t.step, ctx: t.modelCtx, model: t.cfg.Model,
		sys: t.sys, self: t.self, d: t.disp,
	}
	mc.req.Stream = mc.stream
	t.phase = phaseModel
	t.tel.StartStep(t.step)
	t.modelOut = true
	t.beginBatch(true)
	t.unsent, t.early, t.saidText = nil, false, ""
	t.cfg.workers.goFunc(mc.run)
}

// modelCall is one model call of a turn, off its mailbox: the request, and what the
// gateway's stream and the answer are sent back with. One object where the request, the
// stream's count and two closures made four (one step of a no-op call made 121).
type modelCall struct {
	req   gateway.Request
	step  int
	ctx   context.Context
	model gateway.Model
	sys   *actor.ActorSystem
	self  *actor.PID
	d     *turnDispatcher
	// streamed counts the items the gateway streamed.
	streamed atomic.Int64
}

// run asks the model, and sends the turn the end of its response.
func (mc *modelCall) run() {
	resp, err := mc.model.Respond(mc.ctx, &mc.req)
	mc.d.sendInline(mc.sys, mc.self, lastChunk(mc.step, resp, err, int(mc.streamed.Load())))
}

// stream takes a piece of the response as the gateway streams it (Request.Stream).
//
// Each item reaches the mailbox once, in order: those the gateway streams as they
// complete (a call is dispatched from there, onModelStream), then the rest of the
// response as its last chunk (onModelReply); a model that does not stream answers in one
// chunk. The gateway's contract is that the streamed items are the response's first
// ones, Response.Items[:streamed]: the split is made here, once, and the turn never
// matches items by position.
func (mc *modelCall) stream(ev gateway.StreamEvent) {
	switch ev.Kind {
	case gateway.StreamText:
		mc.d.sendInline(mc.sys, mc.self, &modelStream{step: mc.step, text: ev})
	case gateway.StreamItem:
		if ev.Item == nil || int64(ev.Index) != mc.streamed.Load() {
			return // not the next item (the gateway's contract): the response has it
		}
		mc.streamed.Add(1)
		it := *ev.Item
		mc.d.sendInline(mc.sys, mc.self, &modelStream{step: mc.step, item: &it})
	}
}

// responseInfo is what a response says of itself, besides its items.
type responseInfo struct {
	id        string
	usage     bus.Usage
	truncated bool
	text      string // the text of all its messages
	calls     int    // its function calls, streamed or not
}

// lastChunk is the end of a response of which the gateway streamed the first n items.
func lastChunk(step int, resp *gateway.Response, err error, n int) *modelReply {
	m := &modelReply{step: step, err: err}
	if err != nil {
		return m
	}
	if n > len(resp.Items) {
		m.err = &brokenStream{streamed: n, answered: len(resp.Items)}
		return m
	}
	m.rest = resp.Items[n:]
	calls := 0 // counted, not collected (resp.Calls copies them)
	for i := range resp.Items {
		if resp.Items[i].Kind == toolbus.KindFunctionCall {
			calls++
		}
	}
	m.info = responseInfo{id: resp.ID, usage: resp.Usage, truncated: resp.Truncated, text: resp.Text(), calls: calls}
	return m
}

// brokenStream: a gateway streamed more items than its response holds.
type brokenStream struct{ streamed, answered int }

func (e *brokenStream) Error() string {
	return fmt.Sprintf("the gateway streamed %d items and answered with %d", e.streamed, e.answered)
}

func (t *turn) onModelReply(m *modelReply) {
	t.modelOut = false
	// The calls settled while the response streamed: their outputs are stored after the
	// response's items.
	deferred := t.b.ResponseEnded()
	if t.phase != phaseModel && !t.over() && len(t.batch) > 0 {
		// Calls went out while the response streamed: their outputs are stored now,
		// after the part of the response that was stored, whatever became of the rest.
		t.storeOutputs(deferred)
	}
	switch t.phase {
	case phaseHandingBack:
		// Whatever the model said is dropped: the node that resumes asks again. Calls it
		// made while it streamed were stored; they finish first.
		if len(t.batch) == 0 {
			t.handOver()
		} else {
			t.schedule()
		}
		return
	case phaseAborting:
		if t.early {
			// Some of the response was taken before the abort (its calls went out, and
			// the transcript holds them as this step's): the step counts, whatever
			// became of the rest, so the turn's steps agree with its transcript. Which
			// came first, the response's end or the abort, is the machine's timing
			// (TestAbortRecordsHonestOutcomes saw no step under load).
			t.step++
		}
		if t.b.InFlight() == 0 {
			t.completeBatch()
		}
		return
	case phaseModel:
		t.phase = phaseCalls
	default:
		return // over: taken over while the model was asked
	}
	t.step++
	t.stepEnded(m)
	if _, ok := errors.AsType[*brokenStream](m.err); ok {
		t.fail(fmt.Errorf("%w: model step %d: %w", ErrRuntime, m.step+1, m.err))
		return
	}
	if m.err != nil {
		t.fail(fmt.Errorf("%w: model step %d: %w", ErrModel, m.step+1, m.err)) // steps are counted from 1 for people
		return
	}
	if m.info.usage != (bus.Usage{}) {
		u := m.info.usage // on the heap only when there are tokens to count
		t.usage.Add(u)
		t.stepUsage = &u
	}
	// Arguments past what a call may carry are not kept: the transcript, which goes back
	// to the model at every step, holds a note instead, and prepare refuses the call.
	// What streamed up to its last call is in the transcript already: the rest follows
	// it, as the reply has it (the items kept since, unsent, are its too).
	rest := append(t.unsent, elideOversized(m.rest)...)
	t.unsent = nil
	// The calls are taken first: each call's item records what the turn made of it.
	added := t.addCalls(rest, m.info.truncated)
	items := rest
	if t.stepUsage != nil {
		// The step's tokens, for whoever reads the transcript, just before the response
		// they paid for (so a turn's transcript still ends with its answer), or after it
		// when part of it was stored while it streamed (a response's items stay
		// together); gateways skip the item.
		note := durable.UsageNote(t.step, *t.stepUsage)
		if t.early {
			items = append(items, note)
		} else {
			items = append([]toolbus.Item{note}, items...)
		}
	}
	t.transcript = append(t.transcript, items...)
	t.text = m.info.text
	if t.text != "" && len(t.batch) > 0 && t.text != t.saidText {
		// Words before the calls are shown while the calls run.
		t.status(bus.StatusStep, bus.TurnStatus{State: bus.TurnRunning, Text: t.text})
	}
	if len(t.batch) == 0 {
		t.j.afterResponse(items, t.answeredWithText)
		return
	}
	t.j.afterResponse(items, func() { t.ready(added) })
	t.storeOutputs(deferred)
}

// onModelStream takes a piece of the response the model is streaming. An item complete
// is kept; a call complete goes to the transcript and the journal with what came before
// it and is dispatched as the batch's rules allow, while the model goes on writing.
func (t *turn) onModelStream(m *modelStream) {
	if t.phase != phaseModel || m.step != t.step {
		return // aborted, handed back or over: the rest of the response is not acted on
	}
	switch {
	case m.item == nil:
		t.streamText(m.text)
	default:
		it := elideOversized([]toolbus.Item{*m.item})[0]
		t.unsent = append(t.unsent, it)
		if it.Kind != toolbus.KindFunctionCall {
			return
		}
		items := t.unsent
		t.unsent = nil
		t.early = true
		// Whole: a call the output limit cut never streams.
		added := t.addCalls(items[len(items)-1:], false)
		t.transcript = append(t.transcript, items...)
		if text := (&gateway.Response{Items: items}).Text(); text != "" && t.saidText == "" {
			// Words before the calls are shown while the calls run: these are whole. The
			// step is the one the model is writing, not yet counted (t.step): it has the
			// number its text pieces had, and the step's later statuses have.
			t.saidText = text
			t.status(bus.StatusStep, bus.TurnStatus{State: bus.TurnRunning, Text: text, Step: t.step + 1})
		}
		t.j.afterResponse(items, func() { t.ready(added) })
	}
}

// stepStored is the step a transcript write belongs to: the response streaming now is
// the next one (t.step counts the responses that ended).
func (t *turn) stepStored() int {
	if t.modelOut {
		return t.step + 1
	}
	return t.step
}

// elidedKey is the one member of the arguments the transcript keeps of a call whose
// arguments were over bus.MaxCallPayload: {"toolbus_omitted":{"bytes":N,"note":"..."}}.
const elidedKey = "toolbus_omitted"

type elided struct {
	Bytes int64  `json:"bytes"`
	Note  string `json:"note"`
}

// elideOversized replaces the arguments of every function call over bus.MaxCallPayload
// (and in the provider's raw item, when there is one) by a short JSON object saying what
// was left out (elidedKey): the call is refused all the same, and the model reads its
// transcript again at every step. It returns items as they were when no call is that
// large, a copy otherwise.
func elideOversized(items []toolbus.Item) []toolbus.Item {
	changed := false
	for i, it := range items {
		n := len(it.Arguments)
		if it.Kind != toolbus.KindFunctionCall || n <= bus.MaxCallPayload {
			continue
		}
		if !changed {
			items, changed = slices.Clone(items), true
		}
		note, _ := json.Marshal(map[string]elided{elidedKey: {Bytes: int64(n), Note: fmt.Sprintf(
			"%s of arguments, over the %s a call may carry: not kept", bus.FormatBytes(int64(n)), bus.FormatBytes(bus.MaxCallPayload))}})
		it.Arguments = string(note)
		if len(it.Raw) > 0 {
			var raw map[string]json.RawMessage
			if json.Unmarshal(it.Raw, &raw) == nil && raw["arguments"] != nil {
				raw["arguments"], _ = json.Marshal(it.Arguments)
				it.Raw, _ = json.Marshal(raw)
			} else {
				it.Raw, it.Provider = nil, ""
			}
		}
		items[i] = it
	}
	return items
}

// elidedSize reads arguments elideOversized left: the size of the ones it took out.
func elidedSize(args string) (int64, bool) {
	if !strings.HasPrefix(args, `{"`+elidedKey+`":`) {
		return 0, false
	}
	var e map[string]elided
	if json.Unmarshal([]byte(args), &e) != nil || len(e) != 1 || e[elidedKey].Bytes <= bus.MaxCallPayload {
		return 0, false
	}
	return e[elidedKey].Bytes, true
}

// answeredWithText handles a response without calls, as the kind's policy says.
func (t *turn) answeredWithText() {
	p := t.cfg.Kit.Policy
	if p.Text != toolsets.TextRepairOnce {
		t.finish(bus.TurnCompleted, nil)
		return
	}
	if t.repaired {
		t.fail(fmt.Errorf("%w: it was told once (%q)", ErrNoToolCall, p.RepairInstruction))
		return
	}
	t.repaired = true
	// Watchers see the text, and that the turn was told what it lacks.
	t.status(bus.StatusStep, bus.TurnStatus{State: bus.TurnRunning, Text: t.text, Notes: []string{repairNote}})
	msg := []toolbus.Item{{Kind: toolbus.KindMessage, Role: toolbus.RoleDeveloper, Text: p.RepairInstruction}}
	t.transcript = append(t.transcript, msg...)
	t.j.afterResponse(msg, t.callModel)
}

// repairNote is the note of the step status of a response that got the repair
// instruction.
const repairNote = "answered with text alone: told once to end with its call"

// streamText publishes a piece of the text the model is writing, when anyone listens
// (as statuses are gated): a turn nobody watches pays nothing for it.
func (t *turn) streamText(ev gateway.StreamEvent) {
	subject := bus.TextSubject(t.cfg.Spec.ID)
	if t.cfg.interest != nil && !t.cfg.interest(subject) || t.leaseUnsure() {
		return
	}
	d := bus.TextDelta{Turn: t.cfg.Spec.ID, Step: t.step + 1, Item: ev.Index}
	for text := ev.Text; text != ""; {
		d.Text, text = cutText(text, bus.MaxTextDelta)
		t.textSeq++
		d.Seq = t.textSeq
		b, err := json.Marshal(d)
		if err == nil {
			err = t.cfg.Conn.Publish(subject, b)
		}
		if err != nil {
			t.log.Warn("publish text", "err", err)
			return
		}
	}
}

// cutText splits s after at most n bytes, on a rune boundary.
func cutText(s string, n int) (head, rest string) {
	if len(s) <= n {
		return s, ""
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut == 0 {
		cut = n // not UTF-8 there: cut where the bound is
	}
	return s[:cut], s[cut:]
}
