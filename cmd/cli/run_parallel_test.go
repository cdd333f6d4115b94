package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// TestThousandsOfParallelCalls: one response of 2 000 parallel calls completes in an
// embedded run. Before, every call's host read the turn's record (its spec with the
// script, 150 KB) at once, 337 MB in all, and the server closed the host's connection as
// a slow consumer; the done status of 2 000 call records was over the 1 MiB a message
// may carry, so the run never heard the turn end.
func TestThousandsOfParallelCalls(t *testing.T) {
	t.Parallel()
	const n = 2000
	home := t.TempDir()
	for i := range 30 {
		if err := os.WriteFile(filepath.Join(home, fmt.Sprintf("file-%02d.txt", i)), []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	calls := make([]map[string]string, n)
	for i := range calls {
		calls[i] = map[string]string{"name": "list_files", "arguments": `{"path": "."}`}
	}
	b, err := json.Marshal(map[string]any{"responses": []any{
		map[string]any{"text": "Listing.", "calls": calls},
		map[string]any{"text": "Listed."},
	}})
	if err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, string(b))
	code, stdout, stderr := cli(testContext(t), "run", "-json", "-model", "script:"+script, "-home", home, "-store-dir", t.TempDir(), "list")
	if code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	var out client.RunOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("stdout: %v\n%.2000s", err, stdout)
	}
	if out.Status.State != bus.TurnCompleted || out.Status.NumCalls() != n {
		t.Errorf("status %s with %d calls (%d omitted to fit), want completed with %d", out.Status.State, out.Status.NumCalls(), out.Status.CallsOmitted, n)
	}
	outputs := 0
	for _, it := range out.Transcript {
		if it.Kind == toolbus.KindCallOutput {
			outputs++
			if it.IsError || len(it.Output) == 0 || !strings.Contains(it.Output[0].Text, "file-29.txt") {
				t.Fatalf("call %s: output %+v", it.CallID, it)
			}
		}
	}
	if outputs != n {
		t.Errorf("%d outputs in the transcript, want %d", outputs, n)
	}
}
