package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/telemetry"
)

// Defaults of a category host.
const (
	DefaultCallTimeout   = bus.DefaultCallTimeout
	DefaultMaxConcurrent = 64
)

// HostConfig configures the host of one tool category on one node.
type HostConfig struct {
	Category string
	Tools    []*toolbus.Tool
	Conn     *nats.Conn
	// Reconnect, when set, gives a restarted host a new connection after its own
	// closed; without it such a host cannot come back.
	Reconnect func() (*nats.Conn, error)
	Node      string
	// Home, when set, is every agent's home (a single-user node). Otherwise
	// HomeRoot holds the agents' homes: a call of agent A runs with Call.Home =
	// HomeRoot/A. The home never comes from the bus.
	Home     string
	HomeRoot string
	// MaxConcurrent bounds the calls executing at once; more wait for a slot,
	// within their deadline.
	MaxConcurrent int
	// DefaultTimeout bounds a call whose tool sets no Timeout and whose request
	// carries no deadline.
	DefaultTimeout time.Duration
	Logger         *slog.Logger

	workers *workers // the node's; nil: a goroutine per call
	// voucher checks the vouches of the node's turns; nil: validate every call.
	voucher *bus.Voucher
	// interest tells whether anyone would receive an event; nil: publish every one.
	interest func(subject string) bool
	// payloads reads large arguments and stores large replies (bus.ObjectPayloads); nil:
	// the host opens them through its own connection on first use.
	payloads *bus.Payloads
	// telemetry records the calls' host spans and metrics (NodeConfig.Telemetry).
	telemetry *telemetry.Telemetry
}

// hostCall is a tool request taken from the micro handler.
type hostCall struct {
	tool  *toolbus.Tool
	req   micro.Request
	trace string // the request's traceparent, passed on with the call's events
	vouch string // the request's Toolbus-Vouch
	// payload names the object that holds the arguments (Toolbus-Payload), when they were
	// too large for the message.
	payload bus.PayloadRef
	tel     telemetry.HostCall // its span on this node, and its count
	turn    string             // the request's Toolbus-Turn
	conn    uint64             // host.connGen when the request came: see keep

	// What running it takes, in the same allocation (begin, work, run): the call as the
	// tool sees it, the host and the contexts it runs under. One object a call where the
	// closures of begin and run, the call and the reply they captured made six.
	h              *host
	call           toolbus.Call
	st             *endpointStats
	ctx            context.Context
	cancel         context.CancelCauseFunc
	cancelDeadline context.CancelFunc
}

// hostReady asks a host whether it serves; it answers with hostStarted.
type hostReady struct{}

type hostStarted struct{ err error }

// hostFailed tells a host that its service or connection ended without being asked to.
// gen is the incarnation that failed: a connection that closes ends the service too, and
// the second report must not fail the incarnation that replaced the first.
type hostFailed struct {
	err error
	gen int
}

// hostShared is what a host's incarnations share across supervised restarts.
type hostShared struct {
	mu      sync.Mutex
	nc      *nats.Conn
	started bool // a first start succeeded: later starts are restarts
	gen     int  // incarnations so far
}

// host is the actor that serves one category on one node. The actor owns the
// micro service's life; calls do not pass through its mailbox: each starts on
// a goroutine of its own straight from the micro handler (which runs one at a
// time per endpoint), one hop less on every call's path.
type host struct {
	cfg      HostConfig
	shared   *hostShared
	log      *slog.Logger
	sys      *actor.ActorSystem
	self     *actor.PID
	gen      int         // this incarnation
	failed   atomic.Bool // this incarnation reported its failure
	svc      micro.Service
	abortSub *nats.Subscription
	// describeSub answers what a call would do (its activity label) without running it.
	describeSub *nats.Subscription
	startErr    error
	slots       chan struct{}
	stats       map[string]*endpointStats
	agents      *turnAgents
	// resendSub answers the requests for a reply again (bus.ResendSubject) from kept.
	resendSub *nats.Subscription
	kept      keptReplies
	// connGen counts the times the host's connection was re-established.
	connGen    atomic.Uint64
	payloadsMu sync.Mutex
	payloadsOf *bus.Payloads // opened through the host's connection when the node gave none

	mu sync.Mutex
	// inflight maps each call in flight (its turn and id) to its cancel, for aborts. One
	// map keyed by both, not a map of each turn's calls: a turn's map was made and dropped
	// with each of its calls when they ran one at a time (two allocations a call). An
	// abort of a turn with calls here walks every call in flight (at most the calls the
	// host runs and those waiting for a slot); turns counts each turn's, so that the
	// abort of a turn with none (10 000 turns waiting on their model, aborted at once)
	// walks nothing.
	inflight map[inflightKey]context.CancelCauseFunc
	turns    map[string]int
	stopped  bool // stop began: the service's end is expected
	wg       sync.WaitGroup
}

// inflightKey names a call in flight on a host.
type inflightKey struct{ turn, call string }

// endpointStats are kept by the host because replies are sent after the micro
// handler returns, which micro's own stats do not see.
type endpointStats struct {
	inflight atomic.Int64
	ok       atomic.Int64
	errors   atomic.Int64
	nanos    atomic.Int64
}

// withDefaults fills what a host config may leave out; the one place host defaults live.
func (c HostConfig) withDefaults() HostConfig {
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = DefaultCallTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate checks a host config.
func (c HostConfig) validate() error {
	switch {
	case !bus.ValidToken(c.Category):
		return fmt.Errorf("category host: invalid category %q", c.Category)
	case c.Conn == nil:
		return fmt.Errorf("category host %s: no connection", c.Category)
	case len(c.Tools) == 0:
		return fmt.Errorf("category host %s: no tools", c.Category)
	}
	for _, t := range c.Tools {
		if t.Category != c.Category {
			return fmt.Errorf("category host %s: tool %s belongs to category %q", c.Category, t.Name, t.Category)
		}
	}
	return nil
}

// NewHostProps returns the props of a category host actor.
func NewHostProps(cfg HostConfig) (*actor.Props, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	shared := &hostShared{nc: cfg.Conn}
	return actor.PropsFromProducer(func() actor.Actor {
		// The stats table is filled before the service exists and only read
		// after, so micro's STATS handler may read it without a lock.
		stats := make(map[string]*endpointStats, len(cfg.Tools))
		for _, t := range cfg.Tools {
			stats[t.Name] = &endpointStats{}
		}
		return &host{
			cfg:      cfg,
			shared:   shared,
			log:      cfg.Logger.With("category", cfg.Category),
			slots:    make(chan struct{}, cfg.MaxConcurrent),
			inflight: make(map[inflightKey]context.CancelCauseFunc),
			turns:    make(map[string]int),
			stats:    stats,
		}
	}), nil
}

func (h *host) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		h.sys, h.self = ctx.ActorSystem(), ctx.Self()
		h.shared.mu.Lock()
		h.shared.gen++
		h.gen = h.shared.gen
		h.shared.mu.Unlock()
		restart := h.shared.isStarted()
		if err := h.start(); err != nil {
			h.startErr = fmt.Errorf("category host %s: %w", h.cfg.Category, err)
			h.stop()
			if restart {
				// A restart that fails goes back to the supervisor, which tries
				// again later; the first start reports to whoever started it.
				panic(h.startErr)
			}
			return
		}
		h.shared.markStarted()
		if restart {
			h.log.Info("category host restarted")
		}
	case *hostReady:
		ctx.Respond(hostStarted{err: h.startErr})
	case *hostFailed:
		if m.gen == h.gen && !h.isStopped() {
			// Fail to the supervisor (the node), which restarts the host.
			panic(fmt.Errorf("category host %s: %w", h.cfg.Category, m.err))
		}
	case *actor.Stopping:
		h.stop()
	case *actor.Restarting:
		h.stop()
	}
}

func (s *hostShared) isStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

func (s *hostShared) markStarted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
}

// conn is the host's connection, a new one when the last closed.
func (h *host) conn() (*nats.Conn, error) {
	s := h.shared
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nc != nil && !s.nc.IsClosed() {
		return s.nc, nil
	}
	if h.cfg.Reconnect == nil {
		return nil, errors.New("the host's connection is closed and it has no way to reconnect")
	}
	nc, err := h.cfg.Reconnect()
	if err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	s.nc = nc
	return nc, nil
}

func (h *host) isStopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// fail tells the actor that its service or connection ended on its own.
func (h *host) fail(err error) {
	if h.isStopped() || !h.failed.CompareAndSwap(false, true) {
		return
	}
	h.log.Warn("category host failed", "err", err)
	h.sys.Root.Send(h.self, &hostFailed{err: err, gen: h.gen})
}

func (h *host) start() error {
	nc, err := h.conn()
	if err != nil {
		return err
	}
	h.cfg.Conn = nc
	h.agents = newTurnAgents(nc)
	nc.SetClosedHandler(func(*nats.Conn) { h.fail(errors.New("its connection closed")) })
	nc.SetReconnectHandler(func(*nats.Conn) { h.reconnected() })
	specs := make([]*toolbus.Spec, len(h.cfg.Tools))
	tools := make(map[*toolbus.Spec]*toolbus.Tool, len(h.cfg.Tools))
	for i, t := range h.cfg.Tools {
		specs[i] = &t.Spec
		tools[specs[i]] = t
	}
	svc, err := catalog.Serve(nc, catalog.Service{
		Category: h.cfg.Category,
		Node:     h.cfg.Node,
		Specs:    specs,
		Handle: func(spec *toolbus.Spec, r micro.Request) {
			h.begin(&hostCall{tool: tools[spec], req: r})
		},
		Stats: func(e *micro.Endpoint) any {
			s := h.stats[e.Name]
			if s == nil {
				return nil
			}
			return map[string]int64{
				"inflight": s.inflight.Load(), "ok": s.ok.Load(), "errors": s.errors.Load(),
				"execute_ns": s.nanos.Load(),
			}
		},
		DoneHandler: func(micro.Service) { h.fail(errors.New("its micro service stopped")) },
		ErrHandler: func(_ micro.Service, e *micro.NATSError) {
			h.fail(fmt.Errorf("its micro service failed on %s: %s", e.Subject, e.Description))
		},
	})
	if err != nil {
		return err
	}
	h.svc = svc
	sub, err := h.cfg.Conn.Subscribe(bus.AllAborts, func(m *nats.Msg) {
		if ts, ok := bus.ParseTurnSubject(m.Subject); ok {
			var a bus.Abort
			_ = json.Unmarshal(m.Data, &a)
			a.Turn = ts.Turn
			if a.Call != "" {
				h.abortCall(ts.Turn, a.Call, &turnAborted{a})
				return
			}
			h.abort(ts.Turn, &turnAborted{a})
		}
	})
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("subscribe to aborts: %w", err)
	}
	h.abortSub = sub
	byName := make(map[string]*toolbus.Tool, len(h.cfg.Tools))
	for _, t := range h.cfg.Tools {
		byName[t.Name] = t
	}
	dsub, err := h.cfg.Conn.QueueSubscribe(bus.DescribeSubjects(h.cfg.Category), bus.CategoryService(h.cfg.Category), func(m *nats.Msg) {
		_ = m.Respond(describe(byName, m))
	})
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("subscribe to describe requests: %w", err)
	}
	h.describeSub = dsub
	if h.resendSub, err = h.cfg.Conn.Subscribe(bus.ResendSubjects(h.cfg.Category), h.resend); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("subscribe to resend requests: %w", err)
	}
	// Interest must reach the server before anyone is told the host is up.
	if err := h.cfg.Conn.Flush(); err != nil {
		return err
	}
	h.announce(bus.CatalogUp)
	return nil
}

// describe answers a describe request: the activity label of a call with the request's
// arguments. Labels are descriptions, not checks: arguments the tool would refuse still
// get one, and a label function that panics gets the tool's name.
func describe(tools map[string]*toolbus.Tool, m *nats.Msg) []byte {
	var d bus.Description
	name := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if t := tools[name]; t == nil {
		d.Error = "no tool " + name + " in this category"
	} else {
		d.Label = t.Name
		func() {
			defer func() { _ = recover() }()
			d.Label = t.ActivityLabel(m.Data)
		}()
	}
	b, _ := json.Marshal(d)
	return b
}

// announce tells catalogs that the host started or is stopping.
func (h *host) announce(state string) {
	b, err := json.Marshal(bus.CatalogChange{Category: h.cfg.Category, Node: h.cfg.Node, State: state})
	if err == nil {
		err = h.cfg.Conn.Publish(bus.CatalogChanged, b)
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn("announce to catalogs", "state", state, "err", err)
	}
}

func (h *host) stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	if h.abortSub != nil {
		_ = h.abortSub.Unsubscribe()
		h.abortSub = nil
	}
	if h.describeSub != nil {
		_ = h.describeSub.Unsubscribe()
		h.describeSub = nil
	}
	if h.resendSub != nil {
		_ = h.resendSub.Unsubscribe()
		h.resendSub = nil
	}
	if h.svc != nil {
		_ = h.svc.Stop()
		h.svc = nil
		h.announce(bus.CatalogDown)
	}
	h.mu.Lock()
	for _, cancel := range h.inflight {
		cancel(errHostStopping)
	}
	h.mu.Unlock()
	// Calls see their contexts cancelled and their replies still go out; a
	// tool that ignores its context is not waited for forever.
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(stopGrace):
		h.log.Warn("calls still running after stop; abandoning them", "grace", stopGrace)
	}
}

// stopGrace bounds how long a stopping host waits for cancelled calls.
const stopGrace = 5 * time.Second

// abort cancels the calls of a turn.
func (h *host) abort(turn string, cause error) {
	// The calls are cancelled after the lock is let go: each cancel wakes a call, which
	// at once wants the lock to say it has ended. Holding it through a hundred cancels
	// made the woken calls queue on it, and the abort took up to 3 ms.
	h.mu.Lock()
	var cancels []context.CancelCauseFunc
	if n := h.turns[turn]; n > 0 {
		cancels = make([]context.CancelCauseFunc, 0, n)
		for k, cancel := range h.inflight {
			if k.turn == turn {
				cancels = append(cancels, cancel)
			}
		}
	}
	h.mu.Unlock()
	for _, cancel := range cancels {
		cancel(cause)
	}
}

// abortCall cancels one call of a turn (bus.Abort.Call).
func (h *host) abortCall(turn, call string, cause error) {
	h.mu.Lock()
	cancel := h.inflight[inflightKey{turn, call}]
	h.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

var errHostStopping = errors.New("the category host is stopping")

// turnAborted is the cause of a call's end when its turn was aborted: the reply says so
// (ToolReply.Abort), since it may reach the turn before the abort itself does.
type turnAborted struct{ abort bus.Abort }

func (e *turnAborted) Error() string {
	what := "the turn was aborted"
	if e.abort.Call != "" {
		what = "the call was stopped"
	}
	if e.abort.Reason == "" {
		return what
	}
	return what + ": " + e.abort.Reason
}

// begin registers a call and starts it on its own goroutine.
func (h *host) begin(m *hostCall) {
	req, badHeader := bus.ParseToolRequest(nats.Header(m.req.Headers()))
	m.trace, m.vouch, m.payload, m.turn, m.conn = req.Traceparent, req.Vouch, req.Payload, req.Turn, h.connGen.Load()
	m.tel = h.cfg.telemetry.StartHostCall(req.Traceparent, telemetry.HostInfo{Category: h.cfg.Category, Tool: m.tool.Name, ID: req.Call, Turn: req.Turn, Node: h.cfg.Node})
	m.call = toolbus.Call{Turn: req.Turn, ID: req.Call, Tool: m.tool.Name, Agent: req.Agent, Task: req.Task}
	call := &m.call
	timeout := m.tool.Timeout
	if timeout <= 0 {
		timeout = h.cfg.DefaultTimeout
	}
	call.Deadline = time.Now().Add(timeout)
	if !req.Deadline.IsZero() && req.Deadline.Before(call.Deadline) {
		call.Deadline = req.Deadline
	}
	if call.ID == "" {
		call.ID = bus.NewID() // a direct request, e.g. `nats req`
	}
	st := h.stats[m.tool.Name]
	m.h, m.st = h, st
	if badHeader != nil {
		st.errors.Add(1)
		h.replyCall(m, bus.ToolReply{Call: call.ID, Tool: call.Tool, Outcome: bus.OutcomeInvalid, Error: badHeader.Error()})
		return
	}
	// A turn refuses these itself; a direct request must not get past either.
	// Any Toolbus-Truncated but "false" counts (bus.ParseToolRequest).
	if req.Truncated && m.tool.Destructive {
		st.errors.Add(1)
		h.replyCall(m, bus.ToolReply{Call: call.ID, Tool: call.Tool, Outcome: bus.OutcomeInvalid,
			Error: "arguments were cut off (truncated); re-issue the call with the complete arguments"})
		return
	}
	// A request that waited out its deadline on the way (a slow route, a lost host's
	// redelivery) is not run: its caller has given up on it.
	if !req.Deadline.IsZero() && !req.Deadline.After(time.Now()) {
		st.errors.Add(1)
		h.replyCall(m, bus.ToolReply{Call: call.ID, Tool: call.Tool, Outcome: bus.OutcomeTimeout,
			Error: "deadline already past on arrival (" + bus.FormatDeadline(req.Deadline) + "); the tool did not run"})
		return
	}
	// Aborts cancel with their reason as the cause; the deadline sits below.
	actx, cancel := context.WithCancelCause(context.Background())
	cctx, cancelDeadline := context.WithDeadline(actx, call.Deadline)
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		cancelDeadline()
		cancel(nil)
		h.replyCall(m, bus.ToolReply{Call: call.ID, Tool: call.Tool, Outcome: bus.OutcomeUnavailable, Error: "the category host is stopping"})
		return
	}
	if call.Turn != "" {
		k := inflightKey{call.Turn, call.ID}
		if _, dup := h.inflight[k]; !dup {
			h.turns[call.Turn]++
		}
		h.inflight[k] = cancel
	}
	h.wg.Add(1)
	h.mu.Unlock()
	m.ctx, m.cancel, m.cancelDeadline = cctx, cancel, cancelDeadline
	h.cfg.workers.goFunc(m.work)
}

// work runs a call begin registered, on a worker, and forgets it.
func (m *hostCall) work() {
	h, call := m.h, &m.call
	defer h.wg.Done()
	defer m.cancel(nil)
	defer m.cancelDeadline()
	if err := h.identify(m.ctx, call); err != nil {
		outcome := bus.OutcomeUnavailable
		if errors.Is(err, ErrAgentMismatch) {
			outcome = bus.OutcomeInvalid
		}
		m.st.errors.Add(1)
		h.replyCall(m, bus.ToolReply{Call: call.ID, Tool: call.Tool, Outcome: outcome, Error: err.Error()})
	} else {
		h.run(m.ctx, m)
	}
	if call.Turn != "" {
		h.mu.Lock()
		k := inflightKey{call.Turn, call.ID}
		if _, ok := h.inflight[k]; ok {
			delete(h.inflight, k)
			if h.turns[call.Turn]--; h.turns[call.Turn] <= 0 {
				delete(h.turns, call.Turn)
			}
		}
		h.mu.Unlock()
	}
}

// identify settles whose call it is (the turn's stored agent, see turnAgents) and so
// the home it runs in. The home never comes from the bus.
func (h *host) identify(ctx context.Context, call *toolbus.Call) error {
	agent, err := h.agents.resolve(ctx, call.Turn, call.Agent)
	if err != nil {
		return err
	}
	call.Agent = agent
	switch {
	case h.cfg.Home != "":
		call.Home = h.cfg.Home
	case h.cfg.HomeRoot != "":
		if agent == "" {
			agent = "default"
		}
		call.Home = filepath.Join(h.cfg.HomeRoot, agent)
	}
	return nil
}

// run executes one call and replies. It never panics.
func (h *host) run(ctx context.Context, m *hostCall) {
	tool, call := m.tool, &m.call
	st := m.st
	reply := bus.ToolReply{Call: call.ID, Tool: tool.Name}

	args := m.req.Data()
	if !m.payload.IsZero() {
		// Too large for the message: the turn stored them in the object store.
		var outcome bus.Outcome
		if args, outcome, reply.Error = h.arguments(ctx, tool, m.payload); reply.Error != "" {
			reply.Outcome = outcome
			st.errors.Add(1)
			h.replyCall(m, reply)
			return
		}
	}
	if len(args) == 0 {
		args = []byte("{}")
	}
	// Anyone on the bus can publish here: validate again, and never repair; unless a
	// turn of this deployment vouches for these exact arguments against this schema.
	if !h.cfg.voucher.Vouched(m.vouch, h.cfg.Category, tool.Name, tool.Params.Sum(), args) {
		if err := tool.Params.Validate(args); err != nil {
			reply.Outcome, reply.Error = bus.OutcomeInvalid, "invalid arguments for "+tool.Name+": "+err.Error()
			st.errors.Add(1)
			h.replyCall(m, reply)
			return
		}
	}
	call.Args = args

	// A free slot is taken without asking for ctx.Done, which makes the context a channel
	// (an allocation, and a close when the call ends) that a call that never waits for
	// it does not need.
	select {
	case h.slots <- struct{}{}:
	default:
		select {
		case h.slots <- struct{}{}:
		case <-ctx.Done():
			reply.Outcome, reply.Error = h.cancelOutcome(ctx), "cancelled while waiting for an execution slot: "+context.Cause(ctx).Error()
			st.errors.Add(1)
			h.replyCall(m, reply)
			return
		}
	}
	defer func() { <-h.slots }()

	call.Progress = m.progress
	m.emit(bus.EventStarted, func() string { return tool.ActivityLabel(args) })

	st.inflight.Add(1)
	start := time.Now()
	res, err, panicked := execute(ctx, tool, *call)
	reply.Duration = time.Since(start)
	st.inflight.Add(-1)
	st.nanos.Add(int64(reply.Duration))
	if ctx.Err() != nil {
		// An abort wakes every call of the turn at once. Let the others see
		// their cancellation (and stop their work) before this one spends
		// the processor on its reply.
		runtime.Gosched()
	}

	switch {
	case panicked != nil:
		h.log.Error("tool panicked", "tool", tool.Name, "turn", call.Turn, "call", call.ID, "panic", panicked.value, "stack", string(panicked.stack))
		reply.Outcome, reply.Error = bus.OutcomePanic, fmt.Sprintf("tool %s failed internally: %v", tool.Name, panicked.value)
	case ctx.Err() != nil:
		// Whatever execute returned, its context ended first: say why.
		reply.Outcome = h.cancelOutcome(ctx)
		if ta, ok := errors.AsType[*turnAborted](context.Cause(ctx)); ok {
			reply.Abort = &ta.abort
		}
		reply.Error = "call " + string(reply.Outcome) + ": " + context.Cause(ctx).Error()
		if err != nil {
			reply.Error += " (" + err.Error() + ")"
		}
		fillReply(&reply, call.Turn, res)
	case err != nil:
		reply.Outcome, reply.Error = bus.OutcomeError, err.Error()
		fillReply(&reply, call.Turn, res)
	default:
		reply.Outcome = bus.OutcomeOK
		if res.IsError {
			reply.Outcome = bus.OutcomeError
		}
		fillReply(&reply, call.Turn, res)
	}
	if reply.Outcome == bus.OutcomeOK {
		st.ok.Add(1)
	} else {
		st.errors.Add(1)
	}
	reply.Label = completedLabel(tool, args, res, reply)
	// The caller waits for the reply, not for the event: reply first.
	h.replyCall(m, reply)
	// The presentation events travel in the reply for the turn, and on the
	// event subject for whoever watches the turn.
	for _, ev := range reply.Events {
		m.publish(ev, nil)
	}
	m.emit(bus.EventCompleted, func() string { return reply.Label })
}

// progress is the call's toolbus.Call.Progress: a progress event.
func (m *hostCall) progress(label string) {
	m.emit(bus.EventProgress, func() string { return label })
}

// emit sends an event of a kind of the call; label makes its label (publish).
func (m *hostCall) emit(kind bus.EventKind, label func() string) {
	m.publish(bus.Event{Turn: m.call.Turn, Call: m.call.ID, Tool: m.tool.Name, Kind: kind, Time: time.Now()}, label)
}

// publish sends an event of the call on its event subject, for watchers; label makes its
// label, only when someone is to receive it (a label decodes the arguments).
func (m *hostCall) publish(ev bus.Event, label func() string) {
	h, call := m.h, &m.call
	if call.Turn == "" {
		return
	}
	kind := ev.Kind
	subject := bus.EventSubject(call.Turn, call.ID, kind)
	if h.cfg.interest != nil && !h.cfg.interest(subject) {
		return // nobody watches this turn
	}
	if label != nil {
		ev.Label = label()
	}
	b, err := ev.AppendJSON(make([]byte, 0, 256))
	if err == nil {
		msg := &nats.Msg{Subject: subject, Data: b}
		if m.trace != "" {
			msg.Header = nats.Header{bus.HeaderTraceparent: {m.trace}}
		}
		err = h.cfg.Conn.PublishMsg(msg)
	}
	if err != nil {
		h.log.Warn("publish event", "turn", call.Turn, "call", call.ID, "kind", kind, "err", err)
	}
}

// arguments reads a call's arguments from the object store (bus.HeaderPayload); on failure
// the outcome and error of the reply instead.
func (h *host) arguments(ctx context.Context, tool *toolbus.Tool, ref bus.PayloadRef) ([]byte, bus.Outcome, string) {
	if ref.Bucket != bus.ObjectPayloads {
		return nil, bus.OutcomeInvalid, fmt.Sprintf("the arguments of %s are in object store %q; a host reads them only from %s", tool.Name, ref.Bucket, bus.ObjectPayloads)
	}
	if ref.Size > bus.MaxCallPayload {
		return nil, bus.OutcomeInvalid, tooLarge(tool.Name, ref.Size)
	}
	p, err := h.payloads()
	if err == nil {
		var args []byte
		if args, err = p.Get(ctx, ref); err == nil {
			return args, "", ""
		}
	}
	outcome := bus.OutcomeUnavailable
	if errors.Is(err, bus.ErrPayloadMissing) || errors.Is(err, bus.ErrPayloadMismatch) {
		outcome = bus.OutcomeInvalid
	}
	if ctx.Err() != nil {
		outcome = h.cancelOutcome(ctx)
	}
	return nil, outcome, fmt.Sprintf("could not read the arguments of %s (%s) from the object store: %v; the tool did not run", tool.Name, bus.FormatBytes(ref.Size), err)
}

// payloads is the host's store of large payloads: the node's, or one of its own
// connection.
func (h *host) payloads() (*bus.Payloads, error) {
	if h.cfg.payloads != nil {
		return h.cfg.payloads, nil
	}
	h.payloadsMu.Lock()
	defer h.payloadsMu.Unlock()
	if h.payloadsOf == nil {
		js, err := jetstream.New(h.cfg.Conn)
		if err != nil {
			return nil, err
		}
		h.payloadsOf = bus.NewPayloads(js, 1)
	}
	return h.payloadsOf, nil
}

// cancelOutcome tells a deadline from an abort.
func (h *host) cancelOutcome(ctx context.Context) bus.Outcome {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return bus.OutcomeTimeout
	}
	return bus.OutcomeStopped
}

func completedLabel(t *toolbus.Tool, args json.RawMessage, res toolbus.Result, reply bus.ToolReply) string {
	if reply.Outcome == bus.OutcomePanic {
		return t.ActivityLabel(args) + " (failed)"
	}
	if reply.Outcome != bus.OutcomeOK && !res.IsError {
		// Tell the label the outcome: an error returned by Execute, a timeout or a
		// stop is a failed call too, whatever result came with it.
		res.IsError = true
		if len(res.Content) == 0 {
			res.Content = []toolbus.ContentPart{toolbus.Text(reply.Error)}
		}
	}
	label := t.CompletedLabel(args, res)
	if reply.Outcome != bus.OutcomeOK {
		label += " (" + string(reply.Outcome) + ")"
	}
	return label
}

type panicValue struct {
	value any
	stack []byte
}

// execute runs the tool, turning a panic into a value.
func execute(ctx context.Context, t *toolbus.Tool, call toolbus.Call) (res toolbus.Result, err error, p *panicValue) {
	defer func() {
		if r := recover(); r != nil {
			p = &panicValue{value: r, stack: debug.Stack()}
		}
	}()
	res, err = t.Execute(ctx, call)
	return res, err, nil
}

// replyCall replies to a call and ends its telemetry.
func (h *host) replyCall(m *hostCall, reply bus.ToolReply) {
	h.reply(m, reply)
	m.tel.End(string(reply.Outcome), reply.Error)
}

func (h *host) reply(m *hostCall, reply bus.ToolReply) {
	r := m.req
	if r.Reply() == "" {
		return // published without a reply subject: nobody to tell
	}
	b, err := reply.AppendJSON(make([]byte, 0, 256))
	if err != nil {
		b, _ = json.Marshal(bus.ToolReply{Call: reply.Call, Tool: reply.Tool, Outcome: bus.OutcomeError, Error: "encode reply: " + err.Error()})
	}
	// A reply too large for a message goes through the object store, up to what a call
	// may carry; past that, or if it cannot be stored, the caller is told instead of
	// waiting for its deadline. (Tools that produce more cap their own output, as
	// run_command and read_file do.)
	var opts []micro.RespondOpt
	var payload string
	if limit := bus.InlineLimit(h.cfg.Conn.MaxPayload()); len(b) > limit {
		b, payload = h.largeReply(reply, b)
		if payload != "" {
			opts = []micro.RespondOpt{func(m *nats.Msg) {
				if m.Header == nil {
					m.Header = nats.Header{}
				}
				m.Header[bus.HeaderPayload] = []string{payload}
			}}
		}
	}
	h.keep(m, reply, b, payload)
	if err := r.Respond(b, opts...); err != nil {
		h.log.Warn("reply", "tool", reply.Tool, "call", reply.Call, "err", err)
	}
}

// largeReply is what a host sends for an encoded reply too large for a message: the
// reply stored in the object store, up to what a call may carry, and a message that names
// it (bus.PayloadNote, with the reference for bus.HeaderPayload); past that, or if it
// cannot be stored, an error reply that says so.
func (h *host) largeReply(reply bus.ToolReply, b []byte) ([]byte, string) {
	why := fmt.Sprintf("over the %s a call may carry", bus.FormatBytes(bus.MaxCallPayload))
	if len(b) <= bus.MaxCallPayload {
		ref, err := h.storeReply(reply, b)
		if err == nil {
			return bus.PayloadNote, ref.String()
		}
		h.log.Warn("store a large reply", "tool", reply.Tool, "call", reply.Call, "size", len(b), "err", err)
		why = fmt.Sprintf("more than a message carries, and it could not be stored: %v", err)
	}
	out, _ := json.Marshal(bus.ToolReply{
		Call: reply.Call, Tool: reply.Tool, Outcome: bus.OutcomeError, Duration: reply.Duration, Label: reply.Label,
		Error: fmt.Sprintf("tool %s produced a result of %s, %s; the result was dropped: ask for less output", reply.Tool, bus.FormatBytes(int64(len(b))), why),
	})
	return out, ""
}

// storeReply stores an encoded reply too large for a message in bus.ObjectPayloads; the
// turn that reads it deletes it.
func (h *host) storeReply(reply bus.ToolReply, b []byte) (bus.PayloadRef, error) {
	p, err := h.payloads()
	if err != nil {
		return bus.PayloadRef{}, err
	}
	ctx, cancel := bus.WithPayloadTimeout(context.Background())
	defer cancel()
	return p.Put(ctx, bus.ObjectPayloads, bus.PayloadName(reply.Call, "reply"), b)
}

// fillReply copies a result into a reply.
func fillReply(reply *bus.ToolReply, turn string, res toolbus.Result) {
	reply.Content = res.Content
	reply.Details = res.Details
	reply.Terminate = res.Terminate
	now := time.Now()
	for _, e := range res.Events {
		reply.Events = append(reply.Events, bus.Event{Turn: turn, Call: reply.Call, Tool: reply.Tool, Kind: bus.EventPresentation, Label: e.Label, Data: e.Data, Time: now})
	}
	if c := res.Completion; c != nil {
		reply.Completion = &bus.Event{Turn: turn, Call: reply.Call, Tool: reply.Tool, Kind: bus.EventCompleted, Label: c.Label, Data: c.Data, Time: now}
	}
}
