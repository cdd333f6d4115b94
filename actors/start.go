package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets"
)

// Spawn starts a turn with cfg; Conn, JS, Node, the kit and the defaults come from the
// node where cfg leaves them empty. The result reaches cfg.Done.
func (n *Node) Spawn(ctx context.Context, cfg TurnConfig) (string, error) {
	if cfg.Conn == nil {
		cfg.Conn = n.nc
	}
	if cfg.JS == nil {
		if err := n.ensureTranscripts(ctx); err != nil {
			return "", fmt.Errorf("transcript stream: %w", err)
		}
		cfg.JS = n.js
	}
	if cfg.Node == "" {
		cfg.Node = n.cfg.Name
	}
	if cfg.Spec.Limits.MaxSteps == 0 {
		cfg.Spec.Limits.MaxSteps = n.cfg.MaxSteps
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = n.cfg.CallTimeout
	}
	if cfg.MaxCalls == 0 {
		cfg.MaxCalls = n.cfg.MaxTurnCalls
	}
	if cfg.AbortGrace == 0 {
		cfg.AbortGrace = n.cfg.AbortGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = n.log
	}
	if cfg.Kit == nil {
		kit, err := n.Assemble(ctx, cfg.Spec)
		if err != nil {
			return "", err
		}
		cfg.Kit = kit
		if cfg.Unavailable == nil {
			_, cat, _ := n.assembly(ctx)
			cfg.Unavailable = func(string) { cat.Kick() }
		}
	}
	if err := checkTools(cfg.Model, cfg.Kit); err != nil {
		return "", err
	}
	if cfg.Spec.ID == "" {
		cfg.Spec.ID = bus.NewID()
	}
	cfg.workers, cfg.voucher, cfg.interest, cfg.sampled, cfg.payloads = n.workers, n.voucher, n.cfg.Interest, n.cfg.TraceSampled, n.payloads
	cfg.telemetry = n.cfg.Telemetry
	if err := n.listenForLostReplies(); err != nil {
		return "", err
	}
	if _, err := n.request(ctx, &spawnTurn{cfg: &cfg}); err != nil {
		return "", err
	}
	return cfg.Spec.ID, nil
}

// Run runs a turn to its end. Cancelling ctx aborts the turn, which still
// ends with an honest record of every call.
func (n *Node) Run(ctx context.Context, cfg TurnConfig) (TurnResult, error) {
	done := make(chan TurnResult, 1)
	cfg.Done = func(r TurnResult) { done <- r }
	if cfg.Spec.ID == "" {
		cfg.Spec.ID = bus.NewID()
	}
	id, err := n.Spawn(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return TurnResult{}, err
	}
	select {
	case r := <-done:
		return r, nil
	case <-ctx.Done():
	}
	if err := publishAbort(n.nc, id, "cancelled by the caller"); err != nil {
		return TurnResult{}, err
	}
	return <-done, nil
}

// publishAbort publishes an abort for a turn. Every node hosting one of its calls
// and the turn itself listen on the subject.
func publishAbort(nc *nats.Conn, turn, reason string) error {
	if !bus.ValidToken(turn) {
		return fmt.Errorf("abort: invalid turn id %q", turn)
	}
	b, err := json.Marshal(bus.Abort{Turn: turn, Reason: reason})
	if err != nil {
		return err
	}
	if err := nc.Publish(bus.AbortSubject(turn), b); err != nil {
		return fmt.Errorf("abort %s: %w", turn, err)
	}
	return nc.Flush()
}

// maxStarting bounds the start requests a node answers at once (listenForTurns).
const maxStarting = 32

// listenForTurns takes StartTurn requests on the node's own subject and on the
// shared queue. Each is answered on a worker: queueing a turn waits on JetStream (its
// record and its intake message, replicated), and a subscription hands its handler one
// message at a time, so one slow start held up every start after it, and a caller that
// asked again (its answer late) queued one more behind it. At most maxStarting run at
// once; past that the subscription waits.
func (n *Node) listenForTurns() error {
	slots := make(chan struct{}, maxStarting)
	handle := func(m *nats.Msg) {
		node := ""
		if m.Subject == bus.NodeStartTurnSubject(n.cfg.Name) {
			node = n.cfg.Name
		}
		slots <- struct{}{}
		n.startMu.Lock()
		if n.startClosed {
			n.startMu.Unlock()
			<-slots
			return // the node is closing: the caller's ask goes unanswered, as to a node gone
		}
		n.starting.Add(1)
		n.startMu.Unlock()
		n.workers.goFunc(func() {
			defer func() { <-slots; n.starting.Done() }()
			reply := n.startFromBus(m.Data, node)
			b, _ := json.Marshal(reply)
			if err := m.Respond(b); err != nil {
				n.log.Warn("answer start turn", "err", err)
			}
		})
	}
	sub, err := n.nc.Subscribe(bus.NodeStartTurnSubject(n.cfg.Name), handle)
	if err != nil {
		return fmt.Errorf("subscribe start turn: %w", err)
	}
	n.subs = append(n.subs, sub)
	if sub, err = n.nc.QueueSubscribe(bus.AnyNodeStartTurn, bus.StartTurnQueue, handle); err != nil {
		return fmt.Errorf("subscribe start turn: %w", err)
	}
	n.subs = append(n.subs, sub)
	return n.nc.Flush()
}

// listenForLostReplies passes a host's word that a reply may be lost (bus.EventReplyLost)
// to the turn of the call, if it runs here: one subscription for the node, made with its
// first turn (a node that only hosts tools may not subscribe there), not one more a turn
// (each costs the server a scan of its subject cache when it goes).
//
// A reply a host sends while the node's own connection is down is lost too, and the
// host cannot know: when the connection is re-established, every turn on it asks again
// for the replies of its calls in flight (turnsReconnected), which a host keeps for
// bus.ReplyKeep.
func (n *Node) listenForLostReplies() error {
	n.lostMu.Lock()
	defer n.lostMu.Unlock()
	if n.lostSub != nil {
		return nil
	}
	sys, pid, nc := n.sys, n.pid, n.nc
	sub, err := nc.Subscribe(bus.AllRepliesLost, func(m *nats.Msg) {
		if ts, ok := bus.ParseTurnSubject(m.Subject); ok && ts.Kind == bus.KindEvent {
			sys.Root.Send(pid, &replyLost{turn: ts.Turn, call: ts.Call})
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to lost replies: %w", err)
	}
	n.lostSub = sub
	// A status listener, not the reconnect handler: that is the connection's owner's.
	back := nc.StatusChanged(nats.CONNECTED)
	n.lostBack = back
	go func() {
		for range back { // closed by close (RemoveStatusListener)
			sys.Root.Send(pid, &turnsReconnected{nc: nc})
		}
	}()
	return nil
}

// startFromBus queues the turn a TurnSpec envelope describes; node, when set, is the
// node that must run it.
func (n *Node) startFromBus(data []byte, node string) bus.StartTurnReply {
	var spec bus.TurnSpec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return bus.StartTurnReply{Node: n.cfg.Name, Error: "start turn: malformed turn spec: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if f := n.beforeStart.Load(); f != nil {
		(*f)(spec)
	}
	id, err := n.submit(ctx, spec, node)
	if err != nil {
		reply := bus.StartTurnReply{Turn: spec.ID, Node: n.cfg.Name, Error: err.Error()}
		if errors.Is(err, ErrTurnExists) {
			reply.Code = bus.StartTurnExists
		}
		return reply
	}
	return bus.StartTurnReply{Turn: id, Node: n.cfg.Name}
}

// Start queues the turn a spec describes as a durable turn (submit): any node that runs
// turns takes it; its progress and end are published on the turn's subjects.
func (n *Node) Start(ctx context.Context, spec bus.TurnSpec) (string, error) {
	if n.intake != nil {
		return n.submit(ctx, spec, "")
	}
	return n.startHere(ctx, spec)
}

// startHere runs a turn on this node without the intake: it ends with the node.
func (n *Node) startHere(ctx context.Context, spec bus.TurnSpec) (string, error) {
	if err := checkStartable(spec); err != nil {
		return "", err
	}
	if spec.Kind == bus.TurnTask {
		return "", errors.New("start turn: a task turn runs through the turn intake, which this node does not run")
	}
	model, err := n.model(spec)
	if err != nil {
		return "", fmt.Errorf("start turn: %w", err)
	}
	return n.Spawn(ctx, TurnConfig{Spec: spec, Model: model})
}

// toolChecker is a model whose API has rules of its own for the tools a turn sends
// (gateway.Anthropic: names), checked once the turn's kit is assembled rather than at
// its first request.
type toolChecker interface {
	CheckTools([]*toolbus.Spec) error
}

// checkTools applies the model's rules for tools to a kit.
func checkTools(model gateway.Model, kit *toolsets.Kit) error {
	tc, ok := model.(toolChecker)
	if !ok || kit == nil || kit.Tools == nil {
		return nil
	}
	if err := tc.CheckTools(kit.Tools.Specs()); err != nil {
		return fmt.Errorf("%w: %w", ErrModel, err)
	}
	return nil
}

func (n *Node) model(spec bus.TurnSpec) (gateway.Model, error) {
	if len(spec.Script) > 0 {
		var s gateway.Script
		dec := json.NewDecoder(bytes.NewReader(spec.Script))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("inline script: %w", err)
		}
		return gateway.OpenScript(s, n.cfg.Gateway)
	}
	if spec.Model == "" {
		return nil, errors.New("no model given")
	}
	// A script spec names a file on the node's disk; over the bus a script
	// travels inline instead.
	if strings.HasPrefix(spec.Model, "script:") {
		return nil, errors.New("model script:FILE is not accepted over the bus: send the script inline (the turn spec's script)")
	}
	return gateway.Open(spec.Model, n.cfg.Gateway)
}
