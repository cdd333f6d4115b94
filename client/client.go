// Package client is the caller's side of a toolbus bus: start a turn and follow it,
// abort it, answer the calls it holds for approval, resume a turn whose node was lost,
// list turns and read their transcripts, and call one tool. The toolbus command line
// is written on it, and so may any Go program that drives a bus: one it dials
// ([Dial]), or one it started itself with package node ([New] on a connection of it).
//
//	c, err := client.Dial(ctx, "nats://127.0.0.1:4222", "my-app", bus.Credentials{User: "ops", Password: pw})
//	...
//	t, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "a1", Input: "hi", Model: "openai:gpt-5"}, "")
//	for m, err := range t.Events(ctx) { ... } // or: final, err := t.Wait(ctx)
//
// The wire it speaks is docs/protocol.md's; the envelopes are package bus's.
package client

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// DialTimeout bounds Dial when its context has no deadline.
const DialTimeout = 10 * time.Second

// Client is a connection to a bus, from the caller's side. Its methods may be called
// from several goroutines at once.
type Client struct {
	nc    *nats.Conn
	where string
	log   *slog.Logger
	owned bool // Close closes nc

	// sendMu orders what may be refused under the user's permissions and is read back
	// from the connection's last error (send, and the subscriptions of watch): the server
	// answers a refusal with an error the connection keeps until the next one, so two at
	// once could read each other's. Seen: a watcher's console reported an abort as sent,
	// the page's read of the turn having had a held call's request refused in between.
	sendMu sync.Mutex

	mu       sync.Mutex
	js       jetstream.JetStream
	turns    *durable.Store
	payloads *bus.Payloads
}

// Option configures a Client.
type Option func(*Client)

// Where names the bus in messages ("the embedded bus"); the default is the
// connection's URL.
func Where(s string) Option { return func(c *Client) { c.where = s } }

// Logger takes what the client has to warn about (a category's malformed catalog
// entry); the default discards it.
func Logger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// OwnConn hands the connection to the client: Close closes it.
func OwnConn() Option { return func(c *Client) { c.owned = true } }

// New is a client on an open connection, which stays the caller's (Close leaves it
// open) unless OwnConn says otherwise.
func New(nc *nats.Conn, opts ...Option) *Client {
	c := &Client{nc: nc}
	for _, o := range opts {
		o(c)
	}
	if c.where == "" {
		c.where = nc.ConnectedUrlRedacted()
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Dial connects to the bus at url as name (the connection name `nats server report
// connections` shows) and returns a client that owns the connection.
func Dial(ctx context.Context, url, name string, cred bus.Credentials, opts ...Option) (*Client, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DialTimeout)
		defer cancel()
	}
	nc, err := bus.Dial(ctx, url, name, cred)
	if err != nil {
		return nil, err
	}
	return New(nc, append(opts, OwnConn())...), nil
}

// Conn is the client's connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Bus names the bus, for messages: a URL, or what the Where option said.
func (c *Client) Bus() string { return c.where }

// Close flushes what the client published and, when Dial opened the connection,
// closes it.
func (c *Client) Close() {
	_ = c.nc.FlushTimeout(time.Second)
	if c.owned {
		c.nc.Close()
	}
}

// JetStream is the connection's JetStream context, made once; stores of other packages
// open on it (brain.Open, for the knowledge pages with their search index).
func (c *Client) JetStream() (jetstream.JetStream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.js == nil {
		js, err := jetstream.New(c.nc)
		if err != nil {
			return nil, err
		}
		c.js = js
	}
	return c.js, nil
}

// ErrNoTurns reports a bus on which no node has ever run a durable turn: it has no
// turn records to read.
var ErrNoTurns = durable.ErrNoTurns

// turnStore opens the bus's durable turns once; a bus without any is ErrNoTurns.
func (c *Client) turnStore(ctx context.Context) (*durable.Store, error) {
	js, err := c.JetStream()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	s := c.turns
	c.mu.Unlock()
	if s == nil {
		if s, err = durable.Open(ctx, js, durable.Config{}); err != nil {
			return nil, err
		}
		// A store opened before any node made the records is looked for again next
		// time: a long-lived client (toolbus mcp, the console) outlives that moment.
		if s.HasTurns() {
			c.mu.Lock()
			c.turns = s
			c.mu.Unlock()
		}
	}
	if !s.HasTurns() {
		return nil, ErrNoTurns
	}
	return s, nil
}

// payloadStore is the store of large call payloads. A call's payload lives as long
// as the call: one replica is enough.
func (c *Client) payloadStore() (*bus.Payloads, error) {
	js, err := c.JetStream()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.payloads == nil {
		c.payloads = bus.NewPayloads(js, 1)
	}
	return c.payloads, nil
}
