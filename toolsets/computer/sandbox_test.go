package computer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/internal/needs"
)

// modes are the sandbox modes the command tests run in.
var modes = []SandboxMode{SandboxBwrap, SandboxOff}

// inMode is testConfig with the sandbox in mode; it skips t in the bwrap mode where
// bubblewrap is missing.
func inMode(t testing.TB, mode SandboxMode) Config {
	t.Helper()
	if mode == SandboxBwrap {
		needs.Bwrap(t)
	}
	c := testConfig
	c.Sandbox.Mode = mode
	return c
}

// newMarker is a sleep duration no other process uses: 300 s and some random fraction.
// It names the processes of one test in scans of the host's /proc, which sees into every
// sandbox.
func newMarker() string {
	return fmt.Sprintf("300.%09d", rand.Int64N(1e9))
}

// processes are the live processes of the host whose command line holds marker, by pid.
func processes(marker string) map[int]string {
	found := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(marker)) || !alive(pid) {
			continue
		}
		found[pid] = strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
	}
	return found
}

// sleepers checks that at least n processes run `sleep marker`.
func sleepers(marker string, n int) error {
	var got int
	for _, cmdline := range processes(marker) {
		if cmdline == "sleep "+marker {
			got++
		}
	}
	if got < n {
		return fmt.Errorf("%d processes run sleep %s, want %d", got, marker, n)
	}
	return nil
}

// noneLeft waits until no process of the host holds marker in its command line.
func noneLeft(t *testing.T, marker string) {
	t.Helper()
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if left := processes(marker); len(left) > 0 {
			return fmt.Errorf("processes outlived the call: %v", left)
		}
		return nil
	})
}

// command runs a command with tool and returns its output section and details.
func command(t *testing.T, tool *toolbus.Tool, home, cmd string) (string, CommandDetails) {
	t.Helper()
	res, err, _ := run(t, t.Context(), tool, home, map[string]any{"command": cmd})
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	_, out, _ := strings.Cut(res.Text(), "Output (stdout and stderr):\n")
	return out, details[CommandDetails](t, res)
}

// nodeEnv are the variables this process (the node, here) was started with, as
// /proc/<pid>/environ shows them to whoever can read it, less the ones a command gets
// anyway. os.Setenv does not change that list (TestMain's secrets are added by the caller).
func nodeEnv(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for kv := range strings.SplitSeq(string(b), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		if v == "" || len(v) < 4 || slices.Contains([]string{"LANG", "LC_ALL", "TERM", "PWD", "OLDPWD", "SHLVL", "TMPDIR", "_"}, k) {
			continue
		}
		env = append(env, kv)
	}
	if len(env) == 0 {
		t.Fatal("this process was started with no environment to look for")
	}
	return env
}

// leaks returns the entries of env that out shows.
func leaks(out string, env []string) []string {
	var found []string
	for _, kv := range env {
		if strings.Contains(out, kv) {
			found = append(found, kv)
		}
	}
	return found
}

func TestSandboxHidesTheNode(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	env := append(nodeEnv(t), testSecret, testAPIKey)
	self := filepath.Base(os.Args[0]) // computer.test, on the command line of this process
	home := t.TempDir()
	tool := toolNamed(t, testConfig, "run_command")
	for _, cmd := range []string{
		"cat /proc/1/environ",
		"cat /proc/$PPID/environ",
		"env",
		"for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done",
	} {
		out, d := command(t, tool, home, cmd)
		if found := leaks(out, env); d.ExitCode != 0 || len(found) > 0 || strings.Contains(out, "OPENAI") {
			t.Errorf("%s: exit %d, shows the node's %q", cmd, d.ExitCode, found)
		}
	}
	// The environment is the allowlist, nothing more.
	out, _ := command(t, tool, home, "env | sort")
	want := fmt.Sprintf("HOME=%s\nLANG=C.UTF-8\nLC_ALL=C.UTF-8\nPATH=%s\nPWD=%s\nTERM=dumb\nTMPDIR=/tmp", home, defaultPath, home)
	if out != want {
		t.Errorf("env:\n%s\nwant:\n%s", out, want)
	}
	// No process of the host is in view: not this one (the node here), nor its command line.
	out, _ = command(t, tool, home, "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done")
	if strings.Contains(out, self) || strings.Contains(out, "-test.") || !strings.Contains(out, "/bin/sh -c") {
		t.Errorf("command lines in view:\n%s", out)
	}
	if out, d := command(t, tool, home, fmt.Sprintf("cat /proc/%d/cmdline", os.Getpid())); d.ExitCode == 0 {
		t.Errorf("the node's command line is readable: %q", out)
	}

	// Control: bare, the same probe finds the node's environment.
	out, _ = command(t, toolNamed(t, inMode(t, SandboxOff), "run_command"), home, "cat /proc/$PPID/environ")
	if len(leaks(out, env)) == 0 {
		t.Errorf("bare, /proc/$PPID/environ does not show the node's environment: the probe proves nothing")
	}
}

func TestSandboxConfinesFiles(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "b", "secret.txt"), "b's secret\n")
	if err := os.MkdirAll(filepath.Join(root, "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd() // the node's working directory, outside every home
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig
	cfg.HomeRoot = root
	tool := toolNamed(t, cfg, "run_command")
	runAs := func(cmd string) (string, CommandDetails) {
		t.Helper()
		res, err := tool.Execute(t.Context(), toolbus.Call{Agent: "a", Args: mustJSON(t, map[string]any{"command": cmd})})
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		_, out, _ := strings.Cut(res.Text(), "Output (stdout and stderr):\n")
		return out, details[CommandDetails](t, res)
	}

	for _, cmd := range []string{
		"cat ../b/secret.txt",
		"cat " + filepath.Join(root, "b", "secret.txt"),
		"ls " + filepath.Join(root, "b"),
		"cat " + filepath.Join(wd, "sandbox_test.go"),
		"ls " + wd,
		"cat /etc/shadow",
		"ls /root",
	} {
		if out, d := runAs(cmd); d.ExitCode == 0 || strings.Contains(out, "secret\n") || strings.Contains(out, "package computer") {
			t.Errorf("%s: exit %d, output %q", cmd, d.ExitCode, out)
		}
	}
	if out, _ := runAs("ls " + root); out != "a" {
		t.Errorf("the home root shows %q, want only a's home", out)
	}

	// The system is read-only.
	for _, p := range []string{"/x", "/usr/x", "/etc/x", "/bin/x"} {
		if out, d := runAs("echo x > " + p); d.ExitCode == 0 {
			t.Errorf("wrote %s: %q", p, out)
		}
	}
	// Nothing outside the home reaches the host. (The directories above the home exist in
	// the sandbox's private /tmp, so writing root/x there succeeds, and goes nowhere.)
	for _, p := range []string{filepath.Join(root, "x"), filepath.Join(root, "b", "x"), filepath.Join(wd, "x")} {
		runAs("echo x > " + p)
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was created on the host", p)
			os.Remove(p)
		}
	}
	name := "toolbus-private-" + newMarker()
	if out, d := runAs("echo private > /tmp/" + name + " && cat $TMPDIR/" + name + " && echo home > mine.txt"); d.ExitCode != 0 || out != "private" {
		t.Errorf("/tmp: exit %d, output %q", d.ExitCode, out)
	}
	if _, err := os.Stat(filepath.Join(os.TempDir(), name)); err == nil {
		t.Errorf("the command's /tmp file is on the host's /tmp")
	}
	if out, d := runAs("cat /tmp/" + name); d.ExitCode == 0 {
		t.Errorf("the next command sees the last one's /tmp: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(root, "a", "mine.txt")); err != nil || string(b) != "home\n" {
		t.Errorf("the home is not writable: %q, %v", b, err)
	}

	// Control: bare, the other home is in reach.
	cfg.Sandbox.Mode = SandboxOff
	res, err := toolNamed(t, cfg, "run_command").Execute(t.Context(), toolbus.Call{Agent: "a", Args: mustJSON(t, map[string]any{"command": "cat ../b/secret.txt"})})
	if err != nil || !strings.Contains(res.Text(), "b's secret") {
		t.Errorf("bare, the probe cannot read the other home (%v, %q): it proves nothing", err, res.Text())
	}
}

// detached starts three processes that leave the shell's process group and parentage:
// setsid, nohup in the background, and a double fork. Each creates a file once it runs;
// the command waits for the three.
func detached(m string) string {
	return fmt.Sprintf(`setsid sh -c 'touch s1; exec sleep %[1]s' >/dev/null 2>&1 </dev/null &
nohup sh -c 'touch s2; exec sleep %[1]s' >/dev/null 2>&1 &
(sh -c 'touch s3; exec sleep %[1]s' >/dev/null 2>&1 &)
while [ ! -e s1 ] || [ ! -e s2 ] || [ ! -e s3 ]; do sleep 0.01; done
echo detached`, m)
}

func TestSandboxLeavesNothingRunning(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	tool := toolNamed(t, testConfig, "run_command")

	t.Run("finished", func(t *testing.T) {
		home, m := t.TempDir(), newMarker()
		out, d := command(t, tool, home, detached(m))
		if d.ExitCode != 0 || out != "detached" {
			t.Fatalf("exit %d, output %q", d.ExitCode, out)
		}
		noneLeft(t, m)
	})

	t.Run("aborted", func(t *testing.T) {
		home, m := t.TempDir(), newMarker()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan toolbus.Result, 1)
		go func() {
			res, err, _ := run(t, ctx, tool, home, map[string]any{"command": detached(m) + "\nsleep " + m})
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		// The three detached sleeps and the command's own run, seen from outside.
		bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error { return sleepers(m, 4) })
		cancel()
		res := <-done
		if d := details[CommandDetails](t, res); !d.Cancelled {
			t.Errorf("result %q, details %+v", res.Text(), d)
		}
		noneLeft(t, m)
	})
}

func TestSandboxNetwork(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	connect := fmt.Sprintf("bash -c 'echo hello > /dev/tcp/127.0.0.1/%d'", l.Addr().(*net.TCPAddr).Port)
	home := t.TempDir()

	out, d := command(t, toolNamed(t, testConfig, "run_command"), home, connect)
	if d.ExitCode == 0 || d.Network {
		t.Errorf("the command reached the host's listener by default: exit %d, network %v, output %q", d.ExitCode, d.Network, out)
	}

	cfg := testConfig
	var asked []string
	cfg.CallOptions = func(agent string) CallSandbox {
		asked = append(asked, agent)
		return CallSandbox{Network: true}
	}
	out, d = command(t, toolNamed(t, cfg, "run_command"), home, connect)
	if d.ExitCode != 0 || !d.Network {
		t.Fatalf("with the network allowed: exit %d, network %v, output %q", d.ExitCode, d.Network, out)
	}
	if !slices.Equal(asked, []string{"agent-1"}) {
		t.Errorf("call options asked for %q, want the calling agent", asked)
	}
	// The connection is queued: Accept returns at once. The deadline only guards a hang.
	if err := l.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	conn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if b, err := io.ReadAll(conn); err != nil || string(b) != "hello\n" {
		t.Errorf("received %q, %v", b, err)
	}
}

func TestSandboxCallEnv(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			cfg := inMode(t, mode)
			cfg.CallOptions = func(string) CallSandbox {
				return CallSandbox{Env: map[string]string{"GREETING": "hello there", "LANG": "en_US.UTF-8"}}
			}
			out, _ := command(t, toolNamed(t, cfg, "run_command"), t.TempDir(), `echo "$GREETING $LANG $TERM"`)
			if out != "hello there en_US.UTF-8 dumb" {
				t.Errorf("output %q", out)
			}
			cfg.CallOptions = func(string) CallSandbox { return CallSandbox{Env: map[string]string{"A=B": "x"}} }
			_, err, _ := run(t, t.Context(), toolNamed(t, cfg, "run_command"), t.TempDir(), map[string]any{"command": "true"})
			if err == nil || !strings.Contains(err.Error(), `invalid variable "A=B"`) {
				t.Errorf("err = %v", err)
			}
		})
	}
}

func TestSandboxUnavailable(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "notes.md"), "a\n")
	// A bubblewrap that cannot create namespaces, as on a host that forbids them.
	fake := filepath.Join(t.TempDir(), "bwrap")
	writeFile(t, fake, "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.' >&2\nexit 1\n")
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, bwrap, want string
	}{
		{"missing", "/nonexistent/bwrap", "command sandbox unavailable: bubblewrap is not installed (/nonexistent/bwrap: no such file or directory); " +
			`install it ("apt-get install bubblewrap") or start the node with -sandbox=off to run commands without a sandbox`},
		{"not in PATH", "bwrap-" + newMarker(), " is not in PATH); " +
			`install it ("apt-get install bubblewrap") or start the node with -sandbox=off to run commands without a sandbox`},
		{"no namespaces", fake, "command sandbox unavailable: " + fake + " cannot create a sandbox on this host: " +
			"bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.; " +
			"it needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; " +
			"inside a container, one that allows them), or start the node with -sandbox=off to run commands without a sandbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig
			cfg.Sandbox.Bwrap = tc.bwrap
			err := CheckSandbox(cfg)
			if !errors.Is(err, ErrSandboxUnavailable) || !strings.HasSuffix(err.Error(), tc.want) {
				t.Fatalf("CheckSandbox: %v\nwant: %s", err, tc.want)
			}
			_, err, _ = run(t, t.Context(), toolNamed(t, cfg, "run_command"), home, map[string]any{"command": "echo ran"})
			if !errors.Is(err, ErrSandboxUnavailable) || !strings.HasSuffix(err.Error(), tc.want) {
				t.Errorf("run_command: %v", err)
			}
			// The file tools do not need the sandbox.
			if res, err, _ := run(t, t.Context(), toolNamed(t, cfg, "read_file"), home, map[string]any{"path": "notes.md"}); err != nil || res.IsError {
				t.Errorf("read_file: %v %q", err, res.Text())
			}
			// Off, the same configuration runs commands, bare.
			cfg.Sandbox.Mode = SandboxOff
			if err := CheckSandbox(cfg); err != nil {
				t.Errorf("CheckSandbox with the sandbox off: %v", err)
			}
			out, d := command(t, toolNamed(t, cfg, "run_command"), home, "echo ran")
			if out != "ran" || d.Sandbox != SandboxOff {
				t.Errorf("off: output %q, sandbox %q", out, d.Sandbox)
			}
		})
	}
	// A missing read-only path is found before bubblewrap runs: the fake one above stands
	// in for it.
	cfg := testConfig
	cfg.Sandbox.Bwrap = fake
	cfg.Sandbox.ReadOnly = []string{"/nonexistent/toolchain"}
	if err := CheckSandbox(cfg); !errors.Is(err, ErrSandboxUnavailable) || !strings.HasSuffix(err.Error(), "read-only path /nonexistent/toolchain: no such file or directory") {
		t.Errorf("missing read-only path: %v", err)
	}
	var m SandboxMode
	if err := m.Set("docker"); err == nil || err.Error() != `unknown sandbox mode "docker": want bwrap or off` {
		t.Errorf("Set: %v", err)
	}
	if err := CheckSandbox(Config{Sandbox: SandboxConfig{Mode: "docker"}}); !errors.Is(err, ErrSandboxUnavailable) {
		t.Errorf("unknown mode: %v", err)
	}
}

func TestSandboxRefusesHomesThatCoverIt(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	tool := toolNamed(t, testConfig, "run_command")
	for _, home := range []string{"/", "/tmp"} {
		_, err, _ := run(t, t.Context(), tool, home, map[string]any{"command": "true"})
		if err == nil || !strings.Contains(err.Error(), "which the command sandbox mounts itself") {
			t.Errorf("home %s: err = %v", home, err)
		}
	}
}

func TestSandboxReadOnlyPaths(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	tools := t.TempDir() // a toolchain outside every home
	writeFile(t, filepath.Join(tools, "bin", "hello"), "#!/bin/sh\necho hello from the toolchain\n")
	if err := os.Chmod(filepath.Join(tools, "bin", "hello"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig
	cfg.Sandbox.ReadOnly = []string{tools}
	tool := toolNamed(t, cfg, "run_command")
	home := t.TempDir()
	if out, d := command(t, tool, home, filepath.Join(tools, "bin", "hello")); d.ExitCode != 0 || out != "hello from the toolchain" {
		t.Errorf("run from the read-only path: exit %d, %q", d.ExitCode, out)
	}
	if out, d := command(t, tool, home, "touch "+filepath.Join(tools, "x")); d.ExitCode == 0 {
		t.Errorf("wrote into the read-only path: %q", out)
	}
	// Its bin folder is on PATH, before the system's; a read-only path without one adds
	// nothing to PATH.
	plain := t.TempDir()
	cfg.Sandbox.ReadOnly = []string{tools, plain}
	tool = toolNamed(t, cfg, "run_command")
	if out, d := command(t, tool, home, "hello; echo $PATH"); d.ExitCode != 0 ||
		out != "hello from the toolchain\n"+filepath.Join(tools, "bin")+":"+defaultPath {
		t.Errorf("run by name: exit %d, %q", d.ExitCode, out)
	}
	// Without it, the toolchain is not there.
	if out, d := command(t, toolNamed(t, testConfig, "run_command"), home, filepath.Join(tools, "bin", "hello")); d.ExitCode == 0 {
		t.Errorf("the toolchain is in view without ReadOnly: %q", out)
	}
}
