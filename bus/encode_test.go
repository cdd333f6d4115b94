package bus

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

var encodeCases = []Event{
	{Turn: "t1", Call: "c1", Tool: "read_file", Kind: EventStarted, Label: "Reading notes.txt", Time: time.Date(2026, 11, 30, 21, 0, 0, 123456789, time.UTC)},
	{Turn: "t1", Call: "c1", Tool: "noop", Kind: EventCompleted, Time: time.Date(2026, 11, 30, 21, 0, 0, 0, time.FixedZone("", 3600))},
	{Turn: "t", Call: "c", Tool: "x", Kind: EventProgress, Label: "quotes \" \\ <b>&</b> \n\t\r\b\f \x01 \x7f é 😀 \u2028\u2029 bad\xff\xfe utf8", Time: time.Unix(0, 1)},
	{Turn: "t", Call: "c", Tool: "x", Kind: EventPresentation, Data: json.RawMessage(` {"a": 1} `), Time: time.Unix(5, 0)},
	{},
}

func TestEventAppendJSON(t *testing.T) {
	t.Parallel()
	for _, e := range encodeCases {
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.AppendJSON(nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("AppendJSON(%+v):\n got %s (%v)\nwant %s", e, got, err, want)
		}
	}
}

func FuzzEventAppendJSON(f *testing.F) {
	for _, e := range encodeCases {
		f.Add(e.Turn, e.Label, e.Time.UnixNano())
	}
	f.Fuzz(func(t *testing.T, turn, label string, nanos int64) {
		e := Event{Turn: turn, Call: "c", Tool: "tool", Kind: EventStarted, Label: label, Time: time.Unix(0, nanos).UTC()}
		want, werr := json.Marshal(&e)
		got, gerr := e.AppendJSON(nil)
		if (werr == nil) != (gerr == nil) || (werr == nil && !bytes.Equal(got, want)) {
			t.Fatalf("AppendJSON:\n got %s (%v)\nwant %s (%v)", got, gerr, want, werr)
		}
	})
}

func BenchmarkEventEncoding(b *testing.B) {
	e := encodeCases[0]
	b.Run("AppendJSON", func(b *testing.B) {
		buf := make([]byte, 0, 256)
		for b.Loop() {
			buf, _ = e.AppendJSON(buf[:0])
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(&e)
		}
	})
}
