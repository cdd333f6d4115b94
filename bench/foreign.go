package bench

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/schema"
)

// foreignTool serves a no-op tool as a plain micro service that follows
// docs/protocol.md (not a toolbus host), and finds its spec through the bus catalog.
func (s *suite) foreignTool(ctx context.Context) (*toolbus.Spec, func(), error) {
	nc, err := s.node.Connect("bench-foreign")
	if err != nil {
		return nil, nil, err
	}
	svc, err := startForeignHost(nc, "foreign", "ext", 1)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	stop := func() { _ = svc.Stop(); nc.Close() }
	cat := catalog.New(s.node.Actors().Conn(), catalog.Options{Logger: actors.DiscardLogger()})
	if err := cat.Refresh(ctx); err != nil {
		stop()
		return nil, nil, err
	}
	spec, err := cat.Lookup("ext.tool_0")
	if err != nil {
		stop()
		return nil, nil, err
	}
	return spec, stop, nil
}

// startForeignHost serves n no-op tools of category in namespace as a plain micro
// service that answers each request in its handler, with no toolbus host around it.
func startForeignHost(nc *nats.Conn, category, namespace string, n int) (micro.Service, error) {
	params := schema.MustFromJSON([]byte(`{"type":"object","properties":{}}`))
	specs := make([]*toolbus.Spec, n)
	for i := range specs {
		specs[i] = &toolbus.Spec{Name: fmt.Sprintf("tool_%d", i), Description: fmt.Sprintf("Foreign tool number %d.", i),
			Namespace: namespace, NamespaceDescription: "Tools of " + namespace + ".", Category: category, Params: params}
	}
	return catalog.Serve(nc, catalog.Service{Category: category, Node: "bench-foreign", Specs: specs,
		Handle: func(s *toolbus.Spec, r micro.Request) {
			b, _ := json.Marshal(bus.ToolReply{Call: r.Headers().Get(bus.HeaderCall), Tool: s.Name, Outcome: bus.OutcomeOK,
				Content: []bus.ContentPart{{Type: bus.ContentText, Text: "ok"}}})
			_ = r.Respond(b)
		}})
}
