//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/needs"
)

// turnLine is the first line `toolbus run` prints.
var turnLine = regexp.MustCompile(`turn (\S+) on node (\S+)`)

// waitForTurn waits until a running `toolbus run` names its turn.
func waitForTurn(t testing.TB, run *process) string {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		if m := turnLine.FindStringSubmatch(run.stdout.String()); m != nil {
			return m[1]
		}
		if run.exited() || time.Now().After(deadline) {
			t.Fatalf("toolbus run did not name its turn\nstdout:\n%s\nstderr:\n%s", run.stdout.String(), run.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesRunning returns the pids of processes whose whole command line is
// cmdline.
func processesRunning(t testing.TB, cmdline string) []string {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", "-x", regexp.QuoteMeta(cmdline)).Output()
	if exitCode(err) == 1 {
		return nil // no match
	}
	if err != nil {
		t.Fatalf("pgrep: %v", err)
	}
	return strings.Fields(string(out))
}

func TestAbortFromAnotherProcess(t *testing.T) {
	needs.Bwrap(t) // the aborted sleeps run in the node's sandbox
	t.Parallel()
	n := startNode(t, "n1", "-home", t.TempDir())
	n.waitReady(t)

	tests := []struct {
		name   string
		abort  func(t *testing.T, turn string)
		reason string // as the run shows it
	}{
		{
			name:   "toolbus abort",
			reason: "aborted from the command line",
			abort: func(t *testing.T, turn string) {
				out, errOut, err := runCLI(t, "abort", "-server", n.url, turn)
				if err != nil {
					t.Fatalf("toolbus abort: %v\n%s%s", err, out, errOut)
				}
				// abort waits for the turn's final status and reports it.
				for _, want := range []string{"turn " + turn + " aborted", "run_command stopped"} {
					if !strings.Contains(out, want) {
						t.Errorf("toolbus abort output lacks %q:\n%s", want, out)
					}
				}
			},
		},
		{
			name:   "nats pub",
			reason: "published with nats",
			abort: func(t *testing.T, turn string) {
				_, errOut, err := runNats(t, "--server", n.url, "pub", "toolbus.turn."+turn+".abort", `{"reason":"published with nats"}`)
				if err != nil {
					t.Fatalf("nats pub: %v\n%s", err, errOut)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A duration no other process uses marks this test's sleeps; the
			// command leaves one in the background, which the process-group
			// kill must reach too.
			sleep := fmt.Sprintf("sleep 30.%06d", rand.IntN(1e6))
			args, err := json.Marshal(map[string]string{"command": sleep + " & " + sleep + "; wait"})
			if err != nil {
				t.Fatal(err)
			}
			script := writeScript(t, "This answer is never reached.",
				[]scriptCall{{ID: "cmd", Name: "run_command", Arguments: string(args)}})
			run := startProcess(t, "toolbus run", cliBin(t), "run", "-server", n.url, "-model", "script:"+script, "run a long command")
			turn := waitForTurn(t, run)

			deadline := time.Now().Add(waitLimit)
			for len(processesRunning(t, sleep)) != 2 {
				if run.exited() || time.Now().After(deadline) {
					t.Fatalf("the command's two sleeps never ran (found %q)\nstdout:\n%s", processesRunning(t, sleep), run.stdout.String())
				}
				time.Sleep(20 * time.Millisecond)
			}

			tt.abort(t, turn)

			if code := run.wait(t); code != 130 {
				t.Errorf("toolbus run exited %d, want 130 (aborted)", code)
			}
			out := run.stdout.String()
			for _, want := range []string{
				"⊘ abort requested: " + tt.reason,
				"(stopped)", // the call's outcome
				"aborted · 1 step · 1 call",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("toolbus run output lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "never reached") {
				t.Errorf("the model was called again after the abort:\n%s", out)
			}
			// The host replies only after the command's process group is
			// gone, so nothing may be left by the time the turn has ended.
			if pids := processesRunning(t, sleep); len(pids) > 0 {
				t.Errorf("%q still running after the abort: pids %v", sleep, pids)
			}
		})
	}
}
