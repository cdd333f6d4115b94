//go:build linux

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/needs"
)

// withMarker lists the processes of this machine whose command line holds marker, as
// "pid: command line". The host's /proc sees into every sandbox.
func withMarker(marker string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue // gone, not ours, or a zombie (whose command line is empty)
		}
		found = append(found, e.Name()+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
	}
	return found
}

// A node killed with SIGKILL takes its commands' processes with it, detached ones too:
// bubblewrap dies with the node, and the sandbox with bubblewrap.
func TestCommandDiesWithNode(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	n := startNode(t, "n1")
	n.waitReady(t)

	// A duration no other process uses marks this test's sleeps.
	marker := fmt.Sprintf("300.%09d", rand.IntN(1e9))
	sleep := "sleep " + marker
	args, err := json.Marshal(map[string]string{"command": "setsid " + sleep + " >/dev/null 2>&1 </dev/null & " + sleep})
	if err != nil {
		t.Fatal(err)
	}
	// The request never gets its reply.
	req := startProcess(t, "nats req", natsBin(t), "--server", n.url, "req", "--timeout", waitLimit.String(),
		"toolbus.tool.computer.run_command", string(args))
	checkFor(t, "the command's two sleeps running", func() error {
		var n int
		for _, p := range withMarker(marker) {
			if strings.HasSuffix(p, ": "+sleep+" ") {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("%d of 2 sleeps running: %q", n, withMarker(marker))
		}
		return nil
	})

	// The node alone, at once, as a crash or the OOM killer would.
	if err := n.proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	n.proc.wait(t)
	req.terminate() // its command line holds the marker too
	checkFor(t, "no process of the command left", func() error {
		if left := withMarker(marker); len(left) > 0 {
			return fmt.Errorf("still running: %q", left)
		}
		return nil
	})
}

// A command sees nothing of the node process that runs it: not its environment, not its
// password.
func TestCommandSeesNothingOfTheNode(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	const secret = "sk-integration-3c7f-not-a-real-key"
	const pass = "pw-of-the-node-user-91b2"
	// In the node's environment, as a variable of the test's own would be (childEnv keeps it).
	n := startNodeEnv(t, "n1", []string{"SOME_API_KEY=" + secret}, "-pass-file", writePassFile(t, t.TempDir(), pass))
	n.waitReady(t)
	url := fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", testUser, pass, n.port)

	probe := "env; cat /proc/1/environ /proc/$PPID/environ; " +
		"for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; echo; done"
	args, err := json.Marshal(map[string]string{"command": probe})
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runNats(t, "--server", url, "req", "--raw", "--timeout", waitLimit.String(),
		"toolbus.tool.computer.run_command", string(args))
	if err != nil {
		t.Fatalf("nats req: %v\n%s", err, errOut)
	}
	var reply toolReply
	if err := json.Unmarshal([]byte(out), &reply); err != nil {
		t.Fatalf("decode reply: %v\n%s", err, out)
	}
	text := reply.text()
	if reply.Outcome != "ok" || !strings.Contains(text, "TERM=dumb") || !strings.Contains(text, "/bin/sh") {
		t.Fatalf("the probe did not run: %s %s\n%s", reply.Outcome, reply.Error, text)
	}
	for _, s := range []string{secret, pass, "SOME_API_KEY", "-home-root", nodeBin(t)} {
		if strings.Contains(text, s) {
			t.Errorf("the command saw %q:\n%s", s, text)
		}
	}
}
