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
const (
	raftHeartbeat          = 150 * time.Millisecond
	raftMinElectionTimeout = 600 * time.Millisecond
	raftMaxElectionTimeout = 1000 * time.Millisecond
)

//go:linkname raftHB github.com/nats-io/nats-server/v2/server.hbInterval
var raftHB time.Duration

//go:linkname raftMinElect github.com/nats-io/nats-server/v2/server.minElectionTimeout
var raftMinElect time.Duration

//go:linkname raftMaxElect github.com/nats-io/nats-server/v2/server.maxElectionTimeout
var raftMaxElect time.Duration

var raftTimingOnce sync.Once

// setRaftTiming sets the Raft timing above, once, before the process's first server
// starts: every server of the process shares it, and its Raft groups read it as they
// run.
func setRaftTiming() {
	raftTimingOnce.Do(func() {
		raftHB, raftMinElect, raftMaxElect = raftHeartbeat, raftMinElectionTimeout, raftMaxElectionTimeout
	})
}
