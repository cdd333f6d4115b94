package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/node"
)

// TestLogAboveLiveArea runs a turn whose model endpoint refuses connections on
// a terminal: the node's warnings, written to the same terminal, come out as
// readable lines above the live area, once each (with -v, once per attempt,
// the later ones while the live area is drawn), and none is left inside it.
func TestLogAboveLiveArea(t *testing.T) {
	t.Parallel()
	for _, verbose := range []bool{false, true} {
		t.Run(fmt.Sprintf("verbose=%v", verbose), func(t *testing.T) {
			t.Parallel() // each has an embedded bus and a log view of its own
			testLogAboveLiveArea(t, verbose)
		})
	}
}

func testLogAboveLiveArea(t *testing.T, verbose bool) {
	ctx := testContext(t)
	var out output
	logFile := filepath.Join(t.TempDir(), "logs", "run.log")
	logs, err := newLogView(&out, logFile, verbose)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	gw, err := (&node.GatewayFlags{BaseURL: "http://127.0.0.1:1/v1"}).Config()
	if err != nil {
		t.Fatal(err)
	}
	bc, err := startEmbedded(ctx, embedOptions{home: t.TempDir(), turns: true, gateway: gw}, logs.logger())
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	r := &renderer{w: &out, tty: true, width: func() int { return 200 }, now: time.Now}
	req := bus.TurnSpec{ID: bus.NewID(), Kind: bus.TurnMain, Agent: defaultAgent, Input: "hi", Model: "chat:m"}
	st, err := followTurn(ctx, testEnv(nil, ""), bc, "", req, r, logs, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != bus.TurnFailed {
		t.Fatalf("state %s, want failed", st.State)
	}
	lines := screen(t, out.String())
	text := strings.Join(lines, "\n")
	warning := "warning: model request failed: Post \"http://127.0.0.1:1/v1/chat/completions\""
	want := 1
	if verbose {
		want = 1 + gateway.DefaultMaxRetries
	}
	if n := strings.Count(text, warning); n != want {
		t.Errorf("the refused request is on screen %d times, want %d:\n%s", n, want, text)
	}
	for _, l := range lines {
		if strings.Contains(l, "level=") || strings.Contains(l, `\"`) || strings.Contains(l, "waiting for the model") {
			t.Errorf("line %q: a logfmt line, or the live area left on screen:\n%s", l, text)
		}
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte(`msg="model request failed"`)); n != 1+gateway.DefaultMaxRetries {
		t.Errorf("the log file holds %d failed requests, want every attempt (%d):\n%s", n, 1+gateway.DefaultMaxRetries, b)
	}
}

// TestLogViewOnce shows a repeated warning once, and every time with -v.
func TestLogViewOnce(t *testing.T) {
	t.Parallel()
	for _, verbose := range []bool{false, true} {
		var out bytes.Buffer
		v, _ := newLogView(&out, "", verbose)
		log := v.logger().With("provider", "chat")
		for i := range 3 {
			log.Warn("model request failed", "retry", i, "error", "connection refused")
		}
		log.Info("node ready")
		want := "warning: model request failed: connection refused (provider=chat)\n"
		if verbose {
			want = strings.Repeat(want, 3) + "log: node ready (provider=chat)\n"
		}
		if out.String() != want {
			t.Errorf("verbose %v: got\n%s\nwant\n%s", verbose, out.String(), want)
		}
	}
}
