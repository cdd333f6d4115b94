package bus

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/jstest"
)

func TestKeyValueOnSingleServer(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, testConfig{})
	ctx := testContext(t)
	js := jstest.JetStream(t, s, "kv")

	// Three replicas asked of one server: capped to one.
	kv, err := KeyValue(ctx, js, BucketTodos, 3)
	if err != nil {
		t.Fatal(err)
	}
	if r := jstest.StreamReplicas(ctx, t, js, "KV_"+BucketTodos); r != 1 {
		t.Errorf("replicas = %d, want 1", r)
	}
	rev, err := kv.Put(ctx, "agent1.list", []byte(`["a"]`))
	if err != nil {
		t.Fatal(err)
	}

	// Opening again is idempotent and sees the data.
	again, err := KeyValue(ctx, js, BucketTodos, 1)
	if err != nil {
		t.Fatal(err)
	}
	e, err := again.Get(ctx, "agent1.list")
	if err != nil || string(e.Value()) != `["a"]` || e.Revision() != rev {
		t.Fatalf("get through second handle: %v, %v", e, err)
	}
}

func TestEnsureKeyValueConcurrently(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, testConfig{})
	ctx := testContext(t)
	js := jstest.JetStream(t, s, "kv")

	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			kv, err := EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: "shared", History: 5})
			if err == nil {
				_, err = kv.Put(ctx, fmt.Sprintf("k%d", i), []byte("v"))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	kv, err := js.KeyValue(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 5 || st.Values() != n {
		t.Errorf("history %d, values %d; want 5, %d", st.History(), st.Values(), n)
	}
}

func TestKeyValueRejectsBadBucket(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, testConfig{})
	js := jstest.JetStream(t, s, "kv")
	if _, err := KeyValue(testContext(t), js, "bad.name", 1); !errors.Is(err, jetstream.ErrInvalidBucketName) {
		t.Errorf("KeyValue(bad.name): %v, want ErrInvalidBucketName", err)
	}
}

func TestObjectStore(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, testConfig{})
	ctx := testContext(t)
	js := jstest.JetStream(t, s, "obj")

	obs, err := ObjectStore(ctx, js, "toolbus_outputs", 3)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("output "), 100_000)
	if _, err := obs.PutBytes(ctx, "t1/c1", big); err != nil {
		t.Fatal(err)
	}
	again, err := ObjectStore(ctx, js, "toolbus_outputs", 3)
	if err != nil {
		t.Fatal(err)
	}
	got, err := again.GetBytes(ctx, "t1/c1")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("get: %d bytes, %v; want %d bytes", len(got), err, len(big))
	}
}

// TestStream: Stream caps the replicas on a single server, and updates an existing
// stream to a new configuration, keeping its messages. (Package durable tests the
// configurations of its own streams.)
func TestStream(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, testConfig{})
	ctx := testContext(t)
	js := jstest.JetStream(t, s, "streams")

	cfg := jetstream.StreamConfig{Name: "TEST_STREAM", Subjects: []string{"test.>"}, Storage: jetstream.FileStorage, Replicas: 3}
	st, err := Stream(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.Replicas != 1 || info.Config.Subjects[0] != "test.>" {
		t.Errorf("stream config: replicas %d, subjects %v", info.Config.Replicas, info.Config.Subjects)
	}
	for _, entry := range []string{"model: hi", "call: read", "result: ok"} {
		if _, err := js.Publish(ctx, "test.t1", []byte(entry)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, "test.t2", []byte("other turn")); err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, "test.t1")
	if err != nil || string(last.Data) != "result: ok" {
		t.Fatalf("last entry of t1: %v, %v", last, err)
	}

	// Stream updates an existing stream to the new configuration.
	cfg.Replicas = 1
	cfg.MaxMsgsPerSubject = 100
	st, err = Stream(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxMsgsPerSubject; got != 100 {
		t.Errorf("MaxMsgsPerSubject after update = %d, want 100", got)
	}
	if n := st.CachedInfo().State.Msgs; n != 4 {
		t.Errorf("messages after update = %d, want 4", n)
	}
}

// TestCapReplicas: the replicas capReplicas tries against a fake server that accepts up
// to a number of replicas and refuses more, in a cluster whose routes name servers
// servers (0: unknown). A bare refusal lowers the count only above that number: up to
// it the cluster is still forming, and the refusal is returned for Retry to wait out.
func TestCapReplicas(t *testing.T) {
	t.Parallel()
	noPeers := &jetstream.APIError{Code: 400, ErrorCode: errCodeNoPeers, Description: noSuitablePeers}
	offline := &jetstream.APIError{Code: 400, ErrorCode: errCodeNoPeers, Description: noSuitablePeers + ", peer offline"}
	single := &jetstream.APIError{Code: 500, ErrorCode: errCodeReplicasNotSupported, Description: "replicas > 1 not supported in non-clustered mode"}
	other := errors.New("connection closed")

	tests := []struct {
		name     string
		replicas int
		servers  int   // the servers the routes name, 0 unknown
		accept   int   // the largest replica count the fake server accepts
		refusal  error // its answer to more
		tries    []int
		wantErr  error
		forming  bool // the error is marked errClusterForming, and Retry retries it
	}{
		{"fits", 3, 3, 3, noPeers, []int{3}, nil, false},
		{"zero means one", 0, 0, 1, noPeers, []int{1}, nil, false},
		{"single server", 3, 0, 1, single, []int{3, 1}, nil, false},
		{"single server in a cluster's configuration", 3, 3, 1, single, []int{3, 1}, nil, false},
		{"small cluster, size unknown", 5, 0, 3, noPeers, []int{5, 4, 3}, nil, false},
		{"small cluster", 5, 3, 3, noPeers, []int{5, 4, 3}, nil, false},
		{"two servers asked for three", 3, 2, 2, noPeers, []int{3, 2}, nil, false},
		{"forming", 3, 3, 2, noPeers, []int{3}, noPeers, true},
		{"forming, more asked than it will have", 5, 3, 2, noPeers, []int{5, 4, 3}, noPeers, true},
		{"forming, size unknown", 3, 0, 2, noPeers, []int{3, 2}, nil, false},
		{"routes naming fewer, forming", 3, 2, 1, noPeers, []int{3, 2}, noPeers, true},
		{"one replica refused is returned", 1, 3, 0, noPeers, []int{1}, noPeers, false},
		{"offline peers are not capped away", 3, 3, 1, offline, []int{3}, offline, false},
		{"other errors are returned", 3, 3, 1, other, []int{3}, other, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tries []int
			asked := 0
			err := capReplicasWith(func() int { asked++; return tt.servers }, tt.replicas, func(r int) error {
				tries = append(tries, r)
				if r > tt.accept {
					return tt.refusal
				}
				return nil
			})
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			wantRetryable := tt.forming || err != nil && tt.refusal == offline
			if errors.Is(err, errClusterForming) != tt.forming || retryable(err) != wantRetryable {
				t.Errorf("error %v: forming %t, retryable %t; want %t, %t", err, errors.Is(err, errClusterForming), retryable(err), tt.forming, wantRetryable)
			}
			if !slices.Equal(tries, tt.tries) {
				t.Errorf("tried %v, want %v", tries, tt.tries)
			}
			// The cluster's size is looked up once, and only after a bare refusal.
			wantAsked := 0
			if tt.refusal == noPeers && tt.tries[0] > tt.accept {
				wantAsked = 1
			}
			if asked != wantAsked {
				t.Errorf("cluster size looked up %d times, want %d", asked, wantAsked)
			}
		})
	}
}

// TestLeaderLastSeq: the leader's last sequence of a subject, 0 for a subject with no
// message, and a clear error for a stream that does not exist.
func TestLeaderLastSeq(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, testConfig{})
	ctx := testContext(t)
	js := jstest.JetStream(t, s, "leader-last")
	if _, err := Stream(ctx, js, jetstream.StreamConfig{Name: "LAST", Subjects: []string{"last.>"}, Storage: jetstream.FileStorage, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, subj := range []string{"last.a", "last.b", "last.a", "last.b"} {
		ack, err := js.Publish(ctx, subj, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if subj == "last.a" {
			want = ack.Sequence
		}
	}
	if got, err := LeaderLastSeq(ctx, js.Conn(), "LAST", "last.a"); err != nil || got != want {
		t.Errorf("last.a: %d, %v; want %d", got, err, want)
	}
	if got, err := LeaderLastSeq(ctx, js.Conn(), "LAST", "last.none"); err != nil || got != 0 {
		t.Errorf("a subject with no message: %d, %v; want 0", got, err)
	}
	if _, err := LeaderLastSeq(ctx, js.Conn(), "NO_SUCH", "last.a"); err == nil {
		t.Error("a stream that does not exist: no error")
	}
}
