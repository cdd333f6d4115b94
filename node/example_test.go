package node_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
)

type weatherArgs struct {
	City string `json:"city" jsonschema_description:"the city's name"`
}

var weather = toolbus.MustDefine(toolbus.Def[weatherArgs]{
	Spec: toolbus.Spec{Name: "weather", Description: "Today's weather in a city.", Category: "forecast", ReadOnly: true},
	Execute: func(ctx context.Context, call toolbus.Call, a weatherArgs) (toolbus.Result, error) {
		return toolbus.TextResult("Sunny, 21°C in " + a.City), nil
	},
})

var quiet = slog.New(slog.DiscardHandler)

// Run a turn on an embedded bus with a tool of the program's own. The node hosts the
// tool in its category (forecast, from its Spec); the turn may call it, and its result
// gives the final text and each call's tool and outcome. The model is a script, so the
// example runs offline; Model: "openai:gpt-5.4" would ask a real one.
func ExampleNode_Run() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, node.Config{Bus: server.Config{Logger: quiet}, Tools: []*toolbus.Tool{weather}})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	res, err := n.Run(ctx, node.Turn{
		Input: "What is the weather in Oslo?",
		Script: `{"responses": [
			{"calls": [{"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}]},
			{"text": "It is sunny in Oslo."}]}`,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range res.Calls {
		fmt.Println(c.Tool, c.Outcome)
	}
	fmt.Println(res.State, res.Text)
	// Output:
	// weather ok
	// completed It is sunny in Oslo.
}

// Host a category for a bus that runs elsewhere: the node joins the bus at Server and
// serves the program's tools there, and only those. Turns on the bus's other nodes,
// and any client, find them in the bus's catalog and call them.
func ExampleStart_host() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The bus: here a server with a port in this process, elsewhere `toolbus node -listen`.
	creds := bus.Credentials{User: "ops", Password: "example-password"}
	srv, err := server.Start(ctx, server.Config{Listen: "127.0.0.1:-1", Logger: quiet,
		Users: []server.User{{Name: creds.User, Password: creds.Password}}})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	host, err := node.Start(ctx, node.Config{
		Server: srv.ClientURL(), Credentials: creds,
		Node:  node.NodeConfig{Name: "forecaster", Logger: quiet},
		Tools: []*toolbus.Tool{weather},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()

	// A caller of the bus: the tool comes from the catalog, the call goes to its host.
	c, err := client.Dial(ctx, srv.ClientURL(), "example", creds)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	tool, err := c.Tool(ctx, "weather")
	if err != nil {
		log.Fatal(err)
	}
	args, err := tool.Params.Parse(`{"city": "Oslo"}`, schema.ParseOptions{})
	if err != nil {
		log.Fatal(err)
	}
	reply, err := c.Call(ctx, tool, "demo", args)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tool.Category, reply.Outcome, reply.Content[0].Text)
	// Output:
	// forecast ok Sunny, 21°C in Oslo
}
