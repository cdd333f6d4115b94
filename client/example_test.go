package client_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
	brainpages "github.com/toolbus/toolbus/brain/pages"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// startNode starts an embedded node whose agents work in a fresh home holding one
// file, and returns a client on it.
func startNode(ctx context.Context) (*node.Node, *client.Client, func()) {
	home, err := os.MkdirTemp("", "toolbus-example-")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "notes.txt"), []byte("buy milk\ncall Ann\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	n, err := node.Start(ctx, node.Config{
		Bus: server.Config{Logger: slog.New(slog.DiscardHandler)},
		Node: node.NodeConfig{
			Name: "example", Turns: true, Home: home,
			Tools: toolsets.Settings{Computer: computer.Config{Sandbox: computer.SandboxConfig{Mode: computer.SandboxOff}}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	nc, err := n.Connect("example-client")
	if err != nil {
		log.Fatal(err)
	}
	return n, client.New(nc, client.Where("the embedded bus")), func() {
		n.Close()
		os.RemoveAll(home)
	}
}

// holdDestructive gives agent a profile that holds its destructive calls for a person's
// approval.
func holdDestructive(ctx context.Context, c *client.Client, agent string) error {
	profiles, err := c.Profiles(ctx)
	if err != nil {
		return err
	}
	_, err = profiles.Put(ctx, []byte(fmt.Sprintf(`{"version":%d,"agent":%q,"approvals":%q}`, toolsets.ProfileVersion, agent, toolsets.ApproveDestructive)))
	return err
}

// Follow a turn from its start to its end, printing each call as it settles. The turn
// plays a scripted model (offline): one step reads a file, the next answers.
func ExampleClient_Follow() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	spec := bus.TurnSpec{
		ID: bus.NewID(), Kind: bus.TurnMain, Agent: "demo", Input: "What is on my list?",
		Script: []byte(`{"responses":[
			{"calls":[{"name":"read_file","arguments":"{\"path\":\"notes.txt\"}"}]},
			{"text":"Two things: buy milk, and call Ann."}]}`),
	}
	// Watch before starting, so that nothing of the turn is missed.
	w, err := c.Watch(spec.ID)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	t, err := c.Start(ctx, spec, "")
	if err != nil {
		log.Fatal(err)
	}
	t.Close() // followed on w
	final, err := client.FollowWatch(ctx, w, spec.ID, 30*time.Second, func(m bus.TurnMessage) {
		if m.Reply != nil {
			fmt.Printf("%s: %s (%s)\n", m.Reply.Tool, m.Reply.Outcome, m.Reply.Label)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(final.State, final.Text)
	// Output:
	// read_file: ok (Read 2 lines of notes.txt)
	// completed Two things: buy milk, and call Ann.
}

// Follow the model's text as it streams, piece by piece (TurnMessage.Text), as a chat UI
// shows it. The scripted model writes its answer word by word, 20 ms apart.
func ExampleFollowWatch_text() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	spec := bus.TurnSpec{
		ID: bus.NewID(), Kind: bus.TurnMain, Agent: "demo", Input: "Say hello.",
		Script: []byte(`{"responses":[{"text":"Hello from a streamed step.","stream_delay_ms":20}]}`),
	}
	w, err := c.Watch(spec.ID)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	t, err := c.Start(ctx, spec, "")
	if err != nil {
		log.Fatal(err)
	}
	t.Close() // followed on w
	final, err := client.FollowWatch(ctx, w, spec.ID, 30*time.Second, func(m bus.TurnMessage) {
		if m.Text != nil {
			fmt.Printf("step %d: %q\n", m.Text.Step, m.Text.Text)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(final.State, final.Text)
	// Output:
	// step 1: "Hello "
	// step 1: "from "
	// step 1: "a "
	// step 1: "streamed "
	// step 1: "step."
	// completed Hello from a streamed step.
}

// Call one tool of a category served on the bus, as a turn would.
func ExampleClient_Call() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	tool, err := c.Tool(ctx, "read_file")
	if err != nil {
		log.Fatal(err)
	}
	args, err := tool.Params.Parse(`{"path": "notes.txt", "limit": 1}`, schema.ParseOptions{})
	if err != nil {
		log.Fatal(err)
	}
	reply, err := c.Call(ctx, tool, "demo", args)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reply.Outcome, reply.Label)
	first, _, _ := strings.Cut(reply.Content[0].Text, "\n")
	fmt.Println(first)
	// Output:
	// ok Read 1 line of notes.txt
	// notes.txt: lines 1-1 of 2
}

// Start a turn and wait for its end: its state, its answer, its calls.
func ExampleClient_Start() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	t, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "demo", Input: "What is on my list?",
		Script: []byte(`{"responses":[
			{"calls":[{"name":"read_file","arguments":"{\"path\":\"notes.txt\"}"}]},
			{"text":"Two things: buy milk, and call Ann."}]}`)}, "")
	if err != nil {
		log.Fatal(err)
	}
	final, err := t.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(final.State, final.Text)
	for _, r := range final.Calls {
		fmt.Println(r.Tool, r.Outcome)
	}
	// Output:
	// completed Two things: buy milk, and call Ann.
	// read_file ok
}

// Read a turn's messages as they come, each typed by its kind: here its statuses and
// its calls' results. The loop ends with the turn.
func ExampleTurn_Events() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	t, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "demo", Input: "Read my notes.",
		Script: []byte(`{"responses":[
			{"calls":[{"id":"c1","name":"read_file","arguments":"{\"path\":\"notes.txt\"}"}]},
			{"text":"Read."}]}`)}, "")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	for m, err := range t.Events(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		switch {
		case m.Reply != nil:
			fmt.Println("result", m.Subject.Call, m.Reply.Outcome)
		case m.Status != nil && m.Subject.Status != bus.StatusBeat:
			fmt.Println("status", m.Subject.Status, m.Status.State)
		}
	}
	// Output:
	// status started running
	// result c1 ok
	// status step running
	// status done completed
}

// Abort a turn: it calls the model no more, and its end says why.
func ExampleTurn_Abort() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	// A model that takes a minute to answer.
	t, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "demo", Input: "Think long.",
		Script: []byte(`{"responses":[{"delay_ms":60000,"text":"Done thinking."}]}`)}, "")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	for m, err := range t.Events(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		if m.Status != nil && m.Subject.Status == bus.StatusStarted {
			if err := t.Abort(ctx, "no time"); err != nil {
				log.Fatal(err)
			}
		}
		if m.Status != nil && m.Subject.Status == bus.StatusDone {
			fmt.Println(m.Status.State, m.Status.Error)
		}
	}
	// Output:
	// aborted turn aborted: no time
}

// Cancel one call while the turn goes on: the model reads that it was stopped.
func ExampleTurn_CancelCall() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	t, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "demo", Input: "Wait a minute, then answer.",
		Script: []byte(`{"responses":[
			{"calls":[{"id":"slow","name":"run_command","arguments":"{\"command\":\"sleep 60\"}"}]},
			{"text":"Answered without waiting."}]}`)}, "")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	for m, err := range t.Events(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		if m.Event != nil && m.Subject.Call == "slow" && m.Subject.Event == bus.EventStarted {
			if err := t.CancelCall(ctx, "slow", "taking too long"); err != nil {
				log.Fatal(err)
			}
		}
		if m.Status != nil && m.Subject.Status == bus.StatusDone {
			fmt.Println(m.Status.State, m.Status.Text)
			fmt.Println(m.Status.Calls[0].Tool, m.Status.Calls[0].Outcome)
		}
	}
	// Output:
	// completed Answered without waiting.
	// run_command stopped
}

// Approve a call the turn holds for a person's approval (the agent's profile holds its
// destructive calls), then see it run.
func ExampleTurn_Approve() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	if err := holdDestructive(ctx, c, "careful"); err != nil {
		log.Fatal(err)
	}
	t, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "careful", Input: "Write it down.",
		Script: []byte(`{"responses":[
			{"calls":[{"id":"w1","name":"write_file","arguments":"{\"path\":\"todo.txt\",\"content\":\"milk\\n\"}"}]},
			{"text":"Written."}]}`)}, "")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	for m, err := range t.Events(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		if m.Approval != nil {
			fmt.Println("held:", m.Approval.Tool)
			if err := t.Approve(ctx, m.Subject.Call); err != nil {
				log.Fatal(err)
			}
		}
		if m.Reply != nil {
			fmt.Println("ran:", m.Reply.Tool, m.Reply.Outcome)
		}
	}
	// Output:
	// held: write_file
	// ran: write_file ok
}

// Find a turn by its id, from another program or after a restart, and read it: the
// handle is the one Start returns.
func ExampleClient_Turn() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	started, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "demo", Input: "Say hello.",
		Script: []byte(`{"responses":[{"text":"Hello."}]}`)}, "")
	if err != nil {
		log.Fatal(err)
	}
	started.Close()

	t, err := c.Turn(started.ID)
	if err != nil {
		log.Fatal(err)
	}
	final, err := t.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	items, err := t.Transcript(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(final.State)
	for _, it := range items {
		if it.Kind == toolbus.KindMessage {
			fmt.Println(it.Role+":", it.Text)
		}
	}
	// Output:
	// completed
	// user: Say hello.
	// assistant: Hello.
}

// Refuse a call the turn holds for approval: it never runs, and the model reads why.
func ExampleTurn_Refuse() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	if err := holdDestructive(ctx, c, "careful"); err != nil {
		log.Fatal(err)
	}
	t, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "careful", Input: "Clear my notes.",
		Script: []byte(`{"responses":[
			{"calls":[{"id":"w1","name":"write_file","arguments":"{\"path\":\"notes.txt\",\"content\":\"\"}"}]},
			{"text":"Left them as they are."}]}`)}, "")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	for m, err := range t.Events(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		if m.Approval != nil {
			if err := t.Refuse(ctx, m.Subject.Call, "keep my notes"); err != nil {
				log.Fatal(err)
			}
		}
		if m.Status != nil && m.Subject.Status == bus.StatusDone {
			fmt.Println(m.Status.Calls[0].Tool, m.Status.Calls[0].Outcome)
			fmt.Println(m.Status.State, m.Status.Text)
		}
	}
	// Output:
	// write_file refused
	// completed Left them as they are.
}

// Read a turn's record: who runs it, how far it got, how it ended. It is nil for a turn
// the bus keeps no record of.
func ExampleTurn_Record() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	t, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "demo", Input: "Say hello.",
		Script: []byte(`{"responses":[{"text":"Hello."}]}`)}, "")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := t.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	rec, err := t.Record(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.State, rec.Owner, rec.Spec.Agent)
	// Output:
	// completed example demo
}

// Keep an agent's knowledge pages from a program: the client writes them to the bus's
// JetStream as the brain category does, and the nodes' recall finds them.
func ExampleClient_Pages() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	pages, err := c.Pages(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pages.Put(ctx, "ops", brainpages.Page{ID: "deploys", Title: "How we deploy",
		Tags: []string{"Runbook"}, Text: "Tag a release; the pipeline does the rest."}); err != nil {
		log.Fatal(err)
	}
	p, err := pages.Get(ctx, "ops", "deploys")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Title, p.Tags, p.Text)
	// Output:
	// How we deploy [runbook] Tag a release; the pipeline does the rest.
}

// Give an agent a profile: the document is checked against its version's schema before
// it is stored, and the agent's next turns are assembled from it.
func ExampleClient_Profiles() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	profiles, err := c.Profiles(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := profiles.Put(ctx, []byte(`{"version": 5, "agent": "ops", "approvals": "sometimes"}`)); err != nil {
		fmt.Println(err)
	}
	p, err := profiles.Put(ctx, []byte(`{"version": 5, "agent": "ops", "approvals": "destructive"}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.Agent, p.Approvals)
	// Output:
	// invalid agent profile: /approvals: value sometimes should be one of the allowed values: never, destructive, writes
	// ops destructive
}

// Wait for a turn's end and read how it went: its state, its final text, each call.
func ExampleTurn_Wait() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	t, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "demo", Input: "What is in notes.txt?",
		Script: []byte(`{"responses":[{"calls":[{"name":"read_file","arguments":"{\"path\":\"notes.txt\"}"}]},{"text":"A note."}]}`)}, "")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	end, err := t.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(end.State, end.Text)
	for _, call := range end.Calls {
		fmt.Println(call.Tool, call.Outcome)
	}
	// Output:
	// completed A note.
	// read_file ok
}

// Read a finished turn's transcript: the input, each call and its output, the answer.
func ExampleTurn_Transcript() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, c, stop := startNode(ctx)
	defer stop()

	t, err := c.Start(ctx, bus.TurnSpec{Kind: bus.TurnMain, Agent: "demo", Input: "Say hello.",
		Script: []byte(`{"responses":[{"text":"Hello."}]}`)}, "")
	if err != nil {
		log.Fatal(err)
	}
	defer t.Close()
	if _, err := t.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	items, err := t.Transcript(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, it := range items {
		fmt.Println(it.Kind, it.Role, it.Text)
	}
	// Output:
	// message user Say hello.
	// message assistant Hello.
}
