package durable

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	big := bigCall()
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

// TestLargeAppendAnswerLost: a large append whose first store of the body landed but
// whose answer was lost (it came after the attempt's deadline) is tried again under the
// same object name, so the turn keeps one object, the one its message names.
func TestLargeAppendAnswerLost(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := &lostPuts{JetStream: bustest.JetStream(t, srv, "a")}
	js.lose.Store(1)
	s := openStore(t, js, "n1", 1)
	l, spec := claimedTurn(t, ctx, s)
	big := bigCall()
	if err := l.Append(ctx, 1, []toolbus.Item{big}); err != nil {
		t.Fatal(err)
	}
	if js.lose.Load() >= 0 {
		t.Fatal("no store's answer was lost: the test tested nothing")
	}
	stored, err := s.StoredTranscript(ctx, spec.ID)
	if err != nil || len(stored) != 2 {
		t.Fatalf("stored: %d messages, %v", len(stored), err)
	}
	ref, ok, err := bus.PayloadOf(stored[1].Header)
	if !ok || err != nil {
		t.Fatalf("the large message names no object: %v %v", ok, err)
	}
	obs, err := js.JetStream.ObjectStore(ctx, bus.ObjectTranscripts)
	if err != nil {
		t.Fatal(err)
	}
	list, err := obs.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != ref.Name {
		names := make([]string, len(list))
		for i, o := range list {
			names[i] = o.Name
		}
		t.Fatalf("objects %q (%v), want only the message's %q", names, err, ref.Name)
	}
}

// lostPuts is a JetStream whose object stores lose the answer of the first lose stores
// that landed: the store waits out its context and says nats.ErrTimeout, as nats.go's
// Put does when the acknowledgement of its meta message comes after the context ended.
// It also records how long each read of an object had left of its context.
type lostPuts struct {
	jetstream.JetStream
	lose atomic.Int32

	mu       sync.Mutex
	readLeft []time.Duration
}

func (j *lostPuts) ObjectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	obs, err := j.JetStream.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return &lostPutStore{ObjectStore: obs, j: j}, nil
}

func (j *lostPuts) CreateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	obs, err := j.JetStream.CreateObjectStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &lostPutStore{ObjectStore: obs, j: j}, nil
}

type lostPutStore struct {
	jetstream.ObjectStore
	j *lostPuts
}

func (o *lostPutStore) PutBytes(ctx context.Context, name string, data []byte) (*jetstream.ObjectInfo, error) {
	info, err := o.ObjectStore.PutBytes(ctx, name, data)
	if err == nil && o.j.lose.Add(-1) >= 0 {
		<-ctx.Done()
		return nil, nats.ErrTimeout
	}
	return info, err
}

func (o *lostPutStore) GetBytes(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) ([]byte, error) {
	left := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	o.j.mu.Lock()
	o.j.readLeft = append(o.j.readLeft, left)
	o.j.mu.Unlock()
	return o.ObjectStore.GetBytes(ctx, name, opts...)
}

// TestLargeBodyReadSized: the body of a large transcript message is read with the time
// its size needs (bus.PayloadAttempt: 3 s for 2 MiB), not within an attempt of the
// messages' read (1 s first), and read back whole.
func TestLargeBodyReadSized(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := &lostPuts{JetStream: bustest.JetStream(t, srv, "a")}
	s := openStore(t, js, "n1", 1)
	l, spec := claimedTurn(t, ctx, s)
	big := bigCall()
	if err := l.Append(ctx, 1, []toolbus.Item{big}); err != nil {
		t.Fatal(err)
	}
	tr, err := s.readTranscript(ctx, spec.ID)
	if err != nil || len(tr.Items) != 2 || tr.Items[1].Arguments != big.Arguments || tr.Pos != 2 {
		t.Fatalf("read back: %d items, pos %d, %v", len(tr.Items), tr.Pos, err)
	}
	js.mu.Lock()
	defer js.mu.Unlock()
	want := bus.PayloadAttempt(int64(len(big.Arguments))) - time.Second
	if len(js.readLeft) != 1 || js.readLeft[0] < want {
		t.Errorf("the body's reads had %v left, want one read with more than %v", js.readLeft, want)
	}
}

// bigCall is a call whose arguments (2 MiB) are more than a message carries.
func bigCall() toolbus.Item {
	return toolbus.Item{Kind: toolbus.KindFunctionCall, CallID: "c1", Name: "write_file",
		Arguments: `{"path":"big.txt","content":"` + strings.Repeat("0123456789abcdef", 2<<20/16) + `"}`}
}

// claimedTurn queues a turn in s and claims it.
func claimedTurn(t *testing.T, ctx context.Context, s *Store) (*Lease, bus.TurnSpec) {
	t.Helper()
	msg := queued(t, s, 1)[0]
	spec := specOf(t, msg)
	l, err := claim(t, ctx, s, msg, spec)
	if err != nil {
		t.Fatal(err)
	}
	return l, spec
}
