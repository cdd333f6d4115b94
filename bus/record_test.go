package bus

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestCreateOnceAndGetRecord(t *testing.T) {
	s, _ := startServer(t, Config{})
	ctx := testContext(t)
	kv, err := KeyValue(ctx, testJetStream(t, s, "records"), "records", 1)
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
