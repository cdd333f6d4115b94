package bus

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// BenchmarkParseToolRequest reads the headers of a tool request as a turn
// sends it, once per call on every host.
func BenchmarkParseToolRequest(b *testing.B) {
	h := nats.Header{}
	ToolRequest{
		Turn: NewID(), Call: "call_Ab12", Agent: "alice", Deadline: time.Now().Add(2 * time.Minute),
		Traceparent: "00-ab55daee783b548fd618ecbd4d74291d-05897abbd4b6a0cc-01",
	}.SetHeaders(h)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseToolRequest(h); err != nil {
			b.Fatal(err)
		}
	}
}
