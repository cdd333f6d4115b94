package durable

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

// TestReadTranscriptOrderDocumented stores the transcript messages docs/durable.md shows
// for turn t2 (its parallel calls' outputs in the order they finished, list_files first)
// in a real transcript stream, in the stream order shown, and reads them back with
// ReadTranscript: the result must be the JSON the page says a reader returns (each run of
// outputs in the order of its calls), item for item.
func TestReadTranscriptOrderDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/durable.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "The turn `t2` of")
	if start < 0 {
		t.Fatal("docs/durable.md has no transcript sample of turn t2")
	}
	sample, _, _ := strings.Cut(text[start:], "\n```\n\n")
	type stored struct {
		seq  string
		body string
	}
	var msgs []stored
	seqRe := regexp.MustCompile(`(?m)^\s*Toolbus-Seq: (\d+)$`)
	for _, part := range strings.Split(sample, "$ nats stream get TOOLBUS_TRANSCRIPTS ")[1:] {
		seq := seqRe.FindStringSubmatch(part)
		i := strings.Index(part, "\n[")
		if seq == nil || i < 0 {
			t.Fatalf("a message of the sample without Toolbus-Seq or body:\n%s", part)
		}
		body, _, _ := strings.Cut(part[i+1:], "\n")
		msgs = append(msgs, stored{seq[1], body})
	}
	if len(msgs) != 4 {
		t.Fatalf("the sample has %d messages, want 4", len(msgs))
	}
	after := "checks that the reader returns this):\n\n```\n"
	i := strings.Index(text, after)
	if i < 0 {
		t.Fatal("docs/durable.md does not show what the reader returns")
	}
	want, _, _ := strings.Cut(text[i+len(after):], "\n```")

	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := bustest.JetStream(t, srv, "transcripts")
	if _, err := ensureTranscripts(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		msg := nats.NewMsg(bus.TranscriptSubject("t2"))
		msg.Header.Set(bus.HeaderSeq, m.seq)
		msg.Data = []byte(m.body)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	items, err := ReadTranscript(ctx, js, "t2")
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(want)); err != nil {
		t.Fatalf("the documented reading is not JSON: %v\n%s", err, want)
	}
	if string(got) != compact.String() {
		t.Errorf("ReadTranscript returned\n%s\nthe page says\n%s", got, compact.String())
	}
}
