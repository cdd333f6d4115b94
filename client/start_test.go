package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/internal/jstest"
	"github.com/toolbus/toolbus/schema"
)

// restartable is a bus's one server on a port of its own, which a test stops and
// starts again on the same port and store, for connections that reconnect to it.
type restartable struct {
	t   *testing.T
	cfg server.Config
	srv *server.Server
}

func newRestartable(t *testing.T) *restartable {
	port := jstest.FreePorts(t, 1)[0]
	r := &restartable{t: t, cfg: server.Config{
		Name: "n1", StoreDir: t.TempDir(), Listen: fmt.Sprintf("127.0.0.1:%d", port),
		Logger: bustest.Logger(t, slog.LevelWarn), Users: []server.User{{Name: "ops", Password: "pw"}},
	}}
	r.start()
	t.Cleanup(func() { r.srv.Close() })
	return r
}

func (r *restartable) start() {
	srv, err := server.Start(bustest.Context(r.t), r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.srv = srv
}

// dial connects to the server as name, reconnecting for as long as the test runs.
func (r *restartable) dial(name string) *nats.Conn {
	nc, err := bus.Dial(bustest.Context(r.t), r.srv.ClientURL(), name, bus.Credentials{User: "ops", Password: "pw"})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(nc.Close)
	return nc
}

// A turn's start whose answer is lost with the connection (the bus's server gone once
// the node had the start, before the answer reached the starter) is asked again once
// the connection is back, with the same id; the node that queued the first ask answers
// that the turn exists, and Start takes that for the answer. Should no node answer
// after the connection is back (none runs turns now), Start says the start was not
// answered, with the turn's handle: it may have been queued; and so it says at once when
// the starter's connection is closed after the ask.
func TestStartAskedAgainAfterReconnect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		nodeBack bool
		// closeConn closes the starter's connection instead: nothing can come on it.
		closeConn bool
	}{
		{"the node answers again", true, false},
		{"no node after", false, false},
		{"the starter's connection closed", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRestartable(t)
			ghost := r.dial("ghost")
			asks := make(chan string, 4)
			var n atomic.Int32
			if _, err := ghost.Subscribe(bus.AnyNodeStartTurn, func(m *nats.Msg) {
				var spec bus.TurnSpec
				_ = json.Unmarshal(m.Data, &spec)
				asks <- spec.ID
				if n.Add(1) == 1 {
					return // queued; its answer lost with the server
				}
				b, _ := json.Marshal(bus.StartTurnReply{Turn: spec.ID, Node: "ghost",
					Error: "turn " + spec.ID + " exists", Code: bus.StartTurnExists})
				_ = m.Respond(b)
			}); err != nil {
				t.Fatal(err)
			}
			if err := ghost.Flush(); err != nil {
				t.Fatal(err)
			}
			c := New(r.dial("starter"))

			type started struct {
				t   *Turn
				err error
			}
			done := make(chan started, 1)
			// Without a node, the start is asked until ctx ends.
			ctx := context.Background()
			if !tc.nodeBack {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
			}
			go func() {
				turn, err := c.Start(ctx, bus.TurnSpec{ID: "t1", Kind: bus.TurnMain, Agent: "a1", Input: "hi"}, "")
				done <- started{turn, err}
			}()
			select {
			case <-asks:
			case s := <-done:
				t.Fatalf("Start ended before the node had its ask: %+v", s)
			}
			switch {
			case tc.closeConn:
				c.Conn().Close()
			case !tc.nodeBack:
				ghost.Close()
				fallthrough
			default:
				r.srv.Close()
				r.start()
			}

			var s started
			select {
			case s = <-done:
			case <-time.After(StartTimeout + 5*time.Second):
				t.Fatal("Start did not end")
			}
			if s.t != nil {
				defer s.t.Close()
			}
			if tc.nodeBack {
				if s.err != nil || s.t == nil || s.t.ID != "t1" || s.t.Node != "ghost" {
					t.Fatalf("Start: %+v, %v; want turn t1 on ghost", s.t, s.err)
				}
				if again := <-asks; again != "t1" {
					t.Errorf("asked again for %q, want t1", again)
				}
				return
			}
			if !errors.Is(s.err, ErrStartUnanswered) || errors.Is(s.err, ErrTurnExists) ||
				!strings.Contains(s.err.Error(), "turn t1: the start of the turn was not answered: the connection to "+r.srv.ClientURL()) {
				t.Fatalf("Start with no node after: %v; want ErrStartUnanswered naming the turn and the bus", s.err)
			}
			if s.t == nil || s.t.ID != "t1" {
				t.Errorf("handle %+v, want turn t1's", s.t)
			}
		})
	}
}

// TestCallAsksAgainForALostReply: a call's reply goes to its result subject, as a
// turn's does, so a host that kept it sends it again when asked: the caller asks when
// its connection is re-established while it waits (the reply may have been sent
// meanwhile), and when the host says the reply may be lost (its own connection came
// back). Either way the call ends with the host's answer, not at its deadline.
func TestCallAsksAgainForALostReply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		kick bool // the caller's connection is cut; else the host says the reply may be lost
	}{
		{"the caller reconnected", true},
		{"the host said it may be lost", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := bustest.Server(t, nil)
			host := bustest.Conn(t, srv, "host")
			spec := &toolbus.Spec{Name: "kept", Category: "crm", Timeout: 20 * time.Second}
			type ids struct{ turn, call string }
			heard := make(chan ids, 1)
			if _, err := host.Subscribe(bus.ToolSubject("crm", "kept"), func(m *nats.Msg) {
				heard <- ids{m.Header.Get(bus.HeaderTurn), m.Header.Get(bus.HeaderCall)} // the reply is "lost"
			}); err != nil {
				t.Fatal(err)
			}
			var resent atomic.Int32
			if _, err := host.Subscribe(bus.ResendSubjects("crm"), func(m *nats.Msg) {
				turn, call := m.Header.Get(bus.HeaderTurn), m.Header.Get(bus.HeaderCall)
				if m.Reply != bus.ResultSubject(turn, call) {
					return // as package host: only to the call's result subject
				}
				resent.Add(1)
				b, _ := json.Marshal(bus.ToolReply{Call: call, Tool: "kept", Outcome: bus.OutcomeOK,
					Content: []bus.ContentPart{{Type: bus.ContentText, Text: "kept reply"}}})
				_ = m.Respond(b)
			}); err != nil {
				t.Fatal(err)
			}
			if err := host.Flush(); err != nil {
				t.Fatal(err)
			}
			c := New(bustest.Conn(t, srv, "caller"))
			type called struct {
				r   bus.ToolReply
				err error
			}
			done := make(chan called, 1)
			go func() {
				r, err := c.Call(context.Background(), spec, "ann", schema.Args{JSON: []byte(`{}`)})
				done <- called{r, err}
			}()
			var id ids
			select {
			case id = <-heard:
			case r := <-done:
				t.Fatalf("the call ended before its host heard it: %+v %v", r.r, r.err)
			}
			if tc.kick {
				cid, err := c.Conn().GetClientID()
				if err != nil {
					t.Fatal(err)
				}
				if err := srv.NATS().DisconnectClientByID(cid); err != nil {
					t.Fatal(err)
				}
			} else {
				ev, _ := json.Marshal(bus.Event{Turn: id.turn, Call: id.call, Tool: "kept", Kind: bus.EventReplyLost})
				if err := host.Publish(bus.EventSubject(id.turn, id.call, bus.EventReplyLost), ev); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case r := <-done:
				if r.err != nil || r.r.Outcome != bus.OutcomeOK || len(r.r.Content) == 0 || r.r.Content[0].Text != "kept reply" {
					t.Fatalf("Call: %+v, %v; want the kept reply", r.r, r.err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the call did not end with the kept reply")
			}
			if n := resent.Load(); n != 1 {
				t.Errorf("asked again %d times, want once", n)
			}
		})
	}
}
