package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/needs"
)

// readmeBlock is the README's fenced ```sh block that holds all of wants, as lines.
func readmeBlock(t *testing.T, wants ...string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		ok := true
		for _, w := range wants {
			ok = ok && strings.Contains(block[1], w)
		}
		if ok {
			return strings.Split(strings.TrimSpace(block[1]), "\n")
		}
	}
	t.Fatalf("the README has no sh block with %q", wants)
	return nil
}

// commandWords is a line of a README block as words (shellWords), and whether it ends
// in "&" (runs in the background).
func commandWords(line string) ([]string, bool) { return trimAmp(shellWords(line)) }

func trimAmp(words []string) ([]string, bool) {
	if n := len(words); n > 0 && words[n-1] == "&" {
		return words[:n-1], true
	}
	return words, false
}

// TestReadmeNodeBlockHasHome runs the README's "Running a node" block as written, from
// the repository's root, in processes of their own (this test binary is the toolbus
// command when runCLIEnv is set): its exports, a node in the background, and the demo's
// run over the bus, which must find its home (check.sh runs and passes) and say on which
// node and in which home it ran. Only the node's port is the test's own (4222 may be
// taken on a machine that runs tests in parallel): the node listens on a free one, and
// the block's URLs name it. The go install and nats lines are left out: they fetch from
// the network and read the bus, which the integration tests do with the real nats CLI.
func TestReadmeNodeBlockHasHome(t *testing.T) {
	needs.Bwrap(t) // the demo runs sh check.sh, in the node's sandbox
	t.Parallel()
	ctx := testContext(t)
	lines := readmeBlock(t, "toolbus node ", "toolbus run -server ")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	var envv []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "NATS_") && !strings.HasPrefix(k, "XDG_") && !strings.HasPrefix(k, "TOOLBUS_") {
			envv = append(envv, kv)
		}
	}
	// The node's store and default homes in the test's directory, not the user's.
	envv = append(envv, runCLIEnv+"=1", "XDG_STATE_HOME="+filepath.Join(state, "state"), "XDG_DATA_HOME="+filepath.Join(state, "data"))
	command := func(words []string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, self, words[1:]...)
		cmd.Dir, cmd.Env = root, envv
		return cmd
	}

	const written = "nats://127.0.0.1:4222"
	url := ""
	var ran, node bool
	for _, line := range lines {
		words, background := commandWords(line)
		if len(words) == 0 {
			continue
		}
		for i, w := range words {
			if url != "" {
				words[i] = strings.ReplaceAll(w, written, url)
			}
		}
		switch {
		case words[0] == "export":
			envv = append(envv, words[1:]...)
		case words[0] == "toolbus" && len(words) > 1 && words[1] == "node":
			node = true
			if !background {
				t.Fatalf("README: %q: the node must run in the background for the next lines to run", line)
			}
			var home string
			for i, w := range words {
				if w == "-home" && i+1 < len(words) {
					home = words[i+1]
				}
				if w == "-listen" && i+1 < len(words) {
					words[i+1] = "127.0.0.1:-1"
				}
			}
			if home == "" {
				t.Fatalf("README: %q: the node has no -home, so the demo runs in an empty one", line)
			}
			if _, err := os.Stat(filepath.Join(root, home, "check.sh")); err != nil {
				t.Fatalf("README: %q: the demo's check.sh is not in -home %s: %v", line, home, err)
			}
			cmd := command(words)
			var log output
			cmd.Stderr = &log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Waiting for its ready line ends early should the node end first.
			running, ended := context.WithCancel(ctx)
			exited := make(chan struct{})
			go func() {
				_ = cmd.Wait()
				close(exited)
				ended()
			}()
			t.Cleanup(func() {
				// Ctrl-C, as a person stops it; killed should it not stop within a bound.
				_ = cmd.Process.Signal(os.Interrupt)
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
					t.Errorf("the node did not stop on Ctrl-C within 30 s:\n%s", log.String())
				}
			})
			log.waitFor(t, running, "node ready")
			// The node says where it listens in its ready line.
			m := regexp.MustCompile(`node ready.*listening on (nats://[0-9.:]+)`).FindStringSubmatch(log.String())
			if m == nil {
				t.Fatalf("the node's ready line names no URL:\n%s", log.String())
			}
			url = m[1]
		case words[0] == "toolbus" && len(words) > 1 && words[1] == "run":
			if url == "" {
				t.Fatalf("README: %q runs before any node", line)
			}
			out, err := command(words).CombinedOutput()
			if err != nil {
				t.Fatalf("README: %q: %v\n%s", line, err, out)
			}
			home := filepath.Join(root, "examples/demo/home")
			for _, want := range []string{
				" on node n1, agent home " + home + "\n",
				"✓ Ran `sh check.sh` (exit 0)",
				"All checks pass",
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("README: %q: the output lacks %q:\n%s", line, want, out)
				}
			}
			ran = true
		}
	}
	if !node || !ran {
		t.Fatalf("the README's block ran a node: %v, a turn on it: %v", node, ran)
	}
}

// A turn run over the bus says which node ran it and the agent home it worked in (the
// node's, which this process did not choose), and so does its JSON-free output alone.
func TestRunServerSaysWhere(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	// What is checked is said before the model answers: a script without the demo's
	// pacing (4 s a run, three runs).
	quick := writeScript(t, `{"responses":[{"text":"ok"}]}`)
	code, stdout, stderr := cli(ctx, rb.args("run", "-model", "script:"+quick, "hello")...)
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	line := regexp.MustCompile(`(?m)^turn \S+ on node remote1, agent home (.*)$`).FindStringSubmatch(stdout)
	if line == nil {
		t.Fatalf("run -server does not say where the turn ran:\n%s", stdout)
	}
	if want := absPath(t, demoHome); line[1] != want {
		t.Errorf("agent home %q, want %q", line[1], want)
	}
	// The embedded run's home line is for an embedded node alone.
	if strings.Contains(stdout, "(read-write, commands run here") {
		t.Errorf("run -server printed the embedded node's home note:\n%s", stdout)
	}

	// A profile naming a namespace no host serves: the turn runs without it and says
	// so, with what to do, also under -json (on standard error, beside the transcript).
	if code, out, errOut := cli(ctx, append([]string{"agent"}, rb.args("set", "-namespace", "ghost", "ann")...)...); code != exitOK {
		t.Fatalf("agent set: exit %d\n%s%s", code, out, errOut)
	}
	const note = "note: namespace ghost is left out: no host on the bus serves it; start a host that serves it (docs/protocol.md), or take it out of agent ann's profile (toolbus agent set)"
	code, stdout, stderr = cli(ctx, rb.args("run", "-agent", "ann", "-model", "script:"+quick, "hello")...)
	if code != exitOK || !strings.Contains(stdout, "\n"+note+"\n") {
		t.Errorf("run with a namespace no host serves: exit %d, stdout lacks %q:\n%s%s", code, note, stdout, stderr)
	}
	code, _, stderr = cli(ctx, rb.args("run", "-json", "-agent", "ann", "-model", "script:"+quick, "hello")...)
	if code != exitOK || !strings.Contains(stderr, "toolbus: "+note+"\n") {
		t.Errorf("run -json with a namespace no host serves: exit %d, stderr lacks %q:\n%s", code, note, stderr)
	}
}
