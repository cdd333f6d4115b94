package brain

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/bus"
)

// leakIgnore is the goroutine bleve keeps for the life of the process: its analysis
// queue's workers, started when the package is initialised.
var leakIgnore = goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakIgnore)
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// testBus is an embedded server with JetStream, its store in a test directory.
type testBus struct {
	srv *bus.Server
}

func startBus(t testing.TB) *testBus {
	t.Helper()
	srv, err := bus.Start(testContext(t), bus.Config{StoreDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return &testBus{srv: srv}
}

// js opens a connection of its own and its JetStream; the test closes it.
func (b *testBus) js(t testing.TB, name string) jetstream.JetStream {
	t.Helper()
	nc, err := b.srv.Connect(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// store opens a store on a connection of its own, closed with the test.
func (b *testBus) store(t testing.TB, name string, opts Options) *Store {
	t.Helper()
	s, err := Open(testContext(t), b.js(t, name), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}
