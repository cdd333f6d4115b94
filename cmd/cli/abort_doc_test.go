package main

import (
	"os"
	"strings"
	"testing"
)

// TestAbortUnknownTurnDocumented: what `toolbus abort` says of a turn the bus has no
// record of, with -wait 0 and with a wait, is what docs/operations.md §4 says, and it
// exits 1 both ways.
func TestAbortUnknownTurnDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	page := strings.Join(strings.Fields(string(doc)), " ") // the page wraps its lines
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	for _, tc := range []struct {
		wait, doc string
	}{
		{"0", "no turn T on this bus (no record of it; abort sent in case it runs outside the intake)"},
		{"300ms", "no turn T on this bus (no record of it, and no turn answered the abort within 5s)"},
	} {
		if !strings.Contains(page, "`"+tc.doc+"`") {
			t.Errorf("docs/operations.md does not show %q", tc.doc)
		}
		code, stdout, stderr := cli(ctx, rb.args("abort", "-wait", tc.wait, "nosuch")...)
		want := strings.ReplaceAll(tc.doc, "turn T ", "turn nosuch ")
		want = "toolbus: " + strings.ReplaceAll(want, "within 5s", "within "+tc.wait) + "\n"
		if code != exitFailed || stderr != want || stdout != "" {
			t.Errorf("abort -wait %s nosuch: exit %d, stdout %q, stderr %q; want exit 1, stderr %q", tc.wait, code, stdout, stderr, want)
		}
	}
}
