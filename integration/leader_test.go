//go:build linux

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// streamLeader is the server that leads a stream now, as the meta layer says.
func streamLeader(t testing.TB, js jetstream.JetStream, stream string) string {
	t.Helper()
	var leader string
	checkFor(t, "a leader of "+stream, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info := st.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("%s has no leader", stream)
		}
		leader = info.Cluster.Leader
		return nil
	})
	return leader
}

// TestPausedLeaderKeepsTranscripts pauses (SIGSTOP) the server that leads the
// transcripts stream while turns on the other nodes store their calls' outputs (the
// first batch, released while it is paused: they go through the stream's next leader),
// then wakes it just as they store the outputs of their second batch and their ends (a
// woken server takes itself for the leader for a moment): every turn completes with its
// whole transcript, and each record's count of stored messages is what the stream
// holds. Issue 35 saw a turn on a live node end completed, its record counting 6
// messages where the stream held 4.
func TestPausedLeaderKeepsTranscripts(t *testing.T) {
	t.Parallel()
	const lease = 5 * time.Second
	nodes := threeNodes(t, "-categories=", "-turn-lease", lease.String())
	urls := urlsOf(nodes)
	watch := connect(t, strings.Join(urls, ","))
	js, err := jetstream.New(watch)
	if err != nil {
		t.Fatal(err)
	}
	leader := byName(nodes, streamLeader(t, js, bus.StreamTranscripts))
	if leader == nil {
		t.Fatal("the transcripts' leader is no node of the test")
	}
	// The tool host is connected to the other nodes: a reply written to a paused
	// server's socket is lost with the connection (core NATS), and the turn would wait
	// out the call's deadline.
	host := startSlowhost(t, watch, strings.Split(otherURLs(nodes, leader), ",")...)
	if out, errOut, err := runCLI(t, "agent", "set", "-server", strings.Join(urls, ","), "-upfront", "slow", "dur"); err != nil {
		t.Fatalf("agent set: %v\n%s%s", err, out, errOut)
	}
	started := startedTurns(t, watch)

	const turns = 6
	clients, owners := startSlowTurns(t, nodes, started, turns, func(i int) [][]scriptCall {
		return [][]scriptCall{{
			slowCall(fmt.Sprintf("q%d", i), "wait", 0),
			slowCall(fmt.Sprintf("r%d", i), "wait", held),
			slowCall(fmt.Sprintf("d%d", i), "mark", held),
		}, {
			slowCall(fmt.Sprintf("w%d", i), "wait", heldLater),
		}}
	})
	for i := range turns {
		host.waitStarted(t, fmt.Sprintf("r%d", i), fmt.Sprintf("d%d", i))
	}
	if l := streamLeader(t, js, bus.StreamTranscripts); l != leader.name {
		t.Fatalf("%s leads %s now, not %s", l, bus.StreamTranscripts, leader.name)
	}
	t.Logf("%s leads %s, %s leads the turn records; owners %v", leader.name, bus.StreamTranscripts,
		streamLeader(t, js, "KV_"+bus.BucketTurns), owners)
	live := connect(t, otherURLs(nodes, leader))
	liveJS, err := jetstream.New(live)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	store, err := durable.Open(ctx, liveJS, durable.Config{})
	if err != nil {
		t.Fatal(err)
	}

	paused := time.Now()
	resume := pause(t, leader)
	// The first batch ends while the leader is paused: its outputs, and the model's
	// next response, are stored through the stream's next leader, or the second batch
	// does not start.
	host.releaseHeld(t)
	for i := range turns {
		host.waitStarted(t, fmt.Sprintf("w%d", i))
	}
	t.Logf("every turn's second batch started %s after the pause", time.Since(paused).Round(time.Millisecond))
	// The old leader wakes as the second batch ends.
	resume()
	host.releaseLater(t)
	checkFor(t, "every turn ended", func() error {
		for turn := range owners {
			rec, _, err := store.Record(ctx, turn)
			if err != nil {
				return err
			}
			if !rec.State.Ended() {
				return fmt.Errorf("turn %s is %s on %s", turn, rec.State, rec.Owner)
			}
		}
		return nil
	})
	t.Logf("every turn ended %s after the pause", time.Since(paused).Round(time.Millisecond))
	for i, c := range clients {
		if code := c.proc.wait(t); code != 0 {
			t.Errorf("client %d (connected through %s) exited %d\nstdout:\n%s\nstderr:\n%s", i, c.via, code, tail(c.proc.stdout.String()), tail(c.proc.stderr.String()))
		}
	}
	for turn, owner := range owners {
		checkTranscriptWhole(t, ctx, store, liveJS, turn, owner, 4)
	}
}

// checkTranscriptWhole checks that a turn completed, that its transcript holds every
// position up to the one its record says is stored and none after it, and that each of
// its calls has one output.
func checkTranscriptWhole(t testing.TB, ctx context.Context, store *durable.Store, js jetstream.JetStream, turn, owner string, calls int) {
	t.Helper()
	rec, _, err := store.Record(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := store.StoredTranscript(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	have := map[int]bool{}
	top := 0
	for _, m := range msgs {
		pos, _ := strconv.Atoi(m.Header.Get(bus.HeaderSeq))
		have[pos] = true
		top = max(top, pos)
	}
	var missing []int
	for p := 1; p <= rec.Stored; p++ {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	if rec.State != bus.TurnCompleted || top != rec.Stored || len(missing) > 0 {
		t.Errorf("turn %s (first on %s): %s, its record says %d messages stored; the stream holds %d, up to position %d, missing %v",
			turn, owner, rec.State, rec.Stored, len(msgs), top, missing)
	}
	a, err := durable.AuditTranscript(ctx, js, turn)
	if err != nil {
		t.Fatal(err)
	}
	if a.RepeatedPos != 0 || a.StaleAfterFence != 0 || a.Calls != calls || len(a.Outputs) != calls {
		t.Errorf("turn %s (first on %s): %d messages, epochs %v, %d with a repeated position, %d stale after the fence, %d calls, outputs %v",
			turn, owner, a.Messages, a.Epochs, a.RepeatedPos, a.StaleAfterFence, a.Calls, a.Outputs)
	}
	for call, n := range a.Outputs {
		if n != 1 {
			t.Errorf("turn %s: call %s has %d outputs", turn, call, n)
		}
	}
}

// stallProbe runs op again and again until stop,
// and keeps the longest time between two successes after from (the first counted from
// from itself).
type stallProbe struct {
	name string
	op   func(ctx context.Context) error

	mu      sync.Mutex
	from    time.Time
	last    time.Time // the last success after from
	longest time.Duration
	began   time.Time // when the longest stall began (the success before it)
	ok      int       // successes since from
	lastErr error
}

func (p *stallProbe) successes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok
}

func (p *stallProbe) run(stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-stop:
			return
		default:
		}
		// Each attempt has 300 ms: a stall is measured to within that.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := p.op(ctx)
		cancel()
		now := time.Now()
		p.mu.Lock()
		if err != nil {
			p.lastErr = err
		} else if !p.from.IsZero() {
			if d := now.Sub(p.last); d > p.longest {
				p.longest, p.began = d, p.last
			}
			p.last = now
			p.ok++
		}
		p.mu.Unlock()
		if err == nil {
			time.Sleep(20 * time.Millisecond) // a pace, not a wait for anything
		}
	}
}

// since starts counting stalls at from.
func (p *stallProbe) since(from time.Time) {
	p.mu.Lock()
	p.from, p.last, p.longest, p.began, p.ok = from, from, 0, from, 0
	p.mu.Unlock()
}

// stall is the longest stall since from, counting the one still going on, and how
// long after from it began.
func (p *stallProbe) stall() (d, after time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Since(p.last); now > p.longest {
		return now, p.last.Sub(p.from), p.lastErr
	}
	return p.longest, p.began.Sub(p.from), p.lastErr
}

// TestWokenLeaderStallBounded pauses (SIGSTOP) the server that leads the transcripts
// stream until the cluster has elected the next leader and works again, then wakes it
// (SIGCONT): from the wake on, appends to a transcript, reads of its last message at the
// leader and writes of a turn record stall at most 2 s. Issue 35 measured 3-7 s of "no
// response from stream" after the wake.
//
// It is the one test of the package that does not run in parallel: it bounds a time, and
// its load is the machine's (the condition: a CPU hog), not the 15 other tests'
// thirty-odd node processes on the same 2 cores. Alone under a hog its longest stall was
// 1.48 s in 10 runs (most under 0.6 s); run beside them, 2.07-2.7 s in 5 runs of 30.
func TestWokenLeaderStallBounded(t *testing.T) {
	nodes := threeNodes(t, "-categories=")
	watch := connect(t, strings.Join(urlsOf(nodes), ","))
	js, err := jetstream.New(watch)
	if err != nil {
		t.Fatal(err)
	}
	leader := byName(nodes, streamLeader(t, js, bus.StreamTranscripts))
	live := connect(t, otherURLs(nodes, leader))
	liveJS, err := jetstream.New(live)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	kv, err := liveJS.KeyValue(ctx, bus.BucketTurns)
	if err != nil {
		t.Fatal(err)
	}
	turn := bus.NewID()
	subject := bus.TranscriptSubject(turn)
	probes := []*stallProbe{
		{name: "append to a transcript", op: func(ctx context.Context) error {
			_, err := liveJS.Publish(ctx, subject, []byte(`[]`))
			return err
		}},
		{name: "read a transcript's last message at the leader", op: func(ctx context.Context) error {
			_, err := bus.LeaderLastSeq(ctx, live, bus.StreamTranscripts, subject)
			return err
		}},
		{name: "write a turn record", op: func(ctx context.Context) error {
			_, err := kv.Put(ctx, "stall-"+turn, []byte(`{}`))
			return err
		}},
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range probes {
		wg.Add(1)
		go p.run(stop, &wg)
	}
	defer func() { close(stop); wg.Wait() }()

	resume := pause(t, leader)
	paused := time.Now()
	// The cluster works without the paused server: a next leader, and every probe
	// succeeding again.
	checkFor(t, "a next leader of the transcripts", func() error {
		if l := streamLeader(t, liveJS, bus.StreamTranscripts); l == leader.name {
			return fmt.Errorf("%s still leads", l)
		}
		return nil
	})
	elected := time.Now()
	for _, p := range probes {
		p.since(elected)
	}
	checkFor(t, "the cluster working without the paused leader", func() error {
		for _, p := range probes {
			if d, _, err := p.stall(); p.successes() == 0 || d > 500*time.Millisecond {
				return fmt.Errorf("%s stalls (%s): %v", p.name, d.Round(time.Millisecond), err)
			}
		}
		return nil
	})
	t.Logf("the cluster worked again %s after the pause", time.Since(paused).Round(time.Millisecond))
	// Paused for longer than the election timeouts (0.6-1 s, bus/server/raft.go), as a
	// stopped VM or a starved process is: woken, it finds the timers of the groups it
	// follows expired.
	wake := time.Now().Add(3 * time.Second)
	time.Sleep(time.Until(wake)) // the length of the fault, not a wait for an event
	woke := time.Now()
	for _, p := range probes {
		p.since(woke)
	}
	resume()
	// Long enough after the wake for what it stirs up: the woken server's groups hold
	// their elections within a timeout (at most 1 s; nats-server's own 4-9 s before).
	time.Sleep(6 * time.Second) // the window observed, not a wait for an event
	for _, p := range probes {
		d, after, err := p.stall()
		t.Logf("%s: longest stall after the wake %s, from %s after it (last error: %v)", p.name, d.Round(time.Millisecond), after.Round(time.Millisecond), err)
		if d > 2*time.Second {
			t.Errorf("%s stalled %s after the woken leader's wake, want at most 2s (last error: %v)", p.name, d.Round(time.Millisecond), err)
		}
	}
	if t.Failed() {
		// What the servers said of their groups' leaders after the wake, for the cause.
		for _, n := range nodes {
			for _, line := range strings.Split(n.proc.stderr.String(), "\n") {
				if at, ok := logTime(line); ok && !at.Before(woke) && strings.Contains(strings.ToLower(line), "leader") {
					t.Logf("%s +%s: %s", n.name, at.Sub(woke).Round(time.Millisecond), line)
				}
			}
		}
	}
}

// logTime is the time of a node's log line (slog's time=...), if it has one.
func logTime(line string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	stamp, _, _ := strings.Cut(rest, " ")
	at, err := time.Parse(time.RFC3339Nano, stamp)
	return at, err == nil
}
