package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// Defaults of the turn intake.
const (
	// DefaultMaxTurns bounds the turns one node runs at once.
	DefaultMaxTurns = 64
	// DefaultTurnLease is how long a node may go without signalling progress on a
	// turn before the intake gives the turn to another node. The node signals three
	// times a lease.
	DefaultTurnLease = 15 * time.Second
	// DefaultHandBackGrace bounds how long a stopping node waits for its turns to
	// reach a checkpoint and go back to the intake.
	DefaultHandBackGrace = 20 * time.Second
)

// ErrTurnExists refuses a turn id that is already queued, running or ended.
var ErrTurnExists = errors.New("turn id already used")

// intake is a node's part of the durable turn intake.
type intake struct {
	kv       jetstream.KeyValue
	stream   jetstream.Stream
	cancel   context.CancelFunc
	loops    sync.WaitGroup
	slots    chan struct{}
	held     sync.WaitGroup // one per turn being taken or run
	mu       sync.Mutex
	running  map[string]*heldTurn // turn id → the turn this node holds
	stopping bool
}

// heldTurn is a turn this node took from the intake.
type heldTurn struct {
	msg  jetstream.Msg
	pid  *actor.PID
	done chan TurnResult
}

// openIntake creates (or opens) the intake stream, the turns bucket and the consumers.
func (n *Node) openIntake(ctx context.Context) error {
	in := &intake{running: make(map[string]*heldTurn), slots: make(chan struct{}, n.cfg.MaxTurns)}
	err := bus.Retry(ctx, "open the turn intake", n.log, func(ctx context.Context) error {
		var err error
		if in.kv, err = bus.KeyValue(ctx, n.js, bus.BucketTurns, n.cfg.Replicas); err != nil {
			return err
		}
		in.stream, err = bus.EnsureIntake(ctx, n.js, n.cfg.Replicas)
		return err
	})
	if err != nil {
		return err
	}
	n.intake = in
	return nil
}

// Submit queues a durable turn: its record is created (which refuses an id already
// used) and its spec published into the intake, where a node that runs turns takes it
// (node, when set, names the one that must). It returns the turn's id.
func (n *Node) Submit(ctx context.Context, spec bus.TurnSpec, node string) (string, error) {
	if err := checkStartable(spec); err != nil {
		return "", err
	}
	spec.Normalize()
	if spec.ID == "" {
		spec.ID = bus.NewID()
	}
	if node != "" && !bus.ValidToken(node) {
		return "", fmt.Errorf("start turn: invalid node name %q", node)
	}
	if _, err := n.model(spec); err != nil {
		return "", fmt.Errorf("start turn: %w", err)
	}
	in := n.intake
	if in == nil {
		return "", errors.New("start turn: this node does not run the turn intake (start it with Turns)")
	}
	if spec.Kind == bus.TurnTask {
		// A task turn is one attempt of a task of a running workflow, which records its
		// end; any other would run for nobody.
		if err := n.workflows.Admit(ctx, spec); err != nil {
			return "", fmt.Errorf("start turn %s: %w", spec.ID, err)
		}
	}
	now := time.Now()
	rec, err := json.Marshal(bus.TurnRecord{Spec: spec, State: bus.TurnQueued, Created: now, Updated: now})
	if err != nil {
		return "", err
	}
	// A stream electing a leader does not answer: retry, and take a record found on a
	// retry for ours when it is the one we wrote.
	err = bus.Retry(ctx, "create the turn record", n.log, func(ctx context.Context) error {
		_, err := in.kv.Create(ctx, spec.ID, rec)
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		e, gerr := in.kv.Get(ctx, spec.ID)
		if gerr != nil {
			return gerr
		}
		var old bus.TurnRecord
		if json.Unmarshal(e.Value(), &old) != nil {
			return fmt.Errorf("%w (its record is unreadable)", ErrTurnExists)
		}
		if old.Created.Equal(now) {
			return nil
		}
		return fmt.Errorf("%w: it is %s%s since %s", ErrTurnExists, old.State, ownerOf(old), old.Updated.Format(time.RFC3339))
	})
	if err != nil {
		return "", fmt.Errorf("start turn %s: %w", spec.ID, err)
	}
	subject := bus.IntakeAny(spec.ID)
	if node != "" {
		subject = bus.IntakeNode(node, spec.ID)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	if limit := n.nc.MaxPayload(); int64(len(b)) > limit {
		_ = in.kv.Delete(context.WithoutCancel(ctx), spec.ID)
		return "", fmt.Errorf("start turn %s: the turn spec is %d bytes, more than the bus carries in one message (%d, the server's max_payload): "+
			"shorten the input, instructions or script, or raise max_payload on the servers", spec.ID, len(b), limit)
	}
	// The message id is this submission's: a retry of it is stored once, and an id
	// used again after its record was deleted is a new turn, not a duplicate.
	msgID := fmt.Sprintf("%s@%d", spec.ID, now.UnixNano())
	if err := bus.Retry(ctx, "queue the turn", n.log, func(ctx context.Context) error {
		_, err := n.js.Publish(ctx, subject, b, jetstream.WithMsgID(msgID))
		return err
	}); err != nil {
		// Nothing would ever take the turn: remove its record, so the id can be used.
		if derr := in.kv.Delete(context.WithoutCancel(ctx), spec.ID); derr != nil {
			n.log.Warn("remove the record of a turn that could not be queued", "turn", spec.ID, "err", derr)
		}
		return "", fmt.Errorf("start turn %s: intake: %w", spec.ID, err)
	}
	return spec.ID, nil
}

// checkStartable refuses a spec no node can run to an end.
func checkStartable(spec bus.TurnSpec) error {
	if err := spec.Check(); err != nil {
		return fmt.Errorf("start turn: %w", err)
	}
	return nil
}

func ownerOf(r bus.TurnRecord) string {
	if r.Owner == "" {
		return ""
	}
	return " on node " + r.Owner
}

// runIntake pulls turn specs for this node while it has room for another turn. Its
// consumers are set up within start (a node restarted into a cluster waits while its
// stream catches up).
func (n *Node) runIntake(start context.Context) error {
	in := n.intake
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	for _, node := range []string{"", n.cfg.Name} {
		var cons jetstream.Consumer
		err := bus.Retry(start, "intake consumer", n.log, func(ctx context.Context) error {
			var err error
			cons, err = in.stream.CreateOrUpdateConsumer(ctx, bus.RunnerConsumerConfig(node, n.cfg.TurnLease))
			return err
		})
		if err != nil {
			cancel()
			return err
		}
		in.loops.Add(1)
		go func() {
			defer in.loops.Done()
			n.pull(ctx, cons)
		}()
	}
	return nil
}

// pull takes one spec at a time, each when a slot is free, so that no spec waits in
// this node while its lease runs.
func (n *Node) pull(ctx context.Context, cons jetstream.Consumer) {
	in := n.intake
	var warned time.Time
	for {
		select {
		case in.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		// A short pull, the slot held only for it: the node's two consumers take
		// turns at the slots, and a stopping node waits for one pull at most.
		var msg jetstream.Msg
		fctx, fcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
		if err == nil {
			for m := range batch.Messages() {
				msg = m
			}
			err = batch.Error()
		}
		fcancel()
		switch {
		case ctx.Err() != nil:
			if msg != nil {
				_ = msg.Nak() // taken while stopping: another node runs it
			}
			<-in.slots
			return
		case msg == nil:
			<-in.slots
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
				// An election makes every pull fail for a while: say so now and then.
				if time.Since(warned) > 10*time.Second {
					warned = time.Now()
					n.log.Warn("intake fetch failing; retrying", "err", err)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(250 * time.Millisecond):
				}
			}
			continue
		}
		in.held.Add(1)
		go func() {
			defer in.held.Done()
			defer func() { <-in.slots }()
			n.take(msg)
		}()
	}
}

// take claims the turn of an intake message, runs it here until it ends or is handed
// back, and settles the message accordingly.
func (n *Node) take(msg jetstream.Msg) {
	in := n.intake
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var spec bus.TurnSpec
	if sched, ok := bus.ParseIntakeFired(msg.Subject()); ok {
		// A schedule's firing: it becomes a turn of its own, or is settled here.
		if spec, ok = n.fire(ctx, msg, sched); !ok {
			return
		}
	} else if err := json.Unmarshal(msg.Data(), &spec); err != nil || spec.ID == "" {
		n.log.Error("intake: a message that is not a turn spec; dropped", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	log := n.log.With("turn", spec.ID)
	// The lease runs from now: reading a long transcript back, while a stream elects
	// a leader, must not let the intake give the turn to another node meanwhile.
	progress := make(chan struct{})
	defer close(progress)
	go func() {
		t := time.NewTicker(n.cfg.TurnLease / 3)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = msg.InProgress()
			case <-progress:
				return
			}
		}
	}()
	d, err := n.claim(ctx, spec)
	switch {
	case errors.Is(err, errTurnOver):
		n.turnOver(ctx, spec)
		// A task turn that ended on a node lost before it settled: settle it here.
		if err := n.settleTask(d.rec); err != nil {
			log.Warn("intake: could not settle the ended task turn; another node will", "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		_ = msg.Ack()
		return
	case err != nil:
		log.Warn("intake: could not take the turn; another node will", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	n.turnTaken(ctx, spec)
	if d.resume == nil && d.rec.Stored > 0 {
		// Taken over: read back what the turn stored, and number new messages after
		// the last one (outputs stored after the last checkpoint included).
		items, last, err := readTranscriptSeq(ctx, n.js, spec.ID)
		if err != nil && !errors.Is(err, errNoTranscript) {
			log.Warn("intake: could not read the transcript to resume; another node will", "err", err)
			n.release(ctx, d, spec.ID)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		d.resume = items
		d.rec.Stored = max(d.rec.Stored, last)
	}
	switch err := n.admitTask(ctx, spec); {
	case errors.Is(err, errTaskGone):
		n.endUnstarted(ctx, d, spec, bus.TurnAborted, fmt.Errorf("%w: %w", ErrAborted, err))
		n.ackSettled(msg, d.rec)
		return
	case err != nil:
		log.Warn("intake: could not read the turn's workflow; another node will", "err", err)
		n.release(ctx, d, spec.ID)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	model, err := n.model(spec)
	if err != nil {
		n.endUnstarted(ctx, d, spec, bus.TurnFailed, fmt.Errorf("%w: %w", ErrModel, err))
		n.ackSettled(msg, d.rec)
		return
	}
	kit, err := n.Assemble(ctx, spec)
	if err != nil {
		n.endUnstarted(ctx, d, spec, bus.TurnFailed, fmt.Errorf("%w: %w", ErrRuntime, err))
		n.ackSettled(msg, d.rec)
		return
	}
	h := &heldTurn{msg: msg, done: make(chan TurnResult, 1)}
	in.mu.Lock()
	if in.stopping {
		in.mu.Unlock()
		n.release(ctx, d, spec.ID)
		_ = msg.Nak()
		return
	}
	in.running[spec.ID] = h
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		delete(in.running, spec.ID)
		in.mu.Unlock()
	}()

	d.lease = n.cfg.TurnLease
	cfg := TurnConfig{Spec: spec, Model: model, Kit: kit, dur: d, Done: func(r TurnResult) { h.done <- r },
		Unavailable: func(string) { n.catalog.Kick() }}
	if _, err := n.Spawn(ctx, cfg); err != nil {
		log.Warn("intake: could not start the turn; another node will", "err", err)
		n.release(ctx, d, spec.ID)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	// A heartbeat for clients, as often as the progress above.
	beat := time.NewTicker(n.cfg.TurnLease / 3)
	defer beat.Stop()
	for {
		select {
		case r := <-h.done:
			switch {
			case r.HandedBack:
				_ = msg.Nak()
			case r.Fenced:
				// Another node holds the turn and its message now.
			default:
				n.turnEnded(spec, r)
				n.ackSettled(msg, d.rec)
			}
			return
		case <-beat.C:
			n.beat(spec)
		}
	}
}

// beat publishes a heartbeat of a turn this node runs.
func (n *Node) beat(spec bus.TurnSpec) {
	b, err := json.Marshal(bus.TurnStatus{Turn: spec.ID, Node: n.cfg.Name, Agent: spec.Agent, Kind: spec.Kind, State: bus.TurnRunning,
		Lease: n.cfg.TurnLease, Time: time.Now()})
	if err == nil {
		err = n.nc.Publish(bus.TurnStatusSubject(spec.ID, bus.StatusBeat), b)
	}
	if err != nil {
		n.log.Debug("heartbeat", "turn", spec.ID, "err", err)
	}
}

// errTurnOver reports an intake message of a turn that has ended already.
var errTurnOver = errors.New("the turn has ended")

// claim makes this node the turn's owner: at the record's revision, so that of two
// nodes given the same turn one wins.
func (n *Node) claim(ctx context.Context, spec bus.TurnSpec) (*durable, error) {
	kv := n.intake.kv
	var rec bus.TurnRecord
	var rev uint64
	e, err := kv.Get(ctx, spec.ID)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// Published without a record (by hand, or the record was lost): make one.
		now := time.Now()
		rec = bus.TurnRecord{Spec: spec, State: bus.TurnQueued, Created: now, Updated: now}
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return nil, fmt.Errorf("turn record: %w", err)
		}
		rev = e.Revision()
	}
	if rec.State.Ended() {
		return &durable{kv: kv, rec: rec, rev: rev}, errTurnOver
	}
	d := &durable{kv: kv}
	prev := rec.Owner
	if prev != "" || rec.Stored > 0 {
		why := "the turn's node stopped signalling progress (lost, or killed)"
		if prev == "" {
			why = "the turn was handed back by its node (stopping)"
		}
		d.lost = prev
		if d.lost == "" && len(rec.Resumes) > 0 {
			d.lost = rec.Resumes[len(rec.Resumes)-1].Node
		}
		rec.Resumes = append(rec.Resumes, bus.Resume{Node: n.cfg.Name, From: prev, At: time.Now(), Why: why})
	}
	rec.Spec, rec.State, rec.Owner, rec.Updated = spec, bus.TurnRunning, n.cfg.Name, time.Now()
	rec.Epoch++
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if rev == 0 {
		rev, err = kv.Create(ctx, spec.ID, b)
	} else {
		rev, err = kv.Update(ctx, spec.ID, b, rev)
	}
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	d.rev, d.rec = rev, rec
	return d, nil
}

// release gives back a turn this node claimed but did not start, so that the next node
// to take it reads a hand-back, not a lost node.
func (n *Node) release(ctx context.Context, d *durable, id string) {
	d.rec.State, d.rec.Owner, d.rec.Updated = bus.TurnQueued, "", time.Now()
	if _, err := updateRecord(ctx, d.kv, id, d.rec, d.rev, n.log); err != nil {
		n.log.Warn("give the turn back", "turn", id, "err", err)
	}
}

// ackSettled acknowledges the intake message of a turn that ended here, once a task
// turn's workflow has moved on; a node that cannot settle it leaves the message to
// another node, which finds the turn ended and settles it.
func (n *Node) ackSettled(msg jetstream.Msg, rec bus.TurnRecord) {
	if err := n.settleTask(rec); err != nil {
		n.log.Warn("intake: could not settle the task turn; another node will", "turn", rec.Spec.ID, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	_ = msg.Ack()
}

// endUnstarted ends a claimed turn that could not start here (state failed, or aborted
// for a task turn its workflow no longer wants), and says so.
func (n *Node) endUnstarted(ctx context.Context, d *durable, spec bus.TurnSpec, state bus.TurnState, err error) {
	d.rec.State, d.rec.Error, d.rec.Updated = state, err.Error(), time.Now()
	if _, werr := updateRecord(ctx, d.kv, spec.ID, d.rec, d.rev, n.log); werr != nil {
		n.log.Warn("store the turn's end", "turn", spec.ID, "err", werr)
	}
	b, _ := json.Marshal(bus.TurnStatus{Turn: spec.ID, Node: n.cfg.Name, Agent: spec.Agent, Kind: spec.Kind,
		State: state, Error: err.Error(), Time: time.Now()})
	_ = n.nc.Publish(bus.TurnStatusSubject(spec.ID, bus.StatusDone), b)
	n.turnEnded(spec, TurnResult{Turn: spec.ID, State: bus.TurnFailed, Err: err, Error: err.Error()})
}

// stopIntake stops taking turns and hands the running ones back: each at its next
// checkpoint, within grace; a turn that does not make it is stopped where it is and
// the intake gives it to another node at once.
func (n *Node) stopIntake(grace time.Duration) {
	in := n.intake
	if in == nil || in.cancel == nil {
		return
	}
	in.cancel()
	in.loops.Wait()
	in.mu.Lock()
	in.stopping = true
	held := make([]*heldTurn, 0, len(in.running))
	for _, h := range in.running {
		held = append(held, h)
	}
	in.mu.Unlock()
	if len(held) == 0 {
		return
	}
	n.log.Info("handing turns back to the intake", "turns", len(held), "grace", grace)
	n.sys.Root.Send(n.pid, &handBackAll{})
	all := make(chan struct{})
	go func() { in.held.Wait(); close(all) }()
	select {
	case <-all:
		return
	case <-time.After(grace):
	}
	in.mu.Lock()
	for id, h := range in.running {
		n.log.Warn("turn did not reach a checkpoint in time; another node resumes it", "turn", id)
		_ = h.msg.Nak()
	}
	in.mu.Unlock()
}
