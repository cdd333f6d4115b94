package server

import (
	"fmt"

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
