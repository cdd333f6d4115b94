package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
)

// stepModel asks for `calls` calls of one tool per step, for `steps` steps,
// and records the time between handing a response to the turn and being
// asked again: everything the runtime does for that step's calls.
type stepModel struct {
	tool      string
	namespace string
	calls     int
	steps     int

	mu   sync.Mutex
	last time.Time
	gaps []time.Duration
}

func (m *stepModel) Respond(ctx context.Context, req *gateway.Request) (*gateway.Response, error) {
	now := time.Now()
	m.mu.Lock()
	if req.Step > 0 {
		m.gaps = append(m.gaps, now.Sub(m.last))
	}
	m.mu.Unlock()
	if req.Step >= m.steps {
		return &gateway.Response{Items: []toolbus.Item{{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: "done"}}}, nil
	}
	resp := &gateway.Response{Items: make([]toolbus.Item, m.calls)}
	for i := range resp.Items {
		resp.Items[i] = toolbus.Item{Kind: toolbus.KindFunctionCall, CallID: fmt.Sprintf("c%d_%d", req.Step, i), Name: m.tool, Namespace: m.namespace, Arguments: "{}"}
	}
	m.mu.Lock()
	m.last = time.Now()
	m.mu.Unlock()
	return resp, nil
}

// waitModel is a model that never answers: its turns wait until they are aborted.
type waitModel struct{ waiting *sync.WaitGroup }

func (m *waitModel) Respond(ctx context.Context, _ *gateway.Request) (*gateway.Response, error) {
	m.waiting.Done()
	<-ctx.Done()
	return nil, ctx.Err()
}
