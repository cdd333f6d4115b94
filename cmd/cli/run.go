package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// startTimeout bounds the wait for a node to accept a turn; a node answers as
// soon as the turn exists, so this is about reachability, not the turn.
const startTimeout = 15 * time.Second

// abortWait bounds the wait for a turn to end after an abort: the turn gives
// running calls actors.DefaultAbortGrace to stop, then stores its transcript.
const abortWait = actors.DefaultAbortGrace + 13*time.Second

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "[flags] PROMPT",
		"Runs one agent turn and shows its tool calls live, then the model's answer.\n"+
			"Without -server it starts an embedded bus and node in this process. Ctrl-C aborts\n"+
			"the turn and shows how each call ended; a second Ctrl-C quits at once.\n"+
			"Exit status: 0 completed or terminated, 1 failed or step limit, 130 aborted.", stderr)
	var bf busFlags
	bf.register(fs)
	var gf node.GatewayFlags
	gf.Register(fs, "embedded node: ", true)
	var (
		model        = fs.String("model", os.Getenv("TOOLBUS_MODEL"), "the model: script:FILE (a scripted model, offline), openai:MODEL (Responses API, needs a key) or chat:MODEL (Chat Completions, e.g. a local server at -base-url) (env TOOLBUS_MODEL)")
		nodeName     = fs.String("node", "", "with -server: the node that runs the turn (default: any node that runs turns)")
		agent        = fs.String("agent", defaultAgent, "the agent the turn runs for: it selects the agent's home under a node's home root, and its todo list")
		home         = fs.String("home", ".", "embedded node: the agent home, where the file and command tools read, write and run commands")
		storeDir     = fs.String("store-dir", "", "embedded node: JetStream store directory (default: a temporary one, removed at exit)")
		maxSteps     = fs.Int("max-steps", 0, fmt.Sprintf("the most model calls in the turn (default %d)", actors.DefaultMaxSteps))
		instructions = fs.String("instructions", "", "instructions (system prompt) for the model")
		asJSON       = fs.Bool("json", false, "print only the turn's transcript and final status, as JSON")
		giveUp       = fs.Duration("give-up", 30*time.Second, "when the turn's node is lost: how long to wait for another node to resume the turn (at least three of its leases)")
		sandbox      = sandboxFlag(fs)
		logFile      = fs.String("log", "", "embedded node: append its whole log to this file (info and up; debug with -v)")
		verbose      = fs.Bool("v", false, "show the embedded node's info lines too, and every repeat of a warning (default: warnings and errors, once each)")
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	prompt := strings.TrimSpace(strings.Join(pos, " "))
	switch {
	case prompt == "":
		return usagef("no prompt: say what the turn should do")
	case *model == "":
		return usagef("no model: pass -model script:FILE, openai:MODEL or chat:MODEL")
	case *maxSteps < 0:
		return usagef("-max-steps %d: want a positive number", *maxSteps)
	case *nodeName != "" && bf.server == "":
		return usagef("-node picks a node of a running bus: it needs -server")
	case *nodeName != "" && !bus.ValidToken(*nodeName):
		return usagef("-node %q is not a node name", *nodeName)
	}
	if bf.server != "" {
		set := flagsSet(fs)
		for _, f := range []string{"home", "store-dir", "base-url", "api-key-file", "request-timeout", "hosted-tool-search", "sandbox"} {
			if set[f] {
				return usagef("-%s configures the embedded node; with -server the remote node uses its own", f)
			}
		}
	}
	if err := checkAgent(*agent); err != nil {
		return err
	}

	req := bus.TurnSpec{
		ID: bus.NewID(), Kind: bus.TurnMain, Agent: *agent, Input: prompt, Instructions: *instructions,
		Limits: bus.TurnLimits{MaxSteps: *maxSteps},
	}
	if path, ok := strings.CutPrefix(*model, "script:"); ok {
		if path == "" {
			return usagef("-model script: wants a file: script:FILE, e.g. script:examples/demo/script.json")
		}
		// Sent inline, so a remote node needs no copy of the file.
		if req.Script, err = readScript(path); err != nil {
			return err
		}
	} else {
		req.Model = *model
	}

	if err := gf.Check(); err != nil {
		return usagef("%v", err)
	}
	gw, err := gf.Config()
	if err != nil {
		return err
	}
	logs, err := newLogView(stderr, *logFile, *verbose)
	if err != nil {
		return err
	}
	defer logs.Close()
	bc, err := connect(ctx, bf, embedOptions{home: *home, storeDir: *storeDir, turns: true, gateway: gw, sandbox: *sandbox}, logs.logger())
	if err != nil {
		return err
	}
	defer bc.Close()

	r := newRenderer(stdout)
	if *asJSON {
		r = &renderer{w: io.Discard, now: time.Now}
	}
	if bf.server == "" {
		r.println(r.style(ansiDim, homeNote(*home, *sandbox)))
	}
	subject := bus.AnyNodeStartTurn
	if *nodeName != "" {
		subject = bus.NodeStartTurnSubject(*nodeName)
	}
	final, err := followTurn(ctx, bc, subject, *nodeName, req, r, logs, *giveUp)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printTranscript(ctx, bc.nc, final, stdout); err != nil {
			return err
		}
	}
	return turnExit(final)
}

// homeNote says where the embedded node's agent works: -home defaults to the
// current directory, which the turn's tools may change.
func homeNote(home string, sandbox computer.SandboxMode) string {
	if abs, err := filepath.Abs(home); err == nil {
		home = abs
	}
	how := "in a sandbox"
	if sandbox == computer.SandboxOff {
		how = "with no sandbox"
	}
	return fmt.Sprintf("agent home: %s (read-write, commands run here, %s)", home, how)
}

func readScript(path string) (json.RawMessage, error) {
	if _, err := gateway.LoadScript(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load script: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, fmt.Errorf("load script %s: %w", path, err)
	}
	return buf.Bytes(), nil
}

// followTurn subscribes to the turn's subjects, asks a node to start it, and
// shows its messages until the turn is done. A cancelled ctx aborts the turn,
// which still ends with a status that says how every call ended. On a
// terminal, the lines of logs (which may be nil) are printed above the live area.
func followTurn(ctx context.Context, bc *busConn, subject, nodeName string, req bus.TurnSpec, r *renderer, logs *logView, giveUp time.Duration) (bus.TurnStatus, error) {
	msgs := make(chan *nats.Msg, 256)
	stop := make(chan struct{})
	defer close(stop)
	sub, err := bc.nc.Subscribe(bus.TurnSubjects(req.ID), func(m *nats.Msg) {
		select {
		case msgs <- m:
		case <-stop:
		}
	})
	if err != nil {
		return bus.TurnStatus{}, fmt.Errorf("subscribe to turn %s: %w", req.ID, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return bus.TurnStatus{}, fmt.Errorf("subscribe to turn %s: %w", req.ID, err)
	}
	// The subscription must reach the server before the turn can publish.
	if err := bc.nc.Flush(); err != nil {
		return bus.TurnStatus{}, fmt.Errorf("subscribe to turn %s: %w", req.ID, err)
	}
	if ctx.Err() != nil {
		return bus.TurnStatus{}, &exitError{code: exitInterrupted, err: errors.New("interrupted before the turn started")}
	}
	// The summary's duration is the turn's wall time as the user sees it: from
	// the request to start it, which a fast turn may outlive, to its end.
	began := time.Now()
	if _, err := startTurn(ctx, bc, subject, nodeName, req); err != nil {
		return bus.TurnStatus{}, err
	}
	// A durable turn's node beats every third of its lease; a turn silent for a
	// whole lease lost its node, and the intake gives it to another within another.
	w := &ownerWatch{turn: req.ID, r: r, giveUp: giveUp}
	approvals := newApprover(bc.nc, r, os.Stderr, r.w == io.Discard)
	lost := time.NewTimer(time.Hour)
	defer lost.Stop()

	var logLines <-chan struct{}
	if r.tty && logs != nil {
		logs.attach()
		defer logs.detach()
		logLines = logs.ready
	}
	var tick <-chan time.Time
	if r.tty {
		t := time.NewTicker(spinnerEvery)
		defer t.Stop()
		tick = t.C
	}
	interrupt := ctx.Done()
	var abortOver <-chan time.Time
	for {
		select {
		case <-interrupt:
			interrupt = nil
			r.interrupted = true
			if err := actors.Abort(bc.nc, req.ID, "interrupted"); err != nil {
				return bus.TurnStatus{}, &exitError{code: exitInterrupted, err: err}
			}
			abortOver = time.After(abortWait)
		case <-abortOver:
			return bus.TurnStatus{}, &exitError{code: exitInterrupted, err: fmt.Errorf(
				"turn %s did not end within %s of the abort; it may still be running", req.ID, abortWait)}
		case <-tick:
			r.tick()
		case <-logLines:
			for _, l := range logs.take() {
				r.println(r.style(ansiDim, l))
			}
		case <-lost.C:
			if err := w.silent(); err != nil {
				return bus.TurnStatus{}, err
			}
			lost.Reset(w.lease)
		case m := <-msgs:
			w.heard(m)
			if ts, ok := bus.ParseTurnSubject(m.Subject); ok && ts.Kind == bus.KindApproval {
				var held bus.ApprovalRequest
				if json.Unmarshal(m.Data, &held) == nil {
					approvals.held(ctx, held)
				}
			}
			if w.lease > 0 {
				lost.Reset(w.lease)
			}
			if st, done := r.message(m); done {
				r.done(st, time.Since(began))
				return st, nil
			}
		}
	}
}

// ownerWatch notices a durable turn whose node went silent, and its resumption.
type ownerWatch struct {
	turn   string
	r      *renderer
	giveUp time.Duration // how long to wait for a lost turn to be resumed
	node   string        // the node that runs the turn
	lease  time.Duration // from its started or beat status
	missed int           // leases in a row without a word
}

// heard notes a message of the turn; it reports whether the message came from the
// turn's node.
func (w *ownerWatch) heard(m *nats.Msg) bool {
	ts, ok := bus.ParseTurnSubject(m.Subject)
	if !ok {
		return false
	}
	// Only the turn's own statuses prove its node alive: a host's late reply or event
	// says nothing of the node that drives the turn.
	if ts.Kind != bus.KindStatus {
		return false
	}
	w.missed = 0
	if ts.Status != bus.StatusStarted && ts.Status != bus.StatusBeat {
		return true
	}
	var st bus.TurnStatus
	if json.Unmarshal(m.Data, &st) != nil {
		return true
	}
	if st.Lease > 0 {
		w.lease = st.Lease
	}
	if st.Node != "" {
		w.node = st.Node
	}
	return true
}

// silent is called after each lease without a word: the first time it says the node
// seems lost; once the give-up time (at least three leases) has passed it gives up with
// a clear error.
func (w *ownerWatch) silent() error {
	if w.lease <= 0 {
		return nil
	}
	w.missed++
	if w.missed == 1 {
		w.r.println(w.r.style(ansiDim, fmt.Sprintf("node %s has said nothing of turn %s for %s: it seems lost; waiting for another node to resume the turn",
			w.node, w.turn, w.lease)))
	}
	if waited := time.Duration(w.missed) * w.lease; w.missed >= 3 && waited >= w.giveUp {
		return &exitError{code: exitFailed, err: fmt.Errorf(
			"turn %s: its node %s was lost and no node resumed the turn within %s; when a node that runs turns is up, `toolbus resume %s` queues it again",
			w.turn, w.node, waited, w.turn)}
	}
	return nil
}

// startTurn asks a node to run the turn and returns once it exists.
func startTurn(ctx context.Context, bc *busConn, subject, nodeName string, req bus.TurnSpec) (bus.StartTurnReply, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return bus.StartTurnReply{}, fmt.Errorf("encode turn spec: %w", err)
	}
	if limit := bc.nc.MaxPayload(); int64(len(b)) > limit {
		return bus.StartTurnReply{}, durable.SpecTooLarge(len(b), limit)
	}
	// An interrupt must not cut the request short: once the node has the turn,
	// the abort that follows reaches it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	m, err := bc.nc.RequestWithContext(rctx, subject, b)
	switch {
	case errors.Is(err, nats.ErrNoResponders) && nodeName != "":
		return bus.StartTurnReply{}, fmt.Errorf("no node named %s runs turns on %s: check its -name and -turns flags", nodeName, bc.where)
	case errors.Is(err, nats.ErrNoResponders):
		return bus.StartTurnReply{}, fmt.Errorf("no node runs turns on %s: start one with `toolbus node`", bc.where)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return bus.StartTurnReply{}, fmt.Errorf("no node answered the request to start a turn on %s within %s", bc.where, startTimeout)
	case err != nil:
		return bus.StartTurnReply{}, fmt.Errorf("start turn: %w", err)
	}
	var reply bus.StartTurnReply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return bus.StartTurnReply{}, fmt.Errorf("start turn: malformed reply: %w", err)
	}
	if reply.Error != "" {
		return reply, fmt.Errorf("node %s: %s", reply.Node, reply.Error)
	}
	return reply, nil
}

// message shows one message of the turn; it reports the final status once the
// turn is done. Anyone may publish on the turn's subjects, so what does not
// decode is ignored.
func (r *renderer) message(m *nats.Msg) (bus.TurnStatus, bool) {
	ts, ok := bus.ParseTurnSubject(m.Subject)
	if !ok {
		return bus.TurnStatus{}, false
	}
	switch ts.Kind {
	case bus.KindEvent:
		var ev bus.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			ev.Call = ts.Call
			r.event(ev)
		}
	case bus.KindResult:
		// A 503 "no responders" status also lands here, with no body; the
		// batch record accounts for that call.
		var reply bus.ToolReply
		if json.Unmarshal(m.Data, &reply) == nil && reply.Outcome.Valid() {
			r.result(ts.Call, reply)
		}
	case bus.KindAbort:
		var a bus.Abort
		if json.Unmarshal(m.Data, &a) == nil {
			r.aborted(a)
		}
	case bus.KindStatus:
		var st bus.TurnStatus
		if json.Unmarshal(m.Data, &st) != nil {
			return bus.TurnStatus{}, false
		}
		switch ts.Status {
		case bus.StatusStarted:
			r.runningOn(st)
			for _, n := range st.Notes {
				r.println(r.style(ansiDim, "note: "+n))
			}
			r.awaitModel()
		case bus.StatusStep:
			r.step(st)
		case bus.StatusDone:
			return st, true
		}
	}
	return bus.TurnStatus{}, false
}

// runOutput is what run -json prints.
type runOutput struct {
	Turn       string         `json:"turn_id"`
	Status     bus.TurnStatus `json:"status"`
	Transcript []gateway.Item `json:"transcript"`
}

// printTranscript reads the turn's transcript back from JetStream and prints
// it with the final status.
func printTranscript(ctx context.Context, nc *nats.Conn, final bus.TurnStatus, stdout io.Writer) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("read transcript: %w", err)
	}
	// Read it even after an interrupt: that is when it is most wanted.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	items, err := durable.ReadTranscript(rctx, js, final.Turn)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(runOutput{Turn: final.Turn, Status: final, Transcript: items}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode transcript: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

// turnExit maps how a turn ended to the command's exit.
func turnExit(st bus.TurnStatus) error {
	var detail error
	if st.Error != "" {
		detail = errors.New(st.Error)
	}
	switch st.State {
	case bus.TurnCompleted, bus.TurnTerminated:
		if detail != nil {
			return &exitError{code: exitOK, err: fmt.Errorf("turn %s: %w", st.State, detail)}
		}
		return nil
	case bus.TurnAborted:
		return &exitError{code: exitInterrupted, err: detail}
	case bus.TurnFailed:
		return &exitError{code: exitFailed, err: fmt.Errorf("turn failed: %s", cmp.Or(st.Error, "no reason given"))}
	case bus.TurnStepLimit:
		return &exitError{code: exitFailed, err: fmt.Errorf("turn stopped: %s", cmp.Or(st.Error, "no reason given"))}
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("turn ended in an unknown state %q", st.State)}
}
