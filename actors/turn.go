package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors/batch"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
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
	// MaxCalls bounds the turn's calls in flight at once, with the kit's own bounds (the
	// lower holds); zero is none.
	MaxCalls int
	Logger   *slog.Logger
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
		c.CallTimeout = bus.DefaultCallTimeout
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

// pendingCall is one function call of the current batch: what the turn knows of it.
// Where it stands (waiting, held, running, settled, stored) is the batch scheduler's
// (turn.b, its index i): one state, kept in one place.
type pendingCall struct {
	i      int // its index in the batch, the model's order
	item   toolbus.Item
	wireID string // the call id on the bus (the model's when it is a valid token)
	tool   *toolbus.Spec
	local  *toolsets.LocalTool // set for a tool the turn answers itself
	args   json.RawMessage
	// repaired: the repair ladder changed the model's text to make args.
	repaired bool
	timer    *time.Timer // a held call's approval deadline
	start    time.Time
	// expires is when a call sent to its host is given up on: its deadline and replyGrace.
	expires time.Time
	// connLost: the turn's connection was re-established while the call ran
	// (askResendAll), and a reply sent meanwhile was lost.
	connLost bool
	record   bus.CallRecord
	output   toolbus.Result
	// argsHash names the arguments a held call's approval must name (their SHA-256).
	argsHash string
	label    string // the host's activity label for a held call
	deadline time.Time
	// cancelled is why the call was cancelled while it ran (an abort that named it), for
	// the outcome it gets if its host does not answer within the abort grace.
	cancelled string
	// argsRef names the object that holds the arguments sent by reference (too large for
	// a message); the turn deletes it once the call is settled.
	argsRef bus.PayloadRef
	span    *telemetry.Call // its execute_tool span, from dispatch to closeBatch
}

// Messages the turn actor receives besides *nats.Msg.
type (
	turnStep struct{}
	// modelReply is the end of a response: the items that did not stream (rest: the
	// response's last chunk, all of it for a model that does not stream) and what the
	// response says of itself. With the streamed ones (modelStream), each item of a
	// response reaches the turn once, in order (callModel).
	modelReply struct {
		step int
		rest []toolbus.Item
		info responseInfo
		err  error
	}
	// modelStream is a piece of the response the model is streaming: a piece of text, or
	// the next item (item set), complete.
	modelStream struct {
		step int
		text gateway.StreamEvent
		item *toolbus.Item
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
	// disp runs the mailbox; the turn's own goroutines send through it (sendInline).
	disp *turnDispatcher
	subs []*nats.Subscription

	j     journal
	phase phase

	transcript []toolbus.Item
	step       int
	text       string
	usage      bus.Usage  // the model's tokens in the turn
	stepUsage  *bus.Usage // the last response's, until a step status carries them
	records    []bus.CallRecord
	// stepSubject is the subject of the turn's step statuses (statusSubject).
	stepSubject string

	modelCtx    context.Context
	modelCancel context.CancelFunc
	// modelOut: a model call is out, its reply not yet received (the phase may have moved
	// on: an abort or a hand-back waits for it).
	modelOut bool
	// unsent holds the items of the response streaming now that are not in the transcript
	// yet (what came since its last call); early reports items that went to the
	// transcript and journal before the response was whole.
	unsent  []toolbus.Item
	early   bool
	textSeq int // the last text piece published (bus.TextDelta.Seq)
	// saidText is the text a step status said while the response streamed.
	saidText string

	// batch is the calls of the current response, in the model's order; b schedules
	// them (batch.Batch: what goes out, what waits, each call's state).
	batch  []*pendingCall
	b      batch.Batch
	byWire map[string]*pendingCall

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
	d := &turnDispatcher{w: c.workers}
	return actor.PropsFromProducer(func() actor.Actor {
		return &turn{cfg: c, log: c.Logger.With("turn", c.Spec.ID), disp: d}
	}, actor.WithDispatcher(d)), nil
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
	case *turnsReconnected:
		if m.nc == t.cfg.Conn {
			t.askResendAll()
		}
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
	t.b.SetCaps(batch.Caps{Total: lowest(t.cfg.MaxCalls, t.cfg.Kit.MaxCalls), PerGroup: t.cfg.Kit.MaxCallsPerCategory})
	if t.j = t.cfg.journal; t.j == nil {
		t.j = &streamJournal{}
	}
	from := t.j.begin(t)
	t.startTelemetry(from.resume != nil)
	if from.resume == nil {
		t.transcript = append(t.transcript, t.cfg.Input...)
	}

	forward := func(m *nats.Msg) { t.disp.sendInline(t.sys, t.self, m) }
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
	t.status(bus.StatusStarted, bus.TurnStatus{State: bus.TurnRunning, Notes: t.cfg.Kit.Notes, Home: t.cfg.Kit.Home, Lease: from.lease})
	t.sys.Root.Send(t.self, &turnStep{})
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
	subject := t.statusSubject(kind)
	if t.cfg.interest != nil && !t.cfg.interest(subject) {
		if kind == bus.StatusStep {
			t.stepUsage = nil // as if this status had carried them
		}
		return // nobody follows this turn
	}
	st.Turn, st.Node, st.Agent, st.Kind = t.cfg.Spec.ID, t.cfg.Node, t.cfg.Spec.Agent, t.cfg.Spec.Kind
	if st.Step == 0 {
		st.Step = t.step // the steps counted; a status of the step being written says so
	}
	switch {
	case kind == bus.StatusStep && t.stepUsage != nil:
		st.Usage, t.stepUsage = t.stepUsage, nil
	case kind == bus.StatusDone && t.usage != (bus.Usage{}):
		total := t.usage
		st.Usage = &total
	}
	if kind != bus.StatusDone && t.leaseUnsure() {
		return // another node may speak for the turn now
	}
	// Stamped once the lease is known to hold: a status whose time is before a pause of
	// its node was said before it (it may reach a watcher only after the wake).
	st.Time = time.Now()
	b, err := bus.EncodeStatus(st, int(t.cfg.Conn.MaxPayload()))
	if err == nil {
		err = t.cfg.Conn.Publish(subject, b)
	}
	if err != nil {
		t.log.Warn("publish status", "kind", kind, "err", err)
	}
}

// statusSubject is the subject of the turn's statuses of a kind; the step status's, sent
// (or asked about) at every step, is made once.
func (t *turn) statusSubject(kind string) string {
	if kind != bus.StatusStep {
		return bus.TurnStatusSubject(t.cfg.Spec.ID, kind)
	}
	if t.stepSubject == "" {
		t.stepSubject = bus.TurnStatusSubject(t.cfg.Spec.ID, kind)
	}
	return t.stepSubject
}

// lowest is the lower of two bounds where zero is none.
func lowest(a, b int) int {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}
