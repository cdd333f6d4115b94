package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/toolsets"
)

// DefaultStartTimeout bounds Start when its context has no deadline: an embedded
// server that has no JetStream leader within it will not get one (a cluster with too
// few peers up), and a caller is better told than left waiting.
const DefaultStartTimeout = time.Minute

// Config is a node to start: an embedded bus (Bus) or a connection to a running one
// (Server), and the node's actors (Node).
type Config struct {
	// Server, when set, is the NATS URL of a running bus to join instead of embedding
	// one; Credentials log in there, and Bus is ignored.
	Server      string
	Credentials bus.Credentials
	// Bus configures the embedded server. An empty StoreDir is a temporary
	// directory, removed when the node closes; an empty Name is Node.Name.
	Bus bus.Config
	// Node configures the node's actors. Start sets its Connect, Interest and
	// StoreFull; empty Categories are all of toolsets.Categories(), and an empty
	// Logger is Bus.Logger.
	Node actors.NodeConfig
}

func (c *Config) withDefaults() {
	if c.Node.Categories == nil {
		c.Node.Categories = toolsets.Categories()
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
		return errors.New("start node: no name")
	case !bus.ValidToken(c.Node.Name):
		return fmt.Errorf("start node: name %q is not one subject token (no dots, spaces or wildcards)", c.Node.Name)
	case c.Node.Connect != nil:
		return fmt.Errorf("start node %s: Connect is set by Start", c.Node.Name)
	}
	return nil
}

// Node is a running node: its actors, on an embedded server or a connection to a
// running bus.
type Node struct {
	*actors.Node
	srv   *bus.Server // nil when joined to a running bus
	cfg   Config
	where string
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
	redact.AddSecrets(cfg.Node.Gateway.APIKey)

	n := &Node{cfg: cfg}
	if cfg.Server != "" {
		cfg.Node.Connect = func(name string) (*nats.Conn, error) {
			// Connections outlive Start's context: dial with a fresh one.
			dctx, cancel := context.WithTimeout(context.Background(), DefaultStartTimeout)
			defer cancel()
			return bus.Dial(dctx, cfg.Server, name, cfg.Credentials)
		}
		n.where = "connected to " + redact.URL(cfg.Server)
	} else {
		srv, err := bus.Start(ctx, cfg.Bus)
		if err != nil {
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
		return nil, err
	}
	n.Node = an
	n.cfg = cfg
	return n, nil
}

// Connect opens a client connection to the node's bus under name: in-process when
// embedded, dialed with the node's credentials otherwise.
func (n *Node) Connect(name string) (*nats.Conn, error) { return n.cfg.Node.Connect(name) }

// Server is the embedded server, or nil when the node joined a running bus.
func (n *Node) Server() *bus.Server { return n.srv }

// Where says where the node's bus is, for logs: "embedded server, store …, no port".
func (n *Node) Where() string { return n.where }

// Failed is closed when the embedded server's JetStream can no longer write its store
// (see bus.Server.Failed); it never closes for a node joined to a running bus.
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
// server.
func (n *Node) Close() {
	n.Node.Close()
	n.closeServer()
}

func (n *Node) closeServer() {
	if n.srv != nil {
		n.srv.Close()
	}
}
