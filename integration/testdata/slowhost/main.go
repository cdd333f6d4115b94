// Command slowhost serves the category "slow" for the durable-turn tests: tools that take
// the time they are asked for and log each execution's start and end to a file, so a
// test can count how often each call ran. A call asked to wait -1 seconds is held until
// the release file (-release) exists, one asked -N (N > 1) until "<release>.N" does: a
// test then decides when the calls in flight end, instead of guessing a duration long
// enough. It is a plain micro service (catalog.Serve),
// as a worker in another process would be, and reconnects to any node of the cluster.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/schema"
)

func main() {
	servers := flag.String("server", "", "comma-separated NATS URLs")
	logPath := flag.String("log", "", "file to log executions to")
	release := flag.String("release", "", "file whose existence ends the held calls (seconds < 0)")
	flag.Parse()
	nc, err := nats.Connect(*servers, nats.Name("slowhost"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		// As bus.Dial: a server that stops running (paused) is left within seconds.
		nats.PingInterval(2*time.Second), nats.MaxPingsOutstanding(2))
	if err != nil {
		fmt.Fprintln(os.Stderr, "slowhost:", err)
		os.Exit(1)
	}
	logf, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slowhost:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(logf, s)
		_ = logf.Sync()
	}
	params := schema.MustFromJSON([]byte(`{"type":"object","properties":{"id":{"type":"string"},"seconds":{"type":"number"}},"required":["id","seconds"]}`))
	specs := []*toolbus.Spec{
		{Name: "wait", Description: "Wait, then say so. Reads nothing, changes nothing.", Category: "slow", Namespace: "slow",
			ReadOnly: true, Params: params, Timeout: time.Minute},
		{Name: "mark", Description: "Wait, then leave a mark.", Category: "slow", Namespace: "slow",
			Destructive: true, Params: params, Timeout: time.Minute},
	}
	handle := func(s *toolbus.Spec, r micro.Request) {
		go func() {
			req, _ := bus.ParseToolRequest(nats.Header(r.Headers()))
			var a struct {
				ID      string  `json:"id"`
				Seconds float64 `json:"seconds"`
			}
			_ = json.Unmarshal(r.Data(), &a)
			note("start " + a.ID)
			if a.Seconds < 0 {
				// A poll of a file, in a test's helper: no bus subject for the test to
				// be allowed to publish on.
				file := *release
				if a.Seconds <= -2 {
					file = fmt.Sprintf("%s.%d", file, int(-a.Seconds))
				}
				for _, err := os.Stat(file); err != nil; _, err = os.Stat(file) {
					time.Sleep(20 * time.Millisecond)
				}
			} else {
				time.Sleep(time.Duration(a.Seconds * float64(time.Second)))
			}
			note("end " + a.ID)
			b, _ := json.Marshal(bus.ToolReply{Call: req.Call, Tool: s.Name, Outcome: bus.OutcomeOK,
				Content: []bus.ContentPart{{Type: bus.ContentText, Text: s.Name + " " + a.ID + " done"}}})
			_ = r.Respond(b)
		}()
	}
	svc, err := catalog.Serve(nc, catalog.Service{Category: "slow", Node: "slowhost", Specs: specs, Handle: handle})
	if err != nil {
		fmt.Fprintln(os.Stderr, "slowhost:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(bus.CatalogChange{Category: "slow", Node: "slowhost", State: bus.CatalogUp})
	_ = nc.Publish(bus.CatalogChanged, b)
	_ = nc.Flush()
	fmt.Fprintln(os.Stderr, "slowhost ready on", strings.Split(*servers, ",")[0])
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	<-sigs
	_ = svc.Stop()
	nc.Close()
}
