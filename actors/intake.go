package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/toolsets"
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
var ErrTurnExists = durable.ErrTurnExists

// intake is a node's part of the durable turn intake: it pulls turn specs while the
// node has room for another turn, claims each, runs it and settles its message.
type intake struct {
	n        *Node
	log      *slog.Logger
	store    *durable.Store
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
	lease *durable.Lease
	done  chan TurnResult
}

// openIntake opens (creating if needed) the durable state of turns.
func (n *Node) openIntake(ctx context.Context) error {
	store, err := durable.Open(ctx, n.js, durable.Config{Node: n.cfg.Name, Replicas: n.cfg.Replicas, Create: true, Logger: n.log, StoreFull: n.cfg.StoreFull})
	if err != nil {
		return err
	}
	n.intake = &intake{n: n, log: n.log, store: store, running: make(map[string]*heldTurn), slots: make(chan struct{}, n.cfg.MaxTurns)}
	// Read at each scrape (one stream info request), not kept up to date on every turn.
	n.cfg.Telemetry.SetBacklog(func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		v, err := store.IntakeMessages(ctx)
		if err != nil {
			return math.NaN()
		}
		return float64(v)
	})
	return nil
}

// submit queues a durable turn: its record is created (which refuses an id already
// used) and its spec published into the intake, where a node that runs turns takes it
// (node, when set, names the one that must). It returns the turn's id.
func (n *Node) submit(ctx context.Context, spec bus.TurnSpec, node string) (string, error) {
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
		if err := n.svc.CheckTask(ctx, spec); err != nil {
			return "", fmt.Errorf("start turn %s: %w", spec.ID, err)
		}
	}
	if err := in.store.Submit(ctx, spec, node); err != nil {
		return "", fmt.Errorf("start turn %s: %w", spec.ID, err)
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

// runIntake pulls turn specs for this node while it has room for another turn. Its
// consumers are set up within start (a node restarted into a cluster waits while its
// stream catches up).
func (in *intake) run(start context.Context) error {
	consumers, err := in.store.RunnerConsumers(start, in.n.cfg.TurnLease)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	for _, cons := range consumers {
		in.loops.Add(1)
		go func() {
			defer in.loops.Done()
			in.pull(ctx, cons)
		}()
	}
	return nil
}

// pull takes one spec at a time, each when a slot is free, so that no spec waits in
// this node while its lease runs.
func (in *intake) pull(ctx context.Context, cons jetstream.Consumer) {
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
					in.log.Warn("intake fetch failing; retrying", "err", err)
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
			in.take(msg)
		}()
	}
}

// take claims the turn of an intake message, runs it here until it ends or is handed
// back, and settles the message accordingly.
func (in *intake) take(msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec, ok := in.spec(ctx, msg)
	if !ok {
		return
	}
	log := in.log.With("turn", spec.ID)
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 {
		in.mu.Lock()
		h := in.running[spec.ID]
		in.mu.Unlock()
		if h != nil && h.lease.Adopt(msg) {
			// Delivered again while it runs here, its hold confirmed: the intake lost
			// its progress signals (its consumer's leader moved). A claim would fence
			// this node's own turn, which the intake then gives to a node once more.
			log.Info("intake: a turn this node runs was delivered again; it goes on here", "deliveries", md.NumDelivered)
			return
		}
		log.Info("intake: taking a turn delivered again", "deliveries", md.NumDelivered)
	}
	input := []toolbus.Item{toolbus.UserMessage(spec.Input)}
	lease, ok := in.claim(ctx, msg, spec, input, log)
	if !ok {
		return
	}
	cfg, err := in.prepare(ctx, lease, log)
	if err != nil {
		// Not this node's to run: another node takes the turn (the lease given back).
		log.Warn("intake: could not take the turn; another node will", "err", err)
		lease.Release(ctx)
		return
	}
	if cfg == nil {
		return // ended here without a start
	}
	cfg.Input = input
	in.runHeld(ctx, lease, cfg, log)
}

// spec is the turn spec of an intake message: its own, or the turn a schedule's firing
// starts. false: the message is settled (a firing skipped, a message dropped).
func (in *intake) spec(ctx context.Context, msg jetstream.Msg) (bus.TurnSpec, bool) {
	var spec bus.TurnSpec
	if sched, ok := bus.ParseIntakeFired(msg.Subject()); ok {
		// A schedule's firing: it becomes a turn of its own, or is settled here.
		in.n.cfg.Telemetry.ScheduleFired()
		if spec, ok = in.n.svc.Fire(ctx, msg, sched); !ok {
			return spec, false
		}
	} else if err := json.Unmarshal(msg.Data(), &spec); err != nil || spec.ID == "" {
		in.log.Error("intake: a message that is not a turn spec; dropped", "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return spec, false
	}
	spec.Normalize()
	return spec, true
}

// claimTimeout bounds a claim: elections of the record and transcript streams' leaders
// take a few seconds; a claim still unfinished after this is stuck, not slow.
const claimTimeout = 30 * time.Second

// claim takes the turn's lease. A turn found ended is settled here (a node lost after
// it ended the turn, before it settled it); false: nothing more to do here.
func (in *intake) claim(ctx context.Context, msg jetstream.Msg, spec bus.TurnSpec, input []toolbus.Item, log *slog.Logger) (*durable.Lease, bool) {
	first := func(rec bus.TurnRecord, resumed bool) []toolbus.Item {
		if !resumed {
			return input
		}
		r := bus.Resume{Node: in.n.cfg.Name, At: time.Now(), Why: "the turn's record was lost"}
		if k := len(rec.Resumes); k > 0 {
			r = rec.Resumes[k-1]
		}
		return []toolbus.Item{durable.ResumeNote(r)}
	}
	// The lease runs from the claim on: reading a long transcript back, while a stream
	// elects a leader, must not let the intake give the turn to another node meanwhile.
	// But a claim that cannot finish (a read that a peer just lost still holds) gives the
	// turn back after claimTimeout, for the next delivery to try afresh, rather than
	// holding it, in progress, for the minute of the whole take.
	cctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	lease, err := in.store.Claim(cctx, msg, spec, in.n.cfg.TurnLease, first)
	switch {
	case errors.Is(err, durable.ErrTurnOver):
		in.n.svc.TurnOver(ctx, spec)
		// A task turn that ended on a node lost before it settled: settle it here.
		in.ackSettled(lease, log)
		return nil, false
	case err != nil:
		log.Warn("intake: could not take the turn; another node will", "err", err)
		return nil, false
	}
	return lease, true
}

// prepare readies a claimed turn to run here: its job recorded, its task admitted, its
// model and tools. A turn that cannot run anywhere ends here, failed (or aborted: a
// task its workflow no longer wants), and prepare returns nil; an error leaves the turn
// to another node.
func (in *intake) prepare(ctx context.Context, lease *durable.Lease, log *slog.Logger) (*TurnConfig, error) {
	n, spec := in.n, lease.Spec
	n.svc.TurnTaken(ctx, spec, n.cfg.Name)
	switch err := n.svc.AdmitTask(ctx, spec); {
	case errors.Is(err, toolsets.ErrTaskGone):
		in.endUnstarted(ctx, lease, bus.TurnAborted, fmt.Errorf("%w: %w", ErrAborted, err), log)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the turn's workflow: %w", err)
	}
	model, err := n.model(spec)
	if err != nil {
		in.endUnstarted(ctx, lease, bus.TurnFailed, fmt.Errorf("%w: %w", ErrModel, err), log)
		return nil, nil
	}
	var kit *toolsets.Kit
	if lease.Resumed {
		// Within half a lease, which the claim has just begun.
		kit, err = n.assemble(ctx, spec, durable.LastCalls(lease.Items), min(resumeHostPatience, n.cfg.TurnLease/2))
	} else {
		kit, err = n.Assemble(ctx, spec)
	}
	if err != nil {
		in.endUnstarted(ctx, lease, bus.TurnFailed, fmt.Errorf("%w: %w", ErrRuntime, err), log)
		return nil, nil
	}
	if err := checkTools(model, kit); err != nil {
		in.endUnstarted(ctx, lease, bus.TurnFailed, err, log)
		return nil, nil
	}
	return &TurnConfig{Spec: spec, Model: model, Kit: kit, Unavailable: func(string) { n.catalog.Kick() }}, nil
}

// resumeHostPatience bounds how long a resumed turn waits for the hosts of its last
// calls (Node.freshenCatalog).
const resumeHostPatience = 5 * time.Second

// runHeld runs a prepared turn under its lease, beating for clients, until it ends or is
// handed back, and settles its message.
func (in *intake) runHeld(ctx context.Context, lease *durable.Lease, cfg *TurnConfig, log *slog.Logger) {
	n, spec := in.n, cfg.Spec
	h := &heldTurn{lease: lease, done: make(chan TurnResult, 1)}
	in.mu.Lock()
	if in.stopping {
		in.mu.Unlock()
		lease.Release(ctx)
		return
	}
	in.running[spec.ID] = h
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		delete(in.running, spec.ID)
		in.mu.Unlock()
	}()

	cfg.journal = newDurableJournal(lease, n.cfg.TurnLease)
	cfg.Done = func(r TurnResult) { h.done <- r }
	if _, err := n.Spawn(ctx, *cfg); err != nil {
		log.Warn("intake: could not start the turn; another node will", "err", err)
		lease.Release(ctx)
		return
	}
	// Every third of a lease the turn is confirmed this node's (a write of its record, off
	// this loop), and its clients get a heartbeat: the intake's progress signals go on
	// only within a lease of the last confirmation (durable.Lease.Confirm). A claim and a
	// start that took a while are confirmed at once.
	confirmed := make(chan error, 1)
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel() // a confirmation under way when the turn ends gives up, and is not heard
	confirm := func(d time.Duration) {
		go func() { confirmed <- confirmHeld(cctx, lease, d) }()
	}
	confirming, beats := true, false
	confirm(2 * n.cfg.TurnLease / 3)
	settle := func(r TurnResult) {
		switch {
		case r.HandedBack:
			// HandBack gave the message back.
		case r.Fenced:
			// Another node holds the turn and its message now (or may: its lease could
			// not be confirmed): not a word more.
			lease.Stop()
		case r.Unended:
			// Its end is not stored: the turn goes on, from what the stream holds,
			// on the node the intake gives it to next.
			lease.Retry()
		case lease.Fenced():
			lease.Stop()
		default:
			in.turnEnded(spec, r.State, r.Steps, r.Text, r.Calls, r.ErrorText())
			in.ackSettled(lease, log)
		}
	}
	beat := time.NewTicker(n.cfg.TurnLease / 3)
	defer beat.Stop()
	for {
		select {
		case r := <-h.done:
			settle(r)
			return
		case <-beat.C:
			if !confirming {
				confirming = true
				confirm(n.cfg.TurnLease)
			}
		case err := <-confirmed:
			confirming = false
			select {
			case r := <-h.done: // ended meanwhile: no word of its lease after its end
				settle(r)
				return
			default:
			}
			switch {
			case err == nil && !lease.Confirmed():
				// Confirmed before a pause that outlasted it (the answer waited here
				// meanwhile): the intake may have given the turn to another node since.
				confirming = true
				confirm(n.cfg.TurnLease)
			case err == nil && !beats:
				// The claim's own confirmation: the turn's started status says as much,
				// and a beat now could overtake it (the turn publishes it as it starts).
				beats = true
			case err == nil:
				in.beat(spec)
			case errors.Is(err, durable.ErrFenced):
				// The turn stops now, not when it next writes: its calls may run for long.
				n.sys.Root.Send(n.pid, &turnFenced{turn: spec.ID})
			case errors.Is(err, durable.ErrUnconfirmed):
				// Another node may hold the turn now: it stops without a word, and the
				// intake gives it to a node again after the lease.
				log.Warn("intake: could not confirm for a lease that this node still holds the turn (cut off from the quorum?); stopping it without a word", "err", err)
				lease.Stop()
				n.sys.Root.Send(n.pid, &turnUnconfirmed{turn: spec.ID, err: err})
				return
			}
		}
	}
}

// confirmHeld confirms that this node still holds a turn it runs, and will for d: a
// write of its record, unless the lease of its last confirmation outlasts d. A
// confirmation that fails (an election, a slow write: the next beat tries again) is nil
// while the lease of the last one lasts, ErrUnconfirmed once it has run out (the node is
// cut off from the quorum, or was paused past the lease); ErrFenced, another node
// claimed the turn.
func confirmHeld(ctx context.Context, lease *durable.Lease, d time.Duration) error {
	dctx, cancel := context.WithTimeout(ctx, d)
	err := lease.Confirm(dctx)
	cancel()
	if errors.Is(err, durable.ErrUnconfirmed) && ctx.Err() == nil && lease.Confirmed() {
		return nil
	}
	return err
}

// beat publishes a heartbeat of a turn this node runs.
func (in *intake) beat(spec bus.TurnSpec) {
	n := in.n
	b, err := json.Marshal(bus.TurnStatus{Turn: spec.ID, Node: n.cfg.Name, Agent: spec.Agent, Kind: spec.Kind, State: bus.TurnRunning,
		Lease: n.cfg.TurnLease, Time: time.Now()})
	if err == nil {
		err = n.nc.Publish(bus.TurnStatusSubject(spec.ID, bus.StatusBeat), b)
	}
	if err != nil {
		n.log.Debug("heartbeat", "turn", spec.ID, "err", err)
	}
}

// ackSettled acknowledges the intake message of a turn whose end is stored, once a task
// turn's workflow has moved on; a node that cannot settle it leaves the message to
// another node, which finds the turn ended and settles it.
func (in *intake) ackSettled(lease *durable.Lease, log *slog.Logger) {
	if err := in.n.svc.SettleTask(lease.Rec); err != nil {
		log.Warn("intake: could not settle the task turn; another node will", "err", err)
		lease.Retry()
		return
	}
	if err := lease.Ack(); err != nil {
		// Its end is not stored (the node lost its connection as the turn ended): the
		// lease is left to run out, and another node resumes the turn.
		log.Warn("intake: ack", "err", err)
		lease.Stop()
	}
}

// endUnstarted ends a claimed turn that could not start here (state failed, or aborted
// for a task turn its workflow no longer wants), and says so; a node that lost the turn
// meanwhile says nothing.
func (in *intake) endUnstarted(ctx context.Context, lease *durable.Lease, state bus.TurnState, err error, log *slog.Logger) {
	n, spec := in.n, lease.Spec
	if werr := lease.End(ctx, state, err.Error(), 0, nil); werr != nil {
		log.Warn("store the turn's end", "err", werr)
		if errors.Is(werr, durable.ErrFenced) {
			lease.Stop()
		} else {
			lease.Retry()
		}
		return
	}
	b, _ := json.Marshal(bus.TurnStatus{Turn: spec.ID, Node: n.cfg.Name, Agent: spec.Agent, Kind: spec.Kind,
		State: state, Error: err.Error(), Time: time.Now()})
	_ = n.nc.Publish(bus.TurnStatusSubject(spec.ID, bus.StatusDone), b)
	in.turnEnded(spec, state, 0, "", nil, err.Error())
	in.ackSettled(lease, log)
}

// stopIntake stops taking turns and hands the running ones back: each at its next
// checkpoint, within grace; a turn that does not make it is stopped where it is and
// the intake gives it to another node at once. A turn whose lease cannot be confirmed
// for the grace (the node is cut off from the quorum: its hand-back could not be stored
// either) stops at once, within a third of a lease, without a word: the intake gives it
// to another node after the lease.
func (in *intake) stop(grace time.Duration) {
	n := in.n
	if in.cancel == nil {
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
	n.sys.Root.Send(n.pid, &handBackAll{grace: grace})
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
		h.lease.Nak()
	}
	in.mu.Unlock()
}

// turnEnded tells the categories how a turn taken from the intake ended here (a job's
// record follows its turn).
func (in *intake) turnEnded(spec bus.TurnSpec, state bus.TurnState, steps int, text string, calls []bus.CallRecord, errText string) {
	in.n.svc.TurnEnded(spec, bus.TurnStatus{Turn: spec.ID, Node: in.n.cfg.Name, State: state, Step: steps, Text: text, Calls: calls, Error: errText})
}
