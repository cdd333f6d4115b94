//go:build linux

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A listening node takes its users and their roles from -users: an operator's
// command line runs a turn and reads its transcript, lists turns and is told
// when a turn it aborts does not exist; a watcher lists turns too, and a
// wrong password is refused. A second node under the tool role serves the computer
// category: it reads the turn's record (its role allows that much) and runs the call in
// the home of the turn's stored agent.
func TestNodeWithUsersFileAndOperatorCLI(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users.json")
	doc := `[
	  {"user": "ops", "password": "ops-pw-5d1c", "role": "operator"},
	  {"user": "watch", "password": "watch-pw-77e0", "role": "watcher"},
	  {"user": "tools", "password": "tools-pw-0b9a", "role": "tool", "categories": ["computer"]}
	]`
	if err := os.WriteFile(users, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, "n1", "-users", users, "-categories", "todo")
	n.waitReady(t)
	server := fmt.Sprintf("nats://127.0.0.1:%d", n.port)
	as := func(user, pass string) []string {
		return []string{"-server", server, "-user", user, "-pass-file", writePassFile(t, dir, pass)}
	}
	ops, watch := as("ops", "ops-pw-5d1c"), as("watch", "watch-pw-77e0")

	script := writeScript(t, "all done")
	out, errOut, err := runCLI(t, append(append([]string{"run"}, ops...), "-model", "script:"+script, "-json", "do it")...)
	if err != nil || !strings.Contains(out, `"transcript"`) || !strings.Contains(out, "all done") {
		t.Fatalf("toolbus run as operator: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	for _, who := range [][]string{ops, watch} {
		out, errOut, err = runCLI(t, append([]string{"turns"}, who...)...)
		if err != nil || !strings.Contains(out, "completed") {
			t.Errorf("toolbus turns as %s: %v\nstdout:\n%s\nstderr:\n%s", who[3], err, out, errOut)
		}
	}
	homes := t.TempDir()
	if err := os.MkdirAll(filepath.Join(homes, "ann"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(homes, "ann", "notes.txt"), []byte("ann's notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := startProcess(t, "node w1 (tool role)", nodeBin(t), append(as("tools", "tools-pw-0b9a"),
		"-name", "w1", "-categories", "computer", "-turns=false", "-home-root", homes, "-store-dir", filepath.Join(dir, "w1"))...)
	checkFor(t, "the tool node is ready", func() error {
		if !strings.Contains(w.stderr.String(), "node ready") {
			return fmt.Errorf("not yet: %s", w.stderr.String())
		}
		return nil
	})
	script = writeScript(t, "read them", []scriptCall{{ID: "r", Name: "read_file", Arguments: `{"path":"notes.txt"}`}})
	out, errOut, err = runCLI(t, append(append([]string{"run"}, ops...), "-agent", "ann", "-model", "script:"+script, "read my notes")...)
	if err != nil || !strings.Contains(out, "✓ Read 1 line of notes.txt") {
		t.Fatalf("a turn of ann whose read_file the tool node serves: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	_, errOut, err = runCLI(t, append(append([]string{"abort"}, ops...), "-wait", "300ms", "NoSuchTurn")...)
	if exitCode(err) != 1 || !strings.Contains(errOut, "no turn NoSuchTurn on this bus") {
		t.Errorf("abort of an unknown turn: exit %d\n%s", exitCode(err), errOut)
	}
	_, errOut, err = runCLI(t, append([]string{"turns"}, as("ops", "wrong-password")...)...)
	if exitCode(err) != 1 || !strings.Contains(errOut, "Authorization Violation") {
		t.Errorf("toolbus turns with a wrong password: exit %d\n%s", exitCode(err), errOut)
	}
}
