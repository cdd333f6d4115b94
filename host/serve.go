package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
)

// Serve hosts tools on the bus of nc until ctx ends: a Host for each category of the
// tools, serving it as a node's host does (the same subjects, checks, deadlines, aborts
// and outcomes: docs/protocol.md). It has nothing of a node: no home (Call.Home is
// empty), no vouches (every call's arguments are validated against its tool's schema), a
// goroutine per call, up to DefaultMaxConcurrent of a category at once.
//
// nc is the program's: Serve neither drains nor closes it. It adds to nc's reconnect and
// closed handlers (calling the ones set before it, and setting them back when it
// returns), so that a reply the old connection may have lost is sent again when a turn
// asks. A user of a bus with users needs the tool role for the tools' categories
// (docs/protocol.md §14).
//
// Serve returns once the hosts have stopped: nil when ctx ended, or the error that
// ended a host (nc closed, its micro service failed). A tool set it refuses (no tools, a
// name given twice, an invalid category) is an error before anything is served.
func Serve(ctx context.Context, nc *nats.Conn, tools ...*toolbus.Tool) error {
	return ServeConfig(ctx, Config{Conn: nc, Tools: tools})
}

// flushTimeout bounds the flush of what a stopping Serve published.
const flushTimeout = 2 * time.Second

// ServeConfig is Serve with the rest of a host's Config: a logger, the calls a
// category runs at once, their default timeout, a home. cfg.Tools may hold several
// categories, and cfg.Category is ignored: each category gets a Host of its own.
func ServeConfig(ctx context.Context, cfg Config) error {
	if cfg.Conn == nil {
		return errors.New("host: no connection")
	}
	if len(cfg.Tools) == 0 {
		return errors.New("host: no tools to serve")
	}
	failed := make(chan error, 1)
	report := func(err error) {
		select {
		case failed <- err:
		default: // one is enough to stop
		}
	}
	var hosts []*Host
	byCategory := make(map[string][]*toolbus.Tool)
	var order []string
	for _, t := range cfg.Tools {
		if t == nil {
			return errors.New("host: a nil tool")
		}
		if byCategory[t.Category] == nil {
			order = append(order, t.Category)
		}
		byCategory[t.Category] = append(byCategory[t.Category], t)
	}
	for _, category := range order {
		c := cfg
		c.Category, c.Tools, c.Failed = category, byCategory[category], report
		h, err := New(c)
		if err != nil {
			return err
		}
		hosts = append(hosts, h)
	}

	nc := cfg.Conn
	prevReconnected, prevClosed := nc.Opts.ReconnectedCB, nc.Opts.ClosedCB
	nc.SetReconnectHandler(func(c *nats.Conn) {
		if prevReconnected != nil {
			prevReconnected(c)
		}
		for _, h := range hosts {
			h.Reconnected()
		}
	})
	nc.SetClosedHandler(func(c *nats.Conn) {
		if prevClosed != nil {
			prevClosed(c)
		}
		report(errors.New("its connection closed"))
	})
	started := hosts[:0:0]
	defer func() {
		for i := len(started) - 1; i >= 0; i-- {
			started[i].Stop()
		}
		// What the hosts published last (the catalogs told they left) reaches the server
		// before Serve returns, and the program, perhaps, exits.
		_ = nc.FlushTimeout(flushTimeout)
		nc.SetReconnectHandler(prevReconnected)
		nc.SetClosedHandler(prevClosed)
	}()
	for _, h := range hosts {
		if err := h.Start(); err != nil {
			return err
		}
		started = append(started, h)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Debug("serving tools", "categories", order)
	select {
	case <-ctx.Done():
		return nil
	case err := <-failed:
		return fmt.Errorf("host: %w", err)
	}
}
