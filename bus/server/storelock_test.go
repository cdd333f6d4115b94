package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// storeLockChildEnv makes TestStoreDirLockedChild, run in a child process,
// start a server on the directory it names.
const storeLockChildEnv = "TOOLBUS_TEST_STORE_LOCK_DIR"

func TestStoreDirLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := testContext(t)
	s1, _ := startServer(t, Config{Name: "n1", StoreDir: dir})

	// A second server in this process: flock is per open file description,
	// so it conflicts as another process would.
	s2, err := Start(ctx, Config{Name: "n2", StoreDir: dir})
	if err == nil {
		s2.Close()
		t.Fatal("a second server started on a store directory in use")
	}
	var inUse *StoreDirInUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("second server: %v, want a *StoreDirInUseError", err)
	}
	if inUse.Holder.Node != "n1" || inUse.Holder.PID != os.Getpid() || inUse.Holder.Since.IsZero() {
		t.Errorf("holder = %+v, want n1, pid %d and a start time", inUse.Holder, os.Getpid())
	}
	want := fmt.Sprintf("store directory %s is in use by node n1 (pid %d, since ", dir, os.Getpid())
	if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, "stop it or give this node another -store-dir") {
		t.Errorf("error = %q, want it to contain %q and the remedy", msg, want)
	}

	// The first one still works: the refused one did not touch its store.
	nc, err := s1.Connect("still-alive")
	if err != nil {
		t.Fatalf("connect to the first server: %v", err)
	}
	if _, err := nc.Request("$JS.API.INFO", nil, testTimeout); err != nil {
		t.Fatalf("JetStream of the first server: %v", err)
	}

	s1.Close()
	startServer(t, Config{Name: "n3", StoreDir: dir})
	b, err := os.ReadFile(filepath.Join(dir, StoreLockFile))
	if err != nil {
		t.Fatal(err)
	}
	var h StoreLockHolder
	if err := json.Unmarshal(b, &h); err != nil || h.Node != "n3" || h.PID != os.Getpid() {
		t.Errorf("lock file after a restart = %q (%v), want node n3, pid %d", b, err, os.Getpid())
	}

	// Another process: the test binary again, which starts a server on the
	// directory n3 holds and reports what Start said.
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("no test binary to run again: %v", err)
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestStoreDirLockedChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), storeLockChildEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want = fmt.Sprintf("refused: start nats server \"child\": store directory %s is in use by node n3 (pid %d, since ", dir, os.Getpid())
	if !strings.Contains(string(out), want) {
		t.Errorf("child said:\n%s\nwant it refused with %q", out, want)
	}
}

// TestStoreDirLockedChild is the other process of TestStoreDirLocked.
func TestStoreDirLockedChild(t *testing.T) {
	t.Parallel()
	dir := os.Getenv(storeLockChildEnv)
	if dir == "" {
		t.Skip("run by TestStoreDirLocked")
	}
	s, err := Start(testContext(t), Config{Name: "child", StoreDir: dir})
	if err == nil {
		s.Close()
		t.Fatal("started on a store directory another process holds")
	}
	var inUse *StoreDirInUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("Start: %v, want a *StoreDirInUseError", err)
	}
	fmt.Printf("refused: %v\n", err)
}
