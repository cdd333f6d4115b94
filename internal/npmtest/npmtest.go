// Package npmtest installs npm packages for tests: once per test binary run for
// each set of packages, and across runs once per set of versions, into the user's cache
// ($XDG_CACHE_HOME or ~/.cache, toolbus-npmtest), so a clean clone (CI) does not install
// them again (17 s); without a cache folder, into this package's own .npm (ignored by
// git). Without npm or its registry the test is skipped, saying so.
//
// It is a leaf (os, os/exec and testing), for any package's tests.
package npmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The packages the MCP tests run: the reference MCP server and mcporter, pinned
// (mcporter 0.10 and later want Node 24; 0.9.0 runs on Node 20).
const (
	Mcporter   = "mcporter@0.9.0"
	Everything = "@modelcontextprotocol/server-everything@2026.8.31"
)

type install struct {
	once   sync.Once
	prefix string
	err    error
}

var (
	mu       sync.Mutex
	installs = map[string]*install{}
)

// Prefix installs packages with `npm install -g --prefix` and returns the prefix: its
// bin folder holds their commands. It skips t when they cannot be installed.
func Prefix(t testing.TB, packages ...string) string {
	t.Helper()
	key := strings.Join(packages, " ")
	mu.Lock()
	in := installs[key]
	if in == nil {
		in = &install{}
		installs[key] = in
	}
	mu.Unlock()
	in.once.Do(func() { in.prefix, in.err = installPackages(packages) })
	if in.err != nil {
		t.Skipf("SKIP: the npm packages %s cannot be installed here (npm or its registry unreachable?): %v", key, in.err)
	}
	return in.prefix
}

func installPackages(packages []string) (string, error) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", err
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), ".npm")
	if cache, err := os.UserCacheDir(); err == nil {
		dir = filepath.Join(cache, "toolbus-npmtest")
	}
	name := strings.NewReplacer("@", "", "/", "-").Replace(strings.Join(packages, "+"))
	prefix := filepath.Join(dir, name)
	if _, err := os.Stat(filepath.Join(prefix, ".installed")); err == nil {
		return prefix, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Installed into a fresh folder, moved into place when complete: an interrupted
	// install is never taken for a finished one, and two test binaries installing at
	// once each finish their own (npm writes the folder's path into nothing it installs).
	work, err := os.MkdirTemp(dir, "installing-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append([]string{"install", "-g", "--prefix", work, "--no-audit", "--no-fund"}, packages...)
	if b, err := exec.CommandContext(ctx, npm, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	if err := os.WriteFile(filepath.Join(work, ".installed"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(work, prefix); err != nil {
		if _, statErr := os.Stat(filepath.Join(prefix, ".installed")); statErr != nil {
			return "", fmt.Errorf("move the install into place: %w", err)
		}
		// Another test binary finished first: use its copy.
	}
	return prefix, nil
}
