package bus

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func payloadStore(t *testing.T) (*Payloads, *nats.Conn) {
	t.Helper()
	s, _ := startServer(t, testConfig{StoreDir: t.TempDir()})
	nc, err := s.Connect("payloads")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return NewPayloads(js, 1), nc
}

// TestPayloads: a payload stored is read back exactly; one replaced under its name, or
// read with a reference that names another size, is refused; one that is not there is
// ErrPayloadMissing; and a message too large for the bus travels by reference.
func TestPayloads(t *testing.T) {
	t.Parallel()
	p, nc := payloadStore(t)
	ctx := testContext(t)
	data := make([]byte, 2<<20)
	_, _ = rand.Read(data)

	start := time.Now()
	ref, err := p.Put(ctx, ObjectPayloads, PayloadName("t1", "c1", "args"), data)
	if err != nil {
		t.Fatal(err)
	}
	put := time.Since(start)
	start = time.Now()
	got, err := p.Get(ctx, ref)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("round trip: %d bytes, %v", len(got), err)
	}
	t.Logf("2 MiB: put %s, get %s", put.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if ref.Size != int64(len(data)) || !strings.HasPrefix(ref.Name, "t1.c1.args.") {
		t.Errorf("reference %+v", ref)
	}
	back, err := ParsePayloadRef(ref.String())
	if err != nil || back != ref {
		t.Fatalf("ParsePayloadRef(%q) = %+v, %v", ref.String(), back, err)
	}
	// The bucket expires what a call leaves behind.
	obs, err := p.js.ObjectStore(ctx, ObjectPayloads)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := obs.Status(ctx); err != nil || st.TTL() != PayloadTTL || st.Storage() != jetstream.FileStorage {
		t.Errorf("bucket status: %+v %v", st, err)
	}

	// Replaced under its name: the digest says so.
	other := bytes.Clone(data)
	other[len(other)/2] ^= 1
	if _, err := obs.PutBytes(ctx, ref.Name, other); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, ref); !errors.Is(err, ErrPayloadMismatch) {
		t.Errorf("replaced object: %v, want ErrPayloadMismatch", err)
	}
	short := ref
	short.Size--
	if _, err := p.Get(ctx, short); !errors.Is(err, ErrPayloadMismatch) {
		t.Errorf("wrong size: %v, want ErrPayloadMismatch", err)
	}

	// Deleted, or never stored, or in a bucket that does not exist.
	if err := p.Delete(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, ref); err != nil {
		t.Errorf("second delete: %v", err)
	}
	if _, err := p.Get(ctx, ref); !errors.Is(err, ErrPayloadMissing) {
		t.Errorf("deleted object: %v, want ErrPayloadMissing", err)
	}
	nowhere := PayloadRef{Bucket: "toolbus_nowhere", Name: "x", Size: 1, SHA256: ref.SHA256}
	if _, err := p.Get(ctx, nowhere); !errors.Is(err, ErrPayloadMissing) {
		t.Errorf("missing bucket: %v, want ErrPayloadMissing", err)
	}

	// A message: offloaded past the limit, resolved on the other side; a small one is
	// left alone.
	limit := InlineLimit(nc.MaxPayload())
	if limit >= int(nc.MaxPayload()) || limit < 512<<10 {
		t.Errorf("inline limit %d of max payload %d", limit, nc.MaxPayload())
	}
	small := &nats.Msg{Subject: "x", Data: []byte(`{"a":1}`)}
	if r, err := p.Offload(ctx, small, ObjectPayloads, "small", limit); err != nil || !r.IsZero() || small.Header != nil {
		t.Errorf("small message offloaded: %+v %v", r, err)
	}
	big := &nats.Msg{Subject: "x", Data: data}
	r, err := p.Offload(ctx, big, ObjectPayloads, PayloadName("big"), limit)
	if err != nil || r.IsZero() || !bytes.Equal(big.Data, PayloadNote) || big.Header.Get(HeaderPayload) != r.String() {
		t.Fatalf("offload: %+v %v; header %q", r, err, big.Header.Get(HeaderPayload))
	}
	if again, err := p.Offload(ctx, big, ObjectPayloads, PayloadName("big"), -1); err != nil || again != r {
		t.Errorf("a retried offload stored again: %+v %v", again, err)
	}
	body, gotRef, err := p.Resolve(ctx, big.Header, big.Data, ObjectPayloads, MaxCallPayload)
	if err != nil || gotRef != r || !bytes.Equal(body, data) {
		t.Fatalf("resolve: %d bytes, %+v, %v", len(body), gotRef, err)
	}
	if body, _, err := p.Resolve(ctx, nil, small.Data, ObjectPayloads, MaxCallPayload); err != nil || string(body) != `{"a":1}` {
		t.Errorf("resolve a small message: %q %v", body, err)
	}
	if _, _, err := p.Resolve(ctx, big.Header, big.Data, ObjectTranscripts, MaxCallPayload); err == nil || !strings.Contains(err.Error(), `names object store "toolbus_payloads"`) {
		t.Errorf("resolve from another bucket: %v", err)
	}
	if _, _, err := p.Resolve(ctx, big.Header, big.Data, ObjectPayloads, 1<<20); err == nil || !strings.Contains(err.Error(), "payload of 2 MiB, over the 1 MiB allowed") {
		t.Errorf("resolve over the cap: %v", err)
	}
}

func TestParsePayloadRef(t *testing.T) {
	sum := strings.Repeat("0a", 32)
	good := "toolbus_payloads/tür.c1.args.x; size=2097152; sha256=" + sum
	r, err := ParsePayloadRef(good)
	if err != nil || r != (PayloadRef{Bucket: "toolbus_payloads", Name: "tür.c1.args.x", Size: 2097152, SHA256: sum}) || r.String() != good {
		t.Fatalf("ParsePayloadRef(%q) = %+v, %v", good, r, err)
	}
	for _, bad := range []string{
		"",
		"toolbus_payloads/x; size=1",
		"toolbus_payloads; size=1; sha256=" + sum,
		"/x; size=1; sha256=" + sum,
		"toolbus_payloads/; size=1; sha256=" + sum,
		"toolbus.payloads/x; size=1; sha256=" + sum,
		"toolbus_payloads/a b; size=1; sha256=" + sum,
		"toolbus_payloads/x; size=-1; sha256=" + sum,
		"toolbus_payloads/x; size=+1; sha256=" + sum,
		"toolbus_payloads/x; size=1k; sha256=" + sum,
		"toolbus_payloads/x; size=1; sha256=" + strings.ToUpper(sum),
		"toolbus_payloads/x; size=1; sha256=" + sum[:62],
		"toolbus_payloads/x;size=1;sha256=" + sum,
	} {
		_, err := ParsePayloadRef(bad)
		var he *HeaderError
		if !errors.As(err, &he) || !strings.HasPrefix(err.Error(), "bad Toolbus-Payload header ") {
			t.Errorf("ParsePayloadRef(%q): %v", bad, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParsePayloadRef(good) }); n != 0 {
		t.Errorf("ParsePayloadRef allocates %v times", n)
	}
	// A tool request names its arguments' object in the header, and reading it back is
	// as cheap as the rest of the headers.
	h := nats.Header{}
	ToolRequest{Turn: "t1", Call: "c1", Payload: r}.SetHeaders(h)
	req, err := ParseToolRequest(h)
	if err != nil || req.Payload != r {
		t.Fatalf("request payload %+v, %v", req.Payload, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseToolRequest(h) }); n != 0 {
		t.Errorf("ParseToolRequest with a payload allocates %v times", n)
	}
	h.Set(HeaderPayload, "elsewhere")
	if _, err := ParseToolRequest(h); err == nil || err.Error() != `bad Toolbus-Payload header "elsewhere": want "<bucket>/<name>; size=<bytes>; sha256=<64 hex digits>"` {
		t.Errorf("bad payload header: %v", err)
	}
	if FormatBytes(31<<20) != "31 MiB" || FormatBytes(MaxCallPayload) != "16 MiB" || FormatBytes(31_000_000) != "29.6 MiB" {
		t.Errorf("FormatBytes: %s %s %s", FormatBytes(31<<20), FormatBytes(MaxCallPayload), FormatBytes(31_000_000))
	}
}
