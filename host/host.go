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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/internal/workpool"
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

	// Go runs a call; nil: the host's own workers, which keep their grown stacks from
	// call to call (package workpool), until Stop.
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
	stopped  bool           // stop began: the service's end is expected
	pool     *workpool.Pool // the host's own workers (Config.Go nil), closed by Stop
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
	h := &Host{
		cfg:      cfg,
		log:      cfg.Logger.With("category", cfg.Category),
		slots:    make(chan struct{}, cfg.MaxConcurrent),
		inflight: make(map[inflightKey]context.CancelCauseFunc),
		turns:    make(map[string]int),
		stats:    stats,
	}
	if h.cfg.Go == nil {
		// A goroutine per call grew a fresh stack each time (its reply's encoding, the
		// tool's own work): BenchmarkServe's host spent a tenth of its processor time more.
		h.pool = workpool.New(cfg.MaxConcurrent)
		h.cfg.Go = h.pool.Go
	}
	return h, nil
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
	if h.pool != nil {
		h.pool.Close(0) // its calls are over or abandoned: the idle workers end now
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
