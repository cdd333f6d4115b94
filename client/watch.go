package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// Watch is a subscription to the messages of one turn, or of every turn, each decoded
// by bus.DecodeTurnMessage. Messages that are not the envelope their subject names
// are skipped. Its subscription has no pending limit: a follower that falls behind
// (a slow terminal) buffers rather than loses a status.
type Watch struct {
	// C delivers the messages, in the order the server sent them.
	C <-chan bus.TurnMessage

	c    *Client
	sub  *nats.Subscription
	stop chan struct{}
	once sync.Once
}

// watchBuffer is how many decoded messages wait in C before the subscription's own
// (unbounded) pending queue holds the rest.
const watchBuffer = 256

// Watch subscribes to a turn's messages (turn "" watches every turn) and returns once
// the server has the subscription: start the turn after it.
func (c *Client) Watch(turn string) (*Watch, error) {
	subject := bus.AllTurns
	if turn != "" {
		if !bus.ValidToken(turn) {
			return nil, fmt.Errorf("watch: invalid turn id %q", turn)
		}
		subject = bus.TurnSubjects(turn)
	}
	return c.watch(subject)
}

// WatchStatuses subscribes to the statuses of every turn (started, step, beat, done),
// and nothing else of them: what a list of turns follows.
func (c *Client) WatchStatuses() (*Watch, error) { return c.watch(bus.AllStatuses) }

// watch subscribes to subject, one under the turns' subjects.
func (c *Client) watch(subject string) (*Watch, error) {
	ch := make(chan bus.TurnMessage, watchBuffer)
	w := &Watch{C: ch, c: c, stop: make(chan struct{})}
	// A subscription the server refuses is answered with an error as a publish is: not
	// beside a send that reads its own back (Client.sendMu).
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	sub, err := c.nc.Subscribe(subject, func(m *nats.Msg) {
		tm, err := bus.DecodeTurnMessage(m)
		if err != nil {
			return
		}
		select {
		case ch <- tm:
		case <-w.stop:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", subject, err)
	}
	w.sub = sub
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		w.Stop()
		return nil, fmt.Errorf("watch %s: %w", subject, err)
	}
	if err := c.nc.Flush(); err != nil {
		w.Stop()
		return nil, fmt.Errorf("watch %s: %w", subject, err)
	}
	return w, nil
}

// Stop ends the subscription. C is not closed: select on it with a context.
func (w *Watch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		_ = w.sub.Unsubscribe()
	})
}

// Liveness follows a durable turn's node through its statuses, to tell a node that
// was lost from one that is busy: a node says how long it may stay silent (its lease)
// in its started and beat statuses, and beats three times a lease.
type Liveness struct {
	Node   string        // the node that runs the turn, from its statuses
	Lease  time.Duration // from its started or beat status; 0 until one is heard
	missed int           // leases in a row without a status
	// down is when the follower's connection was first found down at a check, before
	// any lease was heard (zero: it was up).
	down time.Time
}

// Next is how long a follower waits for a word of the turn before it checks again: a
// lease, once a status gave one. Until then a third of giveUp (at least 100 ms): a turn
// queued behind others is heard of only when a node takes it, and the follower's own
// connection may be gone meanwhile (Offline).
func (l *Liveness) Next(giveUp time.Duration) time.Duration {
	if l.Lease > 0 {
		return l.Lease
	}
	return max(giveUp/3, 100*time.Millisecond)
}

// Offline notes a check, before any lease was heard, that found the follower's
// connection up or down, and reports how long it has been down, and whether that is
// giveUp: then nothing of the turn can reach the follower, whose node may have been
// lost before it said a word. A turn queued with the connection up is waited for.
func (l *Liveness) Offline(up bool, now time.Time, giveUp time.Duration) (time.Duration, bool) {
	if up || l.Lease > 0 {
		l.down = time.Time{}
		return 0, false
	}
	if l.down.IsZero() {
		l.down = now
	}
	d := now.Sub(l.down)
	return d, d >= giveUp
}

// Heard notes a message of the turn; it reports whether it was a word of the turn's
// node (a status, a piece of streamed text), which resets the silence. A late tool
// reply is not.
func (l *Liveness) Heard(m bus.TurnMessage) bool {
	if m.Text != nil {
		l.missed = 0 // the node streams the model's text
		return true
	}
	if m.Status == nil {
		return false
	}
	l.missed = 0
	if m.Status.Lease > 0 {
		l.Lease = m.Status.Lease
	}
	if m.Status.Node != "" {
		l.Node = m.Status.Node
	}
	return true
}

// Silent notes a whole lease without a status, and says how many in a row and how
// long that is. It notes nothing before a lease is known.
func (l *Liveness) Silent() (missed int, waited time.Duration) {
	if l.Lease <= 0 {
		return 0, 0
	}
	l.missed++
	return l.missed, time.Duration(l.missed) * l.Lease
}

// Lost reports a silence of at least three leases and giveUp: the node is gone, and
// no node resumed the turn in that time.
func (l *Liveness) Lost(giveUp time.Duration) bool {
	return l.missed >= 3 && time.Duration(l.missed)*l.Lease >= giveUp
}

// ErrNodeLost reports a durable turn whose node went silent and that no node resumed
// within the wait Follow was given. The turn may still be resumed (Resume).
var ErrNodeLost = errors.New("the turn's node was lost and no node resumed the turn")

// ErrBusLost reports a turn of which nothing was heard while the follower's connection
// to the bus was down for the wait Follow was given: its node may have been lost
// before its first status. The turn may still run; its record says once the bus is back.
var ErrBusLost = errors.New("nothing was heard of the turn and the connection to the bus was down")

// Follow waits for a turn's end and returns its final status. each, when set, hears
// every message of the turn (statuses, events, results, aborts, approval requests, and
// the model's text as it streams: TurnMessage.Text).
// When nothing of the turn's node is heard for giveUp (at least three leases), Follow
// gives up with ErrNodeLost. Call it before starting the turn, or use Watch and
// FollowWatch; started later, it learns the lease from the next heartbeat.
func (c *Client) Follow(ctx context.Context, turn string, giveUp time.Duration, each func(bus.TurnMessage)) (bus.TurnStatus, error) {
	w, err := c.Watch(turn)
	if err != nil {
		return bus.TurnStatus{}, fmt.Errorf("follow turn %s: %w", turn, err)
	}
	defer w.Stop()
	return FollowWatch(ctx, w, turn, giveUp, each)
}

// FollowWatch is Follow on a Watch the caller made (before starting the turn).
func FollowWatch(ctx context.Context, w *Watch, turn string, giveUp time.Duration, each func(bus.TurnMessage)) (bus.TurnStatus, error) {
	st, err := follow(ctx, w, turn, giveUp, func(m bus.TurnMessage) bool {
		if each != nil {
			each(m)
		}
		return true
	})
	return st.TurnStatus, err
}

// followed is how a turn followed to its end ended: its status, heard on the bus (a done
// status), or read from its record.
type followed struct {
	bus.TurnStatus
	heard bool
}

// follow hands each message of the turn to each until the turn's done status, which
// it hands over too, or its record says it ended; each returning false stops it (zero
// status, nil error).
func follow(ctx context.Context, w *Watch, turn string, giveUp time.Duration, each func(bus.TurnMessage) bool) (followed, error) {
	var live Liveness
	silent := time.NewTimer(live.Next(giveUp))
	defer silent.Stop()
	for {
		select {
		case <-ctx.Done():
			return followed{}, context.Cause(ctx)
		case <-silent.C:
			// A lease without a word: the turn may have ended while this connection
			// was moving to another server, its done status missed. Its record says.
			if st, ok := w.Ended(ctx, turn); ok {
				return followed{TurnStatus: st}, nil
			}
			if down, gone := live.Offline(w.c.nc.IsConnected(), time.Now(), giveUp); gone {
				return followed{}, fmt.Errorf("turn %s: %w for %s", turn, ErrBusLost, down.Round(time.Millisecond))
			}
			if _, waited := live.Silent(); live.Lost(giveUp) {
				return followed{}, fmt.Errorf("turn %s: %w within %s", turn, ErrNodeLost, waited)
			}
			silent.Reset(live.Next(giveUp))
		case m := <-w.C:
			if m.Subject.Turn != turn {
				continue
			}
			live.Heard(m)
			if !each(m) {
				return followed{}, nil
			}
			if m.Status != nil && m.Subject.Status == bus.StatusDone {
				return followed{TurnStatus: *m.Status, heard: true}, nil
			}
			if live.Lease > 0 {
				silent.Reset(live.Lease)
			}
		}
	}
}

// endedPatience bounds reading a turn's record and transcript on a silence.
const endedPatience = 5 * time.Second

// Ended reads the watched turn's end from its record, for a follower that heard nothing
// for a lease (Client.Ended): false while it runs.
func (w *Watch) Ended(ctx context.Context, turn string) (bus.TurnStatus, bool) {
	if !w.c.nc.IsConnected() {
		// Its server is gone too (the node that embedded it was lost): a read would
		// only wait out its patience, every lease, before the follower gives up.
		return bus.TurnStatus{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, endedPatience)
	defer cancel()
	st, ok, err := w.c.Ended(ctx, turn)
	return st, ok && err == nil
}
