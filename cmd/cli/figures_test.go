package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// parseElapsed reads a duration formatElapsed wrote.
func parseElapsed(t *testing.T, s string) time.Duration {
	t.Helper()
	if m, sec, ok := strings.Cut(s, "m"); ok && sec != "" && !strings.HasSuffix(s, "ms") {
		s = m + "m" + sec + "s"
	}
	d, err := time.ParseDuration(strings.Replace(s, "µs", "us", 1))
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

// TestTurnFigures runs a turn whose model fails at its second step: the error,
// the status and the summary all count that step as step 2, and the summary's
// duration is at least the turn's own, from its start to its end.
func TestTurnFigures(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	bc, err := startEmbedded(ctx, embedOptions{home: demoHome, turns: true}, newLogger(&output{}))
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	req := bus.TurnSpec{ID: bus.NewID(), Kind: bus.TurnMain, Agent: defaultAgent, Input: "look",
		Script: json.RawMessage(`{"responses":[{"calls":[{"name":"list_files","arguments":"{\"path\":\".\"}"}]}]}`)}
	started := make(chan bus.TurnStatus, 1)
	sub, err := bc.nc.Subscribe(bus.TurnStatusSubject(req.ID, bus.StatusStarted), func(m *nats.Msg) {
		var st bus.TurnStatus
		if json.Unmarshal(m.Data, &st) == nil {
			started <- st
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := bc.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var out output
	r := &renderer{w: &out, now: time.Now}
	final, err := followTurn(ctx, testEnv(nil, ""), bc, "", req, r, nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if final.State != bus.TurnFailed || final.Step != 2 || !strings.Contains(final.Error, "model step 2: ") ||
		!strings.Contains(final.Error, "no response scripted for step 2 (the script has 1)") {
		t.Errorf("final status: %s after step %d: %s", final.State, final.Step, final.Error)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	summary := lines[len(lines)-1]
	const prefix = "failed · 2 steps · 1 call · "
	if !strings.HasPrefix(summary, prefix) {
		t.Fatalf("summary %q, want %q…\n%s", summary, prefix, out.String())
	}
	st := <-started
	took := parseElapsed(t, strings.TrimPrefix(summary, prefix))
	// formatElapsed only rounds, never reorders two durations.
	if turn := parseElapsed(t, formatElapsed(final.Time.Sub(st.Time))); took < turn {
		t.Errorf("summary says %s; the turn ran %s from its start to its end", took, turn)
	}
}

// TestRunShowsTokens: the summary counts the tokens the model reported in the
// whole turn.
func TestRunShowsTokens(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(script, []byte(`{"responses":[
		{"calls":[{"name":"list_files","arguments":"{\"path\":\".\"}"}],"usage":{"input_tokens":100,"output_tokens":10}},
		{"text":"Done.","usage":{"input_tokens":120,"output_tokens":5}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := cli(testContext(t), "run", "-model", "script:"+script, "-home", demoHome, "look")
	if code != exitOK || !strings.Contains(stdout, "completed · 2 steps · 1 call · ") || !strings.Contains(stdout, " · 220 tokens in, 15 out\n") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
