package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// smallFSEnv names a directory on a small filesystem (a few MiB, e.g. a
// tmpfs) for TestStoreDiskFullFailsServer; unset, that test is skipped.
//
//	unshare -Urm sh -c 'mount -t tmpfs -o size=8m tmpfs /mnt &&
//	    TOOLBUS_TEST_SMALL_FS=/mnt go test -run TestStoreDiskFull ./bus/'
const smallFSEnv = "TOOLBUS_TEST_SMALL_FS"

func TestStoreFillsAndRecovers(t *testing.T) {
	t.Parallel()
	const maxStore = 4 << 20
	s, _ := startServer(t, Config{Name: "full1", MaxStore: maxStore})
	ctx := testContext(t)
	js := connectJS(t, s)
	fill, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "docs", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}

	// The server refuses a write once what it stores exceeds max store:
	// about maxStore/64 KiB messages, one more at most.
	payload := make([]byte, 64<<10)
	var refused error
	for i := range 4 * maxStore / len(payload) {
		if _, err := js.Publish(ctx, fmt.Sprintf("fill.%d", i), payload); err != nil {
			refused = err
			break
		}
	}
	if refused == nil {
		t.Fatalf("wrote %d bytes into a store of %d without a refusal", 4*maxStore, maxStore)
	}
	if !bus.IsStoreFull(refused) {
		t.Fatalf("refused with %v; bus.IsStoreFull = false", refused)
	}
	var apiErr *jetstream.APIError
	if !errors.As(refused, &apiErr) || apiErr.ErrorCode != 10023 { // JSInsufficientResourcesErr
		t.Errorf("refused with %v, want JetStream error 10023", refused)
	}
	named := s.StoreFullError(refused)
	for _, want := range []string{"node full1's store is full (JetStream max store 4 MiB used up)", "raise -max-store", "insufficient resources"} {
		if !strings.Contains(named.Error(), want) {
			t.Errorf("StoreFullError = %q, want %q in it", named, want)
		}
	}
	if !errors.Is(named, refused) || !bus.IsStoreFull(named) {
		t.Errorf("StoreFullError(%v) does not wrap it", refused)
	}
	if bus.StoreFullError("full1", named) != named {
		t.Error("StoreFullError named an error twice")
	}

	// The limit is the server's, not the stream's: every stream is refused.
	_, kvErr := kv.Put(ctx, "a", []byte("x"))
	if !bus.IsStoreFull(kvErr) {
		t.Errorf("KV put into a full store: %v, want a full store", kvErr)
	}
	// A stream that reserves more than the store holds is refused whatever
	// is used (10047).
	_, createErr := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MORE", Subjects: []string{"more"}, MaxBytes: 2 * maxStore})
	if !bus.IsStoreFull(createErr) || !strings.Contains(s.StoreFullError(createErr).Error(), "MaxBytes would exceed JetStream max store 4 MiB") {
		t.Errorf("creating a stream of 8 MiB in a store of 4: %v, want a full store", createErr)
	}

	// Accounting only: JetStream stays up, and after a purge writes succeed
	// again with no restart.
	if !s.NATS().JetStreamEnabled() {
		t.Fatal("JetStream was disabled by a full store limit")
	}
	if err := fill.Purge(ctx); err != nil {
		t.Fatalf("purge a full stream: %v", err)
	}
	if _, err := js.Publish(ctx, "fill.again", payload); err != nil {
		t.Errorf("publish after a purge: %v", err)
	}
	if _, err := kv.Put(ctx, "a", []byte("x")); err != nil {
		t.Errorf("KV put after a purge: %v", err)
	}

	// Filled again, then freed by deleting messages one by one.
	var last uint64
	for i := 0; ; i++ {
		ack, err := js.Publish(ctx, fmt.Sprintf("fill.%d", i), payload)
		if err != nil {
			if !bus.IsStoreFull(err) {
				t.Fatalf("filling again: %v", err)
			}
			break
		}
		last = ack.Sequence
	}
	for seq := last; seq > last-8; seq-- {
		if err := fill.DeleteMsg(ctx, seq); err != nil {
			t.Fatalf("delete message %d: %v", seq, err)
		}
	}
	if _, err := js.Publish(ctx, "fill.after-delete", payload); err != nil {
		t.Errorf("publish after deleting messages: %v", err)
	}

	select {
	case <-s.Failed():
		t.Errorf("Failed closed by a full store limit: %v", s.Err())
	default:
	}
}

func TestIsStoreFull(t *testing.T) {
	t.Parallel()
	api := func(code jetstream.ErrorCode, desc string) error {
		return fmt.Errorf("publish: %w", &jetstream.APIError{Code: 503, ErrorCode: code, Description: desc})
	}
	for _, tc := range []struct {
		err  error
		full bool
		says string
	}{
		{api(10023, "insufficient resources"), true, "JetStream max store 8 MiB used up"},
		{api(10047, "insufficient storage resources available"), true, "MaxBytes would exceed JetStream max store 8 MiB"},
		{api(10028, "insufficient memory resources available"), true, "max memory 1 GiB used up"},
		{api(10002, "resource limits exceeded for account"), true, "the account's JetStream limit"},
		{api(10005, "no suitable peers for placement, insufficient storage"), true, "no node of the cluster has room"},
		{api(10077, "write /s/jetstream/1.blk: no space left on device"), true, "no space left on the disk"},
		{fmt.Errorf("append: %w", &os.PathError{Op: "write", Path: "/s", Err: syscall.ENOSPC}), true, "no space left on the disk"},
		{api(10005, "no suitable peers for placement, peer offline"), false, ""},
		{api(10077, "maximum bytes exceeded"), false, ""},
		{api(10071, "wrong last sequence: 3"), false, ""},
		{context.DeadlineExceeded, false, ""},
		{nil, false, ""},
	} {
		if got := bus.IsStoreFull(tc.err); got != tc.full {
			t.Errorf("IsStoreFull(%v) = %v, want %v", tc.err, got, tc.full)
		}
		named := (&Server{name: "n1", maxStore: 8 << 20, maxMemory: 1 << 30}).StoreFullError(tc.err)
		if !tc.full {
			if named != tc.err {
				t.Errorf("StoreFullError(%v) = %v, want it unchanged", tc.err, named)
			}
			continue
		}
		if msg := named.Error(); !strings.HasPrefix(msg, "node n1's store is full") || !strings.Contains(msg, tc.says) {
			t.Errorf("StoreFullError(%v) = %q, want it to say %q", tc.err, msg, tc.says)
		}
	}
}

// TestStoreFailedWhenJetStreamStops: a JetStream that stops by itself, or a
// store that logs a write error it will keep, closes Failed; Close does not.
func TestStoreFailedWhenJetStreamStops(t *testing.T) {
	t.Parallel()
	t.Run("disabled", func(t *testing.T) {
		s, _ := startServer(t, Config{Name: "dis1"})
		// What handleOutOfSpace and a permission error do.
		if err := s.NATS().ShutdownJetStream(); err != nil {
			t.Fatal(err)
		}
		waitFailed(t, s)
		if err := s.Err(); !errors.Is(err, ErrStoreFailed) || !strings.Contains(err.Error(), "JetStream was disabled") {
			t.Errorf("Err = %v, want ErrStoreFailed, JetStream disabled", err)
		}
	})
	t.Run("write error", func(t *testing.T) {
		s, _ := startServer(t, Config{Name: "werr1"})
		// As stream.go setWriteErrLocked logs it on ENOSPC.
		s.NATS().Errorf("JetStream stream '%s > %s' critical write error: %v", "$G", "TURNS",
			&os.PathError{Op: "write", Path: "/s/jetstream/$G/streams/TURNS/msgs/1.blk", Err: syscall.ENOSPC})
		waitFailed(t, s)
		err := s.Err()
		if !errors.Is(err, ErrStoreFailed) || !bus.IsStoreFull(err) || !strings.Contains(err.Error(), "node werr1's store is full (no space left on the disk)") {
			t.Errorf("Err = %v, want ErrStoreFailed and a full store of werr1", err)
		}
	})
	t.Run("close", func(t *testing.T) {
		s, _ := startServer(t, Config{Name: "close1"})
		s.Close()
		select {
		case <-s.Failed():
			t.Errorf("Failed closed by Close: %v", s.Err())
		default:
		}
	})
}

func waitFailed(t *testing.T, s *Server) {
	t.Helper()
	select {
	case <-s.Failed():
	case <-time.After(10 * storeWatchEvery):
		t.Fatal("Failed not closed")
	}
}

// TestStoreDiskFullFailsServer fills a real, small filesystem: see
// smallFSEnv. It checks what nats-server v2.15.2 does on ENOSPC and what the
// node relies on: the stream keeps the error even once space is freed (a
// purge is refused with it too), Failed closes with a full store named, and
// a restart after space is freed writes again.
func TestStoreDiskFullFailsServer(t *testing.T) {
	t.Parallel()
	root := os.Getenv(smallFSEnv)
	if root == "" {
		t.Skipf("set %s to a directory on a small filesystem", smallFSEnv)
	}
	dir, err := os.MkdirTemp(root, "store-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Room to free later, as an operator would.
	filler := dir + ".filler"
	if err := os.WriteFile(filler, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filler) })

	ctx := testContext(t)
	s, rec := startServer(t, Config{Name: "disk1", StoreDir: dir})
	defer func() {
		for _, m := range rec.Find(slog.LevelWarn, "") {
			t.Logf("server: %s", m)
		}
	}()
	js := connectJS(t, s)
	fill, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill.>"}})
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 64<<10)
	var pubErr error
	for i := 0; pubErr == nil && i < 100_000; i++ {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, pubErr = js.Publish(pctx, fmt.Sprintf("fill.%d", i), payload)
		cancel()
	}
	// On a single server the write that hits ENOSPC is not answered.
	t.Logf("publisher got: %v", pubErr)
	waitFailed(t, s)
	if err := s.Err(); !errors.Is(err, ErrStoreFailed) || !bus.IsStoreFull(err) {
		t.Errorf("Err = %v, want ErrStoreFailed and a full store", err)
	}
	t.Logf("Err: %v", s.Err())
	t.Logf("JetStream enabled: %v", s.NATS().JetStreamEnabled())

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Space freed: the stream keeps its write error all the same.
	if err := fill.Purge(ctx); err == nil || !bus.IsStoreFull(err) {
		t.Errorf("purge after freeing space: %v, want the kept write error", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = js.Publish(pctx, "fill.after", payload)
	cancel()
	if err == nil {
		t.Error("a publish after freeing space succeeded without a restart; Failed may be needless now")
	}

	// A restart writes again.
	s.Close()
	s2, _ := startServer(t, Config{Name: "disk1", StoreDir: dir})
	js2 := connectJS(t, s2)
	fill2, err := js2.Stream(ctx, "FILL")
	if err != nil {
		t.Fatal(err)
	}
	if err := fill2.Purge(ctx); err != nil {
		t.Fatalf("purge after a restart: %v", err)
	}
	if _, err := js2.Publish(ctx, "fill.restarted", payload); err != nil {
		t.Errorf("publish after a restart: %v", err)
	}
}

func connectJS(t *testing.T, s *Server) jetstream.JetStream {
	t.Helper()
	nc, err := s.Connect(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
