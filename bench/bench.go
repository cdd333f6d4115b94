// Package bench is the performance suite behind `toolbus bench`: it measures the runtime in one
// process, against one embedded server and a node named bench, and compares each row with a
// baseline taken in the same run, so every ratio compares numbers taken minutes apart at most.
//
// What it measures, in order (docs/operations.md §8 has a table of the rows):
//   - the floor: a no-op tool's Execute called as a Go function, and core NATS request-reply to
//     an echo responder on another in-process connection;
//   - a call's share of each layer: a plain request to the no-op tool's host, a call and a whole
//     step through a turn, a call through a turn to a foreign host (a plain micro service that
//     follows docs/protocol.md), and a call and a step of the design's skeleton (skeleton.go),
//     all taking turns with the raw baseline in ten rounds;
//   - parallelism (eight 20 ms calls against one), throughput (concurrent turns against as many
//     raw requesters, beside the wire of a call alone and the skeleton, in three rounds), aborts
//     (of 100 calls in flight, and of thousands of turns waiting on their model, with the
//     memory each of those turns costs);
//   - the sandbox's cost per command, a durable turn's checkpoints against the same turn run in
//     Go, and turn assembly (built-in tools, and from a catalog of 500 foreign tools).
//
// The models are scripted (they answer at once), so what is timed is the runtime alone. Run is
// the whole suite; Report is what `toolbus bench -json` prints.
package bench

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"
)

// Defaults of Config, which are also those of the command's flags.
const (
	DefaultSamples = 2000
	DefaultTurns   = 64
	DefaultWaiting = 10000
	// MinSamples is the fewest samples per latency measurement that give a p99 at all.
	MinSamples = 10
)

// ConfigError is what Run returns for a Config it refuses, before measuring anything.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

func configErrorf(format string, args ...any) error {
	return &ConfigError{Msg: fmt.Sprintf(format, args...)}
}

// Config is a run of the suite.
type Config struct {
	// Samples per latency measurement (default DefaultSamples, at least MinSamples); the
	// rows that cost more per sample take a fraction of it.
	Samples int
	// Turns is how many turns run at once in the throughput measurement (default
	// DefaultTurns), against as many raw requesters.
	Turns int
	// Waiting is how many turns wait on their model in the memory and mass-abort measurement
	// (default DefaultWaiting).
	Waiting int
	// Only keeps the groups of measurements whose name contains it ("one call through a
	// turn", "parallel", "traced", "throughput", "abort", "sandbox", "checkpoint", "waiting",
	// "assembly"); the first two rows, the direct call and raw NATS, always run. Empty keeps
	// every group.
	Only string
}

func (c *Config) withDefaults() {
	if c.Samples == 0 {
		c.Samples = DefaultSamples
	}
	if c.Turns == 0 {
		c.Turns = DefaultTurns
	}
	if c.Waiting == 0 {
		c.Waiting = DefaultWaiting
	}
}

func (c *Config) validate() error {
	switch {
	case c.Samples < MinSamples:
		return configErrorf("%d samples per latency measurement: want at least %d", c.Samples, MinSamples)
	case c.Turns < 1:
		return configErrorf("%d concurrent turns: want at least 1", c.Turns)
	case c.Waiting < 1:
		return configErrorf("%d waiting turns: want at least 1", c.Waiting)
	}
	return nil
}

// want says whether the group of measurements called name runs.
func (c *Config) want(name string) bool { return c.Only == "" || strings.Contains(name, c.Only) }

// Row is one row of the suite: a measurement, the baseline it is compared with (measured in
// the same run), and the target ratio.
type Row struct {
	Name    string  `json:"name"`
	Unit    string  `json:"unit"` // "us", "calls/s", "KiB" or "ms"
	P50     float64 `json:"p50,omitempty"`
	P90     float64 `json:"p90,omitempty"`
	P99     float64 `json:"p99,omitempty"`
	Value   float64 `json:"value,omitempty"` // throughput, memory and mass-abort rows
	Samples int     `json:"samples"`
	// Baseline is the name of the row this one is compared with.
	Baseline string `json:"baseline,omitempty"`
	// Ratio is the p50 (or throughput) over the baseline's.
	Ratio  float64 `json:"ratio,omitempty"`
	Target string  `json:"target,omitempty"`
	// Met says whether Target was met; nil for a row without a target.
	Met  *bool  `json:"met,omitempty"`
	Note string `json:"note,omitempty"`
}

// Report is a run of the suite, as `toolbus bench -json` prints it.
type Report struct {
	GoVersion string    `json:"go_version"`
	CPUs      int       `json:"cpus"`
	Started   time.Time `json:"started"`
	Results   []Row     `json:"results"`
}

// Run runs the suite: it starts an embedded server and node, measures, and stops them.
// progress, when not nil, is told of each group of measurements as it starts ("direct
// call…"). A Config it refuses is a *ConfigError.
func Run(ctx context.Context, cfg Config, progress func(step string)) (Report, error) {
	cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	if progress == nil {
		progress = func(string) {}
	}
	s, err := startSuite(ctx, cfg, progress)
	if err != nil {
		return Report{}, err
	}
	defer s.close()
	report := Report{GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Started: time.Now()}
	report.Results, err = s.runAll(ctx)
	if err != nil {
		return Report{}, err
	}
	return report, nil
}
