package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/brain"
)

// TestBrainCommands adds, lists, shows and removes pages through the command line,
// enables the brain in a profile, and runs a turn whose scripted model recalls and reads
// a page on a node of the bus.
func TestBrainCommands(t *testing.T) {
	t.Parallel()
	rb := startRemoteBus(t, true)
	ctx := testContext(t)
	// subArgs are the words of `toolbus CMD SUB` with the bus flags, then args.
	subArgs := func(cmd, sub string, args ...string) []string {
		return append([]string{cmd, sub, "-server", rb.url, "-user", "ops", "-pass-file", rb.passFile}, args...)
	}
	brainArgs := func(sub string, args ...string) []string { return subArgs("brain", sub, args...) }
	// run runs `toolbus brain SUB` for agent ann.
	run := func(sub string, args ...string) (int, string, string) {
		return cli(ctx, brainArgs(sub, append([]string{"-agent", "ann"}, args...)...)...)
	}
	// runStdin is run with standard input reading stdin.
	runStdin := func(stdin, sub string, args ...string) (int, string, string) {
		return cliEnv(ctx, testEnv(nil, stdin), brainArgs(sub, append([]string{"-agent", "ann"}, args...)...)...)
	}
	expect := func(what string, code, want int, text string, parts ...string) {
		t.Helper()
		if code != want {
			t.Errorf("%s: exit %d, want %d:\n%s", what, code, want, text)
		}
		for _, p := range parts {
			if !strings.Contains(text, p) {
				t.Errorf("%s lacks %q:\n%s", what, p, text)
			}
		}
	}
	dir := t.TempDir()
	deploy := "# How we deploy\n\nBuild the image, push it, start a canary at five percent,\nwatch the error rate for ten minutes, then roll out.\n"
	deployFile := filepath.Join(dir, "deploy.md")
	big := strings.Repeat("The gondola log goes on and on.\n", 8000)
	bigFile := filepath.Join(dir, "big.txt")
	for path, text := range map[string]string{deployFile: deploy, bigFile: big} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	code, _, errOut := run("list")
	expect("list of none", code, exitOK, errOut, "agent ann has no pages")

	code, _, errOut = run("add", "-tag", "ops,Deploy", deployFile)
	expect("add", code, exitOK, errOut, "agent ann: page how-we-deploy added (128 B, tags ops, deploy)")
	code, _, errOut = run("add", deployFile)
	expect("add twice", code, exitFailed, errOut, "agent ann already has a page how-we-deploy: pass -replace to replace it, or -id to add another")
	code, _, errOut = run("add", "-title", "Gondola log", "-id", "log", bigFile)
	expect("add a large page", code, exitOK, errOut, "agent ann: page log added (256.0 KB)")
	code, _, errOut = runStdin("Keep the ferry timetable in the hall.", "add", "-title", "Ferry", "-tag", "travel")
	expect("add from standard input", code, exitOK, errOut, "agent ann: page ferry added (37 B, tags travel)")
	code, _, errOut = runStdin("Keep the ferry timetable by the door.", "add", "-title", "Ferry", "-replace", "-")
	expect("replace from standard input", code, exitOK, errOut, "agent ann: page ferry replaced (37 B)")

	code, out, errOut := run("list")
	expect("list", code, exitOK, out+errOut, "ID", "TITLE", "ferry", "how-we-deploy", "How we deploy", "ops,deploy", "128 B", "log", "256.0 KB")
	code, out, _ = run("list", "-json")
	var list []brain.Info
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != exitOK || len(list) != 3 {
		t.Fatalf("list -json: exit %d, %v:\n%s", code, err, out)
	}
	if list[2].ID != "log" || list[2].Object == "" || list[2].Size != len(big) {
		t.Errorf("the large page is listed as %+v", list[2])
	}

	code, out, errOut = run("show", "how-we-deploy")
	expect("show", code, exitOK, errOut, "page how-we-deploy: How we deploy (128 B, tags ops, deploy, updated ")
	if out != deploy {
		t.Errorf("show prints %q, want the text as stored", out)
	}
	code, out, _ = run("show", "log")
	if code != exitOK || out != big {
		t.Errorf("show of the large page: exit %d, %d bytes of %d", code, len(out), len(big))
	}
	code, out, _ = run("show", "-json", "ferry")
	var p brain.Page
	if err := json.Unmarshal([]byte(out), &p); err != nil || code != exitOK || p.Text != "Keep the ferry timetable by the door." || p.Tags != nil {
		t.Errorf("show -json: exit %d, %+v, %v", code, p, err)
	}

	// The profile switch puts recall and get_page in the agent's turns.
	code, out, _ = cli(ctx, rb.args("tools", "-agent", "ann")...)
	if code != exitOK || strings.Contains(out, "recall") {
		t.Errorf("tools before -brain: exit %d, lists recall:\n%s", code, out)
	}
	code, _, errOut = cli(ctx, subArgs("agent", "set", "-brain", "ann")...)
	expect("agent set -brain", code, exitOK, errOut, "agent ann: profile stored (built-in tools only; brain on)")
	code, out, _ = cli(ctx, rb.args("tools", "-agent", "ann")...)
	expect("tools after -brain", code, exitOK, out, "recall", "get_page")
	code, out, _ = cli(ctx, rb.args("tools", "-agent", "ann", "-kind", "task")...)
	if code != exitOK || !strings.Contains(out, "recall") || strings.Contains(out, "read_file") {
		t.Errorf("a task turn's tools with the brain on (exit %d):\n%s", code, out)
	}

	// A turn on the node recalls and reads the page.
	script := writeScript(t, `{"responses": [
	  {"calls": [{"name": "recall", "arguments": "{\"query\": \"how do we deploy\"}"}]},
	  {"calls": [{"name": "get_page", "arguments": "{\"id\": \"how-we-deploy\"}"}]},
	  {"text": "Canary at five percent first."}
	]}`)
	code, out, errOut = cli(ctx, rb.args("run", "-agent", "ann", "-model", "script:"+script, "How do we deploy?")...)
	expect("run", code, exitOK, out+errOut, "✓ Found 1 page for “how do we deploy”", "✓ Read page how-we-deploy (128 bytes)", "Canary at five percent first.")
	code, out, _ = cli(ctx, rb.args("call", "-agent", "ann", "recall", `{"query": "ferry timetable"}`)...)
	expect("call recall", code, exitOK, out, "1 page matches “ferry timetable”", "ferry: Ferry", "**ferry** **timetable**")

	code, _, errOut = run("rm", "how-we-deploy", "log")
	expect("rm", code, exitOK, errOut, "agent ann: page how-we-deploy deleted", "agent ann: page log deleted")
	code, _, errOut = run("rm", "log")
	expect("rm twice", code, exitFailed, errOut, "agent ann: page log: no such page")
	code, out, _ = run("rm", "-json", "ferry")
	expect("rm -json", code, exitOK, out, `"deleted": [`, `"ferry"`)

	noTitle := filepath.Join(dir, "plain.txt")
	if err := os.WriteFile(noTitle, []byte("no heading here"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"brain"}, "want a subcommand: add, list, show or rm"},
		{[]string{"brain", "grep"}, `unknown subcommand "grep"`},
		{[]string{"brain", "list"}, "brain list works on a running bus: pass -server URL"},
		{brainArgs("add", noTitle), "the page needs a title: pass -title"},
		{brainArgs("add", "-title", "東京", noTitle), `no id can be made from the title "東京": pass -id`},
		{brainArgs("add", "-id", "a.b", "-title", "x", noTitle), `-id: page id "a.b" has '.'`},
		{brainArgs("list", "-agent", "a.b"), `-agent "a.b"`},
		{brainArgs("show"), "want one page id"},
		{brainArgs("rm"), "want the id of a page to delete"},
		{subArgs("agent", "set", "-f", noTitle, "-brain", "ann"), "-f gives the whole document: leave out -namespace, -upfront, -approvals, -skill, -brain and the -web flags"},
	} {
		code, out, errOut := cli(ctx, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want usage error %q (stdout %q)", tc.args, code, errOut, tc.want, out)
		}
	}
}

// TestBrainAddRefusesEmptyPage: a page of nothing but white space is refused before the
// bus is asked, with a title or without.
func TestBrainAddRefusesEmptyPage(t *testing.T) {
	ctx := testContext(t)
	empty := filepath.Join(t.TempDir(), "empty.md")
	if err := os.WriteFile(empty, []byte(" \n\t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cli(ctx, "brain", "add", "-server", "nats://127.0.0.1:1", "-title", "Nothing", empty)
	if want := "toolbus: brain add: the page is empty: " + empty + " holds no text\n"; code != exitFailed || stderr != want {
		t.Errorf("exit %d, stderr %q; want %d, %q", code, stderr, exitFailed, want)
	}
}
