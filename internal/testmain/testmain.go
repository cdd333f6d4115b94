// Package testmain is the TestMain of toolbus's test binaries: the default number of
// tests run at once, the check that no goroutine outlives the tests, and the race
// runtime's settings for a test binary.
//
// It is a leaf (flag, os, strings, syscall, testing and goleak), so that every package's tests,
// bus's and the internal leaves' among them, can use it without linking what they test
// against.
package testmain

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// Config is what a package's TestMain says of its tests. The zero Config keeps go test's
// defaults and checks for leaks.
type Config struct {
	// Parallel is how many parallel tests run at once when -parallel is not given.
	// Tests that wait on servers, leases and processes use little of the CPU (a package
	// of them: 34 s of CPU in 66 s on 2 cores), so go test's default (GOMAXPROCS) leaves
	// the machine idle while they wait. 0 keeps that default.
	Parallel int
	// Done runs once after the tests, whatever their result, before the leak check: it
	// stops what TestMain started for all tests (a browser, a folder) and checks what
	// they may have left (cgroups). An error it returns fails the run.
	Done func() error
}

func (c Config) validate() error {
	if c.Parallel < 0 {
		return fmt.Errorf("parallel %d: want 0 (go test's default) or more", c.Parallel)
	}
	return nil
}

// knownLeaks are goroutines of the dependencies that outlive what started them: every
// package's tests leave them alone and find any other.
func knownLeaks() []goleak.Option {
	return []goleak.Option{
		// protoactor throttles its dead-letter log with a goroutine that lives one
		// throttle interval after a dead letter; a late reply or abort reaching a turn
		// that has just stopped is one.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		// bleve (the brain's index) starts its analysis workers when the package is
		// initialised; they live as long as the process.
		goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"),
		// nats.go v1.55.0 jetstream: newAsyncReply starts this goroutine, which reads the
		// publisher's status channel under its lock; a JetStream context cleaned up
		// before it does (the connection closed right after an async publish, as an
		// object store Put makes) has set the channel to nil, and the goroutine waits on
		// it for the process's life (seen once in brain's tests).
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	}
}

// Main runs the tests and exits with their result: call it as the whole of TestMain, or
// at its end.
func Main(m *testing.M, c Config) {
	os.Exit(run(m, c))
}

// A race-built binary starts itself again with raceOptions added to GORACE, unless
// GORACE already sets them: here, before any TestMain, so that what a TestMain does
// before Main (integration's builds of the binaries it starts, and its temporary
// folder) is done once, by the process that runs the tests.
func init() {
	if raceEnabled {
		withRaceOptions()
	}
}

// raceOptions are the race runtime's settings for a test binary. The runtime reads
// GORACE only as the process starts, so a binary that lacks them runs itself again
// with them (syscall.Exec: the same process, arguments and files; it costs a second
// start of the binary, 10 ms for a leaf's tests and 170 ms for actors', mostly the
// packages' init).
//
//   - atexit_sleep_ms=0: os.Exit otherwise sleeps 1 s, a grace for goroutines still
//     running to report a race; 28 binaries made it about 14 s of a 2-core
//     go test -race ./... (a race-built program that only exits: 1.02 s, and 0.015 s
//     without the sleep). After a run that passed, the leak check has found no
//     goroutine of ours still running, so none is left to report one; a run that
//     failed has failed already. A race the detector has seen is still reported at
//     the exit, which fails with 66.
//   - clear_shadow_mmap_threshold=1073741824: for an allocation over this size
//     (64 KiB by default) the runtime drops the shadow memory of the range and maps it
//     afresh, and every first touch of it faults a zeroed page back in, with a TLB
//     flush on every CPU. The tests move megabytes of JSON (arguments of 1.2 and
//     17 MiB, results over 1 MiB): perf showed half of actors' test time in the
//     kernel, in those faults. Clearing the shadow in place instead took actors' tests
//     from 8.2 s of system time to 3.2 s, cmd/cli's from 6.4 s to 3.3 s, and the whole
//     go test -race ./... from 85-87 s to 79-80 s, with no more memory (actors:
//     1.9-2.2 GB at most either way).
var raceOptions = []string{"atexit_sleep_ms=0", "clear_shadow_mmap_threshold=1073741824"}

// withRaceOptions runs this binary again with raceOptions in GORACE, unless it has
// them: on success it does not return. Should that fail, the tests run as they are,
// only slower.
func withRaceOptions() {
	gorace, missing := addOptions(os.Getenv("GORACE"), raceOptions)
	if !missing {
		return
	}
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, setenv(os.Environ(), "GORACE", gorace))
	}
	fmt.Fprintf(os.Stderr, "testmain: run again with GORACE=%q: %v; running without it\n", gorace, err)
}

// setenv sets name to value in env, once: the process's getenv takes a name's first
// value, exec.Cmd its last.
func setenv(env []string, name, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != name {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

// addOptions adds to gorace, a GORACE value ("name=value" pairs separated by spaces),
// each of opts whose name it does not set. missing reports whether it added one: an
// option the caller set keeps the caller's value.
func addOptions(gorace string, opts []string) (merged string, missing bool) {
	fields := strings.Fields(gorace)
	set := make(map[string]bool, len(fields))
	for _, f := range fields {
		name, _, _ := strings.Cut(f, "=")
		set[name] = true
	}
	for _, o := range opts {
		if name, _, _ := strings.Cut(o, "="); !set[name] {
			fields = append(fields, o)
			missing = true
		}
	}
	return strings.Join(fields, " "), missing
}

// run returns the binary's exit code.
func run(m *testing.M, c Config) int {
	if err := errors.Join(c.validate(), defaultParallel(c.Parallel)); err != nil {
		fmt.Fprintln(os.Stderr, "testmain:", err)
		return 1
	}
	code := m.Run()
	if c.Done != nil {
		if err := c.Done(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if code != 0 {
		return code
	}
	if err := goleak.Find(knownLeaks()...); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests passed: %v\n", err)
		return 1
	}
	return 0
}

// defaultParallel sets -test.parallel to n unless the command line gave it.
func defaultParallel(n int) error {
	if n == 0 {
		return nil
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return nil
	}
	return flag.Set("test.parallel", strconv.Itoa(n))
}
