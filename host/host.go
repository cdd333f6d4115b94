// Package host serves tool categories on a bus: each tool call that comes on a
// category's subjects is checked (its arguments validated again unless a turn of the
// deployment vouches for them), run with its deadline, cancelled by the aborts of its
// turn, and answered with an honest outcome; large arguments and replies go through the
// object store, and a reply a lost connection may have swallowed is kept to be sent
// again. docs/protocol.md is the contract it keeps.
//
// A Go program with a connection of its own hosts its tools with [Serve]. A node runs one
// [Host] per category under its supervisor (package actors), which restarts a host whose
// connection or service ends. The package links the wire (package bus) and nats.go, and
// neither the server, the actors nor the categories of a node (TestHostServesOnRemoteBus).
package host

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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
)

// Defaults of a category host.
const (
	DefaultCallTimeout   = bus.DefaultCallTimeout
	DefaultMaxConcurrent = 64
)

// Config configures the host of one tool category.
type Config struct {
	Category string
	Tools    []*toolbus.Tool
	Conn     *nats.Conn
	// Node names the host's node in the catalog; empty for a program's own host.
	Node string
	// Home, when set, is every agent's home (a single-user node). Otherwise
	// HomeRoot holds the agents' homes: a call of agent A runs with Call.Home =
	// HomeRoot/A. The home never comes from the bus.
	Home     string
	HomeRoot string
	// MaxConcurrent bounds the calls executing at once (default DefaultMaxConcurrent);
	// more wait for a slot, within their deadline.
	MaxConcurrent int
	// DefaultTimeout bounds a call whose tool sets no Timeout and whose request
	// carries no deadline (default DefaultCallTimeout).
	DefaultTimeout time.Duration
	Logger         *slog.Logger

	// What a node shares with its hosts; a program's own host leaves them out.

	// Go runs a call; nil: a goroutine per call.
	Go func(func())
	// Voucher checks the vouches of the node's turns; nil: validate every call.
	Voucher *bus.Voucher
	// Interest tells whether anyone would receive an event; nil: publish every one.
	Interest func(subject string) bool
	// Payloads reads large arguments and stores large replies (bus.ObjectPayloads); nil:
	// the host opens them through its own connection on first use.
	Payloads *bus.Payloads
	// Telemetry records the calls' spans and counts; nil: none.
	Telemetry Telemetry
	// Failed is told, once, that the host's service ended without Stop (its micro
	// service stopped or failed); the host serves no more, and its owner starts another.
	Failed func(error)
}

// Telemetry records a call's span and count on the host that runs it: a node's
// telemetry, which package actors adapts.
type Telemetry interface {
	StartCall(traceparent string, c CallInfo) CallSpan
}

// CallInfo names a call on its host.
type CallInfo struct {
	Category, Tool, ID, Turn, Node string
}

// CallSpan is a call's span and count, ended with the call's outcome.
type CallSpan interface {
	End(outcome, errText string)
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
	tel     CallSpan // its span on this node, and its count; nil: none
	turn    string   // the request's Toolbus-Turn
	conn    uint64   // Host.connGen when the request came: see keep

	// What running it takes, in the same allocation (begin, work, run): the call as the
	// tool sees it, the host and the contexts it runs under. One object a call where the
	// closures of begin and run, the call and the reply they captured made six.
	h              *Host
	call           toolbus.Call
	st             *endpointStats
	ctx            context.Context
	cancel         context.CancelCauseFunc
	cancelDeadline context.CancelFunc
}

// Host serves one category on one connection, from Start to Stop. Calls do not queue
// behind one another: each starts on a goroutine of its own (Config.Go) straight from
// the micro handler, which runs one at a time per endpoint.
type Host struct {
	cfg      Config
	log      *slog.Logger
	failed   atomic.Bool // Failed was told
	svc      micro.Service
	abortSub *nats.Subscription
	// describeSub answers what a call would do (its activity label) without running it.
	describeSub *nats.Subscription
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
func (c Config) withDefaults() Config {
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = DefaultCallTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Go == nil {
		c.Go = func(f func()) { go f() }
	}
	return c
}

// validate checks a host config.
func (c Config) validate() error {
	switch {
	case !bus.ValidToken(c.Category):
		return fmt.Errorf("category host: invalid category %q", c.Category)
	case c.Conn == nil:
		return fmt.Errorf("category host %s: no connection", c.Category)
	case len(c.Tools) == 0:
		return fmt.Errorf("category host %s: no tools", c.Category)
	}
	seen := make(map[string]bool, len(c.Tools))
	for _, t := range c.Tools {
		switch {
		case t == nil:
			return fmt.Errorf("category host %s: a nil tool", c.Category)
		case t.Category != c.Category:
			return fmt.Errorf("category host %s: tool %s belongs to category %q", c.Category, t.Name, t.Category)
		case seen[t.Name]:
			return fmt.Errorf("category host %s: tool %s given twice", c.Category, t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

// New returns a host of cfg's category, not yet serving: Start serves it.
func New(cfg Config) (*Host, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The stats table is filled before the service exists and only read after, so
	// micro's STATS handler may read it without a lock.
	stats := make(map[string]*endpointStats, len(cfg.Tools))
	for _, t := range cfg.Tools {
		stats[t.Name] = &endpointStats{}
	}
	return &Host{
		cfg:      cfg,
		log:      cfg.Logger.With("category", cfg.Category),
		slots:    make(chan struct{}, cfg.MaxConcurrent),
		inflight: make(map[inflightKey]context.CancelCauseFunc),
		turns:    make(map[string]int),
		stats:    stats,
	}, nil
}

// Category is the category the host serves.
func (h *Host) Category() string { return h.cfg.Category }

func (h *Host) isStopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// fail tells the host's owner that its service ended on its own.
func (h *Host) fail(err error) {
	if h.isStopped() || !h.failed.CompareAndSwap(false, true) {
		return
	}
	h.log.Warn("category host failed", "err", err)
	if h.cfg.Failed != nil {
		h.cfg.Failed(err)
	}
}

// Start serves the category: its micro service (the tools' endpoints, in the catalog),
// its turns' aborts, describe and resend requests. It returns once the server has the
// host's interest, and tells the catalogs (bus.CatalogChanged). A host that fails to
// start has stopped; a host is started once.
func (h *Host) Start() error {
	if err := h.start(); err != nil {
		h.Stop()
		return fmt.Errorf("category host %s: %w", h.cfg.Category, err)
	}
	return nil
}

func (h *Host) start() error {
	nc := h.cfg.Conn
	h.agents = newTurnAgents(nc)
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
		return fmt.Errorf("subscribe to describe requests: %w", err)
	}
	h.describeSub = dsub
	if h.resendSub, err = h.cfg.Conn.Subscribe(bus.ResendSubjects(h.cfg.Category), h.resend); err != nil {
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
func (h *Host) announce(state string) {
	b, err := json.Marshal(bus.CatalogChange{Category: h.cfg.Category, Node: h.cfg.Node, State: state})
	if err == nil {
		err = h.cfg.Conn.Publish(bus.CatalogChanged, b)
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		h.log.Warn("announce to catalogs", "state", state, "err", err)
	}
}

// Stop ends the service: the host takes no more calls, cancels the running ones (their
// replies still go out) and waits for them, a few seconds at most. The connection stays
// open; it is its owner's.
func (h *Host) Stop() {
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
	case <-time.After(StopGrace):
		h.log.Warn("calls still running after stop; abandoning them", "grace", StopGrace)
	}
}

// StopGrace bounds how long a stopping host waits for its cancelled calls (and a node,
// its workers).
const StopGrace = 5 * time.Second

// abort cancels the calls of a turn.
func (h *Host) abort(turn string, cause error) {
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
func (h *Host) abortCall(turn, call string, cause error) {
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
func (h *Host) begin(m *hostCall) {
	req, badHeader := bus.ParseToolRequest(nats.Header(m.req.Headers()))
	m.trace, m.vouch, m.payload, m.turn, m.conn = req.Traceparent, req.Vouch, req.Payload, req.Turn, h.connGen.Load()
	if h.cfg.Telemetry != nil {
		m.tel = h.cfg.Telemetry.StartCall(req.Traceparent, CallInfo{Category: h.cfg.Category, Tool: m.tool.Name, ID: req.Call, Turn: req.Turn, Node: h.cfg.Node})
	}
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
	h.cfg.Go(m.work)
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
func (h *Host) identify(ctx context.Context, call *toolbus.Call) error {
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
func (h *Host) run(ctx context.Context, m *hostCall) {
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
	if !h.cfg.Voucher.Vouched(m.vouch, h.cfg.Category, tool.Name, tool.Params.Sum(), args) {
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
	if h.cfg.Interest != nil && !h.cfg.Interest(subject) {
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
func (h *Host) arguments(ctx context.Context, tool *toolbus.Tool, ref bus.PayloadRef) ([]byte, bus.Outcome, string) {
	if ref.Bucket != bus.ObjectPayloads {
		return nil, bus.OutcomeInvalid, fmt.Sprintf("the arguments of %s are in object store %q; a host reads them only from %s", tool.Name, ref.Bucket, bus.ObjectPayloads)
	}
	if ref.Size > bus.MaxCallPayload {
		return nil, bus.OutcomeInvalid, bus.ArgsTooLarge(tool.Name, ref.Size)
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
func (h *Host) payloads() (*bus.Payloads, error) {
	if h.cfg.Payloads != nil {
		return h.cfg.Payloads, nil
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
func (h *Host) cancelOutcome(ctx context.Context) bus.Outcome {
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
func (h *Host) replyCall(m *hostCall, reply bus.ToolReply) {
	h.reply(m, reply)
	if m.tel != nil {
		m.tel.End(string(reply.Outcome), reply.Error)
	}
}

func (h *Host) reply(m *hostCall, reply bus.ToolReply) {
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
func (h *Host) largeReply(reply bus.ToolReply, b []byte) ([]byte, string) {
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
func (h *Host) storeReply(reply bus.ToolReply, b []byte) (bus.PayloadRef, error) {
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
