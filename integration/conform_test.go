//go:build linux

package integration

import (
	"regexp"
	"strings"
	"testing"
)

// TestConformWorkerNode runs `toolbus conform`, the built command, against the Node.js
// host of examples/worker-node (category crm) beside a node, as a host author runs it
// against their own host: every case passes, none is skipped (add_note is its
// destructive tool, slow_report the call that runs), and it exits 0.
func TestConformWorkerNode(t *testing.T) {
	t.Parallel()
	n := startNode(t, "n1")
	n.waitReady(t)
	startWorkerNode(t, n, "js1")
	out, errOut, err := runCLI(t, "conform", "-server", n.url, "-category", "crm",
		"-slow-tool", "slow_report", "-slow-args", `{"seconds": 30}`)
	if err != nil {
		t.Fatalf("toolbus conform: %v\nstderr:\n%s\nstdout:\n%s", err, errOut, out)
	}
	for _, want := range []string{
		"ok    catalog: every endpoint is usable and the host names its node (§2, §3)\n",
		"ok    Toolbus-Truncated \"no\" on a destructive tool (add_note)\n",
		"ok    arguments that leave out the required properties (§5, step 5) (lookup_customer)\n",
		"ok    abort during the call: stopped, with the abort (slow_report)\n",
		"ok    abort before the call, deadline during it: the call runs, then times out (slow_report)\n",
		" failed, 0 skipped\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if regexp.MustCompile(`(?m)^(FAIL|skip)  `).MatchString(out) {
		t.Errorf("a case failed or was skipped:\n%s", out)
	}
}
