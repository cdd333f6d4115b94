package durable

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

// TestLargeTranscriptMessage: a transcript message over the bus's limit is stored with
// its body in the object store, still fenced, and read back exactly; a stale node's large
// append is refused and leaves no object; deleting the transcript deletes its objects.
func TestLargeTranscriptMessage(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	jsA := bustest.JetStream(t, srv, "a")
	a := openStore(t, jsA, "n1", 1)
	b := openStore(t, bustest.JetStream(t, srv, "b"), "n2", 1)
	msg := queued(t, a, 1)[0]
	spec := specOf(t, msg)
	la, err := claim(t, ctx, a, msg, spec)
	if err != nil {
		t.Fatal(err)
	}
	big := toolbus.Item{Kind: toolbus.KindFunctionCall, CallID: "c1", Name: "write_file",
		Arguments: `{"path":"big.txt","content":"` + strings.Repeat("0123456789abcdef", 2<<20/16) + `"}`}
	if err := la.Append(ctx, 1, []toolbus.Item{big}); err != nil {
		t.Fatal(err)
	}
	stored, err := a.StoredTranscript(ctx, spec.ID)
	if err != nil || len(stored) != 2 {
		t.Fatalf("stored: %d messages, %v", len(stored), err)
	}
	ref, ok, err := bus.PayloadOf(stored[1].Header)
	if !ok || err != nil || ref.Bucket != bus.ObjectTranscripts || !bytes.Equal(stored[1].Data, bus.PayloadNote) || stored[1].Header.Get(bus.HeaderSeq) != "2" {
		t.Fatalf("the large message as stored: %v %v %q %q", ok, err, stored[1].Data, stored[1].Header)
	}
	tr, err := a.readTranscript(ctx, spec.ID)
	if err != nil || len(tr.Items) != 2 || tr.Items[1].Arguments != big.Arguments || tr.Pos != 2 {
		t.Fatalf("read back: %d items, pos %d, %v", len(tr.Items), tr.Pos, err)
	}

	// n2 takes the turn over; n1's next large append is fenced and its object deleted.
	lb, err := claim(t, ctx, b, msg, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !lb.Resumed || len(lb.Items) != 3 || lb.Items[1].Arguments != big.Arguments {
		t.Fatalf("the claim read %d items back", len(lb.Items))
	}
	if err := la.Append(ctx, 2, []toolbus.Item{big}); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale large append: %v, want ErrFenced", err)
	}
	obs, err := jsA.ObjectStore(ctx, bus.ObjectTranscripts)
	if err != nil {
		t.Fatal(err)
	}
	if list, err := obs.List(ctx); err != nil || len(list) != 1 || list[0].Name != ref.Name {
		t.Errorf("objects after the fenced append: %d, %v", len(list), err)
	}
	if err := lb.End(ctx, bus.TurnCompleted, "", 2, nil); err != nil {
		t.Fatal(err)
	}
	audit, err := AuditTranscript(ctx, jsA, spec.ID)
	if err != nil || audit.Messages != 3 || audit.Calls != 1 {
		t.Fatalf("audit %+v %v", audit, err)
	}
	if err := b.DeleteTranscript(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if list, err := obs.List(ctx); !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Errorf("objects after the transcript was deleted: %d, %v", len(list), err)
	}
}
