package main

import (
	"context"
	"io"
	"testing"
)

// BenchmarkEmbeddedRun measures what a user waits for with `toolbus run`:
// the embedded bus and node starting and stopping (the baseline), and the
// whole command with a one-call scripted turn on top.
func BenchmarkEmbeddedRun(b *testing.B) {
	ctx := context.Background()
	home := b.TempDir()
	b.Run("start-stop", func(b *testing.B) {
		for b.Loop() {
			bc, err := startEmbedded(ctx, embedOptions{home: home, turns: true}, newLogger(io.Discard))
			if err != nil {
				b.Fatal(err)
			}
			bc.Close()
		}
	})
	script := writeScript(b, `{"responses": [
		{"calls": [{"name": "list_files", "arguments": "{}"}]},
		{"text": "Empty."}
	]}`)
	b.Run("run-one-call", func(b *testing.B) {
		for b.Loop() {
			if code := run(ctx, []string{"run", "-model", "script:" + script, "-home", home, "list"}, io.Discard, io.Discard); code != exitOK {
				b.Fatalf("exit %d", code)
			}
		}
	})
}
