// Package testmain is the TestMain of toolbus's test binaries: the default number of
// tests run at once, the check that no goroutine outlives the tests, and an exit that
// does not wait out the race runtime's grace once both have passed.
//
// It is a leaf (flag, os, syscall, testing and goleak), so that every package's tests,
// bus's and the internal leaves' among them, can use it without linking what they test
// against.
package testmain

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
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
	exit(run(m, c))
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

// exit ends the binary with code. Under the race detector, os.Exit(0) first waits out
// the race runtime's atexit_sleep_ms (1 s unless GORACE says otherwise), a grace for
// goroutines still running to report a race: with 27 test binaries, about 14 s of a
// 2-core go test -race ./... (a race-built program that only exits takes 1.02 s, and
// 0.015 s with atexit_sleep_ms=0). After a run that passed, the leak check has just
// found no goroutine of ours still running, so none is left to report one; if the
// detector has seen a race all the same (after m.Run's own check, "race detected
// outside of test execution"), os.Exit reports it and fails the binary as it would.
// A coverage run also ends through os.Exit, whose exit hooks write the counters.
func exit(code int) {
	if code == 0 && raceEnabled && raceErrors() == 0 && testing.CoverMode() == "" {
		syscall.Exit(0)
	}
	os.Exit(code)
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
