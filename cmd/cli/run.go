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

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// abortWait bounds the wait for a turn to end after an abort: the turn gives
// running calls client.AbortGrace to stop, then stores its transcript.
const abortWait = client.AbortGrace + 13*time.Second

func cmdRun(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "[flags] PROMPT",
		"Runs one agent turn and shows its tool calls live, then the model's answer.\n"+
			"Without -server it starts an embedded bus and node in this process. Ctrl-C aborts\n"+
			"the turn and shows how each call ended; a second Ctrl-C quits at once.\n"+
			"Exit status: 0 completed or terminated, 1 failed or step limit, 130 aborted.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var gf node.GatewayFlags
	gf.Register(fs, "embedded node: ", true)
	var (
		model        = fs.String("model", e.getenv("TOOLBUS_MODEL"), "the model: script:FILE (a scripted model, offline), openai:MODEL (Responses API, needs a key), chat:MODEL (Chat Completions, e.g. a local server at -base-url) or anthropic:MODEL (Messages API, ANTHROPIC_API_KEY) (env TOOLBUS_MODEL)")
		nodeName     = fs.String("node", "", "with -server: the node that runs the turn (default: any node that runs turns)")
		agent        = fs.String("agent", defaultAgent, "the agent the turn runs for: it selects the agent's home under a node's home root, and its todo list")
		home         = fs.String("home", ".", "embedded node: the agent home, where the file and command tools read, write and run commands")
		storeDir     = fs.String("store-dir", "", "embedded node: JetStream store directory (default: a temporary one, removed at exit)")
		maxSteps     = fs.Int("max-steps", 0, fmt.Sprintf("the most model calls in the turn (default %d)", bus.DefaultMaxSteps))
		instructions = fs.String("instructions", "", "instructions (system prompt) for the model")
		asJSON       = fs.Bool("json", false, "print only the turn's transcript and final status, as JSON")
		giveUp       = fs.Duration("give-up", 30*time.Second, "when the turn's node is lost: how long to wait for another node to resume the turn (at least three of its leases); before the turn's first status, how long the connection to the bus may stay down")
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
		return usagef("no model: pass -model script:FILE, openai:MODEL, chat:MODEL or anthropic:MODEL")
	case *maxSteps < 0:
		return usagef("-max-steps %d: want a positive number", *maxSteps)
	case *nodeName != "" && bf.server == "":
		return usagef("-node picks a node of a running bus: it needs -server")
	case *nodeName != "" && !bus.ValidToken(*nodeName):
		return usagef("-node %q is not a node name", *nodeName)
	}
	if bf.server != "" {
		set := flagsSet(fs)
		for _, f := range []string{"home", "store-dir", "base-url", "api-key-file", "request-timeout", "hosted-tool-search", "no-prompt-cache", "stream", "sandbox"} {
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

	// A bad -model is refused before an embedded node starts.
	checkGateway := func(gw gateway.Config) error { return checkModel("-model", req.Model, gw, bf.server == "") }
	bc, logs, err := turnBus(ctx, e, bf, &gf, embedOptions{home: *home, storeDir: *storeDir, sandbox: *sandbox}, checkGateway, *logFile, *verbose, stderr)
	if err != nil {
		return err
	}
	defer logs.Close()
	defer bc.Close()

	r := newRenderer(stdout, e)
	if *asJSON {
		r = &renderer{w: io.Discard, now: time.Now, notes: stderr}
	}
	if bf.server == "" {
		r.println(r.style(ansiDim, homeNote(*home, *sandbox)))
	} else {
		r.remote = true
	}
	final, err := followTurn(ctx, e, bc, *nodeName, req, r, logs, *giveUp)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printTranscript(ctx, bc, final, stdout); err != nil {
			return err
		}
	}
	return turnExit(final)
}

// checkModel refuses a model spec before any node starts: one of no known kind, and,
// for the embedded node (embedded), one its gateway cannot open (a missing key). A
// remote node opens the model with its own keys, so only the spec's kind is checked.
// name is where the spec came from: a flag ("-model", whose bad kind is a usage
// error) or a file ("workflow file: model").
func checkModel(name, model string, gw gateway.Config, embedded bool) error {
	if model == "" {
		return nil // a script
	}
	_, err := gateway.Open(model, gw)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, gateway.ErrUnknownModel) || strings.Contains(err.Error(), "names no model"):
		if strings.HasPrefix(name, "-") {
			return usagef("%s %v", name, err)
		}
		return fmt.Errorf("%s %v", name, err)
	case embedded:
		return fmt.Errorf("%s %s: %w", name, model, err)
	}
	return nil
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

// followTurn starts the turn req and shows it live until it ends: on nodeName, or any
// node that runs turns. Ctrl-C (ctx) aborts it and waits for its end; a turn whose node
// is lost and not resumed within giveUp is an error.
func followTurn(ctx context.Context, e *env, bc *busConn, nodeName string, req bus.TurnSpec, r *renderer, logs *logView, giveUp time.Duration) (bus.TurnStatus, error) {
	w, err := bc.cl.Watch(req.ID)
	if err != nil {
		return bus.TurnStatus{}, err
	}
	defer w.Stop()
	if ctx.Err() != nil {
		return bus.TurnStatus{}, &exitError{code: exitInterrupted, err: errors.New("interrupted before the turn started")}
	}
	began := time.Now()
	sctx, stop := untilDownFor(ctx, bc.nc, giveUp)
	t, err := bc.cl.Start(sctx, req, nodeName)
	stop()
	if errors.Is(err, client.ErrStartUnanswered) {
		return bus.TurnStatus{}, fmt.Errorf("%w: `toolbus watch %s` once the bus is back", err, req.ID)
	}
	if err != nil {
		return bus.TurnStatus{}, err
	}
	t.Close() // followed on w, with the owner's liveness and the approvals this command answers
	ow := &ownerWatch{turn: req.ID, r: r, giveUp: giveUp}
	approvals := newApprover(e, bc.cl, r, os.Stderr, r.w == io.Discard)
	if bc.node == nil {
		approvals.server = bc.where
	}
	lost := time.NewTimer(ow.live.Next(giveUp))
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
			if err := bc.cl.Abort(context.WithoutCancel(ctx), req.ID, "interrupted"); err != nil {
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
			// A lease without a word: the turn may have ended while this connection
			// was moving to another server (a paused one), its done status missed.
			if st, ok := w.Ended(ctx, req.ID); ok {
				r.done(st, time.Since(began))
				return st, nil
			}
			if err := ow.offline(bc); err != nil {
				return bus.TurnStatus{}, err
			}
			if err := ow.silent(); err != nil {
				return bus.TurnStatus{}, err
			}
			lost.Reset(ow.live.Next(giveUp))
		case m := <-w.C:
			ow.live.Heard(m)
			if m.Approval != nil {
				approvals.held(ctx, *m.Approval)
			}
			if ow.live.Lease > 0 {
				lost.Reset(ow.live.Lease)
			}
			if st, done := r.message(m); done {
				r.done(st, time.Since(began))
				return st, nil
			}
		}
	}
}

// untilDownFor is ctx, ended also once nc has been down for d: a start whose answer
// was lost with the connection is waited for (client.Start) as long as -give-up says
// the connection may stay down before the turn's first status.
func untilDownFor(ctx context.Context, nc *nats.Conn, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	status := nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	go func() {
		defer nc.RemoveStatusListener(status)
		var over <-chan time.Time
		for {
			select {
			case s := <-status:
				switch {
				case s == nats.CONNECTED:
					over = nil
				case over == nil:
					over = time.After(d)
				}
			case <-over:
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return ctx, cancel
}

// ownerWatch tells the person when the node that runs the turn seems lost, and gives
// up when no node resumed the turn within giveUp.
type ownerWatch struct {
	turn   string
	r      *renderer
	giveUp time.Duration
	live   client.Liveness
}

// offline gives up when nothing of the turn was heard (no lease yet) and the connection
// to the bus has been down for giveUp: the turn's node may have been lost before its
// first status, and nothing more can come.
func (w *ownerWatch) offline(bc *busConn) error {
	down, gone := w.live.Offline(bc.nc.IsConnected(), time.Now(), w.giveUp)
	if !gone {
		return nil
	}
	return &exitError{code: exitFailed, err: fmt.Errorf(
		"turn %s: nothing was heard of it, and the connection to %s has been down for %s; the turn may still run: `toolbus watch %s` once the bus is back",
		w.turn, bc.where, down.Round(time.Millisecond), w.turn)}
}

// silent notes a whole lease without a word of the turn's node.
func (w *ownerWatch) silent() error {
	missed, waited := w.live.Silent()
	if missed == 1 {
		w.r.println(w.r.style(ansiDim, fmt.Sprintf("node %s has said nothing of turn %s for %s: it seems lost; waiting for another node to resume the turn",
			w.live.Node, w.turn, w.live.Lease)))
	}
	if w.live.Lost(w.giveUp) {
		return &exitError{code: exitFailed, err: fmt.Errorf(
			"turn %s: its node %s was lost and no node resumed the turn within %s; when a node that runs turns is up, `toolbus resume %s` queues it again",
			w.turn, w.live.Node, waited, w.turn)}
	}
	return nil
}

// message shows one message of the turn; it reports the final status once the
// turn is done. Anyone may publish on the turn's subjects: what does not decode
// never reaches here (client.Watch skips it).
func (r *renderer) message(m bus.TurnMessage) (bus.TurnStatus, bool) {
	switch {
	case m.Event != nil:
		r.event(*m.Event)
	case m.Reply != nil:
		// A 503 "no responders" result has no reply; the batch record accounts
		// for that call.
		r.result(m.Subject.Call, *m.Reply)
	case m.Abort != nil:
		r.aborted(*m.Abort)
	case m.Text != nil:
		r.text(*m.Text)
	case m.Status != nil:
		st := *m.Status
		switch m.Subject.Status {
		case bus.StatusStarted:
			r.runningOn(st)
			for _, n := range st.Notes {
				if r.notes != nil {
					fmt.Fprintln(r.notes, "toolbus: note: "+n)
					continue
				}
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

// printTranscript reads the turn's transcript back from JetStream and prints
// it with the final status (client.RunOutput).
func printTranscript(ctx context.Context, bc *busConn, final bus.TurnStatus, stdout io.Writer) error {
	// Read it even after an interrupt: that is when it is most wanted.
	items, err := bc.cl.Transcript(context.WithoutCancel(ctx), final.Turn)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(client.RunOutput{Turn: final.Turn, Status: final, Transcript: items}, "", "  ")
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
