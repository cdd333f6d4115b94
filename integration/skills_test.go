//go:build linux

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/needs"
)

// An MCP-backed skill: the agent's skill declares the reference MCP server
// (@modelcontextprotocol/server-everything), and the model reaches it with mcporter
// through run_command, in the sandbox. mcporter 0.10 and later declare Node 24; these
// machines have Node 20, so the test pins 0.9.0, the newest that accepts it
// (/work/shared/notes/mcporter.md).
const (
	mcporterPackage   = "mcporter@0.9.0"
	everythingPackage = "@modelcontextprotocol/server-everything@2026.8.31"
)

// mcpTools is the npm install of mcporter and the server shared by every test of a run.
var mcpTools struct {
	once   sync.Once
	prefix string
	err    error
}

// mcpPrefix installs mcporter and the server with `npm install -g --prefix` into a folder
// of the integration tools dir, once per run and, across runs and clones, once per pair
// of versions.
// Its bin folder holds both commands; a node started with -sandbox-ro PREFIX shows the
// folder to sandboxed commands and puts its bin on their PATH.
func mcpPrefix(t testing.TB) string {
	t.Helper()
	mcpTools.once.Do(func() { mcpTools.prefix, mcpTools.err = installMCPTools() })
	if mcpTools.err != nil {
		t.Fatalf("mcporter and the MCP server cannot be installed: %v", mcpTools.err)
	}
	return mcpTools.prefix
}

func installMCPTools() (string, error) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("npm is needed to install %s (CI installs node and npm): %w", mcporterPackage, err)
	}
	// The sandbox shows /usr and /bin, nothing of the user's own: node must be there.
	node, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("mcporter needs node (20.11 or later) in PATH: %w", err)
	}
	if real, err := filepath.EvalSymlinks(node); err != nil || !(strings.HasPrefix(real, "/usr/") || strings.HasPrefix(real, "/bin/")) {
		return "", fmt.Errorf("node is %s (%v): sandboxed commands see only /usr and /bin, so mcporter needs a node installed there (apt-get install nodejs)", real, err)
	}
	if bins.tools == "" {
		return "", fmt.Errorf("no integration tools dir: %v", bins.natsErr)
	}
	name := strings.NewReplacer("@", "", "/", "-").Replace("mcp-" + mcporterPackage + "-" + everythingPackage)
	prefix := filepath.Join(bins.tools, name)
	if _, err := os.Stat(filepath.Join(prefix, ".installed")); err == nil {
		return prefix, nil
	}
	// Install into a fresh folder and move it into place when complete, so that an
	// interrupted install is never taken for a finished one. npm writes the folder's
	// path into nothing it installs, so the move is safe.
	if err := os.MkdirAll(bins.tools, 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(bins.tools, "mcp-installing-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, npm, "install", "-g", "--prefix", work, "--no-audit", "--no-fund", mcporterPackage, everythingPackage)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install -g --prefix %s %s %s: %w\n%s", work, mcporterPackage, everythingPackage, err, b)
	}
	if err := os.WriteFile(filepath.Join(work, ".installed"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(prefix, ".installed")); err == nil {
		return prefix, nil // another run finished first: its tests may be using it
	}
	_ = os.RemoveAll(prefix) // a half-made one from an older run
	if err := os.Rename(work, prefix); err != nil {
		if _, statErr := os.Stat(filepath.Join(prefix, ".installed")); statErr != nil {
			return "", fmt.Errorf("install the MCP tools: %w", err)
		}
		// Another run finished first: use its copy.
	}
	fmt.Fprintf(os.Stderr, "integration: npm install -g %s %s into %s in %s\n", mcporterPackage, everythingPackage, prefix, time.Since(start).Round(time.Second))
	return prefix, nil
}

// defaultSandboxPath is the PATH of sandboxed commands before the folders of
// -sandbox-ro (toolsets/computer).
const defaultSandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// TestMCPSkillThroughMcporter enables a skill that declares the everything server and
// runs a scripted turn that loads it, lists the server's tools and calls its echo tool
// through run_command and mcporter, in the sandbox. The outputs reach the transcript.
func TestMCPSkillThroughMcporter(t *testing.T) {
	needs.Bwrap(t)
	t.Parallel()
	prefix := mcpPrefix(t)
	n := startNode(t, "n1", "-sandbox-ro", prefix)
	n.waitReady(t)

	home := filepath.Join(n.dir, "homes", "ann")
	skill := "---\nname: everything\ndescription: Tries things out on the MCP reference server.\n" +
		"mcp:\n  everything:\n    command: mcp-server-everything\n    args: [stdio]\n---\n" +
		"# Everything\n\nUse the everything server's echo tool to check that MCP works.\n"
	if err := os.MkdirAll(filepath.Join(home, "skills", "everything"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "skills", "everything", "SKILL.md"), []byte(skill), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := runCLI(t, "agent", "set", "-server", n.url, "-skill", "everything", "ann"); err != nil {
		t.Fatalf("agent set: %v\n%s", err, errOut)
	}
	out, errOut, err := runCLI(t, "tools", "-server", n.url, "-agent", "ann", "-json")
	if err != nil || !strings.Contains(out, `"name": "load_skill"`) {
		t.Fatalf("tools of ann (%v): load_skill missing\n%s%s", err, out, errOut)
	}

	args := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	script := writeScript(t, "The everything server echoes.",
		[]scriptCall{{ID: "load", Name: "load_skill", Arguments: args(map[string]string{"name": "everything"})}},
		[]scriptCall{{ID: "list", Name: "run_command", Arguments: args(map[string]string{"command": "mcporter list everything"})}},
		[]scriptCall{{ID: "echo", Name: "run_command", Arguments: args(map[string]string{"command": "mcporter call everything.echo message=hello"})}},
		[]scriptCall{{ID: "env", Name: "run_command", Arguments: args(map[string]string{"command": "mcporter call everything.get-env"})}},
	)
	out, errOut, err = runCLI(t, "run", "-server", n.url, "-agent", "ann", "-model", "script:"+script, "-json", "check the MCP server")
	if code := exitCode(err); code != 0 {
		t.Fatalf("toolbus run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var r runOutput
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("decode toolbus run -json: %v\n%s", err, out)
	}
	if r.Status.State != "completed" {
		t.Fatalf("turn %s: %s\n%s", r.Status.State, r.Status.Error, out)
	}
	for _, c := range r.Status.Calls {
		if c.Outcome != "ok" {
			t.Errorf("call %s (%s): %s %s", c.Call, c.Tool, c.Outcome, c.Error)
		}
	}
	output := func(id string) string {
		t.Helper()
		text, ok := r.output(id)
		if !ok {
			t.Fatalf("no output of call %s in the transcript:\n%s", id, out)
		}
		return text
	}

	// The skill's text says how to reach the server.
	if text := output("load"); !strings.Contains(text, "Use the everything server's echo tool") ||
		!strings.Contains(text, "`mcporter list everything`") || !strings.Contains(text, "`mcporter call everything.TOOL key=value ...`") {
		t.Errorf("load_skill:\n%s", text)
	}
	// mcporter found the server in the configuration assembly wrote into the home.
	if text := output("list"); !strings.Contains(text, "function echo(message: string);") || !strings.Contains(text, "Echoes back the input string") {
		t.Errorf("mcporter list everything:\n%s", text)
	}
	if text := output("echo"); !strings.Contains(text, "Echo: hello") {
		t.Errorf("mcporter call everything.echo:\n%s", text)
	}
	// The server ran in the sandbox: the sandbox's environment, with the tools' bin first.
	realHome, err := filepath.EvalSymlinks(home)
	if err != nil {
		t.Fatal(err)
	}
	env := output("env")
	for _, want := range []string{
		fmt.Sprintf("%q: %q", "HOME", realHome),
		fmt.Sprintf("%q: %q", "PATH", filepath.Join(prefix, "bin")+":"+defaultSandboxPath),
	} {
		if !strings.Contains(env, want) {
			t.Errorf("the server's environment lacks %s:\n%s", want, env)
		}
	}
	b, err := os.ReadFile(filepath.Join(home, "config", "mcporter.json"))
	if err != nil || !strings.Contains(string(b), `"mcp-server-everything"`) {
		t.Errorf("config/mcporter.json: %s %v", b, err)
	}
}
