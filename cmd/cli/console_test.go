package main

import (
	"strings"
	"testing"
)

// A console on an address other hosts reach, without a password, is a usage error
// that says how to give one; a password file that cannot be read says so too.
func TestConsoleOffLoopbackWithoutPassword(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, false)
	ctx := testContext(t)
	code, _, errOut := cli(ctx, rb.args("console", "-addr", "0.0.0.0:0")...)
	if code != exitUsage || !strings.Contains(errOut, "-addr 0.0.0.0:0 is reachable from other hosts: give the console a password with -password-file FILE") {
		t.Errorf("exit %d, stderr %s", code, errOut)
	}
	code, _, errOut = cli(ctx, rb.args("console", "-addr", "0.0.0.0:0", "-password-file", "/nonexistent/pw")...)
	if code != exitFailed || !strings.Contains(errOut, "-password-file") {
		t.Errorf("exit %d, stderr %s", code, errOut)
	}
}
