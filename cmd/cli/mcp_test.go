package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/npmtest"
)

// TestMcporterCallsToolbusMCP: mcporter, an MCP client nobody here wrote, lists and
// calls the tools of `toolbus mcp` over stdio (mcporter starts the command, which
// starts an embedded node) and over streamable HTTP with a bearer token.
func TestMcporterCallsToolbusMCP(t *testing.T) {
	t.Parallel()
	prefix := npmtest.Prefix(t, npmtest.Mcporter, npmtest.Everything)
	mcporter := filepath.Join(prefix, "bin", "mcporter")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "NOTES.md"), []byte("the word is marmalade\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	mcporterRun := func(config string, args ...string) string {
		t.Helper()
		path := filepath.Join(dir, "mcporter.json")
		if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, mcporter, append([]string{"--config", path}, args...)...)
		cmd.Dir = dir
		// mcporter gives a listing 30 s by default, and each listing or call starts
		// this test binary (race-built) and an embedded node; the whole test took 54 s
		// once, at load average 35 on 2 cores.
		cmd.Env = append(os.Environ(), "MCPORTER_LIST_TIMEOUT=90000", "MCPORTER_CALL_TIMEOUT=90000")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("mcporter %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	// stdio: mcporter starts `toolbus mcp` (this test binary as the command line).
	stdio, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"toolbus": map[string]any{
		"command": exe, "args": []string{"mcp", "-home", home, "-sandbox", "off"},
		"env": map[string]string{runCLIEnv: "1"},
	}}})
	list := mcporterRun(string(stdio), "list", "toolbus", "--schema")
	for _, want := range []string{"read_file", "list_files", `"path"`} {
		if !strings.Contains(list, want) {
			t.Errorf("mcporter list lacks %s:\n%s", want, list)
		}
	}
	// raw: the whole result, whose text the model reads and whose structured content
	// (the tool's details) mcporter would print by itself.
	if out := mcporterRun(string(stdio), "call", "toolbus.read_file", "path=NOTES.md", "--output", "raw"); !strings.Contains(out, "the word is marmalade") ||
		!strings.Contains(out, "structuredContent") || !strings.Contains(out, "total_lines") {
		t.Errorf("mcporter call over stdio:\n%s", out)
	}

	// Streamable HTTP, with a token: toolbus mcp -listen runs in this process.
	e := testEnv(map[string]string{"TOOLBUS_MCP_TOKEN": "tok-51c2"}, "")
	sctx, stop := context.WithCancel(ctx)
	var stderr output
	done := make(chan int, 1)
	go func() {
		done <- runEnv(sctx, e, []string{"mcp", "-listen", "127.0.0.1:0", "-home", home, "-sandbox", "off"}, &output{}, &stderr)
	}()
	defer func() {
		stop()
		if code := <-done; code != exitOK {
			t.Errorf("toolbus mcp -listen exited %d:\n%s", code, stderr.String())
		}
	}()
	stderr.waitFor(t, ctx, "/mcp\n")
	m := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+/mcp)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("toolbus mcp -listen did not say where it serves:\n%s", stderr.String())
	}
	url := m[1]
	// Without the token: refused.
	noToken, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"toolbus": map[string]any{"url": url}}})
	path := filepath.Join(dir, "mcporter-no-token.json")
	if err := os.WriteFile(path, []byte(noToken), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, mcporter, "--config", path, "call", "toolbus.read_file", "path=NOTES.md")
	cmd.Dir = dir
	if out, _ := cmd.CombinedOutput(); strings.Contains(string(out), "marmalade") {
		t.Errorf("mcporter without the token read the file:\n%s", out)
	}
	withToken, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"toolbus": map[string]any{
		"url": url, "headers": map[string]string{"Authorization": "Bearer tok-51c2"},
	}}})
	if out := mcporterRun(string(withToken), "call", "toolbus.read_file", "path=NOTES.md", "--output", "raw"); !strings.Contains(out, "the word is marmalade") {
		t.Errorf("mcporter call over HTTP:\n%s", out)
	}
}

// TestMCPCommandRefusesOpenListen: an HTTP address other hosts reach needs a token,
// refused before anything starts; a token makes it acceptable.
func TestMCPCommandRefusesOpenListen(t *testing.T) {
	t.Parallel()
	code, _, stderr := cliEnv(testContext(t), testEnv(nil, ""), "mcp", "-listen", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(stderr, "-listen 0.0.0.0:0 is reachable from other hosts: give a bearer token with -token-file FILE") {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
	code, _, stderr = cliEnv(testContext(t), testEnv(nil, ""), "mcp", "-approval-wait", "-1s")
	if code != exitUsage || !strings.Contains(stderr, "-approval-wait -1s: want 0 or more") {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
}
