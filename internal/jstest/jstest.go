// Package jstest holds the helpers of tests that start their own server: JetStream
// contexts, and free ports for clusters, one set for the whole process (package bus's
// and bus/server's tests cannot use bus/bustest, which imports bus/server).
package jstest

import (
	"context"
	"net"
	"sync"
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

// FreePorts returns n TCP ports on 127.0.0.1 that were free a moment ago and that no
// other test of this process was given: the kernel hands a port it just freed to the
// next listener now and then, and a cluster test once got one port twice (n1's client
// port was n3's cluster port: "bind: address already in use"). Another process may
// still take one before it is bound: bustest.Cluster starts again on others when that happens.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			t.Fatal("find free ports: every port the kernel offered was given out already")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsGiven[port] {
			portsGiven[port] = true
			ports = append(ports, port)
		}
	}
	return ports
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)
