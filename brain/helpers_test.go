package brain

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/internal/testmain"
)

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{})
}

// testContext is a context that ends with the test, or after a minute.
func testContext(t testing.TB) context.Context { return bustest.Context(t) }

// testBus is an embedded server with JetStream, its store in a test directory.
type testBus struct {
	srv *server.Server
}

func startBus(t testing.TB) *testBus {
	t.Helper()
	return &testBus{srv: bustest.Server(t, nil)}
}

// js opens a connection of its own and its JetStream; the test closes it.
func (b *testBus) js(t testing.TB, name string) jetstream.JetStream {
	t.Helper()
	return bustest.JetStream(t, b.srv, name)
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
