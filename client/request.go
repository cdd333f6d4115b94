package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// ErrRefused reports a publish the server refused under the user's permissions (a
// watcher aborting a turn): errors.Is(err, ErrRefused), its text the server's.
var ErrRefused = errors.New("refused by the bus")

// refused reports whether the server refused a publish on subject to this
// connection. Called after a flush: the server answers a PUB it refuses with -ERR
// before it answers the PING of the flush, and the connection's reader records
// the error (LastError) before it takes the PONG. The error names the subject,
// so a refusal of another subject is not taken for this one's.
func (c *Client) refused(subject string) error {
	err := c.nc.LastError()
	if err != nil && errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
		return fmt.Errorf("%w: %s", ErrRefused, err.Error())
	}
	return nil
}

// send publishes m and flushes it, and reports the server's refusal of it under the
// user's permissions (ErrRefused), one send at a time (Client.sendMu).
func (c *Client) send(ctx context.Context, m *nats.Msg) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.nc.PublishMsg(m); err != nil {
		return err
	}
	var err error
	if _, ok := ctx.Deadline(); ok {
		err = c.nc.FlushWithContext(ctx)
	} else {
		err = c.nc.Flush() // FlushWithContext wants a deadline; Flush has its own
	}
	if err != nil {
		return err
	}
	return c.refused(m.Subject)
}

// request sends m as a request and waits for its one reply within ctx. Unlike
// Conn.RequestMsgWithContext, a request the server refuses under the user's
// permissions is ErrRefused at once, rather than a wait for a reply that cannot
// come: the request is flushed before the wait, and the flush tells.
func (c *Client) request(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	m.Reply = inbox
	if err := c.send(ctx, m); err != nil {
		return nil, err
	}
	resp, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, err
	}
	if len(resp.Data) == 0 && resp.Header.Get("Status") == "503" {
		return nil, nats.ErrNoResponders
	}
	return resp, nil
}
