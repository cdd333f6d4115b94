package server

import (
	"sync"
	"time"
	_ "unsafe" // go:linkname, for the Raft timing below
)

// The Raft timing of the embedded server.
//
// nats-server elects a new leader of a replicated stream 4-9 s after a follower last
// heard from the old one, and its Raft has no pre-vote: a server woken from a pause
// (SIGSTOP, a stopped VM, a starved process) finds the election timers of every group
// it follows expired, campaigns at once with a higher term, and the live leader of each
// such group steps down on the vote request; the woken server, whose log is behind,
// cannot win, so the group has no leader until a live follower's timer fires. Measured
// on a 3-node cluster (TestWokenLeaderStallBounded): writes of the turn records stalled
// 6.0-6.3 s after the wake in 2 of 3 runs. The server takes these from package
// variables only (its own tests set them the same way, jetstream_helpers_test.go: 50 ms
// heartbeats, 1.5-3.5 s elections); no Options field sets them.
//
// Heartbeats every 150 ms, elections 0.6-1 s after the last one heard: a follower
// tolerates four lost heartbeats (a GC pause, a starved goroutine on a loaded machine)
// before it campaigns, and a group a woken server disturbs has a leader again within
// about a second. With 0.8-1.5 s, the longest stall after a wake was 2.35 s with a CPU
// hog on the 2-core machine (TestWokenLeaderStallBounded, 1 run in 10).
//
// Campaigns 50-250 ms after a refused vote (nats-server: 100-800 ms). A live follower
// that refuses a woken server's vote (its log is behind) campaigns itself after this,
// not after a whole election timeout; so does a woken former leader's group when the
// woken server campaigns again because it has not yet heard the next leader (its routes
// come back over the first second, see routeRedial). Seen in the servers' logs (their debug
// lines showed the votes): a transcripts group without a leader from 1.03 s to 1.68 s after the wake
// (stall 1.2 s), and 2.12 s once in CI with three other packages' tests beside it. With
// this and routeRedial, under the same load, the transcripts' longest stall was 0.05-0.63
// s in 14 runs (0.06-1.2 s in 8 before); the turn records' 0.05-0.92 s, the leader that
// learns of the woken server's term from its answer to an append waits a whole election
// timeout (nats-server gives no other path).
//
// All of these suit servers a few milliseconds apart (one machine, a LAN); across a WAN,
// where a vote takes tens of milliseconds, elections would more often split.
const (
	raftHeartbeat          = 150 * time.Millisecond
	raftMinElectionTimeout = 600 * time.Millisecond
	raftMaxElectionTimeout = 1000 * time.Millisecond
	raftMinCampaignTimeout = 50 * time.Millisecond
	raftMaxCampaignTimeout = 250 * time.Millisecond
)

//go:linkname raftHB github.com/nats-io/nats-server/v2/server.hbInterval
var raftHB time.Duration

//go:linkname raftMinElect github.com/nats-io/nats-server/v2/server.minElectionTimeout
var raftMinElect time.Duration

//go:linkname raftMaxElect github.com/nats-io/nats-server/v2/server.maxElectionTimeout
var raftMaxElect time.Duration

// routeRedial is how long a server waits to dial a route again after it closed (plus
// the server's own 0-100 ms of jitter, which keeps two servers from dialling each other
// at once). nats-server waits 1 s. A server woken from a pause finds the routes its
// peers closed as stale meanwhile (DefaultRoutePingInterval) and dials them again: its
// peers' own dials, pending while it was paused, bring back some connections of each
// route's pool within ~20 ms, the rest came back only with its own dials, 1.02-1.15 s
// after the wake; until then it hears the next leaders of its groups late, and
// campaigns again (above). Only the first dial after a close waits this; failed dials
// still wait the server's 1 s between attempts.
const routeRedial = 100 * time.Millisecond

//go:linkname raftMinCampaign github.com/nats-io/nats-server/v2/server.minCampaignTimeout
var raftMinCampaign time.Duration

//go:linkname raftMaxCampaign github.com/nats-io/nats-server/v2/server.maxCampaignTimeout
var raftMaxCampaign time.Duration

//go:linkname routeReconnectDelay github.com/nats-io/nats-server/v2/server.routeReconnectDelay
var routeReconnectDelay time.Duration

var raftTimingOnce sync.Once

// setRaftTiming sets the Raft and route timing above, once, before the process's first
// server starts: every server of the process shares it, and its Raft groups and routes
// read it as they run.
func setRaftTiming() {
	raftTimingOnce.Do(func() {
		raftHB, raftMinElect, raftMaxElect = raftHeartbeat, raftMinElectionTimeout, raftMaxElectionTimeout
		raftMinCampaign, raftMaxCampaign = raftMinCampaignTimeout, raftMaxCampaignTimeout
		routeReconnectDelay = routeRedial
	})
}
