package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCallLargeArguments: `toolbus call` with arguments over the 1 MiB a message carries
// sends them through the payload object store, as a turn does, and the host runs the
// call; arguments over what a call may carry at all are refused before anything is sent.
func TestCallLargeArguments(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	home := t.TempDir()
	// Just over the 1 MiB a message carries, with room for the headers.
	content := strings.Repeat("0123456789abcdef\n", (1<<20+200<<10)/17) // 1.2 MiB
	args, _ := json.Marshal(map[string]string{"path": "big.txt", "content": content})
	code, stdout, stderr := cli(ctx, "call", "-home", home, "write_file", string(args))
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%.2000s\nstdout:\n%.2000s", code, stderr, stdout)
	}
	got, err := os.ReadFile(filepath.Join(home, "big.txt"))
	if err != nil || string(got) != content {
		t.Fatalf("big.txt: %d bytes, %v; want %d", len(got), err, len(content))
	}

	huge, _ := json.Marshal(map[string]string{"path": "huge.txt", "content": strings.Repeat("x", 17<<20)})
	code, _, stderr = cli(ctx, "call", "-home", home, "write_file", string(huge))
	if code != exitFailed || !strings.Contains(stderr, "the arguments of write_file are 17 MiB, over the 16 MiB a tool call may carry") {
		t.Fatalf("exit %d; stderr:\n%.2000s", code, stderr)
	}
}
