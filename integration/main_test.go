//go:build linux

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/internal/jstest"
	"github.com/toolbus/toolbus/internal/testmain"
)

const (
	// natsCLIVersion is the nats CLI the tests drive. v0.5.1 moved on to
	// another nats-server; keep to the version the notes were verified with.
	natsCLIVersion = "0.5.0"
	natsCLIModule  = "github.com/nats-io/natscli/nats@v" + natsCLIVersion

	// Every listener in these tests takes this user.
	testUser = "u"
	testPass = "p"

	// waitLimit bounds each wait for a process or the bus: a liveness guard,
	// so that a hang fails the test instead of the whole run. Healthy runs
	// need a small fraction of it.
	waitLimit = 60 * time.Second
	// stopGrace is how long a process gets between SIGTERM and SIGKILL.
	stopGrace = 10 * time.Second
)

// bins are the executables under test, prepared once by TestMain. A test
// that needs one whose preparation failed fails with the reason.
var bins struct {
	cli, nats       string
	cliErr, natsErr error
	// home isolates the nats CLI from the user's contexts and config.
	home string
	// dir holds the binaries built from this checkout (cmd/cli, slowhost) and the nats
	// CLI, installed into the run's own folder.
	dir string
	// tools keeps the npm installs across runs and clones: the Node.js worker's
	// packages, mcporter and the MCP server (see toolsDir).
	tools string
}

// parallelTests is how many tests run at once when -parallel is not given. The tests
// mostly wait on the processes they start, which run outside this one, so the default
// of go test (GOMAXPROCS, 2 on the CI machine) would leave the machine idle. With 4,
// the longest tests (each 20-30 s of leases and timed calls) often started last.
const parallelTests = 16

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "toolbus-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	prepareBinaries(dir)
	testmain.Main(m, testmain.Config{Parallel: parallelTests, Done: func() error { return os.RemoveAll(dir) }})
}

// prepareBinaries builds cmd/cli into dir and installs the nats
// CLI, recording what failed for the tests to report.
func prepareBinaries(dir string) {
	bins.home = filepath.Join(dir, "home")
	if err := os.MkdirAll(bins.home, 0o755); err != nil {
		bins.cliErr, bins.natsErr = err, err
		return
	}
	root, err := repoRoot()
	if err != nil {
		bins.cliErr, bins.natsErr = err, err
		return
	}
	goCmd, err := goTool()
	if err != nil {
		bins.cliErr, bins.natsErr = err, err
		return
	}
	binDir := os.Getenv("TOOLBUS_TEST_BIN")
	if binDir == "" {
		binDir = filepath.Join(root, "integration", ".bin")
	}
	bins.dir = binDir
	bins.tools = toolsDir(binDir)
	for _, d := range []string{binDir, bins.tools} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			bins.cliErr, bins.natsErr = err, err
			return
		}
	}
	// At once, into binDir, which outlives the run: go build relinks only a binary
	// whose build ID changed (a link is 4 s of the package's run; an unchanged one
	// 0.25 s; see goBuild).
	// Nodes run as `toolbus node` (cmd/node is the same program under another name):
	// one link of the command, not two, on the package's critical path.
	var wg sync.WaitGroup
	wg.Go(func() { bins.cli, bins.cliErr = goBuild(goCmd, root, "./cmd/cli", filepath.Join(binDir, "cli")) })
	wg.Go(func() { bins.nats, bins.natsErr = installNatsCLI(goCmd, binDir) })
	wg.Wait()
}

// toolsDir is where the npm installs are kept: TOOLBUS_TEST_BIN when set (with the
// built binaries), else the user's cache ($XDG_CACHE_HOME or ~/.cache,
// toolbus-integration), as internal/npmtest keeps its installs. A clean clone (CI)
// then installs them only once: in integration/.bin each clone npm ci'd the worker
// (33 s) and npm installed mcporter (57 s) while its tests waited. Each is installed
// into a fresh folder and moved into place under a name that says its version, so runs
// of several clones share them safely. The nats CLI stays in the run's own folder
// (dir): a go install of it from a warm build cache is a link.
func toolsDir(binDir string) string {
	if os.Getenv("TOOLBUS_TEST_BIN") != "" {
		return binDir
	}
	if cache, err := os.UserCacheDir(); err == nil {
		return filepath.Join(cache, "toolbus-integration")
	}
	return binDir
}

// repoRoot is the module root: tests run in the package directory.
func repoRoot() (string, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("find the module root: %w", err)
	}
	return root, nil
}

// goTool finds the go command that builds the binaries.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no go command in PATH or GOROOT: %w", err)
	}
	return p, nil
}

// goBuild builds the package pkg of the module at root into out.
func goBuild(goCmd, root, pkg, out string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Without the VCS stamp: with it every commit (and every edit of a tracked file)
	// would relink each binary.
	cmd := exec.CommandContext(ctx, goCmd, "build", "-buildvcs=false", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// installNatsCLI makes sure dir/nats-vVERSION is the pinned nats CLI, installing it
// when it is missing or does not run as that version.
func installNatsCLI(goCmd, dir string) (string, error) {
	nats := filepath.Join(dir, "nats-v"+natsCLIVersion)
	if v, err := natsCLIVersionOf(nats); err == nil && v == natsCLIVersion {
		return nats, nil
	}
	// Install from an empty directory outside the module, so that go.mod
	// and any go.work are neither read nor touched, into a fresh folder beside the
	// tools: the binary moves into place complete, never written over one that another
	// run is executing.
	work, err := os.MkdirTemp("", "toolbus-natscli-")
	if err != nil {
		return "", fmt.Errorf("install the nats CLI: %w", err)
	}
	defer os.RemoveAll(work)
	gobin, err := os.MkdirTemp(dir, "nats-installing-")
	if err != nil {
		return "", fmt.Errorf("install the nats CLI: %w", err)
	}
	defer os.RemoveAll(gobin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "install", natsCLIModule)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-mod=mod", "GOWORK=off")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go install %s (GOBIN=%s): %w\n%s", natsCLIModule, gobin, err, out)
	}
	v, err := natsCLIVersionOf(filepath.Join(gobin, "nats"))
	if err != nil {
		return "", fmt.Errorf("installed nats CLI does not run: %w", err)
	}
	if v != natsCLIVersion {
		return "", fmt.Errorf("installed nats CLI reports version %q, want %q", v, natsCLIVersion)
	}
	if err := os.Rename(filepath.Join(gobin, "nats"), nats); err != nil {
		return "", fmt.Errorf("install the nats CLI: %w", err)
	}
	fmt.Fprintf(os.Stderr, "integration: installed the nats CLI v%s as %s in %s\n",
		natsCLIVersion, nats, time.Since(start).Round(time.Second))
	return nats, nil
}

// natsCLIVersionOf runs `nats --version` and returns the version without "v".
func natsCLIVersionOf(path string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", path, err, out)
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), nil
}

func natsBin(t testing.TB) string {
	t.Helper()
	if bins.natsErr != nil {
		t.Fatalf("the nats CLI is not available: %v", bins.natsErr)
	}
	return bins.nats
}

// nodeBin is the command that runs a node, `toolbus node`, and its first argument:
// start a node with nodeArgs.
func nodeBin(t testing.TB) string {
	t.Helper()
	if bins.cliErr != nil {
		t.Fatalf("cmd/cli did not build: %v", bins.cliErr)
	}
	return bins.cli
}

// nodeArgs are a node's command-line arguments after nodeBin: `node` and args.
func nodeArgs(args ...string) []string { return append([]string{"node"}, args...) }

func cliBin(t testing.TB) string {
	t.Helper()
	if bins.cliErr != nil {
		t.Fatalf("cmd/cli did not build: %v", bins.cliErr)
	}
	return bins.cli
}

// childEnv is the environment of every process the tests start: the test's
// own, without anything that would point a client at another bus, a model
// API or the user's configuration.
func childEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "NATS_"), strings.HasPrefix(k, "OPENAI_"), strings.HasPrefix(k, "XDG_"),
			k == "HOME", strings.HasPrefix(k, "TOOLBUS_"):
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"),
	)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago and that no other
// test of this process was given (jstest.FreePorts).
func freePort(t testing.TB) int { return jstest.FreePorts(t, 1)[0] }

// process is a child process in a process group of its own, so that it and
// everything it started can be signalled at once.
type process struct {
	name   string
	cmd    *exec.Cmd
	stdout *bustest.Buffer
	stderr *bustest.Buffer
	done   chan struct{} // closed once the process has exited
	err    error         // Wait's error, set before done is closed
	stop   sync.Once
}

// startProcess starts bin with args. The process group is stopped when the
// test ends; if the test failed, its output is logged.
func startProcess(t testing.TB, name, bin string, args ...string) *process {
	t.Helper()
	return startProcessEnv(t, name, bin, nil, args...)
}

// startProcessEnv is startProcess with env ("K=V") added to the child's environment:
// what a test would otherwise set with t.Setenv, which a parallel test may not.
func startProcessEnv(t testing.TB, name, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{name: name, stdout: &bustest.Buffer{}, stderr: &bustest.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(childEnv(filepath.Join(t.TempDir(), "home")), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	// Pdeathsig kills the child if the test binary dies without cleaning up.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A grandchild that keeps the output pipe open must not hold Wait forever.
	p.cmd.WaitDelay = stopGrace
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.terminate()
		if t.Failed() {
			t.Logf("%s %s\n--- stdout:\n%s\n--- stderr:\n%s", name, strings.Join(args, " "), tail(p.stdout.String()), tail(p.stderr.String()))
		}
	})
	return p
}

// tail keeps the end of a long log.
func tail(s string) string {
	const keep = 64 << 10
	if len(s) <= keep {
		return s
	}
	return "…" + s[len(s)-keep:]
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate asks the process group to stop (SIGTERM), kills it after
// stopGrace, and waits for the process. It is idempotent.
func (p *process) terminate() {
	p.stop.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
		}
		// Whatever is left in the group goes, the leader included.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	})
}

// kill kills the process group at once (SIGKILL), as a crash would, and
// waits for the process.
func (p *process) kill() {
	p.stop.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
}

// stacks has a Go process that is stuck print its goroutines (SIGQUIT: the runtime
// prints every stack to stderr and exits) and returns its stderr, for a failure that
// says where it waited.
func (p *process) stacks() string {
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	return p.stderr.String()
}

// wait waits, bounded by waitLimit, for the process to exit and returns its
// exit code.
func (p *process) wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitLimit):
		t.Fatalf("%s did not exit within %s\nstdout:\n%s\nstderr, with its goroutines (SIGQUIT):\n%s", p.name, waitLimit, tail(p.stdout.String()), p.stacks())
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("%s: %v", p.name, p.err)
	return -1
}

// node is a running `toolbus node` process with a client listener.
type node struct {
	name string
	port int
	// url is the client URL with the test credentials.
	url string
	// dir holds the node's store and homes.
	dir string
	// passFile holds testPass, for -pass-file.
	passFile string
	proc     *process
	args     []string // what it was started with, for a restart
	env      []string // added to its environment, for a restart
}

// startNode starts `node -name name` with a client listener on a free
// loopback port, the test credentials, and a store and home root of its
// own; args add or override flags (the last one given wins). It does not
// wait for the node: see waitReady.
func startNode(t testing.TB, name string, args ...string) *node {
	t.Helper()
	return startNodeEnv(t, name, nil, args...)
}

// startNodeEnv is startNode with env ("K=V") added to the node's environment.
func startNodeEnv(t testing.TB, name string, env []string, args ...string) *node {
	t.Helper()
	n := &node{name: name, port: freePort(t), dir: filepath.Join(t.TempDir(), name), env: env}
	n.url = fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", testUser, testPass, n.port)
	n.passFile = writePassFile(t, n.dir, testPass)
	base := []string{
		"-name", name,
		"-listen", "127.0.0.1:" + strconv.Itoa(n.port),
		"-user", testUser, "-pass-file", n.passFile,
		"-store-dir", filepath.Join(n.dir, "store"),
		"-home-root", filepath.Join(n.dir, "homes"),
	}
	n.args = append(base, args...)
	n.proc = startProcessEnv(t, "node "+name, nodeBin(t), n.env, nodeArgs(n.args...)...)
	return n
}

// writePassFile writes pass into a file of its own under dir (made if
// missing) and returns its path.
func writePassFile(t testing.TB, dir, pass string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "pass-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(pass + "\n"); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// restart starts the node again, as it was started (same port, store and homes).
func (n *node) restart(t testing.TB) {
	t.Helper()
	n.proc = startProcessEnv(t, "node "+n.name+" (restarted)", nodeBin(t), n.env, nodeArgs(n.args...)...)
}

// waitReady waits until the node says it serves its categories and turns.
func (n *node) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !strings.Contains(n.proc.stderr.String(), `msg="node ready"`) {
		if n.proc.exited() {
			t.Fatalf("node %s exited before it was ready (%v):\n%s", n.name, n.proc.err, tail(n.proc.stderr.String()))
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not ready within %s:\n%s", n.name, waitLimit, tail(n.proc.stderr.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runNats runs the nats CLI with args and returns what it printed. It is
// isolated from the user's nats contexts; pass --server.
func runNats(t testing.TB, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runBin(t, natsBin(t), args...)
}

// runCLI runs the toolbus command line with args.
func runCLI(t testing.TB, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runBin(t, cliBin(t), args...)
}

// runBin runs a short-lived command in a process group of its own, bounded
// by waitLimit.
func runBin(t testing.TB, bin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = childEnv(bins.home)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = stopGrace
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not finish within %s\nstdout:\n%s\nstderr:\n%s",
			filepath.Base(bin), strings.Join(args, " "), waitLimit, tail(out.String()), tail(errOut.String()))
	}
	return out.String(), errOut.String(), err
}

// exitCode is err's process exit code: 0 for nil, -1 if it is not an exit.
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}
