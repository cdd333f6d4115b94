package actors

import (
	"errors"
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/host"
	"github.com/toolbus/toolbus/telemetry"
)

// The node runs each category's host.Host under its supervisor: hostActor starts one,
// and when its connection or its service ends on its own, fails to the supervisor,
// which restarts it as a new host on the same connection or, if that closed, a new one.

// hostConfig is a host.Config and how to get a new connection after its own closed.
type hostConfig struct {
	host.Config
	// reconnect gives a restarted host a new connection after its own closed; without it
	// such a host cannot come back.
	reconnect func() (*nats.Conn, error)
}

// hostReady asks a host whether it serves; it answers with hostStarted.
type hostReady struct{}

type hostStarted struct{ err error }

// hostFailed tells a host that its service or connection ended without being asked to.
// gen is the incarnation that failed: a connection that closes ends the service too, and
// the second report must not fail the incarnation that replaced the first.
type hostFailed struct {
	err error
	gen int
}

// hostShared is what a host's incarnations share across supervised restarts.
type hostShared struct {
	mu      sync.Mutex
	nc      *nats.Conn
	started bool // a first start succeeded: later starts are restarts
	gen     int  // incarnations so far
}

// hostActor is the actor that keeps one category served on one node.
type hostActor struct {
	cfg      hostConfig
	shared   *hostShared
	h        *host.Host
	startErr error
}

func newHostProps(cfg hostConfig) *actor.Props {
	shared := &hostShared{nc: cfg.Conn}
	return actor.PropsFromProducer(func() actor.Actor {
		return &hostActor{cfg: cfg, shared: shared}
	})
}

func (a *hostActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		restart := a.shared.isStarted()
		if err := a.start(ctx); err != nil {
			a.startErr = err
			if restart {
				// A restart that fails goes back to the supervisor, which tries
				// again later; the first start reports to whoever started it.
				panic(a.startErr)
			}
			return
		}
		a.shared.markStarted()
		if restart {
			a.cfg.Logger.Info("category host restarted", "category", a.cfg.Category)
		}
	case *hostReady:
		ctx.Respond(hostStarted{err: a.startErr})
	case *hostFailed:
		if a.h != nil && m.gen == a.shared.current() {
			// Fail to the supervisor (the node), which restarts the host.
			panic(fmt.Errorf("category host %s: %w", a.cfg.Category, m.err))
		}
	case *actor.Stopping, *actor.Restarting:
		a.stop()
	}
}

// start starts this incarnation's host on the shared connection.
func (a *hostActor) start(ctx actor.Context) error {
	sys, self := ctx.ActorSystem(), ctx.Self()
	gen := a.shared.next()
	failed := func(err error) { sys.Root.Send(self, &hostFailed{err: err, gen: gen}) }
	nc, err := a.shared.conn(a.cfg.reconnect)
	if err != nil {
		return fmt.Errorf("category host %s: %w", a.cfg.Category, err)
	}
	cfg := a.cfg.Config
	cfg.Conn, cfg.Failed = nc, failed
	h, err := host.New(cfg)
	if err != nil {
		return err
	}
	nc.SetClosedHandler(func(*nats.Conn) { failed(errors.New("its connection closed")) })
	nc.SetReconnectHandler(func(*nats.Conn) { h.Reconnected() })
	if err := h.Start(); err != nil {
		return err
	}
	a.h = h
	return nil
}

func (a *hostActor) stop() {
	if a.h != nil {
		a.h.Stop()
		a.h = nil
	}
}

func (s *hostShared) isStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

func (s *hostShared) markStarted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
}

// next counts a new incarnation and returns its number.
func (s *hostShared) next() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	return s.gen
}

func (s *hostShared) current() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// conn is the hosts' connection, a new one when the last closed.
func (s *hostShared) conn(reconnect func() (*nats.Conn, error)) (*nats.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nc != nil && !s.nc.IsClosed() {
		return s.nc, nil
	}
	if reconnect == nil {
		return nil, errors.New("the host's connection is closed and it has no way to reconnect")
	}
	nc, err := reconnect()
	if err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	s.nc = nc
	return nc, nil
}

// hostTelemetry records a host's calls in the node's telemetry.
type hostTelemetry struct{ t *telemetry.Telemetry }

func (a hostTelemetry) StartCall(traceparent string, c host.CallInfo) host.CallSpan {
	return a.t.StartHostCall(traceparent, telemetry.HostInfo(c))
}
