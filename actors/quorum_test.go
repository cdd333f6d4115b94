package actors

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
)

// Log lines of a turn stopped because its node could not confirm its lease: the turn's
// own (its stop's confirmation, or the intake's word), and the intake's (its beat).
const (
	turnUnconfirmedLog   = `msg="could not confirm that this node still holds the turn (cut off from the quorum?); stopping without ending it"`
	intakeUnconfirmedLog = `msg="intake: could not confirm for a lease that this node still holds the turn`
)

// TestLostQuorumStopsTurns cuts a node off from its cluster's quorum (the two other
// servers of three shut down, its own still up) while a turn of its runs a call:
//   - stopping: the node's stop (a SIGTERM), with a grace of a minute, finds that it
//     cannot confirm the turn's lease (3 s) and stops the turn at once, within a third
//     of the lease, rather than waiting out its grace for the call and a hand-back that
//     could not be stored;
//   - running: the turn, whose lease the node cannot confirm for a lease, stops by
//     itself within a third of a lease more (before, its node went on signalling
//     progress that no server took, and ran the turn for ever).
//
// Either way nothing more was written for the turn: once two servers are up again, its
// record still names the node as its owner, running, with the transcript as it was;
// and the intake gives it to another node after the lease, which resumes it (a
// takeover, not a hand-back) and completes it.
func TestLostQuorumStopsTurns(t *testing.T) {
	t.Parallel()
	for _, stopping := range []bool{true, false} {
		name := "running"
		if stopping {
			name = "stopping"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lostQuorum(t, stopping)
		})
	}
}

func lostQuorum(t *testing.T, stopping bool) {
	const (
		lease = 3 * time.Second
		grace = time.Minute
	)
	// The servers' configurations, to start one again on its store; a cluster name of
	// its own, so that the route a server keeps trying to a stopped one's port joins no
	// other test's cluster that took the port meanwhile.
	var cfgMu sync.Mutex
	cfgs := map[string]server.Config{}
	cluster := "quorum-" + bus.NewID()
	srvs := bustest.Cluster(t, 3, func(c *server.Config) {
		c.Cluster.Name = cluster
		cfgMu.Lock()
		defer cfgMu.Unlock()
		cfgs[c.Name] = *c
	})
	ctx := bustest.Context(t)
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})
	g := newGate()
	startNode := func(name string, srv *server.Server) *Node {
		n, err := StartNode(ctx, NodeConfig{
			Name: name, Connect: func(c string) (*nats.Conn, error) { return srv.Connect(c) },
			Turns: true, Categories: []string{}, Replicas: 3, TurnLease: lease, HandBackGrace: grace,
			AbortGrace: 300 * time.Millisecond, Logger: logs.logger().With("node", name),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		t.Cleanup(g.release) // before the node closes: its stop would wait for the call
		if err := n.Host(ctx, "gate", []*toolbus.Tool{g.tool()}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a := startNode("a", srvs[0])
	profiles, err := a.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.Put(ctx, []byte(`{"version":3,"agent":"ann",`+gateNS+`}`)); err != nil {
		t.Fatal(err)
	}

	// A client of a's server: it stays up throughout.
	nc := bustest.Conn(t, srvs[0], "watch")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := durable.Open(ctx, js, durable.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+bus.BucketTurns)
	if err != nil {
		t.Fatal(err)
	}
	if r := st.CachedInfo().Config.Replicas; r != 3 {
		t.Fatalf("turn records have %d replicas, want 3: two servers gone would not take the quorum", r)
	}

	script, err := json.Marshal(gateway.Script{Responses: []gateway.ScriptStep{gateStep(), say("through the gate")}})
	if err != nil {
		t.Fatal(err)
	}
	id := bus.NewID()
	var doneMu sync.Mutex
	var dones []bus.TurnStatus
	sub, err := nc.Subscribe(bus.TurnStatusSubject(id, bus.StatusDone), func(m *nats.Msg) {
		var st bus.TurnStatus
		if json.Unmarshal(m.Data, &st) == nil {
			doneMu.Lock()
			dones = append(dones, st)
			doneMu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.submit(ctx, bus.TurnSpec{ID: id, Agent: "ann", Input: "wait at the gate", Script: script}, ""); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if g.waiting() != 1 || a.intake.runningTurns() != 1 {
			return fmt.Errorf("the turn has not reached the gate on a (%d calls waiting, %d turns held)", g.waiting(), a.intake.runningTurns())
		}
		return nil
	})
	before, _, err := store.Record(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if before.Owner != "a" || before.State != bus.TurnRunning {
		t.Fatalf("record before the cut: %s on %q", before.State, before.Owner)
	}
	written, err := durable.AuditTranscript(ctx, js, id)
	if err != nil {
		t.Fatal(err)
	}

	// The cut: a's server stays up alone, without a quorum.
	var wg sync.WaitGroup
	for _, s := range srvs[1:] {
		wg.Go(s.Close)
	}
	wg.Wait()
	cut := time.Now()

	if stopping {
		stopped := make(chan struct{})
		go func() {
			a.intake.stop(grace)
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(20 * time.Second):
			g.release() // the call ends, and the stop with it
			<-stopped
			t.Fatalf("the stop of a node cut off from its quorum waited for its turn (%s; its lease is %s, its grace %s)", time.Since(cut), lease, grace)
		}
		took := time.Since(cut)
		t.Logf("a stopped %s after the cut (lease %s, grace %s)", took.Round(time.Millisecond), lease, grace)
		if took >= lease {
			t.Errorf("a stopped %s after the cut, want within a third of its lease (%s) and a margin", took, lease)
		}
		log := logs.String()
		turnAt, intakeAt := strings.Index(log, turnUnconfirmedLog), strings.Index(log, intakeUnconfirmedLog)
		switch {
		case turnAt < 0:
			t.Errorf("the turn was not stopped as unconfirmed")
		case !strings.Contains(strings.SplitN(log[turnAt:], "\n", 2)[0], "as its node stops"):
			t.Errorf("the turn was not stopped by its stop's confirmation")
		case intakeAt >= 0 && intakeAt < turnAt:
			t.Errorf("the turn was stopped by the intake's beat, not at the stop")
		}
	} else {
		bustest.CheckFor(t, 4*lease, 20*time.Millisecond, func() error {
			if !strings.Contains(logs.String(), intakeUnconfirmedLog) || a.intake.runningTurns() != 0 {
				return fmt.Errorf("a still runs the turn %s after the cut (lease %s)", time.Since(cut), lease)
			}
			return nil
		})
		took := time.Since(cut)
		t.Logf("the turn stopped on a %s after the cut (lease %s)", took.Round(time.Millisecond), lease)
		// At most a lease and a third after its last confirmation, which came before
		// the cut; a margin for a loaded machine.
		if took > 2*lease {
			t.Errorf("the turn stopped %s after the cut, want within a lease and a third (lease %s) and a margin", took, lease)
		}
		// The turn says why as it stops: its line may come a moment after the intake's
		// (CI: 1 ms after it, and after runningTurns said 0).
		bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			if !strings.Contains(logs.String(), turnUnconfirmedLog) {
				return errors.New("the turn did not say why it stopped")
			}
			return nil
		})
		if g.waiting() != 1 {
			t.Errorf("the call ended (%d waiting): the turn stopped for another reason", g.waiting())
		}
	}
	for _, bad := range []string{"turn handed back to the intake", "did not reach a checkpoint in time", "hand the turn back", "turn taken over by another node"} {
		if strings.Contains(logs.String(), bad) {
			t.Errorf("log says %q", bad)
		}
	}
	a.Close()

	// The quorum back: nothing was written for the turn after the cut.
	restarted, err := server.Start(ctx, cfgs[srvs[1].Name()])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restarted.Close)
	var after bus.TurnRecord
	bustest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		after, _, err = store.Record(ctx, id)
		return err
	})
	if after.Owner != "a" || after.State != bus.TurnRunning || after.Epoch != before.Epoch || after.Stored != before.Stored ||
		after.Step != before.Step || len(after.Resumes) != len(before.Resumes) {
		t.Errorf("record after the cut: %s on %q, epoch %d, stored %d, step %d; before: %s on %q, epoch %d, stored %d, step %d",
			after.State, after.Owner, after.Epoch, after.Stored, after.Step, before.State, before.Owner, before.Epoch, before.Stored, before.Step)
	}
	var now durable.Audit
	bustest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		now, err = durable.AuditTranscript(ctx, js, id)
		return err
	})
	if now.Messages != written.Messages {
		t.Errorf("the transcript has %d messages after the cut, %d before", now.Messages, written.Messages)
	}

	// Another node resumes the turn after its lease: a's lease was stopped without a
	// word (no hand-back).
	g.release()
	startNode("b", restarted)
	bustest.CheckFor(t, 45*time.Second, 50*time.Millisecond, func() error {
		doneMu.Lock()
		defer doneMu.Unlock()
		if len(dones) == 0 {
			return errors.New("the turn did not end after the quorum came back")
		}
		return nil
	})
	doneMu.Lock()
	for _, st := range dones {
		if st.Node != "b" || st.State != bus.TurnCompleted {
			t.Errorf("done status of %s: %s (%s)", st.Node, st.State, st.Error)
		}
	}
	doneMu.Unlock()
	rec, _, err := store.Record(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Resumes); n == 0 || rec.Resumes[n-1].From != "a" || !strings.Contains(rec.Resumes[n-1].Why, "stopped signalling progress") {
		t.Errorf("the turn was not taken over from a: resumes %+v", rec.Resumes)
	}
}

// runningTurns is how many turns the intake runs.
func (in *intake) runningTurns() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.running)
}
