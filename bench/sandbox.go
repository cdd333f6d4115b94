package bench

import (
	"context"
	"errors"
	"os"

	"github.com/toolbus/toolbus/toolsets/computer"
)

// sandbox measures one run_command call (`true`) in a bubblewrap sandbox against the same
// call run as a bare process; without bubblewrap, the sandboxed row says why.
func (s *suite) sandbox(ctx context.Context) ([]Row, error) {
	home, err := os.MkdirTemp("", "toolbus-bench-home-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	n := max(s.cfg.Samples/20, 50)
	samples, err := computer.CommandLatencies(ctx, computer.Config{Sandbox: computer.SandboxConfig{Mode: computer.SandboxOff}}, home, n)
	if err != nil {
		return nil, err
	}
	bare := latency("one run_command call, bare process", samples, "/bin/sh -c true in its own process group")
	const name = "one run_command call, sandboxed (bwrap)"
	samples, err = computer.CommandLatencies(ctx, computer.Config{}, home, n)
	if errors.Is(err, computer.ErrSandboxUnavailable) {
		return []Row{bare, {Name: name, Unit: "us", Baseline: bare.Name, Note: err.Error()}}, nil
	}
	if err != nil {
		return nil, err
	}
	return []Row{bare, compare(latency(name, samples, "the same in a bubblewrap sandbox"), bare, 0, false)}, nil
}
