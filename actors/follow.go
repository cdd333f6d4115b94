package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// ErrNodeLost reports a durable turn whose node went silent and that no node resumed
// within the wait Follow was given.
var ErrNodeLost = errors.New("the turn's node was lost and no node resumed the turn")

// Follow waits for a turn's end and returns its final status. each, when set, hears every
// status the turn publishes (started, step, beat, done). A durable turn says how long its
// node may stay silent (its lease); when nothing of the turn is heard for giveUp (at least
// three leases), Follow gives up with ErrNodeLost: the turn may still be resumed later
// (toolbus resume). Subscribe before the turn starts, or the lease is learnt from its
// next heartbeat.
func Follow(ctx context.Context, nc *nats.Conn, turn string, giveUp time.Duration, each func(bus.TurnStatus)) (bus.TurnStatus, error) {
	msgs := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(bus.TurnSubjects(turn), msgs)
	if err != nil {
		return bus.TurnStatus{}, fmt.Errorf("follow turn %s: %w", turn, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	var (
		lease  time.Duration
		silent = time.NewTimer(time.Hour)
		missed int
	)
	defer silent.Stop()
	for {
		select {
		case <-ctx.Done():
			return bus.TurnStatus{}, ctx.Err()
		case <-silent.C:
			missed++
			if waited := time.Duration(missed) * lease; missed >= 3 && waited >= giveUp {
				return bus.TurnStatus{}, fmt.Errorf("turn %s: %w within %s", turn, ErrNodeLost, waited)
			}
			silent.Reset(lease)
		case m := <-msgs:
			missed = 0
			ts, ok := bus.ParseTurnSubject(m.Subject)
			if ok && ts.Kind == bus.KindStatus {
				var st bus.TurnStatus
				if json.Unmarshal(m.Data, &st) == nil {
					if st.Lease > 0 {
						lease = st.Lease
					}
					if each != nil {
						each(st)
					}
					if ts.Status == bus.StatusDone {
						return st, nil
					}
				}
			}
			if lease > 0 {
				silent.Reset(lease)
			}
		}
	}
}
