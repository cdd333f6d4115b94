package actors

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/telemetry"
	"github.com/toolbus/toolbus/toolsets"
)

// Defaults of a turn.
const (
	DefaultMaxSteps = bus.DefaultMaxSteps
	// DefaultAbortGrace is how long an aborted turn waits for its running calls to
	// stop (bus.DefaultAbortGrace; TestAbortGraceCoversKillGrace holds it above the
	// computer tools' kill grace).
	DefaultAbortGrace = bus.DefaultAbortGrace
	replyGrace        = bus.ReplyGrace
)

// TurnConfig configures one turn.
type TurnConfig struct {
	// Spec is what the turn is: id (empty picks one), kind, agent, instructions, input,
	// limits. Its Model and Script are resolved by the node into Model.
	Spec bus.TurnSpec
	Node string
	// Input, when set, is the transcript the turn starts from instead of Spec.Input as
	// one user message.
	Input []toolbus.Item
	Model gateway.Model
	// Kit holds the turn's tools and policy (toolsets.Assemble); nil lets the node
	// assemble it from the spec, the agent's profile and the bus catalog.
	Kit  *toolsets.Kit
	Conn *nats.Conn
	// JS, when set, receives the transcript on bus.TranscriptSubject(ID).
	JS         jetstream.JetStream
	AbortGrace time.Duration
	// CallTimeout is the deadline of a call whose tool sets no Timeout.
	CallTimeout time.Duration
	Logger      *slog.Logger
	// Done receives the result once, from the actor, when the turn ends.
	Done func(TurnResult)
	// Unavailable, when set, hears of each call no host answered (its category), so a
	// catalog can refresh.
	Unavailable func(category string)

	// journal keeps the turn's history; nil: a streamJournal. The node's intake sets a
	// durableJournal.
	journal journal
	// workers run the turn's mailbox and model calls; set by the node.
	workers *workers
	// voucher vouches for the arguments the turn validated, so the node's hosts need
	// not validate them again; set by the node.
	voucher *bus.Voucher
	// interest tells whether anyone would receive a status; nil: publish every one.
	interest func(subject string) bool
	// sampled sets the sampled flag of the calls' traceparent (NodeConfig.TraceSampled).
	sampled bool
	// payloads stores arguments too large for a message and reads such replies
	// (bus.ObjectPayloads); set by the node. nil: the turn opens them through JS, or
	// its connection, on first use.
	payloads *bus.Payloads
	// telemetry records the turn's spans and metrics (NodeConfig.Telemetry); nil: none.
	telemetry *telemetry.Telemetry
}

// withDefaults fills what a config may leave out; the one place turn defaults live.
func (c TurnConfig) withDefaults() TurnConfig {
	c.Spec.Normalize()
	if c.Spec.ID == "" {
		c.Spec.ID = bus.NewID()
	}
	if c.Spec.Limits.MaxSteps <= 0 {
		c.Spec.Limits.MaxSteps = DefaultMaxSteps
	}
	if c.AbortGrace <= 0 {
		c.AbortGrace = DefaultAbortGrace
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(c.Input) == 0 && c.Spec.Input != "" {
		c.Input = []toolbus.Item{toolbus.UserMessage(c.Spec.Input)}
	}
	return c
}

// validate checks a config after withDefaults.
func (c TurnConfig) validate() error {
	switch {
	case !bus.ValidID(c.Spec.ID):
		return fmt.Errorf("turn: invalid id %q", c.Spec.ID)
	case c.Model == nil:
		return fmt.Errorf("turn %s: no model", c.Spec.ID)
	case c.Conn == nil:
		return fmt.Errorf("turn %s: no connection", c.Spec.ID)
	case c.Kit == nil || c.Kit.Tools == nil:
		return fmt.Errorf("turn %s: no tool kit", c.Spec.ID)
	case c.Spec.Kind != "" && !c.Spec.Kind.Valid():
		return fmt.Errorf("turn %s: invalid kind %q", c.Spec.ID, c.Spec.Kind)
	}
	if c.Spec.Agent != "" {
		if err := bus.CheckAgent(c.Spec.Agent); err != nil {
			return fmt.Errorf("turn %s: %w", c.Spec.ID, err)
		}
	}
	return nil
}

// TurnResult is the outcome of a turn.
type TurnResult struct {
	Turn  string
	State bus.TurnState
	Text  string // the model's final text
	// Err is why the turn did not complete (nil when it did, or a tool ended it); match
	// it with errors.Is against ErrStepLimit, ErrAborted, ErrModel, ErrNodeStopped,
	// ErrNoToolCall or ErrRuntime. ErrorText is its text.
	Err        error
	Steps      int
	Calls      []bus.CallRecord
	Usage      bus.Usage // the model's tokens in the turn
	Transcript []toolbus.Item
	// Submitted is the arguments of the final local call that was accepted (a task's
	// submit_result), when one ended the turn.
	Submitted json.RawMessage
	// HandedBack reports a durable turn its node gave back to the intake (the node is
	// stopping) instead of ending it; Fenced, one that another node took over.
	HandedBack, Fenced bool
	// Unended reports a durable turn whose end could not be stored (its transcript or
	// its record did not take it, Err says why): it is not over, and the intake gives it
	// to a node again, which resumes it from what the stream holds.
	Unended bool
}

// ErrorText is Err's text, or "" when the turn did not fail.
func (r TurnResult) ErrorText() string {
	if r.Err == nil {
		return ""
	}
	return r.Err.Error()
}

// callState is where a call of the current batch stands.
type callState uint8

const (
	callWaiting callState = iota
	callRunning
	callDone
)

// pendingCall is one function call of the current batch.
type pendingCall struct {
	item   toolbus.Item
	wireID string // the call id on the bus (the model's when it is a valid token)
	tool   *toolbus.Spec
	local  *toolsets.LocalTool // set for a tool the turn answers itself
	args   json.RawMessage
	state  callState
	timer  *time.Timer // a held call's approval deadline
	start  time.Time
	// expires is when a call sent to its host is given up on: its deadline and replyGrace.
	expires time.Time
	record  bus.CallRecord
	output  toolbus.Result
	stored  bool // the output is in the transcript stream already
	// held: the call waits for a person's approval (the kit's policy); it counts as in
	// flight, against its deadline. approved: it got one, for argsHash.
	held, approved bool
	argsHash       string
	label          string // the host's activity label for a held call
	deadline       time.Time
	// resumed: the output was read back with the transcript a resumed turn started from,
	// so the turn's transcript holds it already.
	resumed bool
	// ready: the call is in the journal (a durable turn stored it), so it may go out.
	ready bool
	// deferred: it finished while its response was still streaming; its output is
	// stored once the response is, so that the response's items stay together.
	deferred bool
	// argsRef names the object that holds the arguments sent by reference (too large for
	// a message); the turn deletes it once the call is settled.
	argsRef bus.PayloadRef
	span    *telemetry.Call // its execute_tool span, from dispatch to closeBatch
}

// Messages the turn actor receives besides *nats.Msg.
type (
	turnStep   struct{}
	modelReply struct {
		step int
		resp *gateway.Response
		err  error
	}
	// modelStream is a piece of the response the model is streaming.
	modelStream struct {
		step int
		ev   gateway.StreamEvent
	}
	callExpired    struct{ wireID string }
	expiryDue      struct{}
	abortGraceOver struct{}
	// handBack: the node stops; it waits grace for the turn to go back to the intake.
	handBack struct{ grace time.Duration }
	// checkLease: the turn's lease may be lost (its intake found it fenced), or is
	// (unconfirmed: its intake could not confirm it for a lease, and stopped it).
	checkLease struct{ unconfirmed error }
	// onActor runs f on the actor (a journal's write that finished off the mailbox).
	onActor   struct{ f func() }
	localDone struct {
		wireID string
		res    toolbus.Result
		err    error
	}
	// largeSent: the arguments of pc went to the object store and its request out (err nil).
	largeSent struct {
		pc  *pendingCall
		ref bus.PayloadRef
		err error
	}
	// replyFetched: the reply of pc, sent by reference, was read from the object store.
	replyFetched struct {
		pc   *pendingCall
		ref  bus.PayloadRef
		data []byte
		err  error
	}
)

// phase is where a turn stands. One phase at a time, so that every message the turn
// receives is read against it.
type phase uint8

const (
	phaseStarting    phase = iota // subscribing; reading back the history it resumes
	phaseModel                    // a model call is out
	phaseCalls                    // acting on a response: storing it, running its calls
	phaseAborting                 // aborted: the model call or the calls in flight are stopping
	phaseHandingBack              // its node wants it back: it stops at its next checkpoint
	phaseDone                     // ended, handed back or taken over: it does nothing more
	phaseStopped                  // done, and the actor was asked to stop
)

// turn is the actor that runs one agent turn: model step, calls, results,
// until the model stops calling tools.
type turn struct {
	cfg   TurnConfig
	log   *slog.Logger
	trace string // W3C trace id shared by the turn's calls
	// instructions are the spec's and the kit's, joined once.
	instructions string

	sys  *actor.ActorSystem
	self *actor.PID
	subs []*nats.Subscription

	j     journal
	phase phase

	transcript []toolbus.Item
	step       int
	text       string
	usage      bus.Usage  // the model's tokens in the turn
	stepUsage  *bus.Usage // the last response's, until a step status carries them
	records    []bus.CallRecord

	modelCtx    context.Context
	modelCancel context.CancelFunc
	// modelOut: a model call is out, its reply not yet received (the phase may have moved
	// on: an abort or a hand-back waits for it).
	modelOut bool
	// streamed counts the items of the response streaming now that the turn took
	// (gateway.StreamItem: Response.Items[:streamed]); unsent holds those not yet in the
	// transcript (what came before the next call); early reports items that went to the
	// transcript and journal before the response was whole.
	streamed int
	unsent   []toolbus.Item
	early    bool
	textSeq  int // the last text piece published (bus.TextDelta.Seq)
	// saidText is the text a step status said while the response streamed.
	saidText string

	batch      []*pendingCall
	byWire     map[string]*pendingCall
	next       int  // first batch call not yet dispatched or resolved
	running    int  // calls in flight
	seqRunning bool // the call in flight is sequential

	abortErr   error // why the turn was aborted
	abortTimer *time.Timer
	// expiry wakes the turn when the first call in flight expires (expiryAt): one timer
	// for the turn, reset only for an earlier expiry, instead of one per call.
	expiry   *time.Timer
	expiryAt time.Time
	repaired bool // the policy's repair instruction was sent
	// submitted is the arguments of the accepted final local call (a task's result).
	submitted json.RawMessage
	// pl is the store of large payloads (TurnConfig.payloads), opened on first use.
	pl  *bus.Payloads
	tel *telemetry.Turn // nil: nothing recorded (telemetry.go)
}

// NewTurnProps returns the props of a turn actor. cfg is completed with its defaults
// (an empty Spec.ID gets a new id).
func NewTurnProps(cfg *TurnConfig) (*actor.Props, error) {
	*cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := *cfg
	var opts []actor.PropsOption
	if c.workers != nil {
		opts = append(opts, actor.WithDispatcher(c.workers))
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &turn{cfg: c, log: c.Logger.With("turn", c.Spec.ID)}
	}, opts...), nil
}

func (t *turn) Receive(ctx actor.Context) {
	defer t.recoverPanic(ctx)
	switch m := ctx.Message().(type) {
	case *actor.Started:
		t.start(ctx)
	case *turnStep:
		t.callModel()
	case *modelReply:
		t.onModelReply(m)
	case *modelStream:
		t.onModelStream(m)
	case *nats.Msg:
		t.onMsg(m)
	case *callExpired:
		t.onExpired(m.wireID)
	case *expiryDue:
		t.onExpiryDue()
	case *abortGraceOver:
		t.abandonRunning()
	case *localDone:
		t.onLocalDone(m)
	case *largeSent:
		t.onLargeSent(m)
	case *replyFetched:
		t.onReplyFetched(m)
	case *callLabelled:
		if pc := t.byWire[m.wireID]; pc != nil {
			pc.label = m.label
		}
	case *onActor:
		m.f()
	case *handBack:
		t.onHandBack(m.grace)
	case *replyLost:
		t.askResend(m.call)
	case *checkLease:
		if m.unconfirmed != nil {
			t.unconfirmed(m.unconfirmed)
		} else {
			t.leaseLost()
		}
	case *actor.Stopping:
		switch {
		case t.over() || t.self == nil:
		case t.j.kept():
			// A turn whose history is kept, stopped from outside, is not ended: its
			// record and transcript stay as they are, and the intake gives it to
			// another node, which resumes it.
			t.phase = phaseDone
		default:
			// Stopped from outside (the node is closing): the turn still ends with an
			// account of every call.
			t.fail(ErrNodeStopped)
		}
		t.cleanup()
	}
	if t.phase == phaseDone {
		t.phase = phaseStopped
		ctx.Stop(ctx.Self())
	}
}

// over reports a turn that does nothing more.
func (t *turn) over() bool { return t.phase >= phaseDone }

// recoverPanic ends a turn whose handler panicked (a fault of toolbus's own, or of a
// tool's code run on the mailbox) as failed, with an account of every call. Left to the
// supervisor, the actor would be stopped without an end: its caller would wait for ever
// and a durable turn's node would keep its lease alive. A turn that panics again while
// failing is reported to its caller as failed, as it stands.
func (t *turn) recoverPanic(ctx actor.Context) {
	r := recover()
	if r == nil {
		return
	}
	t.log.Error("turn panicked; it fails", "panic", r, "stack", string(debug.Stack()))
	err := fmt.Errorf("%w: internal error: %v", ErrRuntime, r)
	if !t.over() {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.log.Error("turn panicked while failing", "panic", r)
					t.phase = phaseDone
					if t.cfg.Done != nil {
						t.cfg.Done(TurnResult{Turn: t.cfg.Spec.ID, State: bus.TurnFailed, Err: err, Steps: t.step})
					}
				}
			}()
			t.fail(err)
		}()
	}
	if t.phase == phaseDone {
		t.phase = phaseStopped
		ctx.Stop(ctx.Self())
	}
}

func (t *turn) start(ctx actor.Context) {
	t.sys, t.self = ctx.ActorSystem(), ctx.Self()
	t.trace = telemetry.TurnTraceID(t.cfg.Spec.ID).String() // the turn's trace, traced or not
	t.instructions = t.cfg.Spec.Instructions
	if extra := t.cfg.Kit.Instructions; extra != "" {
		if t.instructions != "" {
			t.instructions += "\n\n"
		}
		t.instructions += extra
	}
	t.modelCtx, t.modelCancel = context.WithCancel(context.Background())
	t.byWire = make(map[string]*pendingCall)
	if t.j = t.cfg.journal; t.j == nil {
		t.j = &streamJournal{}
	}
	from := t.j.begin(t)
	t.startTelemetry(from.resume != nil)
	if from.resume == nil {
		t.transcript = append(t.transcript, t.cfg.Input...)
	}

	forward := func(m *nats.Msg) { t.sys.Root.Send(t.self, m) }
	subjects := []string{bus.ResultSubject(t.cfg.Spec.ID, "*"), bus.AbortSubject(t.cfg.Spec.ID)}
	if a := t.cfg.Kit.Approvals; a != "" && a != toolsets.ApproveNever {
		// Only a turn that may hold calls listens for decisions: the server scans its
		// subject cache each time a wildcard subscription goes, a cost every turn's end
		// would pay (a third of the CPU when 10,000 waiting turns were aborted at once).
		subjects = append(subjects, bus.ApproveSubject(t.cfg.Spec.ID, "*"))
	}
	for _, subj := range subjects {
		sub, err := t.cfg.Conn.Subscribe(subj, forward)
		if err == nil {
			err = sub.SetPendingLimits(-1, -1)
		}
		if err != nil {
			t.fail(fmt.Errorf("%w: subscribe %s: %w", ErrRuntime, subj, err))
			return
		}
		t.subs = append(t.subs, sub)
	}
	if err := t.cfg.Conn.Flush(); err != nil {
		t.fail(fmt.Errorf("%w: flush subscriptions: %w", ErrRuntime, err))
		return
	}
	if from.resume != nil {
		t.resume(from.resume, from.lease)
		return
	}
	t.status(bus.StatusStarted, bus.TurnStatus{State: bus.TurnRunning, Notes: t.cfg.Kit.Notes, Lease: from.lease})
	t.sys.Root.Send(t.self, &turnStep{})
}

// callModel asks the model for the next step without blocking the mailbox.
func (t *turn) callModel() {
	if t.phase == phaseAborting || t.over() || t.leaseLost() {
		return
	}
	if t.step >= t.cfg.Spec.Limits.MaxSteps {
		t.finish(bus.TurnStepLimit, fmt.Errorf("%w: %d steps", ErrStepLimit, t.cfg.Spec.Limits.MaxSteps))
		return
	}
	step, ctx, model := t.step, t.modelCtx, t.cfg.Model
	sys, self := t.sys, t.self
	req := &gateway.Request{
		Instructions: t.instructions,
		// Capped, so the turn's later appends never write where the model reads.
		Input:             t.transcript[:len(t.transcript):len(t.transcript)],
		Tools:             t.cfg.Kit.Tools.Specs(),
		ParallelToolCalls: true,
		Step:              t.step,
		// The pieces come to the mailbox in the order the gateway sends them, before its
		// reply: a call complete is dispatched from there (onModelStream).
		Stream: func(ev gateway.StreamEvent) {
			if ev.Item != nil {
				it := *ev.Item
				ev.Item = &it
			}
			sys.Root.Send(self, &modelStream{step: step, ev: ev})
		},
	}
	t.phase = phaseModel
	t.tel.StartStep(t.step)
	t.modelOut = true
	t.beginBatch()
	t.streamed, t.unsent, t.early, t.saidText = 0, nil, false, ""
	t.cfg.workers.goFunc(func() {
		resp, err := model.Respond(ctx, req)
		sys.Root.Send(self, &modelReply{step: step, resp: resp, err: err})
	})
}

func (t *turn) onModelReply(m *modelReply) {
	t.modelOut = false
	if t.phase != phaseModel && !t.over() && len(t.batch) > 0 {
		// Calls went out while the response streamed: their outputs are stored now,
		// after the part of the response that was stored, whatever became of the rest.
		t.storeDeferred()
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
		if t.running == 0 {
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
	if m.err != nil {
		t.fail(fmt.Errorf("%w: model step %d: %w", ErrModel, m.step+1, m.err)) // steps are counted from 1 for people
		return
	}
	resp := m.resp
	if t.streamed > len(resp.Items) {
		t.fail(fmt.Errorf("%w: model step %d: the gateway streamed %d items and answered with %d", ErrRuntime, m.step+1, t.streamed, len(resp.Items)))
		return
	}
	if u := resp.Usage; u != (bus.Usage{}) {
		t.usage.Add(u)
		t.stepUsage = &u
	}
	// Arguments past what a call may carry are not kept: the transcript, which goes back
	// to the model at every step, holds a note instead, and prepare refuses the call.
	// What streamed up to its last call is in the transcript already: the rest follows
	// it, as the reply has it (the items kept since, unsent, are its too).
	rest := elideOversized(resp.Items[t.streamed-len(t.unsent):])
	items := rest
	t.unsent = nil
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
	t.text = resp.Text()
	var calls []toolbus.Item
	for _, it := range rest {
		if it.Kind == toolbus.KindFunctionCall {
			calls = append(calls, it)
		}
	}
	if t.text != "" && len(calls)+len(t.batch) > 0 && t.text != t.saidText {
		// Words before the calls are shown while the calls run.
		t.status(bus.StatusStep, bus.TurnStatus{State: bus.TurnRunning, Text: t.text})
	}
	if len(calls)+len(t.batch) == 0 {
		t.j.afterResponse(items, t.answeredWithText)
		return
	}
	added := t.addCalls(calls, resp.Truncated)
	t.j.afterResponse(items, func() { t.ready(added) })
	t.storeDeferred()
}

// onModelStream takes a piece of the response the model is streaming. An item complete
// is kept; a call complete goes to the transcript and the journal with what came before
// it and is dispatched as the batch's rules allow, while the model goes on writing.
func (t *turn) onModelStream(m *modelStream) {
	if t.phase != phaseModel || m.step != t.step {
		return // aborted, handed back or over: the rest of the response is not acted on
	}
	switch m.ev.Kind {
	case gateway.StreamText:
		t.streamText(m.ev)
	case gateway.StreamItem:
		if m.ev.Item == nil || m.ev.Index != t.streamed {
			return // not the next item (the gateway's contract): the reply has it
		}
		t.streamed++
		it := elideOversized([]toolbus.Item{*m.ev.Item})[0]
		t.unsent = append(t.unsent, it)
		if it.Kind != toolbus.KindFunctionCall {
			return
		}
		items := t.unsent
		t.unsent = nil
		t.early = true
		t.transcript = append(t.transcript, items...)
		if text := (&gateway.Response{Items: items}).Text(); text != "" && t.saidText == "" {
			// Words before the calls are shown while the calls run: these are whole.
			t.saidText = text
			t.status(bus.StatusStep, bus.TurnStatus{State: bus.TurnRunning, Text: text})
		}
		// Whole: a call the output limit cut never streams.
		added := t.addCalls([]toolbus.Item{it}, false)
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

// ready marks calls stored (a durable journal wrote them) and dispatches what the
// modes allow.
func (t *turn) ready(calls []*pendingCall) {
	for _, pc := range calls {
		pc.ready = true
	}
	t.schedule()
}

// storeDeferred stores the outputs of calls that finished while their response streamed.
func (t *turn) storeDeferred() {
	for _, pc := range t.batch {
		if pc.deferred && !pc.stored {
			pc.deferred = false
			pc.stored = t.j.afterCall(pc.outputItem())
		}
	}
}

// prepare resolves each call's tool and arguments, in the model's order, as a new batch
// of calls that are stored already (a resumed turn's).
func (t *turn) prepare(calls []toolbus.Item, truncated bool) {
	t.beginBatch()
	for _, pc := range t.addCalls(calls, truncated) {
		pc.ready = true
	}
}

// beginBatch empties the batch for a new response.
func (t *turn) beginBatch() {
	t.batch = t.batch[:0]
	clear(t.byWire)
	t.next, t.running, t.seqRunning = 0, 0, false
}

// addCalls adds calls to the batch, in the model's order, resolving each one's tool and
// arguments; a call refused here is settled at once. They go out once ready.
func (t *turn) addCalls(calls []toolbus.Item, truncated bool) []*pendingCall {
	added := make([]*pendingCall, 0, len(calls))
	for _, it := range calls {
		pc := &pendingCall{item: it, wireID: it.CallID}
		added = append(added, pc)
		if !bus.ValidID(pc.wireID) {
			pc.wireID = bus.NewID()
		}
		if _, dup := t.byWire[pc.wireID]; dup {
			pc.wireID = bus.NewID()
		}
		t.byWire[pc.wireID] = pc
		pc.record = bus.CallRecord{Call: it.CallID, Tool: it.Name, Namespace: it.Namespace}
		t.batch = append(t.batch, pc)

		tool, ok := t.lookup(it)
		if !ok {
			pc.resolve(bus.OutcomeInvalid, t.unknownTool(it))
			continue
		}
		pc.tool = tool
		if n, ok := elidedSize(it.Arguments); ok {
			pc.resolve(bus.OutcomeInvalid, tooLarge(it.Name, n))
			continue
		}
		if local, ok := t.cfg.Kit.Local[tool.Name]; ok && tool.Category == toolsets.LocalCategory {
			pc.local = &local
		}
		if admit := t.cfg.Kit.Policy.Admit; admit != nil {
			if d, why := admit(tool); d != toolsets.Run {
				pc.resolve(bus.OutcomeInvalid, "call refused: "+why)
				continue
			}
		}
		strict := tool.Strict && tool.Params.Strict().Err == nil
		args, err := tool.Params.Parse(it.Arguments, schema.ParseOptions{
			Strict:      strict,
			Truncated:   truncated || it.Truncated,
			Destructive: tool.Destructive,
		})
		for _, r := range args.Rungs {
			pc.record.Rungs = append(pc.record.Rungs, string(r))
		}
		pc.record.Truncated = args.Truncated
		if err != nil {
			var ae *schema.ArgumentError
			if errors.As(err, &ae) {
				for _, r := range ae.Rungs {
					pc.record.Rungs = append(pc.record.Rungs, string(r))
				}
			}
			pc.resolve(bus.OutcomeInvalid, fmt.Sprintf("invalid arguments for %s: %v", it.Name, err))
			continue
		}
		if n := len(args.JSON); n > bus.MaxCallPayload && pc.local == nil {
			pc.resolve(bus.OutcomeInvalid, tooLarge(it.Name, int64(n)))
			continue
		}
		pc.args = args.JSON
	}
	return added
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
	return fmt.Sprintf("unknown tool %q; the tools available are: %s", name, strings.Join(t.cfg.Kit.Tools.Names(), ", "))
}

// resolve settles a call that never ran.
func (pc *pendingCall) resolve(o bus.Outcome, msg string) {
	pc.state = callDone
	pc.record.Outcome, pc.record.Error = o, msg
	pc.output = toolbus.ErrorResult(msg)
}

// schedule dispatches what the execution modes allow: a run of parallel
// calls goes out together; a sequential call waits until nothing is in
// flight and holds every call after it. A call goes out once stored (ready), and
// the batch is complete once its response is (no model call out) and every call is.
func (t *turn) schedule() {
	for t.phase != phaseAborting && t.next < len(t.batch) && !t.seqRunning {
		pc := t.batch[t.next]
		if pc.state == callDone {
			t.next++
			continue
		}
		if !pc.ready || pc.tool.Mode == toolbus.Sequential && t.running > 0 {
			break
		}
		t.dispatch(pc)
		t.next++
	}
	if t.running == 0 && !t.modelOut && (t.next == len(t.batch) || t.phase == phaseAborting) {
		t.completeBatch()
	}
}

func (t *turn) dispatch(pc *pendingCall) {
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
	if t.cfg.Kit.NeedsApproval(pc.tool) {
		t.hold(pc, timeout)
		return
	}
	t.send(pc, timeout)
}

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
		pc.resolve(bus.OutcomeUnavailable, fmt.Sprintf("dispatch %s: %v", pc.tool.Name, err))
		return
	}
	pc.state = callRunning
	t.running++
	t.seqRunning = pc.tool.Mode == toolbus.Sequential
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
	if t.over() || t.byWire[pc.wireID] != pc || pc.state != callRunning {
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

// tooLarge is the error a call gets whose arguments are over bus.MaxCallPayload.
func tooLarge(tool string, size int64) string {
	return fmt.Sprintf("the arguments of %s are %s, over the %s a call may carry; the call did not run: do the work in smaller calls (write a large file in parts, with append)",
		tool, bus.FormatBytes(size), bus.FormatBytes(bus.MaxCallPayload))
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
		if pc.state != callRunning || pc.expires.IsZero() {
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

// traceparent is a new call's W3C trace context: its execute_tool span's when the turn
// traces, else the turn's trace id and a span id of its own.
func (t *turn) traceparent(pc *pendingCall) string {
	if tp := pc.span.Traceparent(); tp != "" {
		return tp
	}
	flags := "-00"
	if t.cfg.sampled {
		flags = "-01"
	}
	return "00-" + t.trace + "-" + randomHex(8) + flags
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
		t.abort(tm.Abort) // a malformed abort still aborts, with no reason
	case bus.KindResult:
		t.onResult(tm, err)
	case bus.KindApprove:
		t.onApprove(tm.Subject.Call, m, tm.Approve, err)
	}
}

func (t *turn) onResult(tm bus.TurnMessage, err error) {
	pc := t.byWire[tm.Subject.Call]
	if pc == nil || pc.state != callRunning {
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
	if t.over() || t.byWire[pc.wireID] != pc || pc.state != callRunning {
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
	if r.Abort != nil && r.Abort.Turn == t.cfg.Spec.ID && t.phase != phaseAborting {
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

// settle records a call that was in flight and moves the batch on.
func (t *turn) settle(pc *pendingCall, o bus.Outcome, msg string, res toolbus.Result) {
	if pc.timer != nil {
		pc.timer.Stop()
	}
	t.deleteArgs(pc)
	pc.state = callDone
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
	switch {
	case pc.stored:
	case t.modelOut:
		pc.deferred = true // stored after its response (storeDeferred)
	default:
		pc.stored = t.j.afterCall(pc.outputItem())
	}
	t.running--
	if t.seqRunning && pc.tool.Mode == toolbus.Sequential {
		t.seqRunning = false
	}
	if t.phase == phaseAborting {
		if t.running == 0 && !t.modelOut {
			t.completeBatch()
		}
		return
	}
	t.schedule()
}

// answerLocal runs a turn-local tool off the mailbox; its answer comes back as localDone.
func (t *turn) answerLocal(pc *pendingCall) {
	if pc.local.Final && t.submitted != nil {
		// Final calls are sequential: the first accepted one is the turn's.
		pc.resolve(bus.OutcomeInvalid, fmt.Sprintf("%s was accepted already in this response; the turn ends with that one", pc.tool.Name))
		return
	}
	pc.start = time.Now()
	pc.state = callRunning
	t.running++
	t.seqRunning = pc.tool.Mode == toolbus.Sequential
	ctx, answer, args := t.modelCtx, pc.local.Answer, pc.args
	sys, self, id := t.sys, t.self, pc.wireID
	go func() {
		res, err := answer(ctx, args)
		sys.Root.Send(self, &localDone{wireID: id, res: res, err: err})
	}()
}

func (t *turn) onLocalDone(m *localDone) {
	pc := t.byWire[m.wireID]
	if pc == nil || pc.state != callRunning {
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

func (t *turn) onExpired(wireID string) {
	pc := t.byWire[wireID]
	if pc == nil || pc.state != callRunning {
		return
	}
	if pc.held {
		t.settle(pc, bus.OutcomeTimeout, fmt.Sprintf("tool %s waited for an approval that did not come before its deadline; it did not run", pc.tool.QualifiedName()), toolbus.Result{})
		return
	}
	if t.phase == phaseAborting {
		t.settle(pc, bus.OutcomeAbandoned, abandonedMsg(t.cfg.AbortGrace), toolbus.Result{})
		return
	}
	t.settle(pc, bus.OutcomeTimeout, fmt.Sprintf("tool %s did not answer before its deadline", pc.tool.Name), toolbus.Result{})
}

func abandonedMsg(grace time.Duration) string {
	return fmt.Sprintf("call abandoned: the turn was aborted and the call did not stop within %s; it may still be running", grace)
}

// abort stops the turn: no new model call, no new tool call; calls in flight
// were cancelled by their hosts, which listen on the same subject, and get
// the grace period to say so. a is nil for an abort that gave no reason (or a
// malformed one: it aborts all the same).
func (t *turn) abort(a *bus.Abort) {
	if t.phase == phaseAborting || t.over() {
		return
	}
	modelOut := t.modelOut
	t.phase = phaseAborting
	t.modelCancel()
	reason := "aborted"
	t.abortErr = ErrAborted
	if a != nil && a.Reason != "" {
		reason = "aborted: " + a.Reason
		t.abortErr = fmt.Errorf("%w: %s", ErrAborted, a.Reason)
	}
	t.tel.Aborted(reason)
	for _, pc := range t.batch[t.next:] {
		if pc.state == callWaiting {
			pc.resolve(bus.OutcomeNotStarted, "call not started: the turn was "+reason)
		}
	}
	t.next = len(t.batch)
	// A call held for approval never went out: it did not start.
	for _, pc := range t.batch {
		if pc.held && pc.state == callRunning {
			if pc.timer != nil {
				pc.timer.Stop()
			}
			t.settle(pc, bus.OutcomeNotStarted, "call not started (it waited for approval): the turn was "+reason, toolbus.Result{})
		}
	}
	if t.over() {
		return
	}
	switch {
	case t.running > 0:
		sys, self := t.sys, t.self
		t.abortTimer = time.AfterFunc(t.cfg.AbortGrace, func() { sys.Root.Send(self, &abortGraceOver{}) })
	case modelOut:
		// The model call returns with ctx's error; onModelReply finishes.
	default:
		t.completeBatch()
	}
}

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

// abandonRunning gives up on calls that did not stop within the grace.
func (t *turn) abandonRunning() {
	for _, pc := range t.batch {
		if pc.state == callRunning {
			t.settle(pc, bus.OutcomeAbandoned, abandonedMsg(t.cfg.AbortGrace), toolbus.Result{})
		}
	}
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
		if !pc.resumed {
			t.transcript = append(t.transcript, out)
		}
		if !pc.stored {
			outputs = append(outputs, out)
			pc.stored = true
		}
		terminate = terminate || pc.output.Terminate
		t.records = append(t.records, pc.record)
		t.callEnded(pc)
	}
	t.batch = t.batch[:0]
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
	}
}

func (t *turn) fail(err error) {
	t.log.Warn("turn failed", "err", err)
	// Every call of the batch gets an output, so the transcript stays valid
	// for the provider: a call that never went out did not start; one in
	// flight may still be running on its host.
	for _, pc := range t.batch {
		switch pc.state {
		case callWaiting:
			pc.resolve(bus.OutcomeNotStarted, "call not started: the turn failed: "+err.Error())
		case callRunning:
			if pc.timer != nil {
				pc.timer.Stop()
			}
			if pc.held {
				pc.resolve(bus.OutcomeNotStarted, "call not started (it waited for approval): the turn failed: "+err.Error())
				continue
			}
			pc.resolve(bus.OutcomeAbandoned, "call abandoned: the turn failed ("+err.Error()+"); it may still be running")
		}
	}
	if len(t.batch) > 0 {
		t.closeBatch()
	}
	t.finish(bus.TurnFailed, err)
}

func (t *turn) finish(state bus.TurnState, err error) {
	if t.over() {
		return
	}
	t.phase = phaseDone
	t.modelCancel()
	res := TurnResult{
		Turn: t.cfg.Spec.ID, State: state, Text: t.text, Err: err, Steps: t.step,
		Calls: t.records, Transcript: t.transcript, Usage: t.usage, Submitted: t.submitted,
	}
	switch werr := t.j.atEnd(state, res.ErrorText(), t.submitted); {
	case errors.Is(werr, durable.ErrFenced):
		res.Fenced = true
		t.log.Warn("turn taken over by another node; stopping without ending it", "err", werr)
		if t.cfg.Done != nil {
			t.cfg.Done(res)
		}
		return
	case werr != nil && t.j.kept():
		// Not over: a done status would claim an end that no node can read back (a
		// turn completed with a cut history). Another node resumes it after the intake
		// gives it again.
		res.Unended = true
		res.Err = fmt.Errorf("%w: the turn's %s end could not be stored: %w", ErrRuntime, state, werr)
		t.log.Warn("could not store the turn's end; the intake gives it to a node again", "state", state, "err", werr)
		if t.cfg.Done != nil {
			t.cfg.Done(res)
		}
		return
	case werr != nil:
		// A turn whose history was not stored did not complete.
		t.log.Warn("store the turn's end", "err", werr)
		if res.Err == nil {
			res.Err = fmt.Errorf("%w: %w", ErrRuntime, werr)
		}
		if state == bus.TurnCompleted {
			state, res.State = bus.TurnFailed, bus.TurnFailed
		}
	}
	t.status(bus.StatusDone, bus.TurnStatus{State: state, Text: t.text, Calls: t.records, Error: res.ErrorText()})
	if t.cfg.Done != nil {
		t.cfg.Done(res)
	}
}

func (t *turn) cleanup() {
	t.endTelemetry()
	for _, s := range t.subs {
		_ = s.Unsubscribe()
	}
	t.subs = nil
	for _, pc := range t.batch {
		if pc.timer != nil {
			pc.timer.Stop()
		}
	}
	if t.abortTimer != nil {
		t.abortTimer.Stop()
	}
	if t.expiry != nil {
		t.expiry.Stop()
	}
	if t.modelCancel != nil {
		t.modelCancel()
	}
}

// status publishes a turn status message.
func (t *turn) status(kind string, st bus.TurnStatus) {
	st.Turn, st.Node, st.Agent, st.Kind, st.Step, st.Time = t.cfg.Spec.ID, t.cfg.Node, t.cfg.Spec.Agent, t.cfg.Spec.Kind, t.step, time.Now()
	switch {
	case kind == bus.StatusStep && t.stepUsage != nil:
		st.Usage, t.stepUsage = t.stepUsage, nil
	case kind == bus.StatusDone && t.usage != (bus.Usage{}):
		total := t.usage
		st.Usage = &total
	}
	subject := bus.TurnStatusSubject(t.cfg.Spec.ID, kind)
	if t.cfg.interest != nil && !t.cfg.interest(subject) {
		return // nobody follows this turn
	}
	if kind != bus.StatusDone && t.leaseUnsure() {
		return // another node may speak for the turn now
	}
	b, err := bus.EncodeStatus(st, int(t.cfg.Conn.MaxPayload()))
	if err == nil {
		err = t.cfg.Conn.Publish(subject, b)
	}
	if err != nil {
		t.log.Warn("publish status", "kind", kind, "err", err)
	}
}

// leaseLost reports, and stops, a turn whose node no longer holds it, or cannot confirm
// that it does: a node woken after a pause longer than its lease, or cut off from the
// quorum for a lease, asks before it calls the model, settles expired calls or speaks
// for the turn (journal.confirm).
func (t *turn) leaseLost() bool { return t.leaseLostFor(0) }

// leaseLostFor is leaseLost for a caller that relies on the lease for d (a stopping
// node's grace): unless the lease of the turn's last confirmation outlasts d, the record
// is written to confirm it (durableJournal.confirmFor), within a third of a lease.
func (t *turn) leaseLostFor(d time.Duration) bool {
	if t.over() {
		return false
	}
	confirm := t.j.confirm
	if dj, ok := t.j.(*durableJournal); ok && d > 0 {
		confirm = func() error { return dj.confirmFor(d) }
	}
	switch err := confirm(); {
	case errors.Is(err, durable.ErrFenced):
		t.fenced(err)
		return true
	case err != nil && d > 0:
		t.unconfirmed(fmt.Errorf("as its node stops (grace %s): %w", d, err))
		return true
	case err != nil:
		t.unconfirmed(err)
		return true
	}
	return false
}

// leaseUnsure reports a turn that should not speak for itself now: lost, or past its
// lease without confirming it (which stops it).
func (t *turn) leaseUnsure() bool { return t.leaseLost() }

// fenced stops a turn another node took over: it writes nothing more.
func (t *turn) fenced(err error) {
	t.log.Warn("turn taken over by another node; stopping without ending it", "err", err)
	t.phase = phaseDone
	t.modelCancel()
	if t.cfg.Done != nil {
		t.cfg.Done(TurnResult{Turn: t.cfg.Spec.ID, State: bus.TurnRunning, Fenced: true, Steps: t.step})
	}
}

// unconfirmed stops a turn whose node could not confirm that it still holds it
// (durable.ErrUnconfirmed: the node is cut off from the quorum, or was paused past the
// lease): another node may hold it now, or once the lease runs out, so this one says and
// writes nothing more for it. The intake gives it to a node again after the lease; its
// result is Fenced, as a turn taken over.
func (t *turn) unconfirmed(err error) {
	if t.over() {
		return
	}
	t.log.Warn("could not confirm that this node still holds the turn (cut off from the quorum?); stopping without ending it", "err", err)
	t.phase = phaseDone
	t.modelCancel()
	if t.cfg.Done != nil {
		t.cfg.Done(TurnResult{Turn: t.cfg.Spec.ID, State: bus.TurnRunning, Fenced: true, Steps: t.step})
	}
}

// onHandBack asks a turn whose history is kept to stop at its next checkpoint and go
// back to the intake, within its node's grace: at once while it waits for the model (the
// next node asks again), after the batch while calls run. An aborted turn ends as it is;
// a turn another node has taken stops at once, with no checkpoint to wait for (a node
// woken from a pause waited out its stop's grace for the calls of turns it had lost), and
// so does one whose lease its node cannot confirm for the grace (cut off from the
// quorum, it could store no hand-back either, and waited out its grace).
func (t *turn) onHandBack(grace time.Duration) {
	if t.over() || t.phase == phaseAborting || t.phase == phaseHandingBack || !t.j.kept() || t.leaseLostFor(grace) {
		return
	}
	modelOut := t.modelOut
	t.phase = phaseHandingBack
	switch {
	case modelOut:
		t.modelCancel() // onModelReply hands over
	case t.running == 0 && t.next >= len(t.batch):
		t.handOver()
	}
}

// handOver gives the turn back for the next node and ends this node's part.
func (t *turn) handOver() {
	if t.over() {
		return
	}
	err := t.j.handBack()
	t.phase = phaseDone
	t.modelCancel()
	if err != nil {
		t.log.Warn("hand the turn back", "err", err)
	} else {
		t.log.Info("turn handed back to the intake", "step", t.step)
	}
	if t.cfg.Done != nil {
		// A hand-back that was not stored (nor fenced) leaves the turn unended: the intake
		// gives it to a node again (it is not over: no word of an end).
		res := TurnResult{Turn: t.cfg.Spec.ID, State: bus.TurnQueued, HandedBack: err == nil, Fenced: errors.Is(err, durable.ErrFenced),
			Steps: t.step, Transcript: t.transcript}
		if err != nil && !res.Fenced {
			res.Unended, res.Err = true, fmt.Errorf("%w: the turn's hand-back could not be stored: %w", ErrRuntime, err)
		}
		t.cfg.Done(res)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
