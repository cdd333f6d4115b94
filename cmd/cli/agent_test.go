package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets"
)

// TestAgentProfiles writes, reads, lists and removes a profile through the command line,
// and shows that the profile decides which foreign namespaces the agent's tools include.
func TestAgentProfiles(t *testing.T) {
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	hostConn, err := rb.srv.Connect("worker")
	if err != nil {
		t.Fatal(err)
	}
	defer hostConn.Close()
	svc, err := catalog.Serve(hostConn, catalog.Service{Category: "crm", Node: "worker", Handle: func(*toolbus.Spec, micro.Request) {},
		Specs: []*toolbus.Spec{{Name: "lookup", Category: "crm", Namespace: "crm", Description: "Look a customer up.", ReadOnly: true,
			Params: schema.MustFromJSON([]byte(`{"type":"object","properties":{"id":{"type":"string"}}}`))}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()

	// run runs `toolbus <words...> <bus flags> <rest...>`.
	run := func(words []string, rest ...string) (int, string, string) {
		args := append(append(words, "-server", rb.url, "-user", "ops", "-pass-file", rb.passFile), rest...)
		return cli(ctx, args...)
	}
	expect := func(what string, code, want int, stdout, stderr string, in string, parts ...string) {
		t.Helper()
		if code != want {
			t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", what, code, want, stdout, stderr)
		}
		text := map[string]string{"stdout": stdout, "stderr": stderr}[in]
		for _, p := range parts {
			if !strings.Contains(text, p) {
				t.Errorf("%s: %s lacks %q:\n%s", what, in, p, text)
			}
		}
	}

	code, out, errOut := run([]string{"agent", "list"})
	expect("list of none", code, exitOK, out, errOut, "stderr", "no agent has a profile")

	code, out, errOut = run([]string{"tools"}, "-agent", "ann")
	expect("tools before the profile", code, exitOK, out, errOut, "stderr", "agent ann has no profile: built-in tools only")
	if strings.Contains(out, "crm.lookup") {
		t.Errorf("tools lists crm.lookup before the profile names crm:\n%s", out)
	}

	code, out, errOut = run([]string{"agent", "set"}, "-namespace", "crm", "-upfront", "ghost", "ann")
	expect("set from flags", code, exitOK, out, errOut, "stderr", "agent ann: profile stored (namespaces crm (deferred), ghost (upfront))")

	code, out, errOut = run([]string{"tools"}, "-agent", "ann")
	expect("tools after the profile", code, exitOK, out, errOut, "stdout", "crm.lookup (deferred)", "run_command")
	expect("tools after the profile", code, exitOK, out, errOut, "stderr", "note: namespace ghost is left out: no host on the bus serves it")

	code, out, errOut = run([]string{"tools"}, "-agent", "ann", "-kind", "task")
	if code != exitOK || strings.Contains(out, "crm.") || strings.Contains(out, "run_command") || strings.Contains(out, "todo_") {
		t.Errorf("a task turn's tools include computer, todo or namespace tools (exit %d):\n%s%s", code, out, errOut)
	}

	code, out, errOut = run([]string{"tools"}, "-catalog")
	expect("catalog", code, exitOK, out, errOut, "stdout", "HOSTS", "crm.lookup", "worker", "list_files", "remote1")

	code, out, errOut = run([]string{"agent", "get"}, "ann")
	var doc map[string]any
	if code != exitOK || json.Unmarshal([]byte(out), &doc) != nil || doc["agent"] != "ann" || doc["version"] != float64(toolsets.ProfileVersion) {
		t.Errorf("get: exit %d, document %s (%s)", code, out, errOut)
	}

	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version":1,"agent":"ann","namespaces":[{"name":"crm","load":"lazy"},{"name":"computer"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run([]string{"agent", "set"}, "-f", bad, "ann")
	expect("refused document", code, exitFailed, out, errOut, "stderr", "invalid agent profile: /namespaces/0/load: ")
	// Nothing was stored: the profile from flags is still there.
	code, out, errOut = run([]string{"agent", "get"}, "ann")
	expect("after the refusal", code, exitOK, out, errOut, "stdout", `"ghost"`)

	other := filepath.Join(t.TempDir(), "bob.json")
	if err := os.WriteFile(other, []byte(`{"version":1,"agent":"bob"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run([]string{"agent", "set"}, "-f", other, "ann")
	expect("document of another agent", code, exitFailed, out, errOut, "stderr", `the document is for agent "bob", not "ann"`)
	code, out, errOut = run([]string{"agent", "set"}, "-f", other, "bob")
	expect("set from a file", code, exitOK, out, errOut, "stderr", "agent bob: profile stored (built-in tools only)")

	code, out, errOut = run([]string{"agent", "list"})
	expect("list", code, exitOK, out, errOut, "stdout", "AGENT", "ann", "crm (deferred), ghost (upfront)", "bob", "built-in tools only")

	code, out, errOut = run([]string{"agent", "rm"}, "bob")
	expect("rm", code, exitOK, out, errOut, "stderr", "agent bob: profile deleted")
	code, out, errOut = run([]string{"agent", "rm"}, "bob")
	expect("rm twice", code, exitFailed, out, errOut, "stderr", "agent bob: no profile")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"agent"}, "want a subcommand: set, get, list or rm"},
		{[]string{"agent", "grant", "ann"}, `unknown subcommand "grant"`},
		{[]string{"agent", "set", "ann"}, "agent set works on a running bus: pass -server URL"},
		{[]string{"agent", "set", "-server", rb.url, "-f", bad, "-namespace", "crm", "ann"}, "-f gives the whole document"},
		{[]string{"agent", "get", "-server", rb.url, "a.b"}, `agent "a.b": agent id has '.' at position 2`},
	} {
		code, out, errOut := cli(ctx, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want usage error %q (stdout %q)", tc.args, code, errOut, tc.want, out)
		}
	}
}
