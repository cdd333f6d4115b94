package actors

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
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
	"github.com/toolbus/toolbus/toolsets/computer"
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
	lostMu     sync.Mutex
	lostSub    *nats.Subscription // listenForLostReplies
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

// assembly returns what assembling turns needs, the profile store and the catalog of the
// bus, opening them on first use: a node that takes turns over the bus opens them when
// it starts; one whose turns come only through Spawn, when the first needs them.
func (n *Node) assembly(ctx context.Context) (*toolsets.Profiles, *catalog.Catalog, error) {
	n.assemblyMu.Lock()
	defer n.assemblyMu.Unlock()
	if err := n.openProfiles(ctx); err != nil {
		return nil, nil, err
	}
	if n.catalog == nil {
		c := catalog.New(n.nc, n.cfg.Catalog)
		if err := c.Watch(); err != nil {
			return nil, nil, err
		}
		n.catalog = c
	}
	return n.profiles, n.catalog, nil
}

// openProfiles opens the profile store unless it is open; assemblyMu is held.
func (n *Node) openProfiles(ctx context.Context) error {
	if n.profiles != nil {
		return nil
	}
	return bus.Retry(ctx, "open the agent profiles", n.log, func(ctx context.Context) error {
		p, err := toolsets.OpenProfiles(ctx, n.js, n.cfg.Replicas)
		n.profiles = p
		return err
	})
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

// Profiles is the agent profile store, opened on first use.
func (n *Node) Profiles(ctx context.Context) (*toolsets.Profiles, error) {
	p, _, err := n.assembly(ctx)
	return p, err
}

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

// Assemble builds the kit of a turn: its agent's profile (none: built-in tools only) and
// the node's catalog of the bus decide which external namespaces it includes.
func (n *Node) Assemble(ctx context.Context, spec bus.TurnSpec) (kit *toolsets.Kit, err error) {
	return n.assemble(ctx, spec, nil, 0)
}

// assemble is Assemble for a turn that calls the tools of calls next (a resumed turn's
// last batch): it waits up to patience for the catalog to serve their namespaces that
// the profile names.
func (n *Node) assemble(ctx context.Context, spec bus.TurnSpec, calls []toolbus.Item, patience time.Duration) (kit *toolsets.Kit, err error) {
	// A category creator that panics (a bug, or a profile, skill or spec nobody foresaw)
	// fails this turn, with the reason, and not the node with every turn it runs.
	defer func() {
		if r := recover(); r != nil {
			n.log.Error("assemble tools: panic; the turn fails", "turn", spec.ID, "agent", spec.Agent, "panic", r, "stack", string(debug.Stack()))
			kit, err = nil, fmt.Errorf("assemble tools: panic: %v", r)
		}
	}()
	profiles, cat, err := n.assembly(ctx)
	if err != nil {
		return nil, fmt.Errorf("assemble turn: %w", err)
	}
	// An agent without a profile gets the built-in tools (profile stays nil).
	var profile *toolsets.Profile
	if spec.Agent != "" {
		err := bus.Retry(ctx, "read profile "+spec.Agent, n.log, func(ctx context.Context) error {
			p, err := profiles.Get(ctx, spec.Agent)
			if errors.Is(err, toolsets.ErrNoProfile) {
				return nil
			}
			profile = p
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("assemble turn: %w", err)
		}
	}
	n.freshenCatalog(ctx, cat, spec.ID, profile, calls, patience)
	kit, err = toolsets.Assemble(spec, profile, cat, toolsets.Options{Computer: n.cfg.Tools.Computer, Home: n.cfg.Home, HomeRoot: n.cfg.HomeRoot,
		ScheduleMinInterval: n.cfg.Tools.ScheduleMinInterval})
	if kit != nil && !slices.Contains(n.cfg.Categories, computer.Category) {
		// The agent's files are where a computer host works: a node that runs turns
		// beside tool nodes of their own homes would name a home no tool of the turn uses.
		kit.Home = ""
	}
	return kit, err
}

// maxWorkers bounds the goroutines a node keeps waiting for work; past it, work runs on
// goroutines of its own.
const maxWorkers = 512

// catalogPatience is how old the catalog may be before a turn whose profile names a
// namespace it lacks refreshes it first: a host that came up without announcing itself,
// or whose announcement is still being read, is found by the next turn that needs it,
// and a namespace with no host costs at most four refreshes a second.
const catalogPatience = 250 * time.Millisecond

// freshenCatalog refreshes the catalog when the profile names a namespace it lacks.
// With a patience, it then waits up to that long, refreshing every catalogPatience,
// until the catalog serves the namespaces of calls (a resumed turn's last batch) that
// the profile names. A node restarted with its embedded server resumes its turns at
// once, while the hosts that were connected to it are still reconnecting: without the
// wait, a resumed call of theirs is refused as an unknown tool (seen: the turn taken
// 0.3 s after the node was ready, before its host had reconnected).
func (n *Node) freshenCatalog(ctx context.Context, cat *catalog.Catalog, turn string, profile *toolsets.Profile, calls []toolbus.Item, patience time.Duration) {
	if profile == nil || len(profile.Namespaces) == 0 {
		return
	}
	names := make([]string, len(profile.Namespaces))
	for i, ns := range profile.Namespaces {
		names[i] = ns.Name
	}
	if err := cat.Ensure(ctx, catalogPatience, names...); err != nil {
		n.log.Warn("catalog refresh before a turn failed", "err", err)
	}
	var awaited []string
	for _, c := range calls {
		if slices.Contains(names, c.Namespace) && !slices.Contains(awaited, c.Namespace) {
			awaited = append(awaited, c.Namespace)
		}
	}
	if patience <= 0 || len(awaited) == 0 || cat.Serves(awaited...) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	tick := time.NewTicker(catalogPatience)
	defer tick.Stop()
	for !cat.Serves(awaited...) {
		select {
		case <-ctx.Done():
			n.log.Warn("resuming a turn without the hosts of its last calls", "turn", turn, "namespaces", strings.Join(awaited, ","), "waited", patience)
			return
		case <-tick.C:
			_ = cat.Ensure(ctx, catalogPatience, awaited...)
		}
	}
}

// Spawn starts a turn with cfg; Conn, JS, Node, the kit and the defaults come from the
// node where cfg leaves them empty. The result reaches cfg.Done.
func (n *Node) Spawn(ctx context.Context, cfg TurnConfig) (string, error) {
	if cfg.Conn == nil {
		cfg.Conn = n.nc
	}
	if cfg.JS == nil {
		if err := n.ensureTranscripts(ctx); err != nil {
			return "", fmt.Errorf("transcript stream: %w", err)
		}
		cfg.JS = n.js
	}
	if cfg.Node == "" {
		cfg.Node = n.cfg.Name
	}
	if cfg.Spec.Limits.MaxSteps == 0 {
		cfg.Spec.Limits.MaxSteps = n.cfg.MaxSteps
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = n.cfg.CallTimeout
	}
	if cfg.MaxCalls == 0 {
		cfg.MaxCalls = n.cfg.MaxTurnCalls
	}
	if cfg.AbortGrace == 0 {
		cfg.AbortGrace = n.cfg.AbortGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = n.log
	}
	if cfg.Kit == nil {
		kit, err := n.Assemble(ctx, cfg.Spec)
		if err != nil {
			return "", err
		}
		cfg.Kit = kit
		if cfg.Unavailable == nil {
			_, cat, _ := n.assembly(ctx)
			cfg.Unavailable = func(string) { cat.Kick() }
		}
	}
	if err := checkTools(cfg.Model, cfg.Kit); err != nil {
		return "", err
	}
	if cfg.Spec.ID == "" {
		cfg.Spec.ID = bus.NewID()
	}
	cfg.workers, cfg.voucher, cfg.interest, cfg.sampled, cfg.payloads = n.workers, n.voucher, n.cfg.Interest, n.cfg.TraceSampled, n.payloads
	cfg.telemetry = n.cfg.Telemetry
	if err := n.listenForLostReplies(); err != nil {
		return "", err
	}
	if _, err := n.request(ctx, &spawnTurn{cfg: &cfg}); err != nil {
		return "", err
	}
	return cfg.Spec.ID, nil
}

// Run runs a turn to its end. Cancelling ctx aborts the turn, which still
// ends with an honest record of every call.
func (n *Node) Run(ctx context.Context, cfg TurnConfig) (TurnResult, error) {
	done := make(chan TurnResult, 1)
	cfg.Done = func(r TurnResult) { done <- r }
	if cfg.Spec.ID == "" {
		cfg.Spec.ID = bus.NewID()
	}
	id, err := n.Spawn(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return TurnResult{}, err
	}
	select {
	case r := <-done:
		return r, nil
	case <-ctx.Done():
	}
	if err := publishAbort(n.nc, id, "cancelled by the caller"); err != nil {
		return TurnResult{}, err
	}
	return <-done, nil
}

// publishAbort publishes an abort for a turn. Every node hosting one of its calls
// and the turn itself listen on the subject.
func publishAbort(nc *nats.Conn, turn, reason string) error {
	if !bus.ValidToken(turn) {
		return fmt.Errorf("abort: invalid turn id %q", turn)
	}
	b, err := json.Marshal(bus.Abort{Turn: turn, Reason: reason})
	if err != nil {
		return err
	}
	if err := nc.Publish(bus.AbortSubject(turn), b); err != nil {
		return fmt.Errorf("abort %s: %w", turn, err)
	}
	return nc.Flush()
}

// listenForTurns takes StartTurn requests on the node's own subject and on the
// shared queue.
func (n *Node) listenForTurns() error {
	handle := func(m *nats.Msg) {
		node := ""
		if m.Subject == bus.NodeStartTurnSubject(n.cfg.Name) {
			node = n.cfg.Name
		}
		reply := n.startFromBus(m.Data, node)
		b, _ := json.Marshal(reply)
		if err := m.Respond(b); err != nil {
			n.log.Warn("answer start turn", "err", err)
		}
	}
	sub, err := n.nc.Subscribe(bus.NodeStartTurnSubject(n.cfg.Name), handle)
	if err != nil {
		return fmt.Errorf("subscribe start turn: %w", err)
	}
	n.subs = append(n.subs, sub)
	if sub, err = n.nc.QueueSubscribe(bus.AnyNodeStartTurn, bus.StartTurnQueue, handle); err != nil {
		return fmt.Errorf("subscribe start turn: %w", err)
	}
	n.subs = append(n.subs, sub)
	return n.nc.Flush()
}

// listenForLostReplies passes a host's word that a reply may be lost (bus.EventReplyLost)
// to the turn of the call, if it runs here: one subscription for the node, made with its
// first turn (a node that only hosts tools may not subscribe there), not one more a turn
// (each costs the server a scan of its subject cache when it goes).
func (n *Node) listenForLostReplies() error {
	n.lostMu.Lock()
	defer n.lostMu.Unlock()
	if n.lostSub != nil {
		return nil
	}
	sys, pid := n.sys, n.pid
	sub, err := n.nc.Subscribe(bus.AllRepliesLost, func(m *nats.Msg) {
		if ts, ok := bus.ParseTurnSubject(m.Subject); ok && ts.Kind == bus.KindEvent {
			sys.Root.Send(pid, &replyLost{turn: ts.Turn, call: ts.Call})
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to lost replies: %w", err)
	}
	n.lostSub = sub
	return nil
}

// startFromBus queues the turn a TurnSpec envelope describes; node, when set, is the
// node that must run it.
func (n *Node) startFromBus(data []byte, node string) bus.StartTurnReply {
	var spec bus.TurnSpec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return bus.StartTurnReply{Node: n.cfg.Name, Error: "start turn: malformed turn spec: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := n.submit(ctx, spec, node)
	if err != nil {
		reply := bus.StartTurnReply{Turn: spec.ID, Node: n.cfg.Name, Error: err.Error()}
		if errors.Is(err, ErrTurnExists) {
			reply.Code = bus.StartTurnExists
		}
		return reply
	}
	return bus.StartTurnReply{Turn: id, Node: n.cfg.Name}
}

// Start queues the turn a spec describes as a durable turn (submit): any node that runs
// turns takes it; its progress and end are published on the turn's subjects.
func (n *Node) Start(ctx context.Context, spec bus.TurnSpec) (string, error) {
	if n.intake != nil {
		return n.submit(ctx, spec, "")
	}
	return n.startHere(ctx, spec)
}

// startHere runs a turn on this node without the intake: it ends with the node.
func (n *Node) startHere(ctx context.Context, spec bus.TurnSpec) (string, error) {
	if err := checkStartable(spec); err != nil {
		return "", err
	}
	if spec.Kind == bus.TurnTask {
		return "", errors.New("start turn: a task turn runs through the turn intake, which this node does not run")
	}
	model, err := n.model(spec)
	if err != nil {
		return "", fmt.Errorf("start turn: %w", err)
	}
	return n.Spawn(ctx, TurnConfig{Spec: spec, Model: model})
}

// toolChecker is a model whose API has rules of its own for the tools a turn sends
// (gateway.Anthropic: names), checked once the turn's kit is assembled rather than at
// its first request.
type toolChecker interface {
	CheckTools([]*toolbus.Spec) error
}

// checkTools applies the model's rules for tools to a kit.
func checkTools(model gateway.Model, kit *toolsets.Kit) error {
	tc, ok := model.(toolChecker)
	if !ok || kit == nil || kit.Tools == nil {
		return nil
	}
	if err := tc.CheckTools(kit.Tools.Specs()); err != nil {
		return fmt.Errorf("%w: %w", ErrModel, err)
	}
	return nil
}

func (n *Node) model(spec bus.TurnSpec) (gateway.Model, error) {
	if len(spec.Script) > 0 {
		var s gateway.Script
		dec := json.NewDecoder(bytes.NewReader(spec.Script))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("inline script: %w", err)
		}
		return gateway.OpenScript(s, n.cfg.Gateway)
	}
	if spec.Model == "" {
		return nil, errors.New("no model given")
	}
	// A script spec names a file on the node's disk; over the bus a script
	// travels inline instead.
	if strings.HasPrefix(spec.Model, "script:") {
		return nil, errors.New("model script:FILE is not accepted over the bus: send the script inline (the turn spec's script)")
	}
	return gateway.Open(spec.Model, n.cfg.Gateway)
}

// Close stops every turn and host of the node, then its connections.
func (n *Node) Close() {
	n.closeOnce.Do(n.close)
}

func (n *Node) close() {
	if n.intake != nil {
		n.intake.stop(n.cfg.HandBackGrace)
	}
	n.assemblyMu.Lock()
	if n.catalog != nil {
		n.catalog.Close()
	}
	n.assemblyMu.Unlock()
	for _, s := range n.subs {
		_ = s.Unsubscribe()
	}
	n.subs = nil
	n.lostMu.Lock()
	if n.lostSub != nil {
		_ = n.lostSub.Unsubscribe()
		n.lostSub = nil
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
	n.workers.close(host.StopGrace)
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
