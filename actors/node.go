package actors

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/host"
	"github.com/toolbus/toolbus/telemetry"
	"github.com/toolbus/toolbus/toolsets"
)

// NodeConfig configures a node: which categories it hosts and whether it runs turns.
type NodeConfig struct {
	// Name identifies the node on the bus (a valid token).
	Name string
	// Connect opens a named connection to the bus: in-process to an embedded
	// server, or over TCP to a cluster.
	Connect func(name string) (*nats.Conn, error)
	// Categories are the built-in tool categories (toolsets.Categories) to host.
	Categories []string
	// Turns makes the node take StartTurn requests, on its own subject and on
	// the shared queue.
	Turns bool
	// Home, when set, is every agent's home (a single-user node); otherwise
	// agent A's home is HomeRoot/A.
	Home     string
	HomeRoot string
	// Tools configure the built-in categories the node hosts: the computer
	// category's sandbox and limits, the web host's keys, the schedules' minimum
	// interval.
	Tools toolsets.Settings
	// Gateway configures the model gateways that turns started over the bus use.
	Gateway gateway.Config
	// Catalog tunes the node's catalog of the bus, which turns use to include the
	// external namespaces their agents' profiles name.
	Catalog catalog.Options
	// MaxTurns bounds the turns the node takes from the intake at once (default
	// DefaultMaxTurns); TurnLease is how long it may go without signalling progress on
	// one before the intake gives it to another node (DefaultTurnLease); HandBackGrace
	// bounds how long a stopping node waits for its turns to reach a checkpoint
	// (DefaultHandBackGrace).
	MaxTurns      int
	TurnLease     time.Duration
	HandBackGrace time.Duration
	// MaxConcurrent bounds the calls each host of the node executes at once
	// (default host.DefaultMaxConcurrent).
	MaxConcurrent int
	// MaxTurnCalls bounds the calls of each of the node's turns in flight at once, as
	// an agent's profile may (toolsets.CallsPolicy); the lower bound of the two holds.
	// Zero: none.
	MaxTurnCalls int
	// Replicas of the node's buckets and streams (capped by the cluster size).
	Replicas    int
	MaxSteps    int
	CallTimeout time.Duration
	AbortGrace  time.Duration
	Logger      *slog.Logger
	// VouchKey (bus.VouchKeySize bytes) lets the node's hosts trust the argument checks
	// of turns that hold the same key (bus.Vouch); nodes of one deployment may share one.
	// Empty: the node makes its own, so its hosts skip validating what its own turns
	// validated, and validate everyone else's calls.
	VouchKey []byte
	// Interest, when set, reports whether anyone would receive a message on a subject
	// (server.Server.Interest, for an embedded server). The node's hosts and turns then
	// skip the activity events and turn statuses nobody receives: half of a call's
	// messages when nobody watches. Nil: they publish every one.
	Interest func(subject string) bool
	// StoreFull, when set, names a write refused because the store is full, with the
	// server's limits (server.Server.StoreFullError, for an embedded server).
	StoreFull func(error) error
	// TraceSampled sets the W3C sampled flag on the traceparent of every call the node's
	// turns make, so a server whose account configures msg_trace {dest, sampling} traces
	// them. nats-server decodes every header of each such message to look for a trace
	// destination (about 4 µs a call here), so set it only where the account traces; an
	// embedded server configures no msg_trace.
	TraceSampled bool
	// Telemetry, when set, records the spans and metrics of the node's turns and hosts
	// (telemetry.Open); nil records nothing. The node does not close it.
	Telemetry *telemetry.Telemetry
}

// withDefaults fills what a node config may leave out; the one place node defaults live.
// Turn and host defaults stay with TurnConfig and host.Config: zero values pass through.
func (c NodeConfig) withDefaults() NodeConfig {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.MaxTurns <= 0 {
		c.MaxTurns = DefaultMaxTurns
	}
	if c.TurnLease <= 0 {
		c.TurnLease = DefaultTurnLease
	}
	if c.HandBackGrace <= 0 {
		c.HandBackGrace = DefaultHandBackGrace
	}
	if len(c.VouchKey) == 0 {
		c.VouchKey = make([]byte, bus.VouchKeySize)
		_, _ = rand.Read(c.VouchKey) // crypto/rand.Read never fails
	}
	return c
}

// validate checks a node config.
func (c NodeConfig) validate() error {
	switch {
	case !bus.ValidToken(c.Name):
		return fmt.Errorf("start node: invalid name %q", c.Name)
	case c.Connect == nil:
		return fmt.Errorf("start node %s: no Connect function", c.Name)
	case len(c.VouchKey) != bus.VouchKeySize:
		return fmt.Errorf("start node %s: the vouch key has %d bytes, want %d", c.Name, len(c.VouchKey), bus.VouchKeySize)
	case c.MaxSteps < 0 || c.MaxSteps > bus.MaxStepsLimit:
		return fmt.Errorf("start node %s: max steps %d out of range (0 for the default, up to %d)", c.Name, c.MaxSteps, bus.MaxStepsLimit)
	case c.MaxTurnCalls < 0 || c.MaxTurnCalls > toolsets.MaxCallsBound:
		return fmt.Errorf("start node %s: max turn calls %d out of range (0 for none, up to %d)", c.Name, c.MaxTurnCalls, toolsets.MaxCallsBound)
	}
	if err := c.Tools.Validate(); err != nil {
		return fmt.Errorf("start node %s: %w", c.Name, err)
	}
	return nil
}

// Node is the supervisor of one process: it hosts tool categories and runs
// turns, each as a child actor.
type Node struct {
	cfg NodeConfig
	log *slog.Logger
	// workers run the node's turn mailboxes, model calls and host calls.
	workers *workers
	voucher *bus.Voucher
	sys     *actor.ActorSystem
	pid     *actor.PID
	nc      *nats.Conn // turns, control
	js      jetstream.JetStream
	// payloads carries what is too large for a message (bus.Payloads), for the node's
	// turns and hosts.
	payloads *bus.Payloads
	// svc are the built-in categories' stores and engines (toolsets.OpenServices): what
	// the node's hosts serve, and what its turns need of the categories.
	svc *toolsets.Services
	// profiles and catalog serve turn assembly; set on a node that runs turns.
	profiles *toolsets.Profiles
	catalog  *catalog.Catalog
	intake   *intake
	// assemblyMu guards profiles and catalog, opened on first use.
	assemblyMu sync.Mutex
	connMu     sync.Mutex // guards conns: restarted hosts reconnect from their actors
	conns      []*nats.Conn
	super      *nodeSupervisor
	subs       []*nats.Subscription
	// starting counts the start requests being answered (listenForTurns); startClosed,
	// under startMu, says no more are taken (close).
	starting    sync.WaitGroup
	startMu     sync.Mutex
	startClosed bool
	// beforeStart, set by tests only, runs before a start request's turn is queued.
	beforeStart atomic.Pointer[func(bus.TurnSpec)]
	lostMu      sync.Mutex
	lostSub     *nats.Subscription // listenForLostReplies
	lostBack    chan nats.Status   // listenForLostReplies: the connection re-established
	// transcripts is set once the transcript stream is known to exist.
	transcripts atomic.Bool
	closeOnce   sync.Once
}

// node actor messages.
type (
	spawnHost struct{ cfg hostConfig }
	spawnTurn struct{ cfg *TurnConfig }
	// handBackAll: the node stops, and waits grace for its turns to go back to the intake.
	handBackAll struct{ grace time.Duration }
	// turnFenced: the intake found that another node holds the turn now.
	turnFenced struct{ turn string }
	// turnUnconfirmed: the intake could not confirm for a lease that this node still
	// holds the turn (err says why), and stopped its lease.
	turnUnconfirmed struct {
		turn string
		err  error
	}
	// replyLost: a host said that its reply to a call of the turn may be lost.
	replyLost struct{ turn, call string }
	// turnsReconnected: the connection nc was re-established; replies sent to the
	// turns on it meanwhile are lost.
	turnsReconnected struct{ nc *nats.Conn }
)

// nodeActor spawns hosts and turns as its children, so stopping the node
// stops them.
type nodeActor struct{}

func (nodeActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *handBackAll:
		for _, c := range ctx.Children() {
			if strings.Contains(c.Id, "/turn-") {
				ctx.Send(c, &handBack{grace: m.grace})
			}
		}
	case *turnFenced:
		for _, c := range ctx.Children() {
			if strings.HasSuffix(c.Id, "/turn-"+m.turn) {
				ctx.Send(c, &checkLease{})
			}
		}
	case *turnUnconfirmed:
		for _, c := range ctx.Children() {
			if strings.HasSuffix(c.Id, "/turn-"+m.turn) {
				ctx.Send(c, &checkLease{unconfirmed: m.err})
			}
		}
	case *replyLost:
		for _, c := range ctx.Children() {
			if strings.HasSuffix(c.Id, "/turn-"+m.turn) {
				ctx.Send(c, m)
			}
		}
	case *turnsReconnected:
		for _, c := range ctx.Children() {
			if strings.Contains(c.Id, "/turn-") {
				ctx.Send(c, m)
			}
		}
	case *spawnHost:
		if _, err := host.New(m.cfg.Config); err != nil { // a config it would refuse: say so now
			ctx.Respond(err)
			return
		}
		pid, err := ctx.SpawnNamed(newHostProps(m.cfg), "host-"+m.cfg.Category)
		if err != nil {
			ctx.Respond(fmt.Errorf("spawn host %s: %w", m.cfg.Category, err))
			return
		}
		ctx.Respond(pid)
	case *spawnTurn:
		props, err := NewTurnProps(m.cfg)
		if err != nil {
			ctx.Respond(err)
			return
		}
		pid, err := ctx.SpawnNamed(props, "turn-"+m.cfg.Spec.ID)
		if err != nil {
			ctx.Respond(fmt.Errorf("spawn turn %s: %w", m.cfg.Spec.ID, err))
			return
		}
		ctx.Respond(pid)
	}
}

// StartNode starts a node: its actor system, its hosts and, if asked, its
// turn intake.
func StartNode(ctx context.Context, cfg NodeConfig) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.Name), workers: newWorkers(maxWorkers), voucher: bus.NewVoucher(cfg.VouchKey)}
	n.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		// protoactor logs supervision and dead letters at INFO in colour;
		// only its warnings are worth the node's log.
		return slog.New(levelFilter{min: slog.LevelWarn, h: n.log.With("lib", "protoactor").Handler()})
	}))
	var err error
	if n.nc, err = n.connect("turns"); err != nil {
		return nil, err
	}
	if n.js, err = jetstream.New(n.nc); err != nil {
		n.Close()
		return nil, fmt.Errorf("start node %s: jetstream: %w", cfg.Name, err)
	}
	n.payloads = bus.NewPayloads(n.js, cfg.Replicas)
	if err := n.setupStore(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("start node %s: %w", cfg.Name, err)
	}
	n.super = &nodeSupervisor{log: n.log}
	n.pid, err = n.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return nodeActor{} },
		actor.WithSupervisor(n.super)), "node")
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("start node %s: %w", cfg.Name, err)
	}
	if n.svc, err = toolsets.OpenServices(ctx, toolsets.ServicesConfig{
		JS: n.js, Replicas: cfg.Replicas, Logger: n.log, Settings: cfg.Tools,
		Categories: cfg.Categories, Turns: cfg.Turns, Runner: workflowRunner{n},
	}); err != nil {
		n.Close()
		return nil, fmt.Errorf("start node %s: %w", cfg.Name, err)
	}
	n.profiles = n.svc.Profiles()
	for _, cat := range cfg.Categories {
		tools, err := n.svc.Tools(cat)
		if err == nil {
			err = n.Host(ctx, cat, tools)
		}
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("start node %s: host %s: %w", cfg.Name, cat, err)
		}
	}
	if cfg.Turns {
		if _, _, err := n.assembly(ctx); err != nil {
			n.Close()
			return nil, fmt.Errorf("start node %s: %w", cfg.Name, err)
		}
		if err := n.openIntake(ctx); err != nil {
			n.Close()
			return nil, fmt.Errorf("start node %s: %w", cfg.Name, err)
		}
		if err := n.intake.run(ctx); err != nil {
			n.Close()
			return nil, fmt.Errorf("start node %s: %w", cfg.Name, err)
		}
		if err := n.listenForTurns(); err != nil {
			n.Close()
			return nil, fmt.Errorf("start node %s: %w", cfg.Name, err)
		}
	}
	return n, nil
}

// setupStore opens what the node's turns keep in JetStream: the transcript stream.
// A node that runs none needs no JetStream of its own (its categories' stores are the
// services'). Right after a cluster forms, JetStream may not answer yet: retry until
// ctx ends rather than fail the start (bus.Retry).
func (n *Node) setupStore(ctx context.Context) error {
	if !n.cfg.Turns {
		return nil
	}
	return bus.Retry(ctx, "set up JetStream", n.log, n.ensureTranscripts)
}

// ensureTranscripts creates the transcript stream if it does not exist; an
// existing stream keeps the limits an operator gave it.
func (n *Node) ensureTranscripts(ctx context.Context) error {
	if n.transcripts.Load() {
		return nil
	}
	err := durable.EnsureTranscripts(ctx, n.js, n.cfg.Replicas)
	if err == nil {
		n.transcripts.Store(true)
	}
	return err
}

func (n *Node) connect(role string) (*nats.Conn, error) {
	nc, err := n.cfg.Connect("toolbus-" + role + "@" + n.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("node %s: connect %s: %w", n.cfg.Name, role, err)
	}
	n.connMu.Lock()
	n.conns = append(n.conns, nc)
	n.connMu.Unlock()
	return nc, nil
}

// Conn is the node's own connection (turns and control).
func (n *Node) Conn() *nats.Conn { return n.nc }

// JetStream is the node's JetStream handle.
func (n *Node) JetStream() jetstream.JetStream { return n.js }

// Host starts a host for a category with the given tools, on a connection of
// its own, and returns once it serves them.
func (n *Node) Host(ctx context.Context, category string, tools []*toolbus.Tool) error {
	nc, err := n.connect("host-" + category)
	if err != nil {
		return err
	}
	cfg := hostConfig{
		Config: host.Config{
			Category: category, Tools: tools, Conn: nc, Node: n.cfg.Name,
			Home: n.cfg.Home, HomeRoot: n.cfg.HomeRoot, MaxConcurrent: n.cfg.MaxConcurrent, Logger: n.log,
			Go: n.workers.goFunc, Voucher: n.voucher, Interest: n.cfg.Interest, Payloads: n.payloads,
		},
		reconnect: func() (*nats.Conn, error) { return n.connect("host-" + category) },
	}
	if n.cfg.Telemetry != nil {
		cfg.Telemetry = hostTelemetry{n.cfg.Telemetry}
	}
	pid, err := n.request(ctx, &spawnHost{cfg: cfg})
	if err != nil {
		return err
	}
	// Started runs before any other message, so the answer tells whether the
	// service is up.
	res, err := n.sys.Root.RequestFuture(pid, &hostReady{}, timeoutOf(ctx)).Result()
	if err != nil {
		return fmt.Errorf("host %s: %w", category, err)
	}
	if st, ok := res.(hostStarted); ok && st.err != nil {
		n.sys.Root.Stop(pid)
		return st.err
	}
	return nil
}

// timeoutOf is the time left before ctx's deadline, or 10 seconds.
func timeoutOf(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return 10 * time.Second
}

// request asks the node actor and returns its answer.
func (n *Node) request(ctx context.Context, msg any) (*actor.PID, error) {
	res, err := n.sys.Root.RequestFuture(n.pid, msg, timeoutOf(ctx)).Result()
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	switch v := res.(type) {
	case *actor.PID:
		return v, nil
	case error:
		return nil, v
	}
	return nil, fmt.Errorf("node %s: unexpected answer %T", n.cfg.Name, res)
}

// maxWorkers bounds the goroutines a node keeps waiting for work; past it, work runs on
// goroutines of its own.
const maxWorkers = 512

// catalogPatience is how old the catalog may be before a turn whose profile names a
// namespace it lacks refreshes it first: a host that came up without announcing itself,
// or whose announcement is still being read, is found by the next turn that needs it,
// and a namespace with no host costs at most four refreshes a second.
const catalogPatience = 250 * time.Millisecond

// Close stops every turn and host of the node, then its connections.
func (n *Node) Close() {
	n.closeOnce.Do(n.close)
}

func (n *Node) close() {
	// No start is taken from now on, and those being answered are answered before the
	// intake stops.
	for _, s := range n.subs {
		_ = s.Unsubscribe()
	}
	n.subs = nil
	n.startMu.Lock()
	n.startClosed = true
	n.startMu.Unlock()
	n.starting.Wait()
	if n.intake != nil {
		n.intake.stop(n.cfg.HandBackGrace)
	}
	n.assemblyMu.Lock()
	if n.catalog != nil {
		n.catalog.Close()
	}
	n.assemblyMu.Unlock()
	n.lostMu.Lock()
	if n.lostSub != nil {
		_ = n.lostSub.Unsubscribe()
		n.lostSub = nil
		n.nc.RemoveStatusListener(n.lostBack)
		n.lostBack = nil
	}
	n.lostMu.Unlock()
	if n.super != nil {
		n.super.close()
	}
	if n.pid != nil {
		// Stopping the node actor stops its children first.
		_ = n.sys.Root.StopFuture(n.pid).Wait()
		n.pid = nil
	}
	n.workers.Close(host.StopGrace)
	// The actors are gone; what they published must still reach the server.
	n.connMu.Lock()
	conns := n.conns
	n.conns = nil
	n.connMu.Unlock()
	for _, nc := range conns {
		_ = nc.FlushTimeout(time.Second)
		nc.Close()
	}
	n.sys.Shutdown()
}

// levelFilter drops records below min.
type levelFilter struct {
	min slog.Level
	h   slog.Handler
}

func (f levelFilter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.h.Enabled(ctx, l)
}
func (f levelFilter) Handle(ctx context.Context, r slog.Record) error { return f.h.Handle(ctx, r) }
func (f levelFilter) WithAttrs(a []slog.Attr) slog.Handler {
	return levelFilter{min: f.min, h: f.h.WithAttrs(a)}
}
func (f levelFilter) WithGroup(g string) slog.Handler {
	return levelFilter{min: f.min, h: f.h.WithGroup(g)}
}

// DiscardLogger is a logger that drops everything.
func DiscardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
