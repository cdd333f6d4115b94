package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets/workflow"

	"github.com/toolbus/toolbus/internal/jsonpos"
	"github.com/toolbus/toolbus/internal/label"
)

// The workflow command calls the workflow tools over the bus, as a turn's calls would
// go, so a workflow started here is the same as one a main turn starts; start then
// follows it live: its task turns as they run, its document as it moves on.

const workflowUsage = `start|view|list|cancel [flags] [FILE|ID]`

const workflowAbout = "Starts, follows, lists and cancels workflows: tasks that each run as an isolated\n" +
	"turn and end by submitting a result that passes the task's JSON Schema. The\n" +
	"workflow tools run on the bus (category workflow); view, list and cancel need\n" +
	"-server (or NATS_URL). start without -server runs the workflow on an embedded\n" +
	"bus and node, and follows it to its end.\n" +
	"  toolbus workflow start [flags] FILE     FILE holds workflow_start's arguments (- for standard input)\n" +
	"  toolbus workflow view [-follow] ID\n" +
	"  toolbus workflow list [-state STATE]\n" +
	"  toolbus workflow cancel [-reason TEXT] ID"

func cmdWorkflow(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, e, "workflow", workflowUsage, workflowAbout, "start, view, list or cancel", subcommands{
		"start": workflowStart, "view": workflowView, "show": workflowView,
		"list": workflowList, "ls": workflowList, "cancel": workflowCancel,
	}, args, stdout, stderr)
}

func workflowStart(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("workflow start", "[flags] FILE",
		"Starts the workflow FILE describes (workflow_start's arguments: a title and the\n"+
			"tasks, each with instructions, a result_schema, depends_on, max_attempts, and for\n"+
			"offline runs a script) and follows it: each task turn as it runs, each task as it\n"+
			"ends, then the whole workflow. Ctrl-C cancels the workflow. Without -server it runs\n"+
			"on an embedded bus and node. Exit status: 0 completed, 1 failed or cancelled.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var gf node.GatewayFlags
	gf.Register(fs, "embedded node: ", false)
	var (
		agent    = fs.String("agent", defaultAgent, "the agent the workflow runs for")
		model    = fs.String("model", e.getenv("TOOLBUS_MODEL"), "the model of the task turns, openai:MODEL, chat:MODEL or anthropic:MODEL, when FILE names none; tasks with a script play it instead (env TOOLBUS_MODEL)")
		asJSON   = fs.Bool("json", false, "print only the workflow's document at the end (with -detach: at once), as JSON")
		detach   = fs.Bool("detach", false, "with -server: return once the workflow has started, without following it")
		storeDir = fs.String("store-dir", "", "embedded node: JetStream store directory (default: a temporary one, removed at exit)")
		logFile  = fs.String("log", "", "embedded node: append its whole log to this file")
		verbose  = fs.Bool("v", false, "show the embedded node's info lines too")
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return usagef("want one workflow file")
	case *detach && bf.server == "":
		return usagef("-detach leaves the workflow to a running bus: it needs -server")
	case strings.HasPrefix(*model, "script:"):
		return usagef("-model %s: a workflow plays scripts per task (each task's script in FILE); -model names a real model", *model)
	}
	if bf.server != "" {
		set := flagsSet(fs)
		for _, f := range []string{"store-dir", "base-url", "api-key-file", "request-timeout", "no-prompt-cache", "stream", "log"} {
			if set[f] {
				return usagef("-%s configures the embedded node; with -server the remote nodes use their own", f)
			}
		}
	}
	if err := checkAgent(*agent); err != nil {
		return err
	}
	doc, err := readDoc(e.stdin, "workflow file", pos[0])
	if err != nil {
		return err
	}
	var def workflow.Definition
	if err := jsonpos.Decode(docName(pos[0]), doc, &def, true); err != nil {
		return fmt.Errorf("workflow file: %w", err)
	}
	fromFile := def.Model != ""
	if !fromFile {
		def.Model = *model
	}
	if err := def.Check(); err != nil {
		return err
	}
	// A bad model is refused before an embedded node starts, as run does: its kind
	// always, a missing key when the embedded node would open it for a task without a
	// script.
	needsModel := slices.ContainsFunc(def.Tasks, func(t workflow.TaskDef) bool { return len(t.Script) == 0 })
	name := "-model"
	if fromFile {
		name = "workflow file: model"
	}
	checkGateway := func(gw gateway.Config) error { return checkModel(name, def.Model, gw, bf.server == "" && needsModel) }
	bc, logs, err := turnBus(ctx, e, bf, &gf, embedOptions{home: ".", storeDir: *storeDir}, checkGateway, *logFile, *verbose, stderr)
	if err != nil {
		return err
	}
	defer logs.Close()
	defer bc.Close()

	args2, err := json.Marshal(def)
	if err != nil {
		return err
	}
	if *detach {
		wf, err := callWorkflowTool(ctx, bc, "workflow_start", *agent, args2)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, wf)
		}
		fmt.Fprintf(stdout, "workflow %s started: %s\n", wf.ID, label.Plural(len(wf.Tasks), "task"))
		fmt.Fprintf(stdout, "follow it: toolbus workflow view -follow -server … -agent %s %s\n", wf.Agent, wf.ID)
		return nil
	}
	return followToEnd(ctx, e, bc, "workflow_start", *agent, args2, *asJSON, false, stdout)
}

// followToEnd calls a workflow tool and shows the workflow it answers with live until it
// ends (with -json, prints its final document instead); the exit says how it ended.
// showFirst prints the workflow as the tool found it before following it.
func followToEnd(ctx context.Context, e *env, bc *busConn, tool, agent string, args []byte, asJSON, showFirst bool, stdout io.Writer) error {
	r := newRenderer(stdout, e)
	if asJSON {
		r = &renderer{w: io.Discard, now: time.Now}
	}
	// Watch the task turns before any can start.
	watch, err := bc.cl.WatchWorkflows()
	if err != nil {
		return err
	}
	defer watch.Stop()
	wf, err := callWorkflowTool(ctx, bc, tool, agent, args)
	if err != nil {
		return err
	}
	if showFirst {
		r.println(workflow.View(wf))
	}
	if wf, err = followWorkflow(ctx, bc, wf, watch, r); err != nil {
		return err
	}
	if asJSON {
		if err := printJSON(stdout, wf); err != nil {
			return err
		}
	}
	return workflowExit(wf)
}

// printWorkflow prints a workflow's document as JSON, or its view.
func printWorkflow(stdout io.Writer, wf *bus.Workflow, asJSON bool) error {
	if asJSON {
		return printJSON(stdout, wf)
	}
	_, err := fmt.Fprintln(stdout, workflow.View(wf))
	return err
}

// workflowExit maps how a workflow ended to the command's exit.
func workflowExit(wf *bus.Workflow) error {
	switch wf.State {
	case bus.WorkflowCompleted:
		return nil
	case bus.WorkflowRunning:
		return &exitError{code: exitInterrupted, err: fmt.Errorf("workflow %s still runs", wf.ID)}
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("workflow %s %s: %s", wf.ID, wf.State, cmp.Or(wf.Error, "no reason given"))}
}

func workflowView(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("workflow view", "[flags] ID",
		"Shows one workflow: its state, each task with its attempts (turn, outcome, reason),\n"+
			"result and error. -follow shows it live until it ends.", stderr)
	var bf busFlags
	bf.register(fs, e)
	agent := fs.String("agent", defaultAgent, "the agent whose workflow it is")
	asJSON := fs.Bool("json", false, "print the workflow's document as JSON")
	follow := fs.Bool("follow", false, "follow the workflow live until it ends, as start does")
	bc, pos, err := workflowConn(ctx, fs, &bf, args, agent, oneWorkflowID)
	if err != nil {
		return err
	}
	defer bc.Close()
	req, _ := json.Marshal(map[string]string{"workflow_id": pos[0]})
	if *follow {
		return followToEnd(ctx, e, bc, "workflow_view", *agent, req, *asJSON, true, stdout)
	}
	wf, err := callWorkflowTool(ctx, bc, "workflow_view", *agent, req)
	if err != nil {
		return err
	}
	return printWorkflow(stdout, wf, *asJSON)
}

func workflowList(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("workflow list", "[flags]", "Lists an agent's workflows, newest first.", stderr)
	var bf busFlags
	bf.register(fs, e)
	agent := fs.String("agent", defaultAgent, "the agent whose workflows to list")
	asJSON := fs.Bool("json", false, "print the workflows' documents as a JSON array")
	state := fs.String("state", "", "only workflows in this state: running, completed, failed or cancelled")
	bc, _, err := workflowConn(ctx, fs, &bf, args, agent, func(pos []string) error {
		switch {
		case len(pos) > 0:
			return usagef("unexpected arguments %q", pos)
		case *state != "" && !bus.WorkflowState(*state).Valid():
			return usagef("-state %q: want running, completed, failed or cancelled", *state)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer bc.Close()
	// workflow_list answers a page at a time; the command lists them all.
	const pageSize = 100
	var wfs []*bus.Workflow
	for after := ""; ; {
		q := map[string]any{"limit": pageSize}
		if *state != "" {
			q["state"] = *state
		}
		if after != "" {
			q["after"] = after
		}
		req, _ := json.Marshal(q)
		reply, err := workflowCall(ctx, bc, "workflow_list", *agent, req)
		if err != nil {
			return err
		}
		var page []*bus.Workflow
		if err := json.Unmarshal(reply.Details, &page); err != nil {
			return fmt.Errorf("workflow_list: malformed details: %w", err)
		}
		wfs = append(wfs, page...)
		if len(page) < pageSize {
			break
		}
		after = page[len(page)-1].ID
	}
	if *asJSON {
		return printJSON(stdout, wfs)
	}
	if len(wfs) == 0 {
		fmt.Fprintf(stderr, "toolbus: agent %s has no %sworkflows\n", *agent, cmp.Or(*state+" ", ""))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTASKS\tSTARTED\tTITLE")
	for _, wf := range wfs {
		done := 0
		for _, t := range wf.Tasks {
			if t.State == bus.TaskDone {
				done++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d done\t%s\t%s\n", wf.ID, wf.State, done, len(wf.Tasks),
			wf.Created.Local().Format("2006-01-02 15:04:05"), truncate(wf.Title, 60))
	}
	return tw.Flush()
}

func workflowCancel(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("workflow cancel", "[flags] ID",
		"Cancels a running workflow: its running task turns are aborted and its unfinished\n"+
			"tasks recorded as cancelled.", stderr)
	var bf busFlags
	bf.register(fs, e)
	agent := fs.String("agent", defaultAgent, "the agent whose workflow it is")
	asJSON := fs.Bool("json", false, "print the workflow's document as JSON")
	reason := fs.String("reason", "", "why, recorded with the workflow and its tasks")
	bc, pos, err := workflowConn(ctx, fs, &bf, args, agent, oneWorkflowID)
	if err != nil {
		return err
	}
	defer bc.Close()
	wf, err := bc.cl.CancelWorkflow(ctx, *agent, pos[0], cmp.Or(*reason, "cancelled from the command line"))
	if err != nil {
		return err
	}
	return printWorkflow(stdout, wf, *asJSON)
}

// workflowConn parses the flags of view, list and cancel, checks them, and dials -server.
func workflowConn(ctx context.Context, fs *flag.FlagSet, bf *busFlags, args []string, agent *string, check func(pos []string) error) (*busConn, []string, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, nil, err
	}
	if err := check(pos); err != nil {
		return nil, nil, err
	}
	if bf.server == "" {
		return nil, nil, usagef("workflows live on a running bus: this needs -server (or NATS_URL); an embedded bus ends with its own command")
	}
	if err := checkAgent(*agent); err != nil {
		return nil, nil, err
	}
	bc, err := connect(ctx, *bf, embedOptions{}, nil)
	if err != nil {
		return nil, nil, err
	}
	return bc, pos, nil
}

func oneWorkflowID(pos []string) error {
	if len(pos) != 1 {
		return usagef("want one workflow id")
	}
	return nil
}

// workflowCall calls one workflow tool as agent and returns its reply, an error for any
// outcome but ok.
func workflowCall(ctx context.Context, bc *busConn, tool, agent string, args []byte) (bus.ToolReply, error) {
	spec := workflowSpec(tool)
	parsed, err := spec.Params.Parse(string(args), schema.ParseOptions{})
	if err != nil {
		return bus.ToolReply{}, fmt.Errorf("%s: %w", tool, err)
	}
	reply, err := bc.cl.Call(ctx, spec, agent, parsed)
	if err != nil {
		return bus.ToolReply{}, err
	}
	if reply.Outcome != bus.OutcomeOK {
		msg := cmp.Or(reply.Error, toolbus.Result{Content: reply.Content}.Text())
		return bus.ToolReply{}, fmt.Errorf("%s: %s", tool, msg)
	}
	return reply, nil
}

// callWorkflowTool calls a workflow tool whose details are a workflow's document.
func callWorkflowTool(ctx context.Context, bc *busConn, tool, agent string, args []byte) (*bus.Workflow, error) {
	reply, err := workflowCall(ctx, bc, tool, agent, args)
	if err != nil {
		return nil, err
	}
	var wf bus.Workflow
	if err := json.Unmarshal(reply.Details, &wf); err != nil {
		return nil, fmt.Errorf("%s: malformed details: %w", tool, err)
	}
	return &wf, nil
}

// workflowSpec is the spec of a workflow tool, as this build defines it.
func workflowSpec(name string) *toolbus.Spec {
	for _, s := range workflow.Specs() {
		if s.Name == name {
			return s
		}
	}
	panic("no workflow tool " + name)
}

// followPoll is how often a follower reads the document itself too, in case a write
// passed while its connection was down.
const followPoll = 2 * time.Second

// taskStatus is one status of a task turn, as followWorkflow shows it.
type taskStatus struct {
	turn, kind string
	st         bus.TurnStatus
}

// followWorkflow shows a workflow live until it ends: its task turns' statuses and each
// change of its document. An interrupt cancels the workflow, which then ends.
//
// The order of what it shows is the order of events: the node that ends a task turn
// publishes the turn's last status before it writes the workflow, on one connection,
// so when a revision comes from the watcher the statuses published before it are
// already in watch.msgs (a channel subscription's messages are delivered as the
// connection reads them, the watcher's through a goroutine of its own), and are shown
// first. A turn is queued only after the revision that records its attempt is stored,
// so a status of a turn that no revision shown yet records waits for that revision.
func followWorkflow(ctx context.Context, bc *busConn, wf *bus.Workflow, watch *client.WorkflowWatch, r *renderer) (*bus.Workflow, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	r.println(r.style(ansiBold, fmt.Sprintf("workflow %s %q: %s, agent %s", wf.ID, wf.Title, label.Plural(len(wf.Tasks), "task"), wf.Agent)))
	prev := &bus.Workflow{ID: wf.ID, Tasks: make([]bus.Task, len(wf.Tasks))}
	for i, t := range wf.Tasks {
		prev.Tasks[i] = bus.Task{ID: t.ID, State: bus.TaskPending}
	}
	prefix := wf.ID + "-"
	// held are the statuses of task turns whose attempt no revision shown yet records.
	var held []taskStatus
	printStatus := func(s taskStatus) {
		if line := taskTurnLine(r, strings.TrimPrefix(s.turn, prefix), s.kind, s.st); line != "" {
			r.println(line)
		}
	}
	// show prints what a newer revision of the document changed, then the statuses held
	// for the attempts it records; it returns the document once the workflow has ended.
	show := func(cur *bus.Workflow) *bus.Workflow {
		if cur.ID != wf.ID || (!prev.Updated.IsZero() && !cur.Updated.After(prev.Updated)) {
			return nil
		}
		// The statuses held for an attempt this revision records come right after the
		// attempt's line, before its task's end: a watch that began late (a workflow of a
		// few milliseconds) shows a task's start and end in one revision.
		for _, line := range workflowChanges(r, prev, cur, func(turn string) []string {
			var lines []string
			kept := held[:0]
			for _, s := range held {
				if s.turn != turn {
					kept = append(kept, s)
				} else if line := taskTurnLine(r, strings.TrimPrefix(s.turn, prefix), s.kind, s.st); line != "" {
					lines = append(lines, line)
				}
			}
			held = kept
			return lines
		}) {
			r.println(line)
		}
		prev = cur
		if !cur.State.Ended() {
			return nil
		}
		r.println("")
		r.println(workflow.View(cur))
		r.println("")
		r.println(r.style(ansiDim, fmt.Sprintf("%s · %d of %d tasks done · %s", cur.State, doneTasks(cur), len(cur.Tasks),
			formatElapsed(workflowTook(cur)))))
		return cur
	}
	// status shows a status of one of the workflow's task turns, or holds it.
	status := func(m *bus.TurnMessage) {
		ts := m.Subject
		if !strings.HasPrefix(ts.Turn, prefix) {
			return
		}
		s := taskStatus{turn: ts.Turn, kind: ts.Status, st: *m.Status}
		if !hasAttempt(prev, s.turn) {
			held = append(held, s)
			return
		}
		printStatus(s)
	}
	if ended := show(wf); ended != nil {
		return ended, nil
	}
	if err := watch.Document(wctx, wf.Agent, wf.ID); err != nil {
		r.println(r.style(ansiDim, fmt.Sprintf("not watching the workflow's document (%v): reading it every %s", err, followPoll)))
	}
	poll := time.NewTicker(followPoll)
	defer poll.Stop()
	interrupt := ctx.Done()
	var giveUp <-chan time.Time
	for {
		select {
		case <-interrupt:
			interrupt = nil
			r.println(r.style(ansiDim, "interrupted: cancelling the workflow"))
			req, _ := json.Marshal(map[string]string{"workflow_id": wf.ID, "reason": "interrupted"})
			if _, err := workflowCall(wctx, bc, "workflow_cancel", wf.Agent, req); err != nil {
				r.println(r.style(ansiRed, err.Error()))
			}
			giveUp = time.After(abortWait)
		case <-giveUp:
			return prev, &exitError{code: exitInterrupted, err: fmt.Errorf("workflow %s did not end within %s of its cancel", wf.ID, abortWait)}
		case <-poll.C:
			req, _ := json.Marshal(map[string]string{"workflow_id": wf.ID})
			if cur, err := callWorkflowTool(wctx, bc, "workflow_view", wf.Agent, req); err == nil {
				if ended := show(cur); ended != nil {
					return ended, nil
				}
			}
		case ev := <-watch.C:
			// The client delivers a revision after the statuses published before it.
			if ev.Status != nil {
				status(ev.Status)
			} else if ended := show(ev.Doc); ended != nil {
				return ended, nil
			}
		}
	}
}

// workflowTook is how long an ended workflow ran, by its own record: created to ended
// (to its last write, for a document stored before it had an end time). A follower that
// joins late, or a bus far away, does not change it.
func workflowTook(wf *bus.Workflow) time.Duration {
	end := wf.Ended
	if end.IsZero() {
		end = wf.Updated
	}
	return end.Sub(wf.Created)
}

// hasAttempt reports whether turn is the turn of one of wf's attempts.
func hasAttempt(wf *bus.Workflow, turn string) bool {
	for _, t := range wf.Tasks {
		for _, a := range t.Attempts {
			if a.Turn == turn {
				return true
			}
		}
	}
	return false
}

func doneTasks(wf *bus.Workflow) int {
	n := 0
	for _, t := range wf.Tasks {
		if t.State == bus.TaskDone {
			n++
		}
	}
	return n
}

// taskName is "<task>#<attempt>" for a task turn's id without its workflow prefix.
func taskName(rest string) string {
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return rest
	}
	return rest[:i] + "#" + rest[i+1:]
}

// taskTurnLine describes one status of a task turn.
func taskTurnLine(r *renderer, rest, kind string, st bus.TurnStatus) string {
	name := taskName(rest)
	switch kind {
	case bus.StatusStarted:
		if res := st.Resumed; res != nil {
			return r.style(ansiDim, fmt.Sprintf("  %s resumed on node %s (from %s: %s)", name, st.Node, cmp.Or(res.From, "the intake"), res.Why))
		}
		return r.style(ansiDim, fmt.Sprintf("  %s running on node %s", name, st.Node))
	case bus.StatusStep:
		var lines []string
		if st.Text != "" {
			first, _, _ := strings.Cut(st.Text, "\n")
			lines = append(lines, fmt.Sprintf("  %s: %s", name, truncate(first, 100)))
		}
		for _, n := range st.Notes {
			lines = append(lines, r.style(ansiDim, fmt.Sprintf("  %s ↺ %s", name, n)))
		}
		for _, c := range st.Calls {
			if c.Outcome == bus.OutcomeOK {
				lines = append(lines, fmt.Sprintf("  %s %s %s", name, r.style(ansiGreen, "✓"), cmp.Or(c.Label, c.Tool)))
				continue
			}
			// A refused submission: its first line, then each leaf "path: message".
			first, leaves, _ := strings.Cut(c.Error, "\n")
			lines = append(lines, fmt.Sprintf("  %s %s %s: %s", name, r.style(ansiRed, "✗"), c.Tool, truncate(first, 100)))
			for _, l := range strings.Split(leaves, "\n") {
				if l != "" {
					lines = append(lines, "      "+truncate(l, 120))
				}
			}
		}
		return strings.Join(lines, "\n")
	case bus.StatusDone:
		s := fmt.Sprintf("  %s %s after %s", name, endedAs(st), label.Plural(st.Step, "step"))
		if st.Error != "" && st.State != bus.TurnTerminated {
			s += ": " + st.Error
		}
		return r.style(ansiDim, s)
	}
	return ""
}

// workflowChanges describes what changed in a workflow's document; statuses gives the
// lines of the statuses held for an attempt's turn, which follow the attempt's.
func workflowChanges(r *renderer, prev, cur *bus.Workflow, statuses func(turn string) []string) []string {
	var lines []string
	for i := range cur.Tasks {
		t := &cur.Tasks[i]
		var old bus.Task
		if i < len(prev.Tasks) {
			old = prev.Tasks[i]
		}
		for j, a := range t.Attempts {
			var was bus.Attempt
			if j < len(old.Attempts) {
				was = old.Attempts[j]
			} else {
				lines = append(lines, fmt.Sprintf("▶ task %s: attempt %d of %d (turn %s)", t.ID, a.N, t.MaxAttempts, a.Turn))
			}
			lines = append(lines, statuses(a.Turn)...)
			if a.Outcome != "" && was.Outcome == "" && a.Outcome != bus.AttemptAccepted {
				lines = append(lines, r.style(ansiRed, fmt.Sprintf("✗ task %s: attempt %d %s: %s", t.ID, a.N, a.Outcome, a.Reason)))
			}
		}
		if t.State == old.State {
			continue
		}
		switch t.State {
		case bus.TaskDone:
			lines = append(lines, r.style(ansiGreen, fmt.Sprintf("✓ task %s done: %s", t.ID, truncate(string(t.Result), 200))))
		case bus.TaskFailed:
			lines = append(lines, r.style(ansiRed, fmt.Sprintf("✗ task %s failed: %s", t.ID, t.Error)))
		case bus.TaskCancelled:
			lines = append(lines, fmt.Sprintf("✗ task %s cancelled", t.ID))
		}
	}
	return lines
}
