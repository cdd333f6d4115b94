package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Malformed JSON in a script, a workflow file or a profile is reported with its
// file, line and column; a missing workflow file is called what it is.
func TestJSONErrorsHavePositions(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	// Line 3, column 14: the closing brace where a value belongs.
	if err := os.WriteFile(bad, []byte("{\n  \"responses\": [\n    {\"text\": }\n  ]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.json")
	for _, c := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"script", []string{"run", "-model", "script:" + bad, "-home", dir, "hi"}, "toolbus: load script: " + bad + ":3:14: invalid character '}' looking for beginning of value\n"},
		{"workflow file", []string{"workflow", "start", bad}, "toolbus: workflow file: " + bad + ":3:14: invalid character '}' looking for beginning of value\n"},
		{"profile", []string{"agent", "set", "-f", bad, "demo-agent"}, "toolbus: invalid agent profile: " + bad + ":3:14: invalid character '}' looking for beginning of value\n"},
		{"missing workflow file", []string{"workflow", "start", missing}, "toolbus: read workflow file: open " + missing + ": no such file or directory\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := cli(ctx, c.args...)
			if code == exitOK || !strings.HasSuffix(stderr, c.stderr) {
				t.Errorf("exit %d, stderr:\n%s\nwant it to end with:\n%s", code, stderr, c.stderr)
			}
		})
	}
}
