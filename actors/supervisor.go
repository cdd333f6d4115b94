package actors

import (
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Backoff of restarted category hosts: the first restart waits hostBackoff, each failure
// within hostBackoffWindow of the last doubles it, up to hostBackoffMax.
const (
	hostBackoff       = 100 * time.Millisecond
	hostBackoffMax    = 30 * time.Second
	hostBackoffWindow = time.Minute
)

// nodeSupervisor is how a node supervises its children. A category host that fails (its
// service or connection ended on its own, or a restart failed) is restarted after a
// backoff, and the log says so. A turn that panics is stopped, never restarted: a fresh
// turn would replay the model.
type nodeSupervisor struct {
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	timers map[*time.Timer]struct{}
}

var _ actor.SupervisorStrategy = (*nodeSupervisor)(nil)

func (s *nodeSupervisor) HandleFailure(_ *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason, _ any) {
	name := child.Id[strings.LastIndexByte(child.Id, '/')+1:]
	if !strings.HasPrefix(name, "host-") {
		s.log.Error("actor failed; stopping it", "actor", name, "reason", reason)
		sup.StopChildren(child)
		return
	}
	if rs.NumberOfFailures(hostBackoffWindow) == 0 {
		rs.Reset()
	}
	rs.Fail()
	delay := hostBackoffMax
	if n := rs.FailureCount(); n < 20 {
		delay = min(hostBackoff<<(n-1), hostBackoffMax)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.log.Warn("category host failed; restarting it", "host", strings.TrimPrefix(name, "host-"), "reason", reason,
		"in", delay, "failures", rs.FailureCount())
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		s.mu.Lock()
		delete(s.timers, t)
		closed := s.closed
		s.mu.Unlock()
		if !closed {
			sup.RestartChildren(child)
		}
	})
	if s.timers == nil {
		s.timers = make(map[*time.Timer]struct{})
	}
	s.timers[t] = struct{}{}
}

// close cancels pending restarts; the node is stopping.
func (s *nodeSupervisor) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for t := range s.timers {
		t.Stop()
	}
	s.timers = nil
}
