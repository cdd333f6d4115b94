package node

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/internal/secretflag"
	"github.com/toolbus/toolbus/internal/suggest"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/telemetry"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/computer"
	"github.com/toolbus/toolbus/toolsets/schedule"
	"github.com/toolbus/toolbus/toolsets/web"
)

// ErrFlags reports flags the flag package refused; it has already printed the
// error, and where the usage is.
var ErrFlags = errors.New("bad flags")

// UsageError is a mistake in the flags or arguments found after parsing; it is
// not printed yet.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

type options struct {
	name          string
	server        string
	user, pass    string
	passFile      string
	creds         string
	inboxPrefix   string
	listen        string
	usersFile     string
	tlsCert       string
	tlsKey        string
	tlsCA         string
	storeDir      string
	maxMemory     int64
	maxStore      int64
	clusterName   string
	clusterListen string
	routes        string
	routeUser     string
	routePass     string
	routePassFile string
	routePing     time.Duration
	clientPing    time.Duration
	vouchKeyFile  string
	vouchKey      []byte
	categories    string
	turns         bool
	traceSampled  bool
	metrics       string
	metricsPublic bool
	traceContent  bool
	maxTurns      int
	monitor       string
	turnLease     time.Duration
	maxTurnCalls  int
	handBack      time.Duration
	schedMin      time.Duration
	home          string
	homeRoot      string
	replicas      int
	gateway       GatewayFlags
	logLevel      string
	sandbox       computer.SandboxMode
	// webKeyFiles and webKeyEndpoints are the -web-key-file and -web-key-endpoint
	// values (PROVIDER=FILE, PROVIDER=URL); webKeys what they and the environment give.
	webKeyFiles, webKeyEndpoints repeated
	webKeys                      map[string]web.Key
	sandboxRO                    pathList
	console                      ConsoleFlags
	// mcpFlags and mcpFiles are the -mcp and -mcp-config values; mcp the servers
	// they give.
	mcpFlags, mcpFiles repeated
	mcp                []mcp.ServerConfig
}

// pathList collects a repeated path flag, each made absolute.
type pathList []string

func (l *pathList) String() string { return strings.Join(*l, ",") }
func (l *pathList) Set(v string) error {
	abs, err := filepath.Abs(v)
	if err != nil {
		return err
	}
	*l = append(*l, abs)
	return nil
}

// repeated collects the values of a repeatable flag.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// Synopsis, About and Example are the node's usage text; Usage prints them in the
// layout every toolbus command shares.
const (
	Synopsis = "[flags]"
	About    = "Runs a toolbus node: an embedded NATS server (or a connection to a running bus),\n" +
		"the tool categories it hosts, and the turns it runs. Ctrl-C hands running turns\n" +
		"back to the intake; a second Ctrl-C stops at once."
	Example = "toolbus node -name n1 -listen 127.0.0.1:4222 -user ops -pass-file ops.pass"
)

// flagSet is the node's flag set, writing its usage and errors to w under the
// name prog ("toolbus node"); it fills o.
func flagSet(prog string, w io.Writer, o *options) *flag.FlagSet {
	host, _ := os.Hostname()
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(w)
	fs.StringVar(&o.name, "name", sanitize(host), "node name, unique on the bus (also the embedded server's name)")
	fs.StringVar(&o.server, "server", os.Getenv("NATS_URL"), "connect to this NATS server or cluster instead of embedding one (env NATS_URL)")
	fs.StringVar(&o.user, "user", os.Getenv("NATS_USER"), "user: for -server, the login; for -listen, an admin user created beside those of -users (env NATS_USER)")
	fs.StringVar(&o.passFile, "pass-file", "", "file holding the password of -user (default env NATS_PASSWORD)")
	secretflag.Refuse(fs, "pass", "-pass-file FILE or the environment variable NATS_PASSWORD")
	fs.StringVar(&o.creds, "creds", os.Getenv("NATS_CREDS"), "NATS credentials file for -server (env NATS_CREDS)")
	fs.StringVar(&o.inboxPrefix, "inbox-prefix", os.Getenv("NATS_INBOX_PREFIX"), "where replies come, for -server (env NATS_INBOX_PREFIX; default _INBOX_<user>, the one inbox a user of a toolbus users file may read; _INBOX with -creds or no user)")
	fs.StringVar(&o.listen, "listen", "", "embedded server: open a client listener on host:port (requires -users or -user); default none")
	fs.StringVar(&o.usersFile, "users", "", "embedded server: JSON file of the listener's users and their roles (turn, tool, operator, watcher, admin); see docs/operations.md")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "embedded server: PEM certificate: the client listener and cluster routes require TLS")
	fs.StringVar(&o.tlsKey, "tls-key", "", "embedded server: PEM key of -tls-cert")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "PEM CA: with -server, verifies the server's certificate; embedded, verifies the other nodes' route certificates (required for routes over TLS)")
	fs.StringVar(&o.storeDir, "store-dir", "", "embedded server: JetStream store directory (default $XDG_STATE_HOME/toolbus/<name>)")
	fs.Int64Var(&o.maxMemory, "max-memory", server.DefaultMaxMemory, "embedded server: JetStream memory limit in bytes")
	fs.Int64Var(&o.maxStore, "max-store", server.DefaultMaxStore, "embedded server: JetStream store limit in bytes")
	fs.StringVar(&o.clusterName, "cluster-name", "", "embedded server: join this cluster")
	fs.StringVar(&o.clusterListen, "cluster-listen", "", "embedded server: route listener host:port")
	fs.StringVar(&o.routes, "routes", "", "embedded server: comma-separated routes to the other nodes (nats://host:port)")
	fs.DurationVar(&o.clientPing, "client-ping-interval", server.DefaultClientPingInterval, fmt.Sprintf("embedded server: how long a client may send nothing before it is pinged; one that leaves %d pings unanswered is closed, so a host whose network went silent stops getting requests of its category within about %d intervals", server.DefaultClientMaxPingsOut, server.DefaultClientMaxPingsOut+1))
	fs.DurationVar(&o.routePing, "route-ping-interval", server.DefaultRoutePingInterval, fmt.Sprintf("embedded server: how often to ping each route; a route that leaves %d pings unanswered is closed, so a node that stops running (paused, swapped out) stops getting requests within about %d intervals", server.DefaultRouteMaxPingsOut, server.DefaultRouteMaxPingsOut+1))
	fs.StringVar(&o.routeUser, "route-user", "", "cluster route user (required off loopback)")
	fs.StringVar(&o.routePassFile, "route-pass-file", "", "file holding the cluster route password (default env TOOLBUS_ROUTE_PASSWORD)")
	secretflag.Refuse(fs, "route-pass", "-route-pass-file FILE or the environment variable TOOLBUS_ROUTE_PASSWORD")
	fs.StringVar(&o.vouchKeyFile, "vouch-key-file", "", "`FILE` holding a key (64 hex digits, made with openssl rand -hex 32) shared by the nodes of a deployment: hosts skip validating arguments that a turn holding the same key validated; default: a key of this process's own")
	fs.StringVar(&o.categories, "categories", strings.Join(toolsets.Categories(), ","), "tool categories to host, comma-separated; empty hosts none")
	fs.BoolVar(&o.turns, "turns", true, "run turns started over the bus")
	fs.BoolVar(&o.traceSampled, "trace-sampled", false, "set the sampled flag on the traceparent of every call, so an account that configures msg_trace {dest, sampling} traces them (the embedded server configures none; each such message costs the server a decoding of its headers)")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics at http://`host:port`"+DefaultMetricsPath+" (e.g. 127.0.0.1:9464; loopback only unless -metrics-public); default none. Traces go where the OTEL_EXPORTER_OTLP_* environment says, see docs/operations.md")
	fs.BoolVar(&o.metricsPublic, "metrics-public", false, "allow -metrics on an address other than loopback (the endpoint has no authentication)")
	fs.BoolVar(&o.traceContent, "trace-content", false, "record the calls' arguments and results on their execute_tool spans, redacted and cut at "+fmt.Sprint(telemetry.DefaultContentLimit)+" bytes each (default: never recorded, they may hold secrets)")
	fs.StringVar(&o.monitor, "monitor", "", "embedded server: open nats-server's HTTP monitoring endpoint on host:port (no authentication: keep it on loopback)")
	fs.IntVar(&o.maxTurns, "max-turns", actors.DefaultMaxTurns, "the most turns this node runs at once; more wait in the intake for any node")
	fs.IntVar(&o.maxTurnCalls, "max-turn-calls", 0, "the most calls of one turn in flight at once (held or running); more wait, in the model's order; an agent's profile may set a lower bound (calls.max_in_flight); 0: none")
	fs.DurationVar(&o.turnLease, "turn-lease", actors.DefaultTurnLease, "how long this node may go silent on a turn before the intake gives it to another node")
	fs.DurationVar(&o.handBack, "hand-back-grace", actors.DefaultHandBackGrace, "on stop, how long running turns get to reach a checkpoint and go back to the intake")
	fs.DurationVar(&o.schedMin, "schedule-min-interval", schedule.DefaultMinInterval, "the shortest time between firings a new schedule may ask for (at least 1s)")
	fs.StringVar(&o.home, "home", "", "every agent's home directory (single-user node)")
	fs.StringVar(&o.homeRoot, "home-root", "", "directory holding one home per agent (default $XDG_DATA_HOME/toolbus/homes)")
	fs.IntVar(&o.replicas, "replicas", 1, "replicas of the node's JetStream buckets and streams (capped by the cluster size)")
	o.gateway.Register(fs, "", true)
	fs.Var(&o.webKeyFiles, "web-key-file", "web category: a search provider's API key, from a file: PROVIDER=FILE, brave or tavily (repeatable; default env TOOLBUS_BRAVE_API_KEY, TOOLBUS_TAVILY_API_KEY). A key goes only to its provider's official API and the -web-key-endpoint URLs")
	fs.Var(&o.webKeyEndpoints, "web-key-endpoint", "web category: also send a provider's key to this API root: PROVIDER=URL, a proxy or compatible service you run (repeatable); a profile that names any other URL gets its searches sent there without the key")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	o.sandbox = computer.SandboxBwrap
	fs.Var(&o.sandbox, "sandbox", "how run_command isolates commands: bwrap (a bubblewrap sandbox each) or off (bare processes of the node: for hosts that cannot run bwrap, and trusted agents only)")
	o.console.Register(fs, "console", "", "console-password-file")
	fs.Var(&o.sandboxRO, "sandbox-ro", "show the folder `DIR` to sandboxed commands, read-only, at its own path; its bin folder, if any, goes on their PATH (repeatable; e.g. an npm prefix that mcporter was installed into with npm install -g)")
	fs.Var(&o.mcpFlags, "mcp", "host an MCP server's tools as category mcp-NAME, namespace NAME: NAME=COMMAND [ARGS…] (stdio; split at blanks) or NAME=URL (streamable HTTP); repeatable; see docs/mcp.md")
	fs.Var(&o.mcpFiles, "mcp-config", "host the MCP servers of this `FILE`, in the common {\"mcpServers\": {NAME: {\"command\", \"args\", \"env\", \"cwd\"} or {\"url\"}}} shape (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s %s\n\n%s\n\nExample:\n  %s\n\nFlags:\n", prog, Synopsis, About, Example)
		fs.PrintDefaults()
	}
	return fs
}

// FlagSet is the node's flag set, for help and for tests of command lines: its values
// go nowhere, and its usage and errors to w under the name prog ("toolbus node").
func FlagSet(prog string, w io.Writer) *flag.FlagSet { return flagSet(prog, w, &options{}) }

// parseFlags parses the node's command line. It returns flag.ErrHelp for -h,
// ErrFlags for flags the flag package refused, and a *UsageError for the rest.
func parseFlags(prog string, args []string, w io.Writer) (*options, error) {
	o := &options{}
	fs := flagSet(prog, w, o)
	// -h prints the usage; a refused flag, its error and where the usage is.
	full := fs.Usage
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			full()
			return nil, err
		}
		if hint := suggest.Flag(fs, err); hint != "" {
			fmt.Fprintln(w, hint)
		}
		fmt.Fprintf(w, "Run '%s -h' for usage.\n", prog)
		return nil, ErrFlags
	}
	// Secrets come from files or the environment after parsing, so -h never
	// prints them; each is registered for redaction.
	redact.AddEnvSecrets()
	var err error
	if o.pass, err = secretflag.Read(o.passFile, "NATS_PASSWORD"); err != nil {
		return nil, fmt.Errorf("-pass-file: %w", err)
	}
	if o.user != "" && o.pass == "" && o.creds == "" {
		who := "-user " + o.user
		if !isSet(fs, "user") {
			who = "NATS_USER=" + o.user
		}
		return nil, usagef("%s has no password: give it with -pass-file FILE or the environment variable NATS_PASSWORD", who)
	}
	if o.routePass, err = secretflag.Read(o.routePassFile, "TOOLBUS_ROUTE_PASSWORD"); err != nil {
		return nil, fmt.Errorf("-route-pass-file: %w", err)
	}
	if o.vouchKeyFile != "" {
		if o.vouchKey, err = readVouchKey(o.vouchKeyFile); err != nil {
			return nil, fmt.Errorf("-vouch-key-file: %w", err)
		}
	}
	if o.webKeys, err = WebKeys(o.webKeyFiles, o.webKeyEndpoints); err != nil {
		return nil, err
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, errors.New("-tls-cert and -tls-key go together")
	}
	if o.server != "" && (o.usersFile != "" || o.tlsCert != "") {
		return nil, errors.New("-users, -tls-cert and -tls-key configure an embedded server; with -server, the server's own configuration does")
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected arguments %q", fs.Args())
	}
	if o.mcp, err = mcpServers(o.mcpFlags, o.mcpFiles); err != nil {
		return nil, err
	}
	if err := o.console.Check(); err != nil {
		return nil, err
	}
	if o.schedMin < schedule.ServerMinInterval {
		return nil, usagef("-schedule-min-interval %s: JetStream fires schedules at most once a second", o.schedMin)
	}
	if err := o.gateway.Check(); err != nil {
		return nil, usagef("%v", err)
	}
	if o.metrics != "" {
		if err := CheckMetricsAddr(o.metrics, o.metricsPublic); err != nil {
			return nil, usagef("%v", err)
		}
	}
	if !bus.ValidToken(o.name) {
		return nil, usagef("-name %q: want one subject token (no dots, spaces or wildcards)", o.name)
	}
	if o.server != "" && (o.listen != "" || o.clusterName != "") {
		return nil, usagef("-server connects to an existing bus; -listen and -cluster-name configure an embedded one: pick one")
	}
	// Homes are told to the turns' watchers (bus.TurnStatus.Home), who run elsewhere: a
	// path relative to where the node was started would tell them nothing.
	for _, p := range []*string{&o.home, &o.homeRoot} {
		if *p == "" {
			continue
		}
		if *p, err = filepath.Abs(*p); err != nil {
			return nil, fmt.Errorf("home: %w", err)
		}
	}
	return o, nil
}

// mcpServers reads the -mcp and -mcp-config values, refusing two servers of one name.
func mcpServers(flags, files []string) ([]mcp.ServerConfig, error) {
	var out []mcp.ServerConfig
	for _, f := range flags {
		sc, err := mcp.ParseServerFlag(f)
		if err != nil {
			return nil, usagef("%v", err)
		}
		out = append(out, sc)
	}
	for _, f := range files {
		scs, err := mcp.ParseConfigFile(f)
		if err != nil {
			return nil, fmt.Errorf("-mcp-config: %w", err)
		}
		out = append(out, scs...)
	}
	seen := map[string]bool{}
	for _, sc := range out {
		if seen[sc.Name] {
			return nil, usagef("-mcp: two MCP servers are named %s", sc.Name)
		}
		seen[sc.Name] = true
	}
	return out, nil
}

// isSet reports whether the command line set the flag name.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// WebKeys are the web host's search provider keys: from the environment (web.KeyEnv),
// then from files (PROVIDER=FILE, each beating its variable), with the endpoints each may
// also go to (PROVIDER=URL). Each key is registered for redaction.
func WebKeys(files, endpoints []string) (map[string]web.Key, error) {
	keys := web.KeysFromEnv()
	for _, f := range files {
		p, path, err := web.SplitProviderValue(f)
		if err != nil {
			return nil, usagef("-web-key-file %v", err)
		}
		secret, err := gateway.ReadKeyFile(path)
		if err != nil {
			return nil, fmt.Errorf("-web-key-file %s: %w", p, err)
		}
		k := keys[p]
		k.Secret = secret
		keys[p] = k
	}
	for _, e := range endpoints {
		p, u, err := web.SplitProviderValue(e)
		if err != nil {
			return nil, usagef("-web-key-endpoint %v", err)
		}
		if err := web.CheckEndpoint(u); err != nil {
			return nil, usagef("-web-key-endpoint %s: %v", p, err)
		}
		k, ok := keys[p]
		if !ok {
			return nil, usagef("-web-key-endpoint %s: this node has no %s key to send there (set %s or -web-key-file %s=FILE)", p, p, web.KeyEnv[p], p)
		}
		k.Endpoints = append(k.Endpoints, u)
		keys[p] = k
	}
	for _, k := range keys {
		redact.AddSecrets(k.Secret)
	}
	return keys, nil
}

// sanitize turns a host name into a valid token.
func sanitize(s string) string {
	s = strings.NewReplacer(".", "-", " ", "-", "*", "-", ">", "-").Replace(s)
	if s == "" {
		return "node"
	}
	return s
}

// xdgDir is toolbus's folder under an XDG base directory: $env, or
// ~/fallback when it is unset.
func xdgDir(env, fallback, sub string) string {
	base := os.Getenv(env)
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, fallback)
	}
	return filepath.Join(base, "toolbus", sub)
}

// DefaultHomeRoot is the home root of a node run without -home or -home-root:
// $XDG_DATA_HOME/toolbus/homes.
func DefaultHomeRoot() string { return xdgDir("XDG_DATA_HOME", ".local/share", "homes") }

// Run runs a node until ctx ends or the process gets SIGINT or SIGTERM. prog
// names the command in its usage ("toolbus node"); usage, errors of flags and
// the node's log go to stderr. See parseFlags for the errors of a bad command
// line.
func Run(ctx context.Context, prog string, args []string, stderr io.Writer) error {
	o, err := parseFlags(prog, args, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usagef("-log-level: %v", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg := Config{
		Node: NodeConfig{
			Name: o.name, Turns: o.turns,
			Home: o.home, HomeRoot: o.homeRoot, Replicas: o.replicas, Logger: log,
			MaxTurns: o.maxTurns, TurnLease: o.turnLease, HandBackGrace: o.handBack, MaxTurnCalls: o.maxTurnCalls,
			VouchKey: o.vouchKey, TraceSampled: o.traceSampled,
			Tools: toolsets.Settings{
				Computer:            computer.Config{Sandbox: computer.SandboxConfig{Mode: o.sandbox, ReadOnly: o.sandboxRO}},
				Web:                 web.Config{Keys: o.webKeys},
				ScheduleMinInterval: o.schedMin,
			},
		},
		MCP: o.mcp,
	}
	// -categories "" hosts none; Start's default (nil) would host all.
	cfg.Node.Categories = []string{}
	if o.categories != "" {
		cfg.Node.Categories = strings.Split(o.categories, ",")
	}
	if cfg.Node.HomeRoot == "" && cfg.Node.Home == "" {
		cfg.Node.HomeRoot = DefaultHomeRoot()
	}
	if cfg.Node.Gateway, err = o.gateway.Config(); err != nil {
		return err
	}
	if o.server != "" {
		cfg.Server = o.server
		cfg.Credentials = bus.Credentials{User: o.user, Password: o.pass, CredsFile: o.creds, CAFile: o.tlsCA, InboxPrefix: o.inboxPrefix}
	} else {
		cfg.Bus = server.Config{
			Name: o.name, StoreDir: o.storeDir, MaxMemory: o.maxMemory, MaxStore: o.maxStore,
			Listen: o.listen, Logger: log, Monitor: o.monitor, ClientPingInterval: o.clientPing,
			// The embedded server's own debug log (its Raft groups' votes and leaders,
			// routes, JetStream's API) with the node's: what a stall or a lost leader is
			// diagnosed from.
			Debug: level <= slog.LevelDebug,
		}
		if cfg.Bus.StoreDir == "" {
			cfg.Bus.StoreDir = xdgDir("XDG_STATE_HOME", ".local/state", o.name)
		}
		if o.usersFile != "" {
			if cfg.Bus.Users, err = server.ReadUsersFile(o.usersFile); err != nil {
				return err
			}
		}
		if o.user != "" {
			cfg.Bus.Users = append(cfg.Bus.Users, server.User{Name: o.user, Password: o.pass, Role: server.RoleAdmin, Permissions: server.AdminPermissions()})
		}
		if o.tlsCert != "" {
			cfg.Bus.TLS = &server.TLSConfig{Cert: o.tlsCert, Key: o.tlsKey, CA: o.tlsCA}
		}
		if o.clusterName != "" {
			cfg.Bus.Cluster = &server.ClusterConfig{
				Name: o.clusterName, Listen: o.clusterListen, Username: o.routeUser, Password: o.routePass,
				PingInterval: o.routePing,
			}
			if o.routes != "" {
				cfg.Bus.Cluster.Routes = strings.Split(o.routes, ",")
			}
		}
	}
	tel, err := OpenTelemetry(ctx, o.name, o.metrics != "", o.traceContent)
	if err != nil {
		return err
	}
	// Closed after the node: the spans of the turns it hands back are exported too.
	defer func() {
		if err := tel.CloseTimeout(5 * time.Second); err != nil {
			log.Warn("export the last spans", "err", err)
		}
	}()
	cfg.Node.Telemetry = tel
	node, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer node.Close()
	if o.metrics != "" {
		ms, err := ServeMetrics(o.metrics, tel, log)
		if err != nil {
			return err
		}
		defer ms.Close()
		log.Info("metrics endpoint", "url", "http://"+ms.Addr()+DefaultMetricsPath)
	}
	if tel.Tracing() {
		log.Info("tracing: spans go to the OTLP endpoint of the environment")
	}
	cats := slices.Clone(cfg.Node.Categories)
	where := node.Where()
	storeFailed := node.Failed()
	if o.console.Addr != "" {
		// The console acts with the node's own connection: give it a user of its own
		// (toolbus console -server … -user) to limit what its buttons may do.
		nc, err := node.Connect("toolbus-console")
		if err != nil {
			return err
		}
		cl := client.New(nc, client.OwnConn(), client.Where(where), client.Logger(log))
		defer cl.Close()
		con, err := o.console.Start(cl, "console of node "+o.name, log)
		if err != nil {
			return err
		}
		defer con.Close()
		log.Info("console ready", "url", con.URL())
	}
	for _, c := range node.MCP() {
		cats = append(cats, c.Category())
	}
	log.Info("node ready", "node", o.name, "bus", where, "categories", strings.Join(cats, ","), "turns", o.turns)
	select {
	case <-ctx.Done():
	case <-storeFailed:
		// nats-server does not recover from a disk error by itself (see
		// server.Server.Failed): exit non-zero, so that a supervisor restarts
		// the node once space is freed, rather than run on with a store
		// that answers no writes.
		err := node.Err()
		log.Error("node stopping: its store can no longer be written; exiting to be restarted", "node", o.name, "err", err)
		return err
	}
	// From here a second signal stops the process at once.
	stop()
	log.Info("node stopping: handing running turns back (a second signal stops at once)", "node", o.name)
	return nil
}

// readVouchKey reads a vouch key: bus.VouchKeySize bytes written as hex digits.
func readVouchKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != bus.VouchKeySize {
		return nil, fmt.Errorf("%s does not hold a key of %d hex digits (openssl rand -hex %d writes one)", path, 2*bus.VouchKeySize, bus.VouchKeySize)
	}
	return key, nil
}
