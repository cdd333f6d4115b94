// Package server runs the embedded NATS server of a toolbus node: nats-server with
// JetStream, in one of three ways:
//
//   - in-process only (the default): no port is opened and every
//     connection comes through Server.Connect;
//   - with a client listener (Config.Listen), for other processes and the
//     nats CLI, which requires users; role permissions such as
//     TurnPermissions and ToolPermissions give each user only the subjects
//     its part of the protocol (package bus) needs;
//   - as a cluster node (Config.Cluster), joined to other nodes by routes,
//     with replicated JetStream state.
//
// In-process connections authenticate too, as an nkey user whose key never
// leaves the process and which the server accepts only on in-process
// connections, so no network client can use it (nats-server has no
// unauthenticated mode for in-process clients alone).
//
// It is apart from package bus so that what only speaks the wire does not link
// nats-server (docs/internals.md §1).
package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/redact"
)

// Defaults for the JetStream limits. The server's own defaults are 75% of
// RAM and the whole free disk, which an embedded bus must not claim.
const (
	DefaultMaxMemory int64 = 256 << 20
	DefaultMaxStore  int64 = 1 << 30
)

// Route liveness defaults. nats-server pings a route every 2 minutes (capped at
// 30s for routes) and closes it after 2 unanswered pings, so a node that is still
// there for TCP but not running (SIGSTOP, a paused VM, a swap storm) keeps its
// routes for a minute or more, and with them its interest: the live nodes go on
// routing to it the direct gets of its stream replicas (every KV Get) and the
// requests of its queue groups, which wait for their whole timeout. With these,
// its routes close within about PingInterval*(MaxPingsOut+1).
const (
	DefaultRoutePingInterval = time.Second
	DefaultRouteMaxPingsOut  = 3
)

// Client liveness defaults. nats-server pings a client that has sent it nothing for 2
// minutes and closes it after 2 unanswered pings. A tool host whose network went silent
// (a cut, a lost machine) thus kept its subscriptions for minutes after it had given its
// connection up and connected again, and every request of its category that the server
// handed that member of the queue group was lost, its turn waiting out the call's
// deadline (TestRequestsAvoidSilentHost: requests lost for the whole 45 s it waits). With
// these, a silent client is closed within about ClientPingInterval*(ClientMaxPingsOut+1),
// 15 s (12 s measured). A client that sends anything within the interval (its own pings:
// bus.Dial pings every 2 s) is never pinged, so a busy or well-behaved client pays
// nothing for it.
const (
	DefaultClientPingInterval = 5 * time.Second
	DefaultClientMaxPingsOut  = 2
)

// Config configures an embedded server. The zero value is a valid
// in-process server with no port and a temporary store.
type Config struct {
	// Name is the server name, unique in a cluster. Default "toolbus-<random>".
	Name string
	// StoreDir holds JetStream data (under StoreDir/jetstream). If empty, the
	// Server makes a fresh temporary directory and removes it on Close, so
	// nothing survives a restart.
	StoreDir string
	// MaxMemory and MaxStore limit JetStream; zero or less means
	// DefaultMaxMemory and DefaultMaxStore.
	MaxMemory int64
	MaxStore  int64
	// Listen is the client listener, "host:port"; port 0 or -1 picks a free
	// one. Empty means no listener: in-process connections only.
	Listen string
	// Users may connect through the listener; required when Listen is set.
	// See ReadUsersFile.
	Users []User
	// TLS, when set, makes the client listener and the cluster routes
	// require TLS.
	TLS *TLSConfig
	// Cluster joins a cluster through routes.
	Cluster *ClusterConfig
	// Logger receives the server's log. Nil means slog.Default() for
	// warnings and errors only (debug too when Debug is set).
	Logger *slog.Logger
	// Debug makes the server log debug messages (at slog.LevelDebug).
	Debug bool
	// Monitor, when set, opens nats-server's HTTP monitoring endpoint on "host:port"
	// (/varz, /connz, /jsz, /stacksz ...). It has no authentication: keep it on loopback.
	Monitor string
	// ClientPingInterval and ClientMaxPingsOut: a client that has sent nothing for the
	// interval is pinged, and closed when it leaves ClientMaxPingsOut pings unanswered.
	// Zero means DefaultClientPingInterval and DefaultClientMaxPingsOut.
	ClientPingInterval time.Duration
	ClientMaxPingsOut  int
}

// User is a listener user. Password may be plain text or a bcrypt hash
// ("$2a$..."); the server warns about plain text ones. A user with an Nkey
// (a public user key) instead signs the server's challenge with its seed;
// its Name is only for messages.
type User struct {
	Name     string
	Password string
	Nkey     string
	// Role is what Permissions were made from (RolePermissions); informative.
	Role Role
	// Permissions restrict the user; nil allows everything. See
	// TurnPermissions, ToolPermissions, ControlPermissions, AdminPermissions.
	Permissions *natsserver.Permissions
}

// TLSConfig names PEM files. Cert and Key are the server's certificate and
// key, required. CA verifies peers: routes require it (each route presents
// its certificate to the other, which must be valid for client and server
// authentication); clients are not asked for certificates.
type TLSConfig struct {
	Cert, Key, CA string
}

// ClusterConfig joins the server to a cluster.
type ClusterConfig struct {
	// Name is the cluster name, the same on every node.
	Name string
	// Listen is the route listener, "host:port".
	Listen string
	// Routes are the other nodes' route listeners, "nats://host:port" or
	// "host:port". The same list may be given to every node: a route to
	// itself is ignored.
	Routes []string
	// Username and Password authenticate routes in both directions and must
	// be the same on every node. They are required unless Listen is on a
	// loopback address.
	Username string
	Password string
	// PingInterval and MaxPingsOut: a route that leaves MaxPingsOut pings
	// unanswered is closed (and redialled). Zero means DefaultRoutePingInterval
	// and DefaultRouteMaxPingsOut; the server caps the interval at 30s.
	PingInterval time.Duration
	MaxPingsOut  int
}

// Errors returned by Start and Connect.
var (
	ErrNoUsers = errors.New("bus: a client listener requires at least one user")
	ErrClosed  = errors.New("bus: server closed")
)

// inProcessOnly restricts a user to in-process connections
// (jwt.ConnectionTypeInProcess).
var inProcessOnly = map[string]struct{}{"IN_PROCESS": {}}

// Server is an embedded nats-server with JetStream.
type Server struct {
	ns        *natsserver.Server
	log       *serverLogger
	name      string
	clientURL string // "" when the caller asked for no listener
	storeDir  string
	ownedDir  bool          // storeDir is ours to remove
	lock      *storeLock    // held from before JetStream starts until Close
	started   chan struct{} // closed when ns.Start returns

	maxStore, maxMemory int64 // the JetStream limits, for messages

	// The store watch: see Failed. failMu is its own, not mu, because the
	// server's log calls take it from inside nats-server.
	failed      chan struct{} // closed by fail
	stopWatch   chan struct{} // closed by Close
	watchDone   chan struct{} // closed when watchStore returns
	closing     atomic.Bool   // set first thing by Close
	failMu      sync.Mutex
	failErr     error  // set before failed is closed
	storeErrLog string // the last server error about the store

	// In-process connections authenticate as an nkey user that exists only
	// in this process and may not connect over the network.
	userKey nkeys.KeyPair
	userPub string
	acc     *natsserver.Account // the account of every user, for Interest

	closeOnce sync.Once
	mu        sync.Mutex
	closed    bool
	conns     []*nats.Conn // made by Connect, closed by Close
}

// Start starts a server and waits, bounded by ctx, until it accepts
// connections and JetStream is usable. In a cluster, JetStream is usable
// once a meta leader is elected, which needs a quorum of nodes: start the
// nodes concurrently.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	name := cfg.Name
	if name == "" {
		name = "toolbus-" + strings.ToLower(rand.Text()[:8])
	}
	opts, clientURLWanted, err := serverOptions(name, cfg)
	if err != nil {
		return nil, fmt.Errorf("configure nats server %q: %w", name, err)
	}

	s := &Server{
		name: name, storeDir: cfg.StoreDir, started: make(chan struct{}),
		maxStore: opts.JetStreamMaxStore, maxMemory: opts.JetStreamMaxMemory,
		failed: make(chan struct{}), stopWatch: make(chan struct{}), watchDone: make(chan struct{}),
	}
	if s.userKey, err = nkeys.CreateUser(); err != nil {
		return nil, fmt.Errorf("create in-process user key: %w", err)
	}
	if s.userPub, err = s.userKey.PublicKey(); err != nil {
		return nil, fmt.Errorf("create in-process user key: %w", err)
	}
	opts.Nkeys = append(opts.Nkeys, &natsserver.NkeyUser{Nkey: s.userPub, AllowedConnectionTypes: inProcessOnly})

	if s.storeDir == "" {
		if s.storeDir, err = os.MkdirTemp("", "toolbus-"+name+"-"); err != nil {
			return nil, fmt.Errorf("create store dir: %w", err)
		}
		s.ownedDir = true
	}
	opts.StoreDir = s.storeDir
	// Before JetStream starts: a second server on the directory would
	// restore the streams and write over the first's blocks.
	if s.lock, err = lockStoreDir(s.storeDir, name); err != nil {
		s.removeStoreDir()
		return nil, fmt.Errorf("start nats server %q: %w", name, err)
	}

	setRaftTiming()
	if s.ns, err = natsserver.NewServer(opts); err != nil {
		s.lock.release()
		s.removeStoreDir()
		return nil, fmt.Errorf("create nats server %q: %w", name, err)
	}
	logger, minLevel := cfg.Logger, slog.Level(math.MinInt) // a given logger's handler decides
	if logger == nil {
		logger, minLevel = slog.Default(), slog.LevelWarn
		if cfg.Debug {
			minLevel = slog.LevelDebug
		}
	}
	s.log = newServerLogger(logger.With(slog.String("server", name)), minLevel)
	s.ns.SetLoggerV2(storeWatchLogger{s.log, s}, cfg.Debug, false, false)

	go func() {
		defer close(s.started)
		s.ns.Start()
	}()
	if err := s.waitReady(ctx); err != nil {
		close(s.watchDone) // never started
		s.Close()
		return nil, fmt.Errorf("start nats server %q: %w", name, err)
	}
	go s.watchStore()
	if clientURLWanted {
		s.clientURL = s.ns.ClientURL()
	}
	s.acc = s.ns.GlobalAccount() // every user is in it; looked up once, not under the server's lock per message
	return s, nil
}

// serverOptions translates cfg; it reports whether the caller asked for a
// client listener.
func serverOptions(name string, cfg Config) (*natsserver.Options, bool, error) {
	o := &natsserver.Options{
		ServerName:         name,
		JetStream:          true,
		JetStreamMaxMemory: orDefault(cfg.MaxMemory, DefaultMaxMemory),
		JetStreamMaxStore:  orDefault(cfg.MaxStore, DefaultMaxStore),
		NoSigs:             true,
		Debug:              cfg.Debug,
		PingInterval:       cfg.ClientPingInterval,
		MaxPingsOut:        cfg.ClientMaxPingsOut,
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultClientPingInterval
	}
	if o.MaxPingsOut <= 0 {
		o.MaxPingsOut = DefaultClientMaxPingsOut
	}

	switch {
	case cfg.Listen != "":
		if len(cfg.Users) == 0 {
			return nil, false, fmt.Errorf("listen on %q: %w", cfg.Listen, ErrNoUsers)
		}
		host, port, err := splitListen(cfg.Listen)
		if err != nil {
			return nil, false, fmt.Errorf("client listener: %w", err)
		}
		o.Host, o.Port = host, port
	case cfg.Cluster != nil:
		// Routes start only after the client accept loop is up, which
		// DontListen skips: such a server never becomes ready. Listen on
		// loopback instead; only in-process connections can log in unless
		// Users are configured.
		o.Host, o.Port = "127.0.0.1", natsserver.RANDOM_PORT
	default:
		o.DontListen = true
	}
	if cfg.Monitor != "" {
		host, port, err := splitListen(cfg.Monitor)
		if err != nil {
			return nil, false, fmt.Errorf("monitoring listener: %w", err)
		}
		o.HTTPHost, o.HTTPPort = host, port
	}

	seen := make(map[string]bool, len(cfg.Users))
	for _, u := range cfg.Users {
		if u.Nkey != "" {
			if u.Password != "" {
				return nil, false, fmt.Errorf("user %q: a password or an nkey, not both", u.Name)
			}
			if seen[u.Nkey] {
				return nil, false, fmt.Errorf("nkey %q defined twice", u.Nkey)
			}
			seen[u.Nkey] = true
			o.Nkeys = append(o.Nkeys, &natsserver.NkeyUser{Nkey: u.Nkey, Permissions: u.Permissions})
			continue
		}
		if u.Name == "" || u.Password == "" {
			return nil, false, fmt.Errorf("user %q: name and password are required", u.Name)
		}
		if seen[u.Name] {
			return nil, false, fmt.Errorf("user %q defined twice", u.Name)
		}
		seen[u.Name] = true
		o.Users = append(o.Users, &natsserver.User{Username: u.Name, Password: u.Password, Permissions: u.Permissions})
	}

	if cfg.TLS != nil {
		tc, err := natsserver.GenTLSConfig(&natsserver.TLSConfigOpts{CertFile: cfg.TLS.Cert, KeyFile: cfg.TLS.Key, CaFile: cfg.TLS.CA})
		if err != nil {
			return nil, false, fmt.Errorf("tls: %w", err)
		}
		if len(tc.Certificates) == 0 {
			return nil, false, errors.New("tls: a certificate and its key are required")
		}
		o.TLS, o.TLSConfig, o.TLSTimeout = true, tc, 2
	}

	if c := cfg.Cluster; c != nil {
		if err := clusterOptions(o, c); err != nil {
			return nil, false, fmt.Errorf("cluster: %w", err)
		}
	}
	return o, cfg.Listen != "", nil
}

func clusterOptions(o *natsserver.Options, c *ClusterConfig) error {
	if c.Name == "" {
		return errors.New("a cluster name is required")
	}
	host, port, err := splitListen(c.Listen)
	if err != nil {
		return fmt.Errorf("route listener: %w", err)
	}
	if (c.Username == "") != (c.Password == "") {
		return errors.New("route username and password go together")
	}
	if c.Username == "" && !isLoopback(host) {
		return fmt.Errorf("route listener %q is not on loopback: route credentials are required", c.Listen)
	}
	o.Cluster = natsserver.ClusterOpts{Name: c.Name, Host: host, Port: port, Username: c.Username, Password: c.Password,
		PingInterval: c.PingInterval, MaxPingsOut: c.MaxPingsOut}
	if o.Cluster.PingInterval <= 0 {
		o.Cluster.PingInterval = DefaultRoutePingInterval
	}
	if o.Cluster.MaxPingsOut <= 0 {
		o.Cluster.MaxPingsOut = DefaultRouteMaxPingsOut
	}
	if o.TLSConfig != nil {
		// As nats-server configures cluster TLS: both ends present and
		// verify certificates against the CA.
		if o.TLSConfig.ClientCAs == nil {
			return errors.New("route TLS needs a CA (-tls-ca) to verify the other nodes")
		}
		rc := o.TLSConfig.Clone()
		rc.ClientAuth = tls.RequireAndVerifyClientCert
		rc.RootCAs = rc.ClientCAs
		o.Cluster.TLSConfig, o.Cluster.TLSTimeout = rc, 2
	}
	for _, r := range c.Routes {
		if !strings.Contains(r, "://") {
			r = "nats://" + r
		}
		u, err := url.Parse(r)
		if err != nil {
			// A *url.Error quotes the whole URL, credentials included.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return fmt.Errorf("route %q: %w", redact.URL(r), err)
		}
		if u.Host == "" {
			return fmt.Errorf("route %q: no host", redact.URL(r))
		}
		if u.User == nil && c.Username != "" {
			u.User = url.UserPassword(c.Username, c.Password)
		}
		o.Routes = append(o.Routes, u)
	}
	return nil
}

// splitListen parses "host:port"; port 0 means a free port, as -1 does for
// the server (which reads 0 as "the default port").
func splitListen(hostport string) (string, int, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: %w", hostport, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("address %q: bad port", hostport)
	}
	if port == 0 {
		port = natsserver.RANDOM_PORT
	}
	return host, port, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func orDefault(v, def int64) int64 {
	if v <= 0 {
		return def
	}
	return v
}

// waitReady waits in short steps rather than one long ReadyForConnections
// so that a fatal startup error or ctx ends the wait at once.
func (s *Server) waitReady(ctx context.Context) error {
	// ReadyForConnections sleeps 25ms between checks when given more than
	// 25ms, and spins otherwise.
	for !s.ns.ReadyForConnections(50 * time.Millisecond) {
		if err := s.startFailed(ctx, "accept connections"); err != nil {
			return err
		}
	}
	// Immediate on a single node; in a cluster it holds once this node
	// follows (or is) an elected meta leader.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !s.ns.JetStreamIsCurrent() {
		if err := s.startFailed(ctx, "elect a JetStream meta leader"); err != nil {
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	return nil
}

// startFailed reports a fatal server error or the end of ctx, if any.
func (s *Server) startFailed(ctx context.Context, waitingTo string) error {
	select {
	case msg := <-s.log.fatal:
		return errors.New(msg)
	default:
	}
	if ctx.Err() != nil {
		return fmt.Errorf("waiting to %s: %w", waitingTo, context.Cause(ctx))
	}
	return nil
}

// Connect opens an in-process connection named name (shown by `nats server
// report connections` and in message traces). It authenticates as the
// server's in-process user, which has no restrictions; do not pass
// credential options. Close closes the connection if the caller has not:
// in-process clients cannot outlive their server anyway.
func (s *Server) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	all := append([]nats.Option{
		nats.InProcessServer(inProcess{s.ns}),
		// nats.go's 2 s for the handshake ran out on a loaded machine (go test -race
		// beside other packages on 2 cores: "read pipe: i/o timeout"); an in-process
		// server that does not answer is busy, not gone.
		nats.Timeout(inProcessTimeout),
		// No write deadline: on a pipe to a server in this same process, nats.go's one
		// minute armed and disarmed a timer around every write (about 5 allocations of a
		// turn's step, BenchmarkTurnStep), to guard against a peer that cannot be gone.
		nats.FlusherTimeout(0),
		nats.Name(name),
		nats.Nkey(s.userPub, s.userKey.Sign),
	}, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("connect %q in-process: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		nc.Close()
		return nil, ErrClosed
	}
	s.conns = slices.DeleteFunc(s.conns, (*nats.Conn).IsClosed)
	s.conns = append(s.conns, nc)
	return nc, nil
}

// inProcess is the server as nats.go's in-process connections see it: what connects
// them, and the size of the cluster for [bus.ClusterSizer] (bus.KeyValue and the other
// creations cap replicas by it). Package bus reads it from the connection's options
// without importing nats-server.
type inProcess struct{ ns *natsserver.Server }

func (p inProcess) InProcessConn() (net.Conn, error) { return p.ns.InProcessConn() }

// ClusterServers counts the servers the route list names, this one included: what
// names every node (Config.Cluster.Routes, the same list on every node); nats-server
// sizes a fresh meta group by it too. 0 when it cannot tell.
func (p inProcess) ClusterServers() int {
	v, err := p.ns.Varz(nil)
	if err != nil {
		return 0
	}
	routes := make(map[string]bool, len(v.Cluster.URLs))
	for _, hostport := range v.Cluster.URLs {
		routes[strings.ToLower(hostport)] = true
	}
	return len(routes)
}

// inProcessTimeout bounds an in-process connection's handshake.
const inProcessTimeout = 10 * time.Second

// ClientURL is the client listener's URL, or "" when Config.Listen was
// empty. (A cluster node always has a loopback listener, but only
// configured users may log in through it.)
func (s *Server) ClientURL() string { return s.clientURL }

// Name is the server name.
func (s *Server) Name() string { return s.name }

// StoreDir is the JetStream store directory in use.
func (s *Server) StoreDir() string { return s.storeDir }

// Interest reports whether a message published on subject now would reach anyone: a
// client of this server or, through a route, leaf node or stream, of the cluster. It
// is the test the server itself makes before it forwards a message, so a publisher of
// what only watchers read (activity events, turn statuses) may skip the message when
// it is false and nobody can tell the difference. It does not fill the server's
// subject cache, so unique subjects cost a walk of the subscription tree and nothing
// after.
func (s *Server) Interest(subject string) bool {
	return s.acc.SubscriptionInterest(subject)
}

// NATS is the underlying server, for what this package does not wrap.
func (s *Server) NATS() *natsserver.Server { return s.ns }

// Close closes the connections made by Connect, shuts the server down and
// waits for it, and removes the store directory if the Server made it.
// Callers that need pending messages delivered drain their connections
// first. Close is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.mu.Lock()
		s.closed = true
		conns := s.conns
		s.conns = nil
		s.mu.Unlock()
		for _, nc := range conns {
			nc.Close()
		}
		// The watch ends first: a JetStream that stops because the server
		// does is no failure.
		close(s.stopWatch)
		<-s.watchDone
		// Shut down only after Start has returned, so it cannot start
		// anything on a server that is going away.
		<-s.started
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.lock.release()
		s.removeStoreDir()
	})
}

func (s *Server) removeStoreDir() {
	if !s.ownedDir {
		return
	}
	if err := os.RemoveAll(s.storeDir); err != nil && s.log != nil {
		s.log.Warnf("remove store dir %s: %v", s.storeDir, err)
	}
}

// ErrStoreFailed is what [Server.Err] wraps: JetStream on this server can no
// longer write its store.
var ErrStoreFailed = errors.New("JetStream stopped writing the store until it restarts")

// storeWatchEvery is how often the store watch polls JetStream; a write
// error the server logs closes Failed at once, without a poll.
const storeWatchEvery = time.Second

// Failed is closed when JetStream on this server can no longer write its
// store, never because of Close; [Server.Err] then says why. The server is
// left running, for the caller to stop: a node exits non-zero, so that its
// supervisor restarts it.
//
// It happens on a disk error, in practice a full disk (ENOSPC): nats-server
// v2.15.2 keeps a stream's write error for good (filestore.go setWriteErr,
// stream.go setWriteErrLocked, "critical write error") and, for a raft or
// replicated write, disables JetStream (jetstream.go handleOutOfSpace, "will
// be DISABLED"). Either way it does not recover once space is freed: the
// stream answers no more publishes (on a single server the publisher is not
// even answered, and times out) until JetStream restarts. A used up JetStream
// limit (Config.MaxStore) is different: writes are refused with an answer
// ([IsStoreFull]) and succeed again once messages are deleted; Failed does
// not fire.
//
// Why exit rather than re-enable in place: server.EnableJetStream can be
// called again (a config reload does, reload.go restartJetStream), but only
// after ShutdownJetStream, which drops every stream, consumer and raft group
// under the clients' feet; the clients of a node (intake consumers, KV
// watchers, in-process connections) would each have to notice and start
// over. A restart does that for all of them, and it is what nats-server
// itself expects after a disk error (ShutdownJetStream: "transient runtime
// errors that the operator is expected to fix before restarting"). A node
// restarted while the disk is still full starts, fails its first write and
// exits again: the supervisor's restart delay paces that.
func (s *Server) Failed() <-chan struct{} { return s.failed }

// Err is why Failed was closed: an error wrapping [ErrStoreFailed] that
// names the node; for a full disk, a [*FullStoreError] ([IsStoreFull]
// reports it) around it. It is nil while Failed is open.
func (s *Server) Err() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failErr
}

// fail records the first failure and closes Failed. It may be called from
// inside the server with its locks held (a log call): it does nothing else.
func (s *Server) fail(reason string) {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	if s.failErr != nil || s.closing.Load() {
		return
	}
	if bus.IsStoreFull(errors.New(reason)) { // the disk, in the server's words
		// Named as a full store first: that is what the operator must fix.
		s.failErr = &bus.FullStoreError{Node: s.name, MaxStore: s.maxStore, MaxMemory: s.maxMemory, Err: fmt.Errorf("%w: %s", ErrStoreFailed, reason)}
	} else {
		s.failErr = fmt.Errorf("node %s: %w: %s", s.name, ErrStoreFailed, reason)
	}
	close(s.failed)
}

// watchStore closes Failed when JetStream stops on its own or a stream
// holds a write error. The log hook (storeWatchLogger) catches write errors
// as they happen; the polls catch what a log message of another server
// version might not say the same way.
func (s *Server) watchStore() {
	defer close(s.watchDone)
	tick := time.NewTicker(storeWatchEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stopWatch:
			return
		case <-s.failed:
			return
		case <-tick.C:
		}
		if !s.ns.JetStreamEnabled() {
			reason := "JetStream was disabled"
			if last := s.lastStoreErr(); last != "" {
				reason += " after: " + last
			}
			s.fail(reason)
			continue
		}
		if !s.ns.JetStreamIsClustered() {
			// On a single server healthz reads each stream's write error;
			// in a cluster it skips those of R1 streams, and checks much
			// more (raft currency) than is worth a poll.
			if reason := healthzWriteError(s.ns.Healthz(&natsserver.HealthzOptions{Details: true})); reason != "" {
				s.fail(reason)
			}
		}
	}
}

func healthzWriteError(h *natsserver.HealthStatus) string {
	if h == nil {
		return ""
	}
	for _, e := range h.Errors {
		if strings.Contains(e.Error, "write error") {
			return e.Error
		}
	}
	return ""
}

// lastStoreErr is the last server error that looked like a store failure.
func (s *Server) lastStoreErr() string {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.storeErrLog
}

// storeWatchLogger passes the server's log on and watches its errors for
// store failures.
type storeWatchLogger struct {
	*serverLogger
	s *Server
}

func (l storeWatchLogger) Errorf(format string, v ...any) {
	l.serverLogger.Errorf(format, v...)
	lower := strings.ToLower(format)
	critical := strings.Contains(lower, "critical write error")
	if !critical && !strings.Contains(lower, "will be disabled") && !strings.Contains(lower, "disabling jetstream") {
		return
	}
	msg := fmt.Sprintf(format, v...)
	l.s.failMu.Lock()
	l.s.storeErrLog = msg
	l.s.failMu.Unlock()
	if critical {
		// Kept by the store until JetStream restarts (see Failed).
		l.s.fail(msg)
	}
}

// StoreFullError is [bus.StoreFullError] for this server, with its limits in the
// message.
func (s *Server) StoreFullError(err error) error {
	var fe *bus.FullStoreError
	if !bus.IsStoreFull(err) || errors.As(err, &fe) {
		return err
	}
	return &bus.FullStoreError{Node: s.name, MaxStore: s.maxStore, MaxMemory: s.maxMemory, Err: err}
}
