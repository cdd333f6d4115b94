// Package bustest starts real embedded NATS servers with JetStream for tests: one
// server, or a cluster of several on loopback, each closed when its test ends. It is the
// one harness of the bus for the packages above it (as net/http/httptest is for HTTP).
package bustest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/internal/jstest"
)

// Context is a context that ends with the test, or after a minute.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Server starts one embedded server in a directory of the test's, edit changing its
// config first (nil: none).
func Server(t testing.TB, edit func(*server.Config)) *server.Server {
	t.Helper()
	cfg := server.Config{Name: "n1", StoreDir: t.TempDir(), Logger: quiet()}
	if edit != nil {
		edit(&cfg)
	}
	s, err := server.Start(Context(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Conn connects to s in-process, closed when the test ends.
func Conn(t testing.TB, s *server.Server, name string) *nats.Conn {
	t.Helper()
	nc, err := s.Connect(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream is a JetStream context of a new connection to s.
func JetStream(t testing.TB, s *server.Server, name string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Conn(t, s, name))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Cluster starts n servers that route to each other on loopback ports, n1 to nN,
// concurrently (each waits for a JetStream meta leader, which needs a quorum). A port
// another process took meanwhile starts the cluster again on others.
func Cluster(t testing.TB, n int, edit func(*server.Config)) []*server.Server {
	t.Helper()
	for attempt := 1; ; attempt++ {
		nodes, err := tryCluster(t, n, edit)
		if err == nil {
			for _, s := range nodes {
				t.Cleanup(s.Close)
			}
			waitPeers(t, nodes)
			return nodes
		}
		for _, s := range nodes {
			if s != nil {
				s.Close()
			}
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
}

// waitPeers waits until the meta leader counts every node as a JetStream peer it can
// place on. A meta leader needs only a quorum: a stream asked for n replicas before the
// last node's statistics reach it is refused ("no suitable peers") and created with fewer
// (bus's capReplicas), which TestReplicatedConflictFences saw once (2 replicas, want 3).
func waitPeers(t testing.TB, nodes []*server.Server) {
	t.Helper()
	CheckFor(t, time.Minute, 20*time.Millisecond, func() error {
		for _, s := range nodes {
			if peers := s.NATS().JetStreamClusterPeers(); len(peers) == len(nodes) {
				return nil
			}
		}
		return fmt.Errorf("the meta leader does not count all %d nodes as JetStream peers yet", len(nodes))
	})
}

func tryCluster(t testing.TB, n int, edit func(*server.Config)) ([]*server.Server, error) {
	ctx := Context(t)
	ports := jstest.FreePorts(t, n)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	nodes := make([]*server.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cfg := server.Config{
				Name:     fmt.Sprintf("n%d", i+1),
				StoreDir: t.TempDir(),
				Logger:   quiet(),
				Cluster: &server.ClusterConfig{
					Name:     "toolbus-test",
					Listen:   fmt.Sprintf("127.0.0.1:%d", ports[i]),
					Routes:   routes,
					Username: "route",
					Password: "route-secret",
				},
			}
			if edit != nil {
				edit(&cfg)
			}
			nodes[i], errs[i] = server.Start(ctx, cfg)
		})
	}
	wg.Wait()
	return nodes, errors.Join(errs...)
}

// CheckFor calls f every `every` until it returns nil or total has passed, then fails the
// test with f's last error: the tests' one way to wait for an event (as nats.go's
// checkFor), never a bare sleep.
func CheckFor(t testing.TB, total, every time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(every)
	}
	t.Fatal(err)
}

// Logger is a logger of records at level and above, kept and logged only should t
// fail: a test's world quiet while it passes and explained when it does not.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	l, _ := LoggerBuffer(t, level)
	return l
}

// LoggerBuffer is Logger with the buffer it writes, for a test that waits for a line.
func LoggerBuffer(t testing.TB, level slog.Level) (*slog.Logger, *Buffer) {
	b := &Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			if s := b.String(); s != "" {
				t.Logf("logged:\n%s", s)
			}
		}
	})
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: level})), b
}

// Buffer is a bytes.Buffer that goroutines write while a test reads it: a process's
// output, a node's log.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
