package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/host"
	"github.com/toolbus/toolbus/schema"
)

type shoutArgs struct {
	Text string `json:"text" jsonschema_description:"what to shout"`
}

var shout = toolbus.MustDefine(toolbus.Def[shoutArgs]{
	Spec: toolbus.Spec{Name: "shout", Description: "Say a text in capitals.", Category: "voice", Mode: toolbus.Parallel, ReadOnly: true},
	Execute: func(_ context.Context, _ toolbus.Call, a shoutArgs) (toolbus.Result, error) {
		return toolbus.TextResult(strings.ToUpper(a.Text) + "!"), nil
	},
})

// startBus starts a bus for an example: a server in this process. A program hosting its
// tools on a bus that runs elsewhere dials it instead (bus.Dial, examples/go-host).
func startBus(ctx context.Context) (*server.Server, func()) {
	dir, err := os.MkdirTemp("", "host-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.Start(ctx, server.Config{StoreDir: dir, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	return srv, func() { srv.Close(); os.RemoveAll(dir) }
}

// served waits for a host of category to tell the catalogs it serves: up is closed
// then. stop ends the wait.
func served(nc *nats.Conn, category string) (up <-chan struct{}, stop func(), err error) {
	ch := make(chan struct{})
	var once sync.Once
	sub, err := nc.Subscribe(bus.CatalogChanged, func(m *nats.Msg) {
		var c bus.CatalogChange
		if json.Unmarshal(m.Data, &c) == nil && c.Category == category && c.State == bus.CatalogUp {
			once.Do(func() { close(ch) })
		}
	})
	if err != nil {
		return nil, nil, err
	}
	// The subscription reaches the server before the host may start.
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, nil, err
	}
	return ch, func() { _ = sub.Unsubscribe() }, nil
}

// mustServe is served for an example.
func mustServe(nc *nats.Conn, category string) (<-chan struct{}, func()) {
	up, stop, err := served(nc, category)
	if err != nil {
		log.Fatal(err)
	}
	return up, stop
}

// callShout calls the shout tool as any client of the bus does.
func callShout(ctx context.Context, nc *nats.Conn, text string) {
	args, err := shout.Params.Parse(`{"text": "`+text+`"}`, schema.ParseOptions{})
	if err != nil {
		log.Fatal(err)
	}
	reply, err := client.New(nc).Call(ctx, &shout.Spec, "", args)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(reply.Outcome, reply.Content[0].Text)
}

// Host a tool on a bus with a connection of the program's own: Serve serves it until its
// context ends, and any turn or client of the bus may call it.
func ExampleServe() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, stop := startBus(ctx)
	defer stop()
	nc, err := srv.Connect("my-tools") // elsewhere: bus.Dial(ctx, url, "my-tools", creds)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	up, stopWait := mustServe(nc, "voice")
	defer stopWait()
	serving, end := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- host.Serve(serving, nc, shout) }()
	<-up

	callShout(ctx, nc, "hello")
	end()
	fmt.Println("Serve returned", <-done)
	// Output:
	// ok HELLO!
	// Serve returned <nil>
}

// ServeConfig takes the rest of a host's Config: here a bound on the calls a category
// runs at once and a default timeout for tools that set none.
func ExampleServeConfig() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, stop := startBus(ctx)
	defer stop()
	nc, err := srv.Connect("my-tools")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	up, stopWait := mustServe(nc, "voice")
	defer stopWait()
	serving, end := context.WithCancel(ctx)
	defer end()
	go func() {
		err := host.ServeConfig(serving, host.Config{Conn: nc, Tools: []*toolbus.Tool{shout},
			MaxConcurrent: 4, DefaultTimeout: 30 * time.Second, Logger: quiet})
		if err != nil {
			log.Print(err)
		}
	}()
	<-up
	callShout(ctx, nc, "quiet please")
	// Output:
	// ok QUIET PLEASE!
}

// A Host is one category served from Start to Stop, for a program that runs its own
// supervision (a node's supervisor restarts its hosts this way). Stop takes it out of
// the catalog; the connection stays the program's.
func ExampleHost() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, stop := startBus(ctx)
	defer stop()
	nc, err := srv.Connect("my-tools")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	h, err := host.New(host.Config{Category: "voice", Tools: []*toolbus.Tool{shout}, Conn: nc, Logger: quiet,
		Failed: func(err error) { log.Print("the host stopped serving: ", err) }})
	if err != nil {
		log.Fatal(err)
	}
	if err := h.Start(); err != nil { // returns once it serves
		log.Fatal(err)
	}
	callShout(ctx, nc, "started")
	h.Stop()
	_, err = nc.Request(bus.ToolSubject("voice", "shout"), []byte(`{"text":"anyone?"}`), time.Second)
	fmt.Println(h.Category(), "after Stop:", err)
	// Output:
	// ok STARTED!
	// voice after Stop: nats: no responders available for request
}
