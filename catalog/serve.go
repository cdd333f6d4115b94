package catalog

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
)

// Version is the micro service version toolbus hosts report.
const Version = "0.1.0"

// Service describes a category's micro service: what a host publishes so that catalogs
// find its tools.
type Service struct {
	Category string
	// Node names the host on the bus (service metadata "node").
	Node  string
	Specs []*toolbus.Spec
	// Handle receives each request of a tool. micro runs it one request at a time per
	// endpoint: a host that takes time hands the request off and replies later.
	Handle func(spec *toolbus.Spec, r micro.Request)
	// Stats, DoneHandler and ErrHandler are passed to micro as they are; nil is allowed.
	Stats       micro.StatsHandler
	DoneHandler micro.DoneHandler
	ErrHandler  micro.ErrHandler
}

// Serve publishes s as a micro service on nc, the way docs/protocol.md says: service
// "toolbus-<category>", one endpoint per tool on its tool subject, each in the queue group
// "toolbus.<category>" (set per endpoint: the nats.js services API refuses dots at
// service level), the spec as endpoint metadata.
func Serve(nc *nats.Conn, s Service) (micro.Service, error) {
	if !bus.ValidToken(s.Category) {
		return nil, fmt.Errorf("serve category %q: not a valid token", s.Category)
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:         bus.CategoryService(s.Category),
		Version:      Version,
		Description:  "toolbus tool category " + s.Category,
		Metadata:     map[string]string{KeyCategory: s.Category, KeyNode: s.Node},
		StatsHandler: s.Stats,
		DoneHandler:  s.DoneHandler,
		ErrorHandler: s.ErrHandler,
	})
	if err != nil {
		return nil, fmt.Errorf("serve category %s: %w", s.Category, err)
	}
	for _, spec := range s.Specs {
		if spec.Category != s.Category {
			_ = svc.Stop()
			return nil, fmt.Errorf("serve category %s: tool %s belongs to category %q", s.Category, spec.Name, spec.Category)
		}
		handler := micro.HandlerFunc(func(r micro.Request) { s.Handle(spec, r) })
		if err := svc.AddEndpoint(spec.Name, handler,
			micro.WithEndpointSubject(bus.ToolSubject(s.Category, spec.Name)),
			micro.WithEndpointQueueGroup(bus.CategoryQueue(s.Category)),
			micro.WithEndpointMetadata(Metadata(spec)),
			micro.WithEndpointPendingLimits(-1, -1),
		); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("serve category %s: endpoint %s: %w", s.Category, spec.Name, err)
		}
	}
	// The service's interest must reach the server before anyone is told it is up.
	if err := nc.Flush(); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("serve category %s: %w", s.Category, err)
	}
	return svc, nil
}
