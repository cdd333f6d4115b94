package server

import (
	"fmt"
	"time"
	_ "unsafe" // go:linkname, for transferRaftLeaders

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// MoveClients disconnects the clients that reached this server over the network, so that
// they reconnect to another server of the cluster before this one stops, and returns how
// many it disconnected. The connections made by Connect (the node's own, in this process)
// stay: they still have the node's turns to hand back.
//
// A client that stays until the server shuts down loses what is routed to it meanwhile:
// a turn that another node resumed sends its next call to a host still connected here,
// the route delivers it as the server closes its clients, and the call is lost with no
// reply and no "no responders" (seen in CI: the turn waited out its call's deadline). A
// client moved first has its subscriptions on another server by the time the turns are
// handed back. nats-server's lame duck mode moves clients too, but all of them, this
// process's own with them, and ends with the server's shutdown.
//
// A moved client reconnects as it does when its server goes away: nats.go tries the
// other servers it knows (those it was given and those the cluster advertised) before
// this one. A server with no routes moves nobody: its clients have nowhere to go.
func (s *Server) MoveClients() (int, error) {
	if s.ns.NumRoutes() == 0 {
		return 0, nil
	}
	own := make(map[uint64]bool)
	s.mu.Lock()
	for _, nc := range s.conns {
		if id, err := nc.GetClientID(); err == nil {
			own[id] = true
		}
	}
	s.mu.Unlock()
	cz, err := s.ns.Connz(&natsserver.ConnzOptions{Limit: max(s.ns.NumClients()+64, natsserver.DefaultConnListSize)})
	if err != nil {
		return 0, fmt.Errorf("list the server's clients: %w", err)
	}
	moved := 0
	for _, c := range cz.Conns {
		if own[c.Cid] {
			continue
		}
		// A client gone meanwhile is no failure.
		if s.ns.DisconnectClientByID(c.Cid) == nil {
			moved++
		}
	}
	return moved, nil
}

// StepDownLeaders hands the leadership of every Raft group this server leads (the
// JetStream meta group, replicated streams and consumers) to another server, and keeps
// it from being elected again, as nats-server's lame duck mode does before it shuts
// down; it reports whether any group moved. A server that shuts down while it leads a
// group takes with it what the group's followers have not applied yet: seen in CI, the
// intake consumer's new leader did not know that the turn the stopping node had just
// handed back was delivered to another node, delivered it a third time, and a live
// node's turn was taken over (its read-only call run twice). A leader that steps down
// first hands over a follower that is current. A leader with no current follower keeps
// its group (a loaded machine): it is asked again, twice, 200 ms apart, while the last
// round moved any. A server with no routes has no group to hand over.
func (s *Server) StepDownLeaders() bool {
	if s.ns.NumRoutes() == 0 {
		return false
	}
	moved := false
	for range 3 {
		if !transferRaftLeaders(s.ns) {
			break
		}
		moved = true
		time.Sleep(200 * time.Millisecond)
	}
	return moved
}

// transferRaftLeaders is nats-server's own step of its lame duck mode (raft.go): each
// Raft node of the server steps down and becomes an observer. nats-server offers no
// exported way to do it without entering lame duck mode, which also closes every
// client, this process's own, and ends with the server's shutdown.
//
//go:linkname transferRaftLeaders github.com/nats-io/nats-server/v2/server.(*Server).transferRaftLeaders
func transferRaftLeaders(s *natsserver.Server) bool
