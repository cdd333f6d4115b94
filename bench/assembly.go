package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/toolsets"
)

// assembly measures building a main turn's kit: built-in tools only, against putting
// the same specs into a set; then from a catalog of 500 foreign tools in 20 namespaces,
// all named by the agent's profile.
func (s *suite) assembly(ctx context.Context) ([]Row, error) {
	spec := bus.TurnSpec{Agent: "bench", Input: "bench"}
	prebuilt, err := toolsets.Assemble(spec, nil, nil, toolsets.Options{})
	if err != nil {
		return nil, err
	}
	specs := prebuilt.Tools.Specs()

	nc, err := s.node.Connect("bench-catalog")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	profile := &toolsets.Profile{Version: toolsets.ProfileVersion, Agent: "bench"}
	for i := range 20 {
		ns := fmt.Sprintf("ns%02d", i)
		svc, err := startForeignHost(nc, "cat"+ns, ns, 25)
		if err != nil {
			return nil, err
		}
		defer func() { _ = svc.Stop() }()
		profile.Namespaces = append(profile.Namespaces, toolsets.NamespaceRef{Name: ns})
	}
	cat := catalog.New(s.node.Actors().Conn(), catalog.Options{Logger: actors.DiscardLogger()})
	if err := cat.Refresh(ctx); err != nil {
		return nil, err
	}
	big, err := toolsets.Assemble(spec, profile, cat, toolsets.Options{})
	if err != nil {
		return nil, err
	}
	if big.Tools.Len() != len(specs)+500 || len(big.Notes) > 0 {
		return nil, fmt.Errorf("assembly from the catalog: %d tools (want %d), notes %q", big.Tools.Len(), len(specs)+500, big.Notes)
	}

	var asm, set, asmBig []time.Duration
	for range s.cfg.Samples {
		t0 := time.Now()
		if _, err := toolsets.Assemble(spec, nil, nil, toolsets.Options{}); err != nil {
			return nil, err
		}
		asm = append(asm, time.Since(t0))
		t0 = time.Now()
		if _, err := toolbus.NewSet(specs...); err != nil {
			return nil, err
		}
		set = append(set, time.Since(t0))
		t0 = time.Now()
		if _, err := toolsets.Assemble(spec, profile, cat, toolsets.Options{}); err != nil {
			return nil, err
		}
		asmBig = append(asmBig, time.Since(t0))
	}
	base := latency("tool set from already-built specs", set, "")
	r := latency(fmt.Sprintf("turn assembly (%d built-in tools)", len(specs)), asm, "")
	rb := latency(fmt.Sprintf("turn assembly from a catalog of 500 tools in 20 namespaces (%d tools)", big.Tools.Len()), asmBig, "")
	rb.Target = "p50 ≤ 100 µs"
	met := rb.P50 <= 100
	rb.Met = &met
	return []Row{base, compare(r, base, 0, false), rb}, nil
}
