package server

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testlog"
	"github.com/toolbus/toolbus/internal/testmain"
)

// parallelTests: the tests wait on servers, clusters and timeouts; the package took
// 11.2 s with go test's default (2 here) and 6.4 s with 8.
const parallelTests = 8

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{Parallel: parallelTests})
}

// testTimeout bounds every wait in these tests. It is a liveness guard, not
// a speed assertion: a healthy run needs a small fraction of it. 30 s was once too
// little for a three-server cluster to create a replicated bucket while .ci/run's
// other packages (the integration clusters among them) held both cores.
const testTimeout = time.Minute

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// startServer starts a server that is closed when the test ends; its log
// goes to the returned recorder.
func startServer(t testing.TB, cfg Config) (*Server, *logRecorder) {
	t.Helper()
	rec := &logRecorder{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(rec)
	}
	s, err := Start(testContext(t), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Close)
	return s, rec
}

// logRecorder keeps what a test logs (testlog.Recorder).
type logRecorder = testlog.Recorder

// clusterServers is what package bus reads from an in-process connection to size
// its creations' replicas (bus.ClusterSizer).
func clusterServers(js jetstream.JetStream) int {
	if js == nil {
		return 0
	}
	cs, ok := js.Conn().Opts.InProcessServer.(bus.ClusterSizer)
	if !ok {
		return 0
	}
	return cs.ClusterServers()
}
