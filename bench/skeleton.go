package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/workpool"
)

// The design's skeleton is what any runtime built the way toolbus is must do for a call,
// and nothing more: a turn asks its model off the goroutines that deliver its messages (a
// model is an HTTP call that an abort must interrupt, and while it streams the turn hears
// the replies of the calls it dispatched early), and sends the call's request with a
// turn's headers and a reply subject of its own; the host's micro endpoint hands each
// request to a worker (micro runs an endpoint's handler one request at a time, so a host
// that ran calls there would run one call at a time), which reads the headers, decodes the
// arguments and answers. No actor, no validation against a schema, no context or deadline,
// no transcript, event or status.
//
// Its concurrent throughput is a ceiling of the concurrent turns' row, as the wire of a
// call alone is the skeleton's: the row shows how much of what the turns' row lacks is the
// design's two hand-offs, and how much is toolbus. Measured at rest on 2 cores
// (docs/operations.md §8), it reached 0.51–0.54× of raw request-reply, below the turns'
// target of 0.55×, at 29 µs of processor time a call against the turns' 60.

// skeletonSubject is the subject of the skeleton's host.
const skeletonSubject = "bench.skeleton.noop"

// skeleton is the design's skeleton: a host, and the connection its turns share.
type skeleton struct {
	pool   *workpool.Pool // the turns' model calls and the host's calls, as a node's workers run both
	hc, tc *nats.Conn
	svc    micro.Service
}

// startSkeleton starts the skeleton's host on its own connection, and a connection for its
// turns.
func (s *suite) startSkeleton() (_ *skeleton, err error) {
	k := &skeleton{pool: workpool.New(4 * s.cfg.Turns)}
	defer func() {
		if err != nil {
			k.stop()
		}
	}()
	if k.hc, err = s.node.Connect("bench-skeleton-host"); err != nil {
		return nil, err
	}
	tool := s.noop.Name
	k.svc, err = micro.AddService(k.hc, micro.Config{Name: "bench-skeleton", Version: "1.0.0"})
	if err != nil {
		return nil, err
	}
	if err := k.svc.AddEndpoint("noop", micro.HandlerFunc(func(r micro.Request) {
		k.pool.Go(func() { answerSkeleton(r, tool) })
	}), micro.WithEndpointSubject(skeletonSubject)); err != nil {
		return nil, err
	}
	if err := k.hc.Flush(); err != nil {
		return nil, err
	}
	if k.tc, err = s.node.Connect("bench-skeleton-turns"); err != nil {
		return nil, err
	}
	return k, nil
}

// answerSkeleton is the skeleton host's call: the headers read, the arguments decoded, the
// reply encoded.
func answerSkeleton(r micro.Request, tool string) {
	req, err := bus.ParseToolRequest(nats.Header(r.Headers()))
	var args noArgs
	if err == nil {
		err = json.Unmarshal(r.Data(), &args)
	}
	if err != nil {
		_ = r.Error("400", err.Error(), nil)
		return
	}
	tr := bus.ToolReply{Call: req.Call, Tool: tool, Outcome: bus.OutcomeOK, Content: []toolbus.ContentPart{toolbus.Text("ok")}}
	b, err := tr.AppendJSON(make([]byte, 0, 128))
	if err != nil {
		_ = r.Error("500", err.Error(), nil)
		return
	}
	_ = r.Respond(b)
}

func (k *skeleton) stop() {
	if k.tc != nil {
		k.tc.Close()
	}
	if k.svc != nil {
		_ = k.svc.Stop()
	}
	if k.hc != nil {
		k.hc.Close()
	}
	k.pool.Close(time.Second)
}

// turn runs a skeleton turn of steps steps of one call each: each reply, heard on the
// turn's subscription, has the model asked again on a worker, where its call goes out.
// With a timing, it records each call's round trip (its request built → its reply decoded) and
// each step (the model's answer → the model asked again), as the turn rows time theirs.
func (k *skeleton) turn(ctx context.Context, steps int, tm *skeletonTiming) error {
	id := bus.NewID()
	done := make(chan error, 1)
	finish := func(err error) {
		select {
		case done <- err:
		default: // the turn has its end already
		}
	}
	var step atomic.Int64
	dispatch := func() {
		tm.asked()
		tm.sent() // before the request is built, as a turn's call counts from there
		call := "c" + strconv.FormatInt(step.Load(), 10)
		m := &nats.Msg{Subject: skeletonSubject, Reply: bus.ResultSubject(id, call), Data: []byte(`{}`), Header: make(nats.Header, 8)}
		bus.ToolRequest{Turn: id, Call: call, Agent: "bench", Deadline: time.Now().Add(time.Minute),
			Traceparent: wireTraceparent, Vouch: wireVouch}.SetHeaders(m.Header)
		if err := k.tc.PublishMsg(m); err != nil {
			finish(err)
		}
	}
	sub, err := k.tc.Subscribe(bus.ResultSubject(id, "*"), func(m *nats.Msg) {
		var r bus.ToolReply
		if e := m.Header.Get(micro.ErrorHeader); e != "" {
			finish(errors.New("skeleton host: " + e))
			return
		}
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Outcome != bus.OutcomeOK {
			finish(fmt.Errorf("skeleton reply %q: %v", m.Data, err))
			return
		}
		tm.replied() // decoded, as a turn's call counts to there
		if step.Add(1) == int64(steps) {
			finish(nil)
			return
		}
		k.pool.Go(dispatch) // the model asked again, off the subscription
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	k.pool.Go(dispatch)
	select {
	case err := <-done:
		return err
	case <-time.After(10*time.Second + time.Duration(steps)*time.Millisecond):
		return fmt.Errorf("skeleton turn: %d of %d steps within its time", step.Load(), steps)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// skeletonTiming records a skeleton turn's round trips and steps; nil records nothing.
// Its moments come from the turn's worker and its subscription, one after the other.
type skeletonTiming struct {
	mu           sync.Mutex
	ask, send    time.Time
	trips, steps []time.Duration
}

// asked is the model's answer (the worker's start): the end of the step before.
func (tm *skeletonTiming) asked() {
	if tm == nil {
		return
	}
	now := time.Now()
	tm.mu.Lock()
	if !tm.ask.IsZero() {
		tm.steps = append(tm.steps, now.Sub(tm.ask))
	}
	tm.ask = now
	tm.mu.Unlock()
}

// sent is the start of the request.
func (tm *skeletonTiming) sent() {
	if tm == nil {
		return
	}
	tm.mu.Lock()
	tm.send = time.Now()
	tm.mu.Unlock()
}

// replied is the reply decoded on the turn's subscription.
func (tm *skeletonTiming) replied() {
	if tm == nil {
		return
	}
	now := time.Now()
	tm.mu.Lock()
	tm.trips = append(tm.trips, now.Sub(tm.send))
	tm.mu.Unlock()
}
