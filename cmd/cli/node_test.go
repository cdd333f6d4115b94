package main

import (
	"context"
	"testing"
)

// TestNode runs `toolbus node` until it is ready, then stops it as Ctrl-C would.
func TestNode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	var stdout, stderr output
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"node", "-name", "clitest", "-store-dir", t.TempDir(), "-home", t.TempDir(), "-sandbox=off"}, &stdout, &stderr)
	}()
	stderr.waitFor(t, testContext(t), "node ready")
	cancel()
	if c := <-code; c != exitOK {
		t.Fatalf("node: exit %d\n%s", c, stderr.String())
	}
	if code, _, stderr := cli(testContext(t), "node", "-name", "a.b"); code != exitUsage {
		t.Errorf("node -name a.b: exit %d\n%s", code, stderr)
	}
}
