package server

import (
	"bytes"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// benchEcho starts an echo responder on its own connection, the way a tool
// host answers a tool request.
func benchEcho(b *testing.B, responder *nats.Conn) string {
	b.Helper()
	subject := bus.ToolSubject("bench", "echo")
	if _, err := responder.QueueSubscribe(subject, bus.CategoryQueue("bench"), func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		b.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		b.Fatal(err)
	}
	return subject
}

func benchRequests(b *testing.B, requester *nats.Conn, subject string) {
	b.Helper()
	payload := bytes.Repeat([]byte("x"), 128)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := requester.Request(subject, payload, 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestReplyInProcess is raw core NATS request-reply through an
// in-process server: the baseline that tool dispatch is measured against.
func BenchmarkRequestReplyInProcess(b *testing.B) {
	s, _ := startServer(b, Config{})
	responder, err := s.Connect("echo")
	if err != nil {
		b.Fatal(err)
	}
	requester, err := s.Connect("caller")
	if err != nil {
		b.Fatal(err)
	}
	benchRequests(b, requester, benchEcho(b, responder))
}

// BenchmarkRequestReplyTCP is the same over a loopback listener, for
// comparison.
func BenchmarkRequestReplyTCP(b *testing.B) {
	s, _ := startServer(b, Config{Listen: "127.0.0.1:-1", Users: []User{{Name: "bench", Password: "pw"}}})
	connect := func(name string) *nats.Conn {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("bench", "pw"), nats.Name(name))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	benchRequests(b, connect("caller"), benchEcho(b, connect("echo")))
}
