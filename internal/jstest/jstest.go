// Package jstest holds the helpers of tests that start their own server: JetStream
// contexts, and free ports for clusters, one set for the whole process (package bus's
// and bus/server's tests cannot use bus/bustest, which imports bus/server).
package jstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
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
// port was n3's cluster port: "bind: address already in use").
//
// They are picked at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), where no outgoing connection takes its local port:
// a port the kernel gave a listener for 127.0.0.1:0 was free to be the local port of the
// next connection any process opened, and with the whole suite run twice at once a node
// of the integration tests found its route port taken so ("bind: address already in
// use"). Another process's test may still pick the same port at the same moment, one in
// thousands: bustest.Cluster starts again on others when that happens.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := belowEphemeral()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			t.Fatal("find free ports: every port tried was taken or given out already")
		}
		port := lo + rand.IntN(hi-lo)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		l.Close()
		portsGiven[port] = true
		ports = append(ports, port)
	}
	return ports
}

// belowEphemeral is the range FreePorts picks from: from 20000 up to the first port of
// the kernel's ephemeral range (32768 when it cannot be read).
func belowEphemeral() (lo, hi int) {
	lo, hi = 20000, 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	var first, last int
	if _, err := fmt.Sscan(string(b), &first, &last); err != nil || first <= lo+1000 {
		return lo, hi
	}
	return lo, first
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)
