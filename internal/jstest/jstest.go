// Package jstest holds the JetStream helpers of tests that start their own server
// (package bus's, which cannot use bus/bustest, and bus/server's).
package jstest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Connector opens connections to a server in the test's process.
type Connector interface {
	Connect(name string, opts ...nats.Option) (*nats.Conn, error)
}

// JetStream is a JetStream context on a new connection to s named name.
func JetStream(t testing.TB, s Connector, name string) jetstream.JetStream {
	t.Helper()
	nc, err := s.Connect(name)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// StreamReplicas is how many replicas a stream was created with.
func StreamReplicas(ctx context.Context, t testing.TB, js jetstream.JetStream, stream string) int {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config.Replicas
}
