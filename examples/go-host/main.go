// Command go-host hosts one tool on a running toolbus bus: a Go program with a connection
// of its own, which links the wire and the category host (package host) and nothing of a
// node. Its tool, text.count_words, counts the words of a text; any turn whose profile
// includes the text namespace can call it.
//
// Start a node with a client listener and a user of the tool role for category text
// (docs/operations.md), then:
//
//	NATS_URL=nats://127.0.0.1:4222 NATS_USER=words NATS_PASSWORD=secret go run ./examples/go-host
//
// It serves until interrupted (SIGINT, SIGTERM).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/host"
)

type countArgs struct {
	Text string `json:"text" jsonschema_description:"the text whose words to count"`
}

var countWords = toolbus.MustDefine(toolbus.Def[countArgs]{
	Spec: toolbus.Spec{Name: "count_words", Description: "Count the words of a text.",
		Category: "text", Mode: toolbus.Parallel, ReadOnly: true},
	DescribeActivity: func(a countArgs) string { return fmt.Sprintf("Counting the words of %d bytes", len(a.Text)) },
	Execute: func(ctx context.Context, call toolbus.Call, a countArgs) (toolbus.Result, error) {
		return toolbus.TextResult(fmt.Sprint(len(strings.Fields(a.Text)))), nil
	},
})

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := bus.Dial(ctx, url, "go-host", bus.Credentials{User: os.Getenv("NATS_USER"), Password: os.Getenv("NATS_PASSWORD")})
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	log.Printf("serving text.count_words on %s", nc.ConnectedUrlRedacted())
	if err := host.Serve(ctx, nc, countWords); err != nil {
		log.Fatal(err)
	}
}
