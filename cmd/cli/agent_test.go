package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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
	t.Parallel()
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
	if code != exitOK || strings.Contains(out, "crm.") || strings.Contains(out, "run_command") || strings.Contains(out, "todo_") ||
		strings.Contains(out, "workflow_") || !strings.Contains(out, "submit_result") {
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

// TestAgentWebTools: the -web flags of agent set bind the web tools, and tools -agent
// -json shows exactly the ones the profile binds, for main and task turns.
func TestAgentWebTools(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	run := func(words []string, rest ...string) (int, string, string) {
		args := append(append(words, "-server", rb.url, "-user", "ops", "-pass-file", rb.passFile), rest...)
		return cli(ctx, args...)
	}
	// names are the tool names of a tools -json listing.
	names := func(stdout string) []string {
		var defs []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal([]byte(stdout), &defs); err != nil {
			t.Fatalf("tools -json: %v\n%s", err, stdout)
		}
		var out []string
		for _, d := range defs {
			out = append(out, d.Name)
		}
		return out
	}
	has := func(list []string, name string) bool {
		for _, n := range list {
			if n == name {
				return true
			}
		}
		return false
	}

	for _, tc := range []struct {
		agent   string
		set     []string
		stored  string
		main    []string // web tools of a main turn
		present []string // other tools that must be there
	}{
		{agent: "nobody", main: nil, present: []string{"run_command"}},
		{agent: "wes", set: []string{"-web-search", "searxng=http://127.0.0.1:8888", "-web-fetch"},
			stored: "agent wes: profile stored (built-in tools only; web: search searxng at http://127.0.0.1:8888, fetch)",
			main:   []string{"web_search", "web_fetch"}, present: []string{"run_command", "todo_write"}},
		{agent: "bea", set: []string{"-web-search", "brave"},
			stored: "agent bea: profile stored (built-in tools only; web: search brave)", main: []string{"web_search"}},
		{agent: "fio", set: []string{"-web-fetch-private", "-namespace", "crm"},
			stored: "agent fio: profile stored (namespaces crm (deferred); web: fetch (private addresses too))", main: []string{"web_fetch"}},
		{agent: "ned", set: []string{"-approvals", "writes"},
			stored: "agent ned: profile stored (built-in tools only; approvals: writes)", main: nil},
	} {
		t.Run(tc.agent, func(t *testing.T) {
			if tc.set != nil {
				code, out, errOut := run([]string{"agent", "set"}, append(tc.set, tc.agent)...)
				if code != exitOK || !strings.Contains(errOut, tc.stored) {
					t.Fatalf("agent set: exit %d, stderr %q, want %q (%s)", code, errOut, tc.stored, out)
				}
			}
			for _, kind := range []string{"main", "task"} {
				code, out, errOut := run([]string{"tools"}, "-agent", tc.agent, "-kind", kind, "-json")
				if code != exitOK {
					t.Fatalf("tools -kind %s: exit %d: %s", kind, code, errOut)
				}
				got := names(out)
				var web []string
				for _, n := range got {
					if strings.HasPrefix(n, "web_") {
						web = append(web, n)
					}
				}
				if strings.Join(web, ",") != strings.Join(tc.main, ",") {
					t.Errorf("%s turn: web tools %v, want %v (all: %v)", kind, web, tc.main, got)
				}
				if kind == "task" {
					// A task turn holds the web tools its profile binds, its submit_result
					// and nothing else.
					if want := append(slices.Clone(tc.main), "submit_result"); !slices.Equal(got, want) {
						t.Errorf("task turn: tools %v, want %v", got, want)
					}
					continue
				}
				for _, p := range tc.present {
					if !has(got, p) {
						t.Errorf("main turn lacks %s: %v", p, got)
					}
				}
			}
		})
	}

	// The web tools sit after computer's and carry their schemas.
	code, out, _ := run([]string{"tools"}, "-agent", "wes", "-json")
	if code != exitOK || !strings.Contains(out, `"description": "How many results to return, 1 to 20 (default 5)."`) ||
		strings.Index(out, `"name": "run_command"`) > strings.Index(out, `"name": "web_search"`) {
		t.Errorf("tools -json of wes:\n%s", out)
	}
	// Without -server no profile is read: no web tools.
	code, out, _ = cli(ctx, "tools", "-json")
	if code != exitOK || strings.Contains(out, "web_") {
		t.Errorf("tools without a bus lists web tools (exit %d)", code)
	}

	code, out, errOut := run([]string{"agent", "list"})
	if code != exitOK || !strings.Contains(out, "web: search searxng at http://127.0.0.1:8888, fetch") {
		t.Errorf("agent list: exit %d\n%s%s", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-web-search", "searxng", "x1"}, exitUsage, "-web-search searxng needs the instance's URL: -web-search searxng=http://HOST:PORT"},
		{[]string{"-web-search", "google", "x1"}, exitFailed, "invalid agent profile: /web/search/provider: "},
		{[]string{"-web-search", "brave=ftp://x", "x1"}, exitFailed, `/web/search/url: "ftp://x" is not an http or https URL`},
		{[]string{"-web-search", "searxng=http://u:p@host", "x1"}, exitFailed, "the URL holds credentials"},
		{[]string{"-f", "-", "-web-fetch", "x1"}, exitUsage, "-f gives the whole document: leave out -namespace, -upfront, -approvals, -skill, -brain and the -web flags"},
	} {
		code, out, errOut := run([]string{"agent", "set"}, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("agent set %q: exit %d, stderr %q, want %d and %q (%s)", tc.args, code, errOut, tc.code, tc.want, out)
		}
	}
}
