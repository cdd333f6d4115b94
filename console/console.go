// Package console serves toolbus's web console: the bus's turns, one turn's timeline,
// its workflows, jobs and schedules, its nodes and categories, live in a browser, with
// the buttons of the command line (abort, approve and refuse, cancel, remove).
//
// Everything it shows and does goes through package client, on the one connection it
// was given: it acts as that NATS user, whose role limits what it reads and what its
// buttons may do (a watcher's abort is refused by the server). No credential of that
// connection reaches the page. Live views are fed from bus subscriptions that exist
// only while a page is open: a console nobody looks at holds no subscription and adds
// nothing to a turn.
//
// The page is plain HTML, CSS and a little JavaScript, embedded in the binary: there
// is no build step outside `go build`.
package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/client"
)

// DefaultAddr is where a console listens unless told otherwise: loopback only.
const DefaultAddr = "127.0.0.1:7070"

// ErrNeedsPassword refuses a console on an address other hosts can reach without a
// password: the console acts with its NATS user's rights, which must not be given to
// whoever reaches the port.
var ErrNeedsPassword = errors.New("a console on a non-loopback address needs a password")

// Config configures a console.
type Config struct {
	// Addr is the host:port to listen on; DefaultAddr when empty. A host other than a
	// loopback one (127.0.0.1, ::1, localhost) requires Password.
	Addr string
	// Password, when set, is asked by HTTP basic authentication (any user name) for
	// every request. Serve it behind TLS (a reverse proxy) off a trusted network.
	Password string
	// Client is the bus the console reads and acts on, as its connection's user.
	Client *client.Client
	// By names who decides approvals, for the turn's record; "console" when empty.
	By string
	// Logger takes what the console has to say (a failed request); the default discards.
	Logger *slog.Logger
}

func (c *Config) withDefaults() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.By == "" {
		c.By = "console"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	if c.Client == nil {
		return errors.New("console: no client")
	}
	return CheckAddr(c.Addr, c.Password != "")
}

// CheckAddr refuses an address a console cannot listen on as configured: one that is
// not host:port, or one other hosts reach when the console has no password
// (ErrNeedsPassword).
func CheckAddr(addr string, password bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("console: address %q: %w", addr, err)
	}
	if !isLoopback(host) && !password {
		return fmt.Errorf("console: %s: %w, or listen on 127.0.0.1", addr, ErrNeedsPassword)
	}
	return nil
}

// isLoopback reports whether host (a name or an address, without port) names this
// machine's loopback interface only. An empty host ("":7070) listens everywhere.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Server is a running console.
type Server struct {
	cfg   Config
	cl    *client.Client
	ln    net.Listener
	srv   *http.Server
	token string // asked of every state-changing request, in a header
	log   *slog.Logger

	feeds atomic.Int64 // live feeds open (pages looking)
	done  chan struct{}
	once  sync.Once

	mu    sync.Mutex
	calls map[string]int // call counts of ended turns, whose transcripts no longer change
}

// Start listens on cfg.Addr and serves the console until Close.
func Start(cfg Config) (*Server, error) {
	cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{cfg: cfg, cl: cfg.Client, ln: ln, token: hex.EncodeToString(b), log: cfg.Logger,
		done: make(chan struct{}), calls: map[string]int{}}
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: the live feeds stay open as long as their page.
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("console stopped", "err", err)
		}
	}()
	return s, nil
}

// URL is where the console is, for people: http://host:port/.
func (s *Server) URL() string {
	addr := s.ln.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(addr.Port)) + "/"
}

// Feeds is how many live feeds are open: one per page looking. With none, the console
// holds no subscription on the bus.
func (s *Server) Feeds() int { return int(s.feeds.Load()) }

// Close ends the live feeds and stops serving.
func (s *Server) Close() error {
	s.once.Do(func() { close(s.done) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}
