package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/npmtest"
	"github.com/toolbus/toolbus/mcp"
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
// refused before anything starts; so are waits out of range, and an idle limit for
// HTTP sessions without -listen.
func TestMCPCommandRefusesOpenListen(t *testing.T) {
	t.Parallel()
	code, _, stderr := cliEnv(testContext(t), testEnv(nil, ""), "mcp", "-listen", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(stderr, "-listen 0.0.0.0:0 is reachable from other hosts: give a bearer token with -token-file FILE") {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-approval-wait", "-1s"}, "-approval-wait -1s: want 0 or more"},
		{[]string{"-listen", "127.0.0.1:0", "-session-idle", "-1s"}, "-session-idle -1s: want 0 (never) or more"},
		{[]string{"-session-idle", "5m"}, "-session-idle closes HTTP sessions: give -listen too"},
	} {
		code, _, stderr = cliEnv(testContext(t), testEnv(nil, ""), append([]string{"mcp"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d:\n%s", c.args, code, stderr)
		}
	}
}

// TestResumeEndsKilledMCPSession: `toolbus mcp` on a remote bus records its client's
// session as a turn and beats for it, so `toolbus resume` leaves it alone while it lives;
// killed (SIGKILL, no chance to end the session), it beats no more, and `toolbus resume`
// ends its record as failed, with a note in its transcript, instead of leaving it
// running for ever.
func TestResumeEndsKilledMCPSession(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, rb.args("mcp")...)
	cmd.Env = append(os.Environ(), runCLIEnv+"=1")
	var mcpErr output
	cmd.Stderr = &mcpErr
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to toolbus mcp: %v\n%s", err, mcpErr.String())
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cs.Close() // waits for the process (the SDK's transport does)
	}()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "notes.txt"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v\n%s", err, res, mcpErr.String())
	}
	turn, _ := res.Meta[mcp.MetaTurn].(string)
	if turn == "" {
		t.Fatalf("no turn in the result's _meta: %v", res.Meta)
	}
	nc, err := rb.srv.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := client.New(nc)
	listed := func() (bus.TurnRecord, error) {
		recs, err := cl.Turns(ctx)
		for _, r := range recs {
			if r.Spec.ID == turn {
				return r, nil
			}
		}
		return bus.TurnRecord{}, fmt.Errorf("turn %s not listed (%d turns, %v)", turn, len(recs), err)
	}
	bustest.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
		if rec, err := listed(); err != nil || rec.State != bus.TurnRunning || rec.Step != 1 || rec.Spec.Kind != bus.TurnMCP {
			return fmt.Errorf("record %+v %v", rec, err)
		}
		return nil
	})

	// Alive, it beats: nothing to end.
	code, _, stderr := cliEnv(ctx, testEnv(nil, ""), rb.args("resume", turn)...)
	if code == exitOK || !strings.Contains(stderr, "which beats: it is open") {
		t.Fatalf("resume of a live session: exit %d\n%s", code, stderr)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cs.Wait() // the connection ends with the process
	if rec, err := listed(); err != nil || rec.State != bus.TurnRunning {
		t.Fatalf("the killed session's record: %+v %v", rec, err)
	}
	code, _, stderr = cliEnv(ctx, testEnv(nil, ""), rb.args("resume", turn)...)
	if code != exitOK || !strings.Contains(stderr, "no longer beats: its record is ended as failed at step 1") {
		t.Fatalf("resume of a killed session: exit %d\n%s", code, stderr)
	}
	rec, err := listed()
	if err != nil || rec.State != bus.TurnFailed || rec.Epoch != 2 || !strings.Contains(rec.Error, "stopped beating without ending the session") {
		t.Errorf("the ended record: %+v %v", rec, err)
	}
	items, err := cl.Transcript(ctx, turn)
	if err != nil || len(items) == 0 || !strings.Contains(string(items[len(items)-1].Raw), "toolbus.session_lost") {
		t.Errorf("transcript %+v %v", items, err)
	}
	code, _, stderr = cliEnv(ctx, testEnv(nil, ""), rb.args("resume", turn)...)
	if code == exitOK || !strings.Contains(stderr, "has ended (failed)") {
		t.Errorf("resume of the ended session: exit %d\n%s", code, stderr)
	}
}
