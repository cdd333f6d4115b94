package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/jstest"
)

func TestCreateOnceAndGetRecord(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, testConfig{})
	ctx := testContext(t)
	kv, err := KeyValue(ctx, jstest.JetStream(t, s, "records"), "records", 1)
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		N int `json:"n"`
	}
	if err := CreateOnce(ctx, kv, "a", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	// A create retried with the same value took effect; another value is refused.
	if err := CreateOnce(ctx, kv, "a", []byte(`{"n":1}`)); err != nil {
		t.Errorf("the same create again: %v", err)
	}
	if err := CreateOnce(ctx, kv, "a", []byte(`{"n":2}`)); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Errorf("another value: %v, want ErrKeyExists", err)
	}
	got, rev, err := GetRecord[rec](ctx, kv, "a")
	if err != nil || got.N != 1 || rev == 0 {
		t.Errorf("GetRecord: %+v %d %v", got, rev, err)
	}
	if _, _, err := GetRecord[rec](ctx, kv, "missing"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a missing key: %v, want ErrKeyNotFound", err)
	}
	if _, err := kv.Put(ctx, "bad", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := GetRecord[rec](ctx, kv, "bad"); err == nil || !strings.Contains(err.Error(), "unreadable record bad") {
		t.Errorf("a value that is not the record: %v", err)
	}
}

func TestListKeys(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, testConfig{})
	ctx := testContext(t)
	kv, err := KeyValue(ctx, jstest.JetStream(t, s, "keys"), "keys", 1)
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := ListKeys(ctx, kv); err != nil || len(keys) != 0 {
		t.Errorf("an empty bucket: %v %v", keys, err)
	}
	for _, k := range []string{"ann.a", "ann.b", "bob.a"} {
		if _, err := kv.Put(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := ListKeys(ctx, kv)
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, []string{"ann.a", "ann.b", "bob.a"}) {
		t.Errorf("all keys: %v %v", keys, err)
	}
	// The same filters twice, as a retried attempt gives them: nats.go writes into the
	// filters it is given.
	filters := []string{"*.a"}
	for range 2 {
		keys, err = ListKeys(ctx, kv, filters...)
		slices.Sort(keys)
		if err != nil || !slices.Equal(keys, []string{"ann.a", "bob.a"}) {
			t.Errorf("filtered: %v %v", keys, err)
		}
	}
	if filters[0] != "*.a" {
		t.Errorf("the caller's filter became %q", filters[0])
	}
}

// A listing cut short by its context's end is an error, never a shorter list: nats.go's
// lister closes its keys the same way when it has them all.
func TestListKeysCutShortIsAnError(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, testConfig{})
	ctx := testContext(t)
	kv, err := KeyValue(ctx, jstest.JetStream(t, s, "many"), "many", 1)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	for i := range n {
		if _, err := kv.Put(ctx, fmt.Sprintf("k.%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond} {
		short, cancel := context.WithTimeout(ctx, d)
		keys, err := ListKeys(short, kv)
		cancel()
		if err == nil && len(keys) != n {
			t.Errorf("within %v: %d of %d keys and no error", d, len(keys), n)
		}
	}
	if keys, err := ListKeys(ctx, kv); err != nil || len(keys) != n {
		t.Errorf("all keys: %d, %v", len(keys), err)
	}
}
