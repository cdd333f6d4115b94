package actors

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/needs"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// computerNode starts a node that hosts the computer tools with cfg, every agent working
// in home, and the node's turn and abort defaults.
func computerNode(t *testing.T, home string, cfg computer.Config) *Node {
	t.Helper()
	return computerNodeLogging(t, home, cfg, DiscardLogger())
}

func computerNodeLogging(t *testing.T, home string, cfg computer.Config, log *slog.Logger) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := server.Start(ctx, server.Config{StoreDir: t.TempDir(), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	n, err := StartNode(ctx, NodeConfig{
		Name:       "n1",
		Connect:    func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Categories: []string{computer.Category},
		Home:       home,
		Tools:      toolsets.Settings{Computer: cfg},
		Logger:     log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// runCommands runs a turn that calls run_command once per command, in one batch.
func runCommands(t *testing.T, ctx context.Context, n *Node, cfg computer.Config, commands ...string) TurnResult {
	t.Helper()
	set, err := toolbus.NewSet(computer.Specs(cfg)...)
	if err != nil {
		t.Fatal(err)
	}
	var calls []gateway.ScriptCall
	for _, c := range commands {
		args, _ := json.Marshal(map[string]string{"command": c})
		calls = append(calls, call("run_command", string(args)))
	}
	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{{Calls: calls}, {Text: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := n.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Agent: "tester", Input: "go"}, Model: model, Kit: toolsets.NewKit(set)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// An aborted command that ignores SIGTERM is killed KillGrace later, within the turn's
// abort grace: the call is stopped, not abandoned. Both use their defaults.
func TestAbortedStubbornCommandIsStopped(t *testing.T) {
	t.Parallel()
	for _, mode := range []computer.SandboxMode{computer.SandboxBwrap, computer.SandboxOff} {
		t.Run(string(mode), func(t *testing.T) {
			if mode == computer.SandboxBwrap {
				needs.Bwrap(t)
			}
			t.Parallel() // a node of its own; each waits out the kill grace
			home := t.TempDir()
			cfg := computer.Config{Sandbox: computer.SandboxConfig{Mode: mode}}
			n := computerNode(t, home, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				defer cancel() // Run turns this into an abort on the bus
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
					if _, err := os.Stat(filepath.Join(home, "started")); err == nil {
						return
					}
				}
				t.Error("the command never started")
			}()
			res := runCommands(t, ctx, n, cfg, `trap "" TERM; touch started; sleep 30 & wait`)
			if res.State != bus.TurnAborted {
				t.Fatalf("state %s: %s", res.State, res.ErrorText())
			}
			if got, want := outcomes(res), []string{"run_command:stopped"}; !slices.Equal(got, want) {
				t.Errorf("outcomes %v, want %v (abort grace %s, kill grace %s)", got, want, DefaultAbortGrace, computer.DefaultKillGrace)
			}
		})
	}
}

// The node's environment never reaches a transcript, whatever a command prints.
func TestTranscriptHoldsNoSecrets(t *testing.T) {
	needs.Bwrap(t) // the commands run in the default sandbox
	const secret = "sk-test-7d1e5b-not-a-real-key"
	t.Setenv("OPENAI_API_KEY", secret) // in the node's environment from here on
	// What /proc/<pid>/environ shows of this process: its environment as started.
	initial, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{secret}
	for kv := range strings.SplitSeq(string(initial), "\x00") {
		if k, v, _ := strings.Cut(kv, "="); len(v) >= 4 && !slices.Contains([]string{"LANG", "LC_ALL", "TERM", "PWD", "OLDPWD", "SHLVL", "_"}, k) {
			secrets = append(secrets, kv)
		}
	}

	cfg := computer.Config{}
	n := computerNode(t, t.TempDir(), cfg)
	res := runCommands(t, context.Background(), n, cfg,
		"env",
		"cat /proc/1/environ; echo; cat /proc/$PPID/environ",
		"for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done",
	)
	if res.State != bus.TurnCompleted {
		t.Fatalf("state %s: %s", res.State, res.ErrorText())
	}
	stored, err := durable.ReadTranscript(context.Background(), n.JetStream(), res.Turn)
	if err != nil {
		t.Fatal(err)
	}
	transcript, _ := json.Marshal(stored)
	if !strings.Contains(string(transcript), "TERM=dumb") {
		t.Fatalf("the transcript lacks the commands' output:\n%s", transcript)
	}
	for _, s := range secrets {
		if strings.Contains(string(transcript), s) {
			t.Errorf("the transcript holds the node's %q", s)
		}
	}
	if t.Failed() {
		t.Logf("transcript:\n%s", transcript)
	}
}

// A node that hosts the computer tools says loudly when commands run without a sandbox,
// and when run_command will refuse every call.
func TestNodeLogsTheSandbox(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   computer.Config
		want  string
		bwrap bool // the node's sandbox check runs the real bwrap
	}{
		{"off", computer.Config{Sandbox: computer.SandboxConfig{Mode: computer.SandboxOff}},
			`level=WARN msg="NO SANDBOX: run_command runs commands as bare processes of the node (-sandbox=off)`, false},
		{"unavailable", computer.Config{Sandbox: computer.SandboxConfig{Bwrap: "/nonexistent/bwrap"}},
			`level=ERROR msg="run_command will refuse every call" node=n1 err="command sandbox unavailable: bubblewrap is not installed (/nonexistent/bwrap: no such file or directory)`, false},
		{"bwrap", computer.Config{}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bwrap {
				needs.Bwrap(t)
			}
			var logs logBuffer
			computerNodeLogging(t, t.TempDir(), tc.cfg, logs.logger())
			got := logs.String()
			if tc.want == "" && (strings.Contains(got, "SANDBOX") || strings.Contains(got, "refuse")) || !strings.Contains(got, tc.want) {
				t.Errorf("log:\n%s\nwant: %s", got, tc.want)
			}
		})
	}
}
