package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// StartTimeout bounds the request that starts a turn: a node answers once the turn is
// queued in the intake, which takes milliseconds unless JetStream is electing a leader.
const StartTimeout = 15 * time.Second

// AbortGrace is how long a turn gives the calls it aborts to say how they stopped,
// before it settles them abandoned; a caller waiting for an aborted turn's end waits
// longer than this.
const AbortGrace = bus.DefaultAbortGrace

// ErrStartUnanswered reports a turn's start that no node answered, the connection to
// the bus having gone down after it was sent: the turn may have been queued or not.
// Its record says once the bus is back (Client.Turn, Turn.Wait).
var ErrStartUnanswered = errors.New("the start of the turn was not answered")

// start asks for the turn spec describes: on the node named node, or on any node that
// runs turns when node is empty (Start).
func (c *Client) start(ctx context.Context, spec bus.TurnSpec, node string) (bus.StartTurnReply, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return bus.StartTurnReply{}, fmt.Errorf("encode turn spec: %w", err)
	}
	if limit := c.nc.MaxPayload(); int64(len(b)) > limit {
		return bus.StartTurnReply{}, durable.SpecTooLarge(len(b), limit)
	}
	subject := bus.AnyNodeStartTurn
	if node != "" {
		subject = bus.NodeStartTurnSubject(node)
	}
	// Asked once, the start is answered even when ctx ends meanwhile: a turn queued
	// but not known to its starter could not be followed or aborted. Should the
	// connection go down before the answer, the start is asked again once it is back
	// (a node queues a turn id once, and answers a second ask that it exists), until
	// StartTimeout or ctx's end: the answer is unsure anyway.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StartTimeout)
	defer cancel()
	m, lost, err := c.ask(rctx, &nats.Msg{Subject: subject, Data: b}, asking{again: true, cut: ctx.Done()})
	switch {
	case lost && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrConnectionClosed)):
		return bus.StartTurnReply{}, fmt.Errorf("turn %s: %w: the connection to %s went down after it was sent, and no node answered it since; the turn may have been queued",
			spec.ID, ErrStartUnanswered, c.where)
	case errors.Is(err, ErrRefused):
		return bus.StartTurnReply{}, fmt.Errorf("start turn: %w", err)
	case errors.Is(err, nats.ErrNoResponders) && node != "":
		return bus.StartTurnReply{}, fmt.Errorf("no node named %s runs turns on %s: check its -name and -turns flags", node, c.where)
	case errors.Is(err, nats.ErrNoResponders):
		return bus.StartTurnReply{}, fmt.Errorf("no node runs turns on %s: start one with `toolbus node`", c.where)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return bus.StartTurnReply{}, fmt.Errorf("no node answered the request to start a turn on %s within %s", c.where, StartTimeout)
	case err != nil:
		return bus.StartTurnReply{}, fmt.Errorf("start turn: %w", err)
	}
	var reply bus.StartTurnReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return bus.StartTurnReply{}, fmt.Errorf("start turn: malformed reply: %w", err)
	}
	if reply.Error != "" {
		err := &refusal{msg: fmt.Sprintf("node %s: %s", reply.Node, reply.Error)}
		if reply.Code == bus.StartTurnExists {
			if lost {
				// This start's first ask, its answer lost with the connection (or a
				// turn that had the id before it: Start cannot tell).
				return bus.StartTurnReply{Turn: spec.ID, Node: reply.Node}, nil
			}
			err.is = durable.ErrTurnExists
		}
		return reply, err
	}
	return reply, nil
}

// refusal is a node's refusal, matched by its code: errors.Is(err,
// durable.ErrTurnExists) for an id already used.
type refusal struct {
	msg string
	is  error
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.is }

// Abort asks a turn to stop: it calls the model no more, starts no new call and
// cancels the calls in flight, whose hosts listen on the same subject. It returns once
// the server has the abort; the turn's done status says how it ended. A user whose
// role may not abort (a watcher) gets ErrRefused.
func (c *Client) Abort(ctx context.Context, turn, reason string) error {
	if !bus.ValidToken(turn) {
		return fmt.Errorf("abort: invalid turn id %q", turn)
	}
	b, err := json.Marshal(bus.Abort{Turn: turn, Reason: reason})
	if err != nil {
		return err
	}
	// The flush is the server's word that it has the abort: a turn on another node
	// hears it from there.
	if err := c.send(ctx, &nats.Msg{Subject: bus.AbortSubject(turn), Data: b}); err != nil {
		return fmt.Errorf("abort %s: %w", turn, err)
	}
	return nil
}

// CancelCall cancels one call of a turn (bus.Abort.Call): its host stops it, and the
// turn, if one runs, ends it with an honest outcome (not started, stopped, or abandoned
// after the abort grace) and goes on; the model reads why. call is the call's id on the
// bus or the model's. It returns once the cancel is sent: the call's outcome comes with
// its batch (the turn's step status, Follow).
func (c *Client) CancelCall(ctx context.Context, turn, call, reason string) error {
	if !bus.ValidToken(turn) || !bus.ValidToken(call) {
		return fmt.Errorf("abort: invalid turn id %q or call id %q", turn, call)
	}
	b, err := json.Marshal(bus.Abort{Turn: turn, Call: call, Reason: reason})
	if err != nil {
		return err
	}
	if err := c.send(ctx, &nats.Msg{Subject: bus.AbortSubject(turn), Data: b}); err != nil {
		return fmt.Errorf("abort %s %s: %w", turn, call, err)
	}
	return nil
}

// ApproveTimeout bounds a request to a turn about a held call.
const ApproveTimeout = 10 * time.Second

// Approve sends a decision on a call the turn holds for approval, and returns the
// turn's answer. A decision with an empty Decision asks for the held call's request
// (its arguments, their hash) without deciding. A user whose role may not decide (a
// watcher) gets ErrRefused.
func (c *Client) Approve(ctx context.Context, turn, call string, a bus.Approval) (bus.ApprovalReply, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return bus.ApprovalReply{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, ApproveTimeout)
	defer cancel()
	m, err := c.request(rctx, &nats.Msg{Subject: bus.ApproveSubject(turn, call), Data: b})
	switch {
	case errors.Is(err, ErrRefused):
		return bus.ApprovalReply{}, fmt.Errorf("approve %s %s: %w", turn, call, err)
	case errors.Is(err, nats.ErrNoResponders):
		return bus.ApprovalReply{}, c.notRunning(ctx, turn)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return bus.ApprovalReply{}, fmt.Errorf("turn %s did not answer about call %s within %s", turn, call, ApproveTimeout)
	case err != nil:
		return bus.ApprovalReply{}, fmt.Errorf("approve %s %s: %w", turn, call, err)
	}
	var r bus.ApprovalReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return bus.ApprovalReply{}, fmt.Errorf("approve %s %s: malformed reply: %w", turn, call, err)
	}
	if r.Error != "" {
		return r, errors.New(r.Error)
	}
	if r.Request == nil {
		return r, fmt.Errorf("approve %s %s: the turn sent no request", turn, call)
	}
	return r, nil
}

// Decide decides on a call the turn holds for approval as d says (its Decision, By and
// Reason): it asks the turn for the call's request first, and decides on exactly those
// arguments (their hash, ArgsHash), as `toolbus approve` and the console do.
func (c *Client) Decide(ctx context.Context, turn, call string, d bus.Approval) error {
	r, err := c.Approve(ctx, turn, call, bus.Approval{})
	if err != nil {
		return err
	}
	d.ArgsHash = r.Request.ArgsHash
	_, err = c.Approve(ctx, turn, call, d)
	return err
}

// notRunning says why no turn answered: it has ended (its record says how), or the
// bus knows no such turn.
func (c *Client) notRunning(ctx context.Context, turn string) error {
	rec, err := c.Record(ctx, turn)
	switch {
	case err == nil && rec != nil && rec.State.Ended():
		return fmt.Errorf("turn %s has ended (%s)", turn, rec.State)
	case err == nil && rec == nil:
		return fmt.Errorf("no turn %s on this bus", turn)
	}
	return fmt.Errorf("no turn %s is running (it ended, or its id is wrong)", turn)
}

// Record reads a turn's record; nil when the bus has none (no durable turns, or no
// record: the turn is unknown, or runs outside the intake).
func (c *Client) Record(ctx context.Context, turn string) (*bus.TurnRecord, error) {
	store, err := c.turnStore(ctx)
	if errors.Is(err, ErrNoTurns) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec, _, err := store.Record(ctx, turn)
	if errors.Is(err, durable.ErrNoRecord) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read turn %s: %w", turn, err)
	}
	return &rec, nil
}

// Turns lists the bus's durable turns, newest first. A running turn's step is its
// transcript's (its record is written at the claim and the end only).
func (c *Client) Turns(ctx context.Context) ([]bus.TurnRecord, error) {
	store, err := c.turnStore(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	for i, r := range recs {
		if r.State == bus.TurnRunning {
			if live, err := store.Live(ctx, r.Spec.ID); err == nil {
				recs[i] = live
			}
		}
	}
	return recs, nil
}

// ErrNotLost reports a turn Resume refuses: it has ended, or its node still beats.
var ErrNotLost = errors.New("not a lost turn")

// Resume queues again a turn whose node was lost while no node could take it over. It
// first listens for the turn's heartbeat for listen: a turn whose node beats is
// running, and queueing it again would have two nodes drive it.
//
// The session of an MCP client with `toolbus mcp` (bus.TurnMCP) cannot be resumed: no
// node runs it. One whose process no longer beats (killed without ending it) has its
// record ended as failed instead (durable.Store.EndLostSession), and the record Resume
// returns says so (its State ended). For a session it listens for a third of
// bus.SessionLease and a second at least.
func (c *Client) Resume(ctx context.Context, turn string, listen time.Duration) (bus.TurnRecord, error) {
	store, err := c.turnStore(ctx)
	if err != nil {
		return bus.TurnRecord{}, err
	}
	rec, _, err := store.Record(ctx, turn)
	if errors.Is(err, durable.ErrNoRecord) {
		return bus.TurnRecord{}, fmt.Errorf("no turn %s on this bus", turn)
	}
	if err != nil {
		return bus.TurnRecord{}, fmt.Errorf("read turn %s: %w", turn, err)
	}
	if rec.State.Ended() {
		return rec, fmt.Errorf("turn %s has ended (%s): nothing to resume: %w", turn, rec.State, ErrNotLost)
	}
	if rec.Spec.Kind == bus.TurnMCP {
		// Its record is ended, not queued, if no beat is heard: listen for longer than
		// the process beats at, whatever the caller asked.
		listen = max(listen, bus.SessionLease/3+time.Second)
	}
	beats, err := c.nc.SubscribeSync(bus.TurnStatusSubject(turn, bus.StatusBeat))
	if err != nil {
		return rec, err
	}
	defer func() { _ = beats.Unsubscribe() }()
	lctx, cancel := context.WithTimeout(ctx, listen)
	defer cancel()
	if m, err := beats.NextMsgWithContext(lctx); err == nil {
		var st bus.TurnStatus
		_ = json.Unmarshal(m.Data, &st)
		if rec.Spec.Kind == bus.TurnMCP {
			return rec, fmt.Errorf("turn %s is the session of an MCP client with %s, which beats: it is open, and no node runs it: %w", turn, st.Node, ErrNotLost)
		}
		return rec, fmt.Errorf("turn %s is running on node %s (it beats): nothing to resume: %w", turn, st.Node, ErrNotLost)
	} else if ctx.Err() != nil {
		return rec, ctx.Err()
	}
	if rec.Spec.Kind == bus.TurnMCP {
		// No node can run it: its calls came from an MCP client, through a toolbus mcp
		// that is gone. Its record is ended, so that it no longer claims to run.
		why := fmt.Sprintf("%s stopped beating without ending the session (killed, or its machine lost); ended by toolbus resume", rec.Owner)
		if rec, err = store.EndLostSession(ctx, turn, rec.Owner, why); err != nil {
			if errors.Is(err, durable.ErrSessionAlive) || errors.Is(err, durable.ErrTurnOver) {
				err = fmt.Errorf("%w: %w", err, ErrNotLost)
			}
			return rec, err
		}
		return rec, nil
	}
	if rec, err = store.Requeue(ctx, turn); err != nil {
		return rec, fmt.Errorf("queue turn %s: %w", turn, err)
	}
	return rec, nil
}

// ErrNoTranscript reports a turn that has stored no transcript message yet (queued, or
// its node has not answered its first step), or none at all.
var ErrNoTranscript = durable.ErrNoTranscript

// TranscriptTimeout bounds reading a transcript when ctx has no deadline: the read
// waits out a leader election of the transcript stream.
const TranscriptTimeout = 30 * time.Second

// Transcript reads a turn's transcript back, in the turn's order; ErrNoTranscript
// when it has none.
func (c *Client) Transcript(ctx context.Context, turn string) ([]toolbus.Item, error) {
	js, err := c.JetStream()
	if err != nil {
		return nil, fmt.Errorf("read transcript: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, TranscriptTimeout)
		defer cancel()
	}
	return durable.ReadTranscript(ctx, js, turn)
}

// RunOutput is what `toolbus run -json` prints: the turn, its final status and its
// transcript (docs/durable.md shows one).
type RunOutput struct {
	Turn       string         `json:"turn_id"`
	Status     bus.TurnStatus `json:"status"`
	Transcript []toolbus.Item `json:"transcript"`
}

// Ended reads a turn's end from its record, for a follower that may have missed the
// done status (its connection moved to another server while the turn ended: a
// subscription hears nothing that was published while it was away). ok is false while
// the turn runs, or when the bus keeps no record of it. The status has the record's
// state, owner, step and error, each call's outcome as its batch stored it, and the
// final text from the transcript.
func (c *Client) Ended(ctx context.Context, turn string) (st bus.TurnStatus, ok bool, err error) {
	rec, err := c.Record(ctx, turn)
	if err != nil || rec == nil || !rec.State.Ended() {
		return bus.TurnStatus{}, false, err
	}
	st = bus.TurnStatus{Turn: turn, Node: rec.Owner, Agent: rec.Spec.Agent, Kind: rec.Spec.Kind,
		State: rec.State, Step: rec.Step, Error: rec.Error, Time: rec.Updated}
	for _, cs := range rec.Batch {
		st.Calls = append(st.Calls, bus.CallRecord{Call: cs.Call, Tool: cs.Tool, Namespace: cs.Namespace, Outcome: cs.Outcome})
	}
	if items, terr := c.Transcript(ctx, turn); terr == nil {
		for i := len(items) - 1; i >= 0; i-- {
			if it := items[i]; it.Kind == toolbus.KindMessage && it.Role == toolbus.RoleAssistant && it.Text != "" {
				st.Text = it.Text
				break
			}
		}
		if len(st.Calls) == 0 {
			st.Calls = callRecords(items)
		}
	}
	return st, true, nil
}

// callRecords are the records of a transcript's calls, as the turn's done status had
// them, from what the transcript keeps of each (the call's run and rungs, its output's
// ran): their outcome, label and times; their error is the output's first line when it
// is one. A call without an output (its turn ended while it ran) has no outcome.
func callRecords(items []toolbus.Item) []bus.CallRecord {
	outputs := make(map[string]toolbus.Item)
	for _, it := range items {
		if it.Kind == toolbus.KindCallOutput {
			outputs[it.CallID] = it
		}
	}
	var calls []bus.CallRecord
	for _, it := range items {
		if it.Kind != toolbus.KindFunctionCall {
			continue
		}
		r := bus.CallRecord{Call: it.CallID, Tool: it.Name, Namespace: it.Namespace, Rungs: it.Rungs}
		if r.Namespace == "" && it.Run != nil {
			r.Namespace = it.Run.Namespace
		}
		if o, ok := outputs[it.CallID]; ok && o.Ran != nil {
			r.Outcome, r.Label, r.Duration, r.Latency = bus.Outcome(o.Ran.Outcome), o.Ran.Label, o.Ran.Duration, o.Ran.Latency
			if o.IsError && len(o.Output) > 0 {
				r.Error, _, _ = strings.Cut(o.Output[0].Text, "\n")
			}
		}
		calls = append(calls, r)
	}
	return calls
}
