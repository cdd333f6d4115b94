package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
// Conn.RequestMsgWithContext, a request the server refused under the user's
// permissions is ErrRefused at once, rather than a wait for a reply that cannot
// come: the request is flushed before the wait, and the flush tells.
//
// The connection going down does not end the wait (ask).
func (c *Client) request(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	resp, _, err := c.ask(ctx, m, false, nil)
	return resp, err
}

// askAgainEvery spaces the asks of a request asked again (ask) that no one answers
// after the connection came back: its answerer's own connection may be a moment
// behind (bus.Dial reconnects every 250 ms).
const askAgainEvery = 250 * time.Millisecond

// ask is request, and reports whether the connection went down after m was sent:
// then m may have reached the server or not, and its reply, if one was sent while the
// connection was down, is lost. The wait goes on: a reply sent once the connection is
// back comes to the inbox, which nats.go subscribes again; and cut, once the
// connection went down, ends it (ctx.Err(), lost).
//
// again asks once more when the connection is back, for a request its answerer takes
// once by an id in it (a turn's start), and then every askAgainEvery while no one
// answers (no responders); the answer to any ask is the answer.
func (c *Client) ask(ctx context.Context, m *nats.Msg, again bool, cut <-chan struct{}) (resp *nats.Msg, lost bool, err error) {
	status := c.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	defer c.nc.RemoveStatusListener(status)
	// The reply, and the no-responders statuses of asks that may come before it.
	replies := make(chan *nats.Msg, 8)
	m.Reply = c.nc.NewInbox()
	sub, err := c.nc.ChanSubscribe(m.Reply, replies)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	send := func() error {
		err := c.send(ctx, m)
		if errors.Is(err, nats.ErrConnectionClosed) && !c.nc.IsClosed() {
			// The connection went down during the flush, m in it or not: the
			// status listener has heard it too.
			return nil
		}
		return err
	}
	if err := send(); err != nil {
		return nil, false, err
	}
	var retry <-chan time.Time
	for {
		var cutNow <-chan struct{}
		if lost {
			cutNow = cut
		}
		select {
		case resp := <-replies:
			if len(resp.Data) != 0 || resp.Header.Get("Status") != "503" {
				return resp, lost, nil
			}
			if !again || !lost {
				return nil, lost, nats.ErrNoResponders
			}
			retry = time.After(askAgainEvery)
		case s := <-status:
			switch {
			case s == nats.CLOSED:
				return nil, true, nats.ErrConnectionClosed // nothing more can come
			case s != nats.CONNECTED:
				lost = true
			case again && lost:
				retry = time.After(0)
			}
		case <-retry:
			retry = nil
			if !c.nc.IsConnected() {
				continue // asked when it is back
			}
			if err := send(); err != nil {
				return nil, lost, err
			}
		case <-cutNow:
			return nil, lost, context.Canceled
		case <-ctx.Done():
			return nil, lost, ctx.Err()
		}
	}
}
