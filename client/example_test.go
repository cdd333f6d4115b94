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

	"github.com/toolbus/toolbus/bus"
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
		Bus: bus.Config{Logger: slog.New(slog.DiscardHandler)},
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
	if _, err := c.Start(ctx, spec, ""); err != nil {
		log.Fatal(err)
	}
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
	if _, err := c.Start(ctx, spec, ""); err != nil {
		log.Fatal(err)
	}
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
