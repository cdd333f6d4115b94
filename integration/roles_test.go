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
// wrong password is refused.
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
	n := startNode(t, "n1", "-users", users, "-home", t.TempDir())
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
	_, errOut, err = runCLI(t, append(append([]string{"abort"}, ops...), "-wait", "300ms", "NoSuchTurn")...)
	if exitCode(err) != 1 || !strings.Contains(errOut, "no turn NoSuchTurn on this bus") {
		t.Errorf("abort of an unknown turn: exit %d\n%s", exitCode(err), errOut)
	}
	_, errOut, err = runCLI(t, append([]string{"turns"}, as("ops", "wrong-password")...)...)
	if exitCode(err) != 1 || !strings.Contains(errOut, "Authorization Violation") {
		t.Errorf("toolbus turns with a wrong password: exit %d\n%s", exitCode(err), errOut)
	}
}
