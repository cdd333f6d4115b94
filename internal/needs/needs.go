// Package needs lets a test say it needs a program the machine may lack (bubblewrap,
// chromium): without it the test skips, saying what is missing and how to get it, so
// that `go test ./...` passes on a fresh machine. Under .ci/run, which installs every
// such program and sets TOOLBUS_TEST_NEEDS=all, the same test fails instead: CI must
// never pass by skipping what it did not run.
//
// It is a leaf (os, os/exec and testing), for any package's tests.
package needs

import (
	"os"
	"os/exec"
	"testing"
)

// Env names the variable that, set to "all", turns every skip of this package into a
// failure.
const Env = "TOOLBUS_TEST_NEEDS"

// Bwrap ends t as Missing does unless bubblewrap is on PATH: run_command runs every
// command in a bwrap sandbox (toolsets/computer), and a test of a sandboxed command needs
// a real one.
func Bwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		Missing(t, "needs bubblewrap (bwrap is not on PATH): apt-get install bubblewrap; .ci/run installs it")
	}
}

// Missing ends t for want of a program: it skips t with why, which says what is missing
// and how to get it, or fails t when Env is "all". A test that looks for its program
// itself (chromium: under several names, or where a variable says) calls it when it
// finds none.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(Env) == "all" {
		t.Fatalf("%s, and %s=all says every test must run", why, Env)
	}
	t.Skip(why)
}
