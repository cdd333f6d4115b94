package node

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/telemetry"
	"github.com/toolbus/toolbus/toolsets"
)

// DefaultStartTimeout bounds Start when its context has no deadline: an embedded
// server that has no JetStream leader within it will not get one (a cluster with too
// few peers up), and a caller is better told than left waiting.
const DefaultStartTimeout = time.Minute

// NodeConfig configures a node's actors: its name, the categories it hosts, whether
// it runs turns, its homes, gateway and limits (see actors.NodeConfig, which it is).
type NodeConfig = actors.NodeConfig

// Config is a node to start: an embedded bus (Bus) or a connection to a running one
// (Server), and the node's actors (Node).
type Config struct {
	// Server, when set, is the NATS URL of a running bus to join instead of embedding
	// one; Credentials log in there, and Bus is ignored.
	Server      string
	Credentials bus.Credentials
	// Bus configures the embedded server. An empty StoreDir is a temporary
	// directory, removed when the node closes; an empty Name is Node.Name.
	Bus server.Config
	// Node configures the node's actors. Start sets its Connect, Interest and
	// StoreFull; nil Categories are all of toolsets.Categories() (none when Tools is
	// set: list them to host both), an empty Logger is Bus.Logger, and an empty Name
	// is DefaultName on an embedded bus. A nil Telemetry is opened from the process's
	// OTEL_* environment when it names an exporter (and closed with the node), so that
	// `toolbus run` traces as `toolbus node` does; none otherwise.
	Node NodeConfig
	// Tools are the program's own tools, which the node hosts beside the built-in
	// Categories: one host per category, each category the Spec.Category its tools
	// name. Turns that Run starts call them unless their Turn names other tools.
	Tools []*toolbus.Tool
	// MCP are MCP servers the node hosts as categories, each "mcp-NAME" in namespace
	// NAME (package mcp): started with the node, kept running, stopped with it.
	MCP []mcp.ServerConfig
}

// DefaultName names an embedded node whose config gives no name. A node joining a
// running bus has to be named: two nodes of one name would take each other's turns.
const DefaultName = "embedded"

func (c *Config) withDefaults() {
	if c.Node.Categories == nil && len(c.Tools) == 0 {
		c.Node.Categories = toolsets.Categories()
	}
	if c.Node.Name == "" && c.Server == "" {
		c.Node.Name = DefaultName
	}
	if c.Bus.Name == "" {
		c.Bus.Name = c.Node.Name
	}
	if c.Node.Logger == nil {
		c.Node.Logger = c.Bus.Logger
	}
	if c.Bus.Logger == nil {
		c.Bus.Logger = c.Node.Logger
	}
	if c.Node.Gateway.Logger == nil {
		c.Node.Gateway.Logger = c.Node.Logger
	}
}

func (c *Config) validate() error {
	switch {
	case c.Node.Name == "":
		// Only a node joining a running bus (Server) gets here: an embedded one is named
		// DefaultName. Two nodes of one name on a bus would take each other's turns.
		return fmt.Errorf("start node: no name: a node that joins the bus at %s needs Config.Node.Name (node.NodeConfig.Name; `toolbus node -name`), unique on that bus, since nodes of one name would take each other's turns",
			redact.URL(c.Server))
	case !bus.ValidToken(c.Node.Name):
		return fmt.Errorf("start node: name %q is not one subject token (no dots, spaces or wildcards)", c.Node.Name)
	case c.Node.Connect != nil:
		return fmt.Errorf("start node %s: Connect is set by Start", c.Node.Name)
	}
	builtin := make(map[string]bool, len(c.Node.Categories))
	for _, cat := range c.Node.Categories {
		builtin[cat] = true
	}
	for i, t := range c.Tools {
		switch {
		case t == nil:
			return fmt.Errorf("start node %s: tool %d is nil", c.Node.Name, i)
		case builtin[t.Category]:
			return fmt.Errorf("start node %s: tool %s: category %s is a built-in category the node hosts: give the tool a category of its own", c.Node.Name, t.Name, t.Category)
		}
		if err := t.Check(); err != nil {
			return fmt.Errorf("start node %s: tool %s: %w", c.Node.Name, t.Name, err)
		}
	}
	if _, err := toolbus.NewSet(toolbus.SpecsOf(c.Tools)...); err != nil {
		return fmt.Errorf("start node %s: %w", c.Node.Name, err)
	}
	return nil
}

// byCategory groups tools by their category, in the order the categories first appear.
func byCategory(tools []*toolbus.Tool) (cats []string, of map[string][]*toolbus.Tool) {
	of = make(map[string][]*toolbus.Tool)
	for _, t := range tools {
		if of[t.Category] == nil {
			cats = append(cats, t.Category)
		}
		of[t.Category] = append(of[t.Category], t)
	}
	return cats, of
}

// Node is a running node: its actors, on an embedded server or a connection to a
// running bus. A program runs a turn of its own on it with [Node.Run]; a turn for any
// node of a bus starts with client.Start, on a connection from [Node.Connect].
type Node struct {
	// an are the node's actors (the supervisor of its hosts and turns). They are a
	// field, not embedded, so that a node's API is the methods below and nothing of
	// package actors' comes with it; [Node.Actors] hands them to the bench and tests.
	an    *actors.Node
	srv   *server.Server // nil when joined to a running bus
	cfg   Config
	where string
	tel   *telemetry.Telemetry // opened by Start, closed by Close
	mcp   []*mcp.Category
}

// Start starts a node. Embedded, it starts the server first and waits for JetStream;
// the keys of the process's environment and of the model gateway are registered for
// redaction, since the node's turns write transcripts.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	redact.AddEnvSecrets()
	redact.AddSecrets(cfg.Node.Gateway.APIKey, cfg.Node.Gateway.OpenAIKey, cfg.Node.Gateway.AnthropicKey)

	n := &Node{cfg: cfg}
	if cfg.Node.Telemetry == nil {
		tel, err := telemetry.Open(ctx, telemetry.Config{Node: cfg.Node.Name})
		if err != nil {
			return nil, fmt.Errorf("start node %s: %w", cfg.Node.Name, err)
		}
		if tel.Tracing() {
			cfg.Node.Telemetry, n.tel = tel, tel
		}
	}
	if cfg.Server != "" {
		cfg.Node.Connect = func(name string) (*nats.Conn, error) {
			// Connections outlive Start's context: dial with a fresh one.
			dctx, cancel := context.WithTimeout(context.Background(), DefaultStartTimeout)
			defer cancel()
			return bus.Dial(dctx, cfg.Server, name, cfg.Credentials)
		}
		n.where = "connected to " + redact.URL(cfg.Server)
	} else {
		srv, err := server.Start(ctx, cfg.Bus)
		if err != nil {
			n.closeTelemetry()
			return nil, err
		}
		n.srv = srv
		cfg.Node.Connect = func(name string) (*nats.Conn, error) { return srv.Connect(name) }
		cfg.Node.Interest, cfg.Node.StoreFull = srv.Interest, srv.StoreFullError
		n.where = "embedded server, store " + srv.StoreDir()
		if u := srv.ClientURL(); u != "" {
			n.where += ", listening on " + u
		} else {
			n.where += ", no port"
		}
	}
	an, err := actors.StartNode(ctx, cfg.Node)
	if err != nil {
		n.closeServer()
		n.closeTelemetry()
		return nil, err
	}
	n.an = an
	n.cfg = cfg
	cats, of := byCategory(cfg.Tools)
	for _, cat := range cats {
		if err := an.Host(ctx, cat, of[cat]); err != nil {
			n.Close()
			return nil, fmt.Errorf("start node %s: host %s: %w", cfg.Node.Name, cat, err)
		}
	}
	if err := n.startMCP(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("start node %s: %w", cfg.Node.Name, err)
	}
	return n, nil
}

// startMCP starts the node's MCP servers and waits, within ctx, for each first
// start to end: a server that is up by then has its tools hosted when Start
// returns; one that is not is logged, and its category keeps trying.
func (n *Node) startMCP(ctx context.Context) error {
	for _, sc := range n.cfg.MCP {
		if sc.Logger == nil {
			sc.Logger = n.cfg.Node.Logger
		}
		c, err := mcp.Start(sc, n.an)
		if err != nil {
			return err
		}
		n.mcp = append(n.mcp, c)
	}
	for _, c := range n.mcp {
		select {
		case <-c.Started():
		case <-ctx.Done():
			return nil // still starting: it hosts its tools once it answers
		}
	}
	return nil
}

// MCP are the node's MCP server categories, in the order of Config.MCP.
func (n *Node) MCP() []*mcp.Category { return n.mcp }

// Name is the node's name (Config.Node.Name, DefaultName for an embedded node given
// none): the name its turns and hosts carry on the bus.
func (n *Node) Name() string { return n.cfg.Node.Name }

// Host hosts tools of category on the running node, as Start hosts Config.Tools: on a
// connection of its own, served to every node of the bus; it returns once the host
// serves them. A category's tools are fixed while it is hosted: to change them, Unhost
// it, then Host it again.
func (n *Node) Host(ctx context.Context, category string, tools []*toolbus.Tool) error {
	return n.an.Host(ctx, category, tools)
}

// Unhost stops the node's host of category: its calls in flight end as a stopping
// host's do, and the bus's catalogs hear that it is gone. A category the node does not
// host is no error.
func (n *Node) Unhost(ctx context.Context, category string) error {
	return n.an.Unhost(ctx, category)
}

// Actors are the node's actors: its supervisor of hosts and turns, for the bench and
// for tests that drive turns below [Node.Run] (a gateway.Model or a toolsets.Kit of
// their own, a turn spawned and then aborted, the durable intake).
//
// A method rather than fields on Turn for such turns (a Model, a Kit): those would put
// the lower layers' types into the API every program reads, for the bench alone, and
// still not reach the intake or a turn spawned without waiting for its end. Programs
// need none of it: Run, or client.Start on a connection from Connect.
func (n *Node) Actors() *actors.Node { return n.an }

// Connect opens a client connection to the node's bus under name: in-process when
// embedded, dialed with the node's credentials otherwise.
func (n *Node) Connect(name string) (*nats.Conn, error) { return n.cfg.Node.Connect(name) }

// Server is the embedded server, or nil when the node joined a running bus.
func (n *Node) Server() *server.Server { return n.srv }

// Where says where the node's bus is, for logs: "embedded server, store …, no port".
func (n *Node) Where() string { return n.where }

// Failed is closed when the embedded server's JetStream can no longer write its store
// (see server.Server.Failed); it never closes for a node joined to a running bus.
func (n *Node) Failed() <-chan struct{} {
	if n.srv == nil {
		return nil
	}
	return n.srv.Failed()
}

// Err says why Failed closed.
func (n *Node) Err() error {
	if n.srv == nil {
		return nil
	}
	return n.srv.Err()
}

// Close stops the node's actors (handing its running turns back), then the embedded
// server. The embedded server of a cluster first moves its clients from other processes
// (hosts, workers, clients) to the other servers (server.Server.MoveClients), and hands
// the Raft groups it leads to them (server.Server.StepDownLeaders): a request routed to a
// client still here as the server shuts down would be lost, and so would what a group it
// led had not replicated yet (the hand-backs of the turns below among them).
func (n *Node) Close() {
	n.leaveCluster()
	for _, c := range n.mcp {
		c.Close()
	}
	n.an.Close()
	n.closeServer()
	n.closeTelemetry()
}

// leaveCluster has the embedded server's clients from other processes reconnect to the
// cluster's other servers, and hands those servers the Raft groups it leads; it logs
// what it did. A node joined to a running bus, or alone, has nothing to do.
func (n *Node) leaveCluster() {
	if n.srv == nil {
		return
	}
	moved, err := n.srv.MoveClients()
	stepped := n.srv.StepDownLeaders()
	log := n.cfg.Node.Logger
	if log == nil {
		return
	}
	switch {
	case err != nil:
		log.Warn("move the embedded server's clients to the cluster's other servers", "err", err)
	case moved > 0:
		log.Info("moved the embedded server's clients to the cluster's other servers before stopping", "clients", moved)
	}
	if stepped {
		log.Info("handed the embedded server's Raft leadership to the cluster's other servers before stopping")
	}
}

// closeTelemetry exports the last spans of a telemetry Start opened.
func (n *Node) closeTelemetry() {
	if n.tel != nil {
		_ = n.tel.CloseTimeout(5 * time.Second)
	}
}

func (n *Node) closeServer() {
	if n.srv != nil {
		n.srv.Close()
	}
}
