package mcp

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionIDHeader is the streamable HTTP transport's header naming a session (MCP
// specification, 2025-06-18, "Session Management").
const sessionIDHeader = "Mcp-Session-Id"

// idleSessions follows the HTTP requests of each session: how many are in flight,
// and when the last one ended. The go-sdk's own SessionTimeout closes a session
// without saying so to its owner, whose turn would then read as completed by the
// client; and it does not count an open event stream (GET) as use.
type idleSessions struct {
	mu   sync.Mutex
	seen map[string]*sessionUse // by session id
}

type sessionUse struct {
	inFlight int
	last     time.Time
}

// wrap counts h's requests by session.
func (u *idleSessions) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(sessionIDHeader)
		if id == "" { // an initialize: the session is followed from its first sweep
			h.ServeHTTP(w, r)
			return
		}
		u.mu.Lock()
		use := u.seen[id]
		if use == nil {
			use = &sessionUse{}
			u.seen[id] = use
		}
		use.inFlight++
		u.mu.Unlock()
		defer func() {
			u.mu.Lock()
			use.inFlight--
			use.last = time.Now()
			u.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// idle is the sessions among live (by id) that have had no request in flight for at
// least limit at now; a session seen for the first time starts its clock at now. It
// forgets the sessions that are gone.
func (u *idleSessions) idle(live map[string]*sdk.ServerSession, now time.Time, limit time.Duration) []*sdk.ServerSession {
	u.mu.Lock()
	defer u.mu.Unlock()
	for id := range u.seen {
		if live[id] == nil {
			delete(u.seen, id)
		}
	}
	var out []*sdk.ServerSession
	for id, ss := range live {
		use := u.seen[id]
		switch {
		case use == nil:
			u.seen[id] = &sessionUse{last: now}
		case use.inFlight == 0 && now.Sub(use.last) >= limit:
			out = append(out, ss)
		}
	}
	return out
}

// closeIdle closes the sessions idle for the configured time until ctx ends, looking
// four times a limit (at most once a minute): a session is closed between the limit
// and a quarter more.
func (s *Server) closeIdle(ctx context.Context, u *idleSessions) {
	limit := s.cfg.SessionIdle
	every := min(max(limit/4, 10*time.Millisecond), time.Minute)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			live := map[string]*sdk.ServerSession{}
			for ss := range s.srv.Sessions() {
				if id := ss.ID(); id != "" { // an HTTP session: Run's have no id
					live[id] = ss
				}
			}
			for _, ss := range u.idle(live, now, limit) {
				s.log.Info("mcp session closed: idle", "session", ss.ID(), "idle", limit)
				s.stop(ss, fmt.Sprintf("the MCP client sent no request for %s: toolbus mcp closed its session", limit))
			}
		}
	}
}
