package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/secretflag"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/computer"
	"github.com/toolbus/toolbus/toolsets/web"
)

// clientName is the connection name the command line uses on the bus, as
// `nats server report connections` and message traces show it.
const clientName = "toolbus-cli"

// embeddedNode is the name of the node an embedded run starts.
const embeddedNode = "cli"

// defaultAgent is the agent a command acts for unless -agent says otherwise:
// the todo tools keep one list per agent and refuse calls without one.
const defaultAgent = "default"

// dialTimeout bounds connecting to a remote bus.
const dialTimeout = 10 * time.Second

// busFlags select a remote bus; their defaults come from the environment
// variables the nats CLI and the node command read.
type busFlags struct {
	server, user, passFile, creds, tlsCA, inboxPrefix string
}

func (b *busFlags) register(fs *flag.FlagSet, e *env) {
	fs.StringVar(&b.server, "server", e.getenv("NATS_URL"), "use the nodes of the bus at this NATS URL instead of an embedded one (env NATS_URL)")
	fs.StringVar(&b.user, "user", e.getenv("NATS_USER"), "user for -server (env NATS_USER)")
	// Read only when used, so that -h never prints it.
	fs.StringVar(&b.passFile, "pass-file", "", "file holding the password of -user (default env NATS_PASSWORD)")
	secretflag.Refuse(fs, "pass", "-pass-file FILE or the environment variable NATS_PASSWORD")
	fs.StringVar(&b.creds, "creds", e.getenv("NATS_CREDS"), "NATS credentials file for -server (env NATS_CREDS)")
	fs.StringVar(&b.tlsCA, "tls-ca", e.getenv("NATS_CA"), "PEM CA that verifies the server's TLS certificate (env NATS_CA)")
	fs.StringVar(&b.inboxPrefix, "inbox-prefix", e.getenv("NATS_INBOX_PREFIX"), "where replies come, for -server (env NATS_INBOX_PREFIX; default _INBOX_<user>, the one inbox a user of a toolbus users file may read; _INBOX with -creds or no user)")
}

func (b *busFlags) dial(ctx context.Context) (*nats.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	pass, err := secretflag.Read(b.passFile, "NATS_PASSWORD")
	if err != nil {
		return nil, usagef("-pass-file: %v", err)
	}
	return bus.Dial(ctx, b.server, clientName, bus.Credentials{
		User: b.user, Password: pass, CredsFile: b.creds, CAFile: b.tlsCA, InboxPrefix: b.inboxPrefix,
	})
}

// clientFor connects a command that works on a running bus (what names it in the
// error when -server is missing); closing the client closes the connection.
func (b *busFlags) clientFor(ctx context.Context, what string) (*client.Client, error) {
	nc, err := b.dialFor(ctx, what)
	if err != nil {
		return nil, err
	}
	return client.New(nc, client.Where(nc.ConnectedUrlRedacted()), client.OwnConn()), nil
}

// embedOptions configure the bus and node a command starts in-process.
type embedOptions struct {
	home     string // every agent's home
	storeDir string // JetStream store; empty is a temporary one
	turns    bool   // the node runs turns
	gateway  gateway.Config
	sandbox  computer.SandboxMode // how run_command isolates commands
}

// sandboxFlag registers -sandbox, the embedded node's sandbox mode for run_command.
func sandboxFlag(fs *flag.FlagSet) *computer.SandboxMode {
	m := computer.SandboxBwrap
	fs.Var(&m, "sandbox", "embedded node: how run_command isolates commands: bwrap (a bubblewrap sandbox each) or off (bare processes of this one, for trusted agents only)")
	return &m
}

// busConn is a connection to the bus a command works on: a remote one, or an
// embedded server with its node.
type busConn struct {
	nc    *nats.Conn
	cl    *client.Client // on nc
	where string         // for messages: a URL, or "the embedded bus"
	node  *node.Node     // the embedded node, or nil
}

// newBusConn is a connection to a remote bus; log, when set, takes the client's
// warnings.
func newBusConn(nc *nats.Conn, log *slog.Logger) *busConn {
	where := nc.ConnectedUrlRedacted()
	opts := []client.Option{client.Where(where)}
	if log != nil {
		opts = append(opts, client.Logger(log))
	}
	return &busConn{nc: nc, cl: client.New(nc, opts...), where: where}
}

// connect dials -server when it is set, and otherwise starts an embedded bus
// and node configured by embed.
func connect(ctx context.Context, bf busFlags, embed embedOptions, log *slog.Logger) (*busConn, error) {
	if bf.server != "" {
		nc, err := bf.dial(ctx)
		if err != nil {
			return nil, err
		}
		return newBusConn(nc, log), nil
	}
	return startEmbedded(ctx, embed, log)
}

// turnBus is the bus of a command that runs turns: the remote one of bf, or an
// embedded node that runs turns, its gateway from e's environment and gf, checked by
// check (when set) before anything starts; the log view shows what the embedded node logs (to stderr,
// and to logFile when set). Close both.
func turnBus(ctx context.Context, e *env, bf busFlags, gf *node.GatewayFlags, o embedOptions, check func(gateway.Config) error, logFile string, verbose bool, stderr io.Writer) (*busConn, *logView, error) {
	if err := gf.Check(); err != nil {
		return nil, nil, usagef("%v", err)
	}
	gw, err := gf.ConfigFrom(e.getenv)
	if err != nil {
		return nil, nil, err
	}
	if check != nil {
		if err := check(gw); err != nil {
			return nil, nil, err
		}
	}
	logs, err := newLogView(stderr, logFile, verbose)
	if err != nil {
		return nil, nil, err
	}
	o.turns, o.gateway = true, gw
	bc, err := connect(ctx, bf, o, logs.logger())
	if err != nil {
		logs.Close()
		return nil, nil, err
	}
	return bc, logs, nil
}

func startEmbedded(ctx context.Context, o embedOptions, log *slog.Logger) (*busConn, error) {
	home, err := filepath.Abs(o.home)
	if err != nil {
		return nil, fmt.Errorf("home %s: %w", o.home, err)
	}
	if fi, err := os.Stat(home); err != nil {
		return nil, fmt.Errorf("home: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("home %s is not a directory", home)
	}
	n, err := node.Start(ctx, node.Config{
		Bus: server.Config{StoreDir: o.storeDir, Logger: log},
		Node: node.NodeConfig{
			Name:    embeddedNode,
			Turns:   o.turns,
			Home:    home,
			Gateway: o.gateway,
			Tools: toolsets.Settings{
				Computer: computer.Config{Sandbox: computer.SandboxConfig{Mode: o.sandbox}},
				// Search keys from TOOLBUS_BRAVE_API_KEY and TOOLBUS_TAVILY_API_KEY,
				// redacted with the process's other keys.
				Web: web.Config{Keys: web.KeysFromEnv()},
			},
			Logger: log,
		},
	})
	if err != nil {
		return nil, err
	}
	nc, err := n.Connect(clientName)
	if err != nil {
		n.Close()
		return nil, err
	}
	const where = "the embedded bus"
	return &busConn{nc: nc, cl: client.New(nc, client.Where(where), client.Logger(log)), where: where, node: n}, nil
}

// Close stops the embedded node and server, or closes the remote connection.
func (c *busConn) Close() {
	if c.node != nil {
		c.node.Close() // closes nc too
		return
	}
	_ = c.nc.FlushTimeout(time.Second)
	c.nc.Close()
}

// newLogger shows warnings and errors of the embedded bus and node on stderr,
// one readable line each, once each; below that they would drown the output.
func newLogger(stderr io.Writer) *slog.Logger {
	v, _ := newLogView(stderr, "", false) // without a file it cannot fail
	return v.logger()
}

// checkAgent refuses agent ids the category hosts would refuse on every call
// (bus.CheckAgent); an empty one means no agent.
func checkAgent(agent string) error {
	if agent == "" {
		return nil
	}
	if err := bus.CheckAgent(agent); err != nil {
		return usagef("-agent %q: %v", agent, err)
	}
	return nil
}
