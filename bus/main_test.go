package bus

import (
	"context"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

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

// testConfig is what this package's tests ask of a server.
type testConfig struct{ StoreDir string }

// testServer is a bare nats-server with JetStream. The embedded server of a node
// (package bus/server) imports this package, so these tests start nats-server
// themselves; its own tests, and those of the clusters, live with it.
type testServer struct {
	t  testing.TB
	ns *natsserver.Server
}

// Connect opens an in-process connection to s, closed when the test ends.
func (s *testServer) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect("", append([]nats.Option{nats.InProcessServer(s.ns), nats.Name(name), nats.Timeout(10 * time.Second)}, opts...)...)
	if err != nil {
		return nil, err
	}
	s.t.Cleanup(nc.Close)
	return nc, nil
}

// startServer starts a server that is closed when the test ends.
func startServer(t testing.TB, cfg testConfig) (*testServer, *logRecorder) {
	t.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	ns, err := natsserver.NewServer(&natsserver.Options{
		ServerName: "bus-test", DontListen: true, JetStream: true, StoreDir: cfg.StoreDir,
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 1 << 30, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(testTimeout) {
		t.Fatal("nats-server not ready")
	}
	return &testServer{t: t, ns: ns}, &logRecorder{}
}

// logRecorder keeps what a test logs (testlog.Recorder).
type logRecorder = testlog.Recorder
