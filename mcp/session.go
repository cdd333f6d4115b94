package mcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/durable"
)

// recordPatience bounds one write of a session's turn (its record, a transcript
// message, its end). A user that may not write turn records (an operator) is not told
// so by the server, its writes only go unanswered: past this the session gives up
// recording, and its calls go on unrecorded.
const recordPatience = 15 * time.Second

// sessionTurn is the turn an MCP session owns, made at its first call. Every call of
// the session goes under its id, so `nats sub 'toolbus.turn.TURN.>'` shows them; and
// it is recorded as a turn of kind mcp (bus.TurnMCP): its record, running until the
// session ends, and its transcript (the session's start, then each call and its
// output), so that `toolbus turns` and the console list it with its calls. Its
// statuses (started, a step per call, done) go out as a node's do, for `toolbus watch`
// and the console's live pages.
//
// The recording runs behind the calls, in order, on a goroutine of its own: a call
// never waits for it, and a bus that keeps no turn records (no node runs turns) or a
// user that may not write them (an operator) costs the calls nothing.
type sessionTurn struct {
	s     *Server
	id    string
	input string

	mu      sync.Mutex
	queue   []func(context.Context)
	wake    chan struct{}
	over    bool // the session ended: the end is the last write
	done    chan struct{}
	rec     *durable.Session // nil until opened, or when it could not be
	failed  bool             // a write failed: nothing more is recorded
	steps   int              // calls begun: the turn's step
	records []bus.CallRecord // the calls answered, for the final status

	beatMu sync.Mutex
	quiet  chan struct{} // closed when the session stops beating (silence)
}

// owner is what a session's record names as its node: this process.
var owner = func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("toolbus-mcp@%s/%d", host, os.Getpid())
}()

// sessionTurn is ss's turn, made (and its recording begun) at its first call; when
// the session ends, its turn ends with it.
func (s *Server) sessionTurn(ss *sdk.ServerSession) *sessionTurn {
	fresh := &sessionTurn{s: s, id: bus.NewID(), wake: make(chan struct{}, 1), done: make(chan struct{}), quiet: make(chan struct{})}
	v, loaded := s.turns.LoadOrStore(ss, fresh)
	t := v.(*sessionTurn)
	if loaded {
		return t
	}
	who := "an MCP client"
	if p := ss.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
		who = p.ClientInfo.Name
		if p.ClientInfo.Version != "" {
			who += " " + p.ClientInfo.Version
		}
	}
	t.input = fmt.Sprintf("MCP session of %s with toolbus mcp, for agent %s", who, s.cfg.Agent)
	s.log.Info("mcp session", "session", ss.ID(), "turn", t.id, "client", who)
	s.endMu.Lock()
	closing := s.closing
	if !closing {
		s.ending.Add(1)
	}
	s.endMu.Unlock()
	if closing {
		// A session that began as the server stops: its calls go unrecorded.
		t.mu.Lock()
		t.over = true
		t.mu.Unlock()
		close(t.done)
		return t
	}
	t.push(t.open)
	go t.run()
	go func() {
		defer s.ending.Done()
		_ = ss.Wait() // returns once the session's calls have returned
		s.turns.Delete(ss)
		s.endMu.Lock()
		state, why := bus.TurnCompleted, ""
		if stopped, ok := s.stopped[ss]; ok {
			state, why = bus.TurnAborted, stopped
		}
		delete(s.stopped, ss)
		s.endMu.Unlock()
		t.end(state, why)
		<-t.done
	}()
	return t
}

// push queues a write of the turn, unless the session has ended.
func (t *sessionTurn) push(f func(context.Context)) {
	t.mu.Lock()
	if !t.over {
		t.queue = append(t.queue, f)
	}
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// run makes the queued writes in order, until the end is written.
func (t *sessionTurn) run() {
	defer close(t.done)
	for {
		t.mu.Lock()
		q, over := t.queue, t.over
		t.queue = nil
		t.mu.Unlock()
		for _, f := range q {
			ctx, cancel := context.WithTimeout(context.Background(), recordPatience)
			f(ctx)
			cancel()
		}
		if over && len(q) == 0 {
			return
		}
		if len(q) == 0 {
			<-t.wake
		}
	}
}

// open creates the turn's record and its first transcript message.
func (t *sessionTurn) open(ctx context.Context) {
	spec := bus.TurnSpec{ID: t.id, Kind: bus.TurnMCP, Agent: t.s.cfg.Agent, Input: t.input}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchRefusal(ctx, t.s.cfg.Client.Conn(), cancel)
	rec, err := t.s.cfg.Client.OpenSession(ctx, spec, owner, toolbus.UserMessage(t.input))
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, nats.ErrPermissionViolation) {
		err = cause
	}
	if err != nil {
		t.failed = true
		how := "the session's calls are on the bus, but not in `toolbus turns` nor the console's list of turns"
		switch {
		case errors.Is(err, client.ErrNoTurns):
			t.s.log.Info("mcp session: not recorded as a turn: this bus keeps no turn records (no node that runs turns has started on it); "+how, "turn", t.id)
		default:
			t.s.log.Warn("mcp session: not recorded as a turn (recording needs a NATS user that may write turn records and transcripts, as the turn role may; an operator may not); "+how,
				"turn", t.id, "err", err)
		}
		return
	}
	t.rec = rec
	t.status(bus.StatusStarted, bus.TurnStatus{State: bus.TurnRunning, Lease: bus.SessionLease})
	go t.beat()
}

// beat publishes the session's heartbeat every third of bus.SessionLease until silence: a
// record running without one is a session whose process is gone (client.Resume).
func (t *sessionTurn) beat() {
	tick := time.NewTicker(bus.SessionLease / 3)
	defer tick.Stop()
	for {
		select {
		case <-t.quiet:
			return
		case <-tick.C:
		}
		t.beatMu.Lock()
		select {
		case <-t.quiet:
		default:
			t.status(bus.StatusBeat, bus.TurnStatus{State: bus.TurnRunning, Lease: bus.SessionLease})
		}
		t.beatMu.Unlock()
	}
}

// silence stops the beats, for good: no beat follows its return. The session's end
// silences it before its done status, and so does a write refused because the record
// was ended by another (EndLostSession), which a heartbeat would contradict.
func (t *sessionTurn) silence() {
	t.beatMu.Lock()
	defer t.beatMu.Unlock()
	select {
	case <-t.quiet:
	default:
		close(t.quiet)
	}
}

// watchRefusal cancels ctx with the server's refusal of a write to the turn records
// while ctx lasts. A user that may not write them (an operator) is told so only
// through the connection's errors: no reply carries it, and the write would wait out
// its patience, and Close after it.
func watchRefusal(ctx context.Context, nc *nats.Conn, cancel context.CancelCauseFunc) {
	before := nc.LastError()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if last := nc.LastError(); last != nil && last != before && errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), bus.BucketTurns) {
			cancel(last)
			return
		}
	}
}

// called records a call the client made, before it runs (or is held): the console
// shows a held call from its transcript. It returns the turn's step, the call's.
func (t *sessionTurn) called(item toolbus.Item) int {
	t.mu.Lock()
	t.steps++
	step := t.steps
	t.mu.Unlock()
	t.push(func(ctx context.Context) { t.append(ctx, step, item) })
	return step
}

// answered records a call's output, as the client got it, and its account.
func (t *sessionTurn) answered(step int, out toolbus.Item, rec bus.CallRecord) {
	t.push(func(ctx context.Context) {
		t.append(ctx, step, out)
		rec.Details = nil // the transcript's output and the host's events have what matters
		t.records = append(t.records, rec)
		t.status(bus.StatusStep, bus.TurnStatus{State: bus.TurnRunning, Step: step, Calls: []bus.CallRecord{rec}})
	})
}

func (t *sessionTurn) append(ctx context.Context, step int, item toolbus.Item) {
	if t.rec == nil || t.failed {
		return
	}
	if err := t.rec.Append(ctx, step, item); err != nil {
		t.failed = true
		if errors.Is(err, durable.ErrFenced) {
			t.silence() // its record was ended by another (EndLostSession): the session is over for the bus
		}
		t.s.log.Warn("mcp session: its transcript could not be written; the session's calls go on unrecorded", "turn", t.id, "err", err)
	}
}

// end queues the turn's end, its last write.
func (t *sessionTurn) end(state bus.TurnState, why string) {
	t.push(func(ctx context.Context) {
		if t.rec == nil {
			return
		}
		t.mu.Lock()
		steps := t.steps
		t.mu.Unlock()
		if t.failed && state == bus.TurnCompleted {
			// A record that says less than the session did is not an honest "completed".
			state, why = bus.TurnFailed, "the session's transcript could not be written in full; its calls ran on"
		}
		t.silence()
		if err := t.rec.End(ctx, state, why, steps); errors.Is(err, durable.ErrFenced) {
			// Taken for lost while it was paused or cut off (toolbus resume): the
			// record's end stands, and a done status saying otherwise would contradict it.
			t.s.log.Warn("mcp session: its turn's record was ended by another (toolbus resume took the session for lost); its own end is not recorded", "turn", t.id, "state", state, "err", err)
			return
		} else if err != nil {
			t.s.log.Warn("mcp session: its turn's end could not be recorded", "turn", t.id, "state", state, "err", err)
		}
		t.status(bus.StatusDone, bus.TurnStatus{State: state, Step: steps, Error: why, Calls: t.records})
		t.s.log.Info("mcp session ended", "turn", t.id, "state", state, "calls", steps)
	})
	t.mu.Lock()
	t.over = true
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// status publishes a status of the turn, as a node publishes its turns'.
func (t *sessionTurn) status(kind string, st bus.TurnStatus) {
	st.Turn, st.Node, st.Agent, st.Kind, st.Time = t.id, owner, t.s.cfg.Agent, bus.TurnMCP, time.Now()
	nc := t.s.cfg.Client.Conn()
	b, err := bus.EncodeStatus(st, int(nc.MaxPayload()))
	if err == nil {
		err = nc.Publish(bus.TurnStatusSubject(t.id, kind), b)
	}
	if err != nil {
		t.s.log.Warn("mcp session: publish status", "turn", t.id, "kind", kind, "err", err)
	}
}
