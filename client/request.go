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
		return flushError{err}
	}
	return c.refused(m.Subject)
}

// flushError is a send whose flush failed: the message was published, and may have
// reached the server.
type flushError struct{ err error }

func (e flushError) Error() string { return e.err.Error() }
func (e flushError) Unwrap() error { return e.err }

// request sends m as a request and waits for its one reply within ctx. Unlike
// Conn.RequestMsgWithContext, a request the server refused under the user's
// permissions is ErrRefused at once, rather than a wait for a reply that cannot
// come: the request is flushed before the wait, and the flush tells.
//
// The connection going down does not end the wait (ask).
func (c *Client) request(ctx context.Context, m *nats.Msg) (*nats.Msg, error) {
	resp, _, err := c.ask(ctx, m, asking{})
	return resp, err
}

// askAgainEvery spaces the asks of a request asked again (asking.again) that no one
// answers after the connection came back: its answerer's own connection may be a
// moment behind (bus.Dial reconnects every 250 ms).
const askAgainEvery = 250 * time.Millisecond

// asking is what ask does beyond waiting for the reply; the zero value, nothing.
type asking struct {
	// again asks once more when the connection is back, for a request its answerer
	// takes once by an id in it (a turn's start), and then every askAgainEvery while no
	// one answers (no responders); the answer to any ask is the answer.
	again bool
	// resend is published instead when the connection is back, and when a message
	// comes on lostOn: for a call, whose host keeps the reply it sent to the call's
	// result subject (m.Reply) and sends it again when asked (bus.ResendSubject); lostOn
	// is where the host says its reply may be lost (bus.EventReplyLost).
	resend *nats.Msg
	lostOn string
	// cut, once the connection went down, ends the wait (ctx.Err(), lost).
	cut <-chan struct{}
}

// ask is request, with how, and reports whether the connection went down after m was
// sent: then m may have reached the server or not, and its reply, if one was sent
// while the connection was down, is lost. The wait goes on: a reply sent once the
// connection is back reaches its subscription, which nats.go makes again. m's reply
// subject is a new inbox unless it has one.
func (c *Client) ask(ctx context.Context, m *nats.Msg, how asking) (resp *nats.Msg, lost bool, err error) {
	status := c.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	defer c.nc.RemoveStatusListener(status)
	var hostLost chan *nats.Msg
	if how.lostOn != "" {
		hostLost = make(chan *nats.Msg, 1)
		lsub, err := c.nc.ChanSubscribe(how.lostOn, hostLost)
		if err != nil {
			return nil, false, err
		}
		defer func() { _ = lsub.Unsubscribe() }()
	}
	// The reply, and the no-responders statuses of asks that may come before it. Its
	// subscription is the last before the request: the connection keeps one error, and
	// the server's refusal of this one must be it (refused, below).
	replies := make(chan *nats.Msg, 8)
	if m.Reply == "" {
		m.Reply = c.nc.NewInbox()
	}
	sub, err := c.nc.ChanSubscribe(m.Reply, replies)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// send reports whether m may have gone out: a flush the connection's end cut short
	// (the connection reconnecting, or closed) may have carried it.
	send := func(m *nats.Msg) (sent bool, err error) {
		err = c.send(ctx, m)
		var fe flushError
		if errors.As(err, &fe) && errors.Is(err, nats.ErrConnectionClosed) {
			if c.nc.IsClosed() {
				return true, err
			}
			return true, nil // the status listener has heard it too
		}
		return err == nil, err
	}
	if sent, err := send(m); err != nil {
		return nil, sent, err
	}
	// The flush has the server's word on the reply subject's subscription too: a
	// user who may not read a call's result subject would wait out its deadline.
	if err := c.refused(m.Reply); err != nil {
		return nil, false, err
	}
	var retry <-chan time.Time
	for {
		var cutNow <-chan struct{}
		if lost {
			cutNow = how.cut
		}
		select {
		case resp := <-replies:
			if len(resp.Data) != 0 || resp.Header.Get("Status") != "503" {
				return resp, lost, nil
			}
			if !how.again || !lost {
				return nil, lost, nats.ErrNoResponders
			}
			retry = time.After(askAgainEvery)
		case s := <-status:
			switch {
			case s == nats.CLOSED:
				return nil, true, nats.ErrConnectionClosed // nothing more can come
			case s != nats.CONNECTED:
				lost = true
			case lost && (how.again || how.resend != nil):
				retry = time.After(0)
			}
		case <-hostLost:
			if how.resend != nil {
				retry = time.After(0)
			}
		case <-retry:
			retry = nil
			if !c.nc.IsConnected() {
				continue // asked when it is back
			}
			again := m
			if how.resend != nil {
				again = how.resend
			}
			if _, err := send(again); err != nil {
				return nil, lost, err
			}
		case <-cutNow:
			return nil, lost, context.Canceled
		case <-ctx.Done():
			return nil, lost, ctx.Err()
		}
	}
}
