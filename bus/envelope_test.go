package bus

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestEnvelopeGolden pins the wire format: the JSON of each envelope must
// match its golden file, and decode back to the same value.
func TestEnvelopeGolden(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	started := Event{Turn: "t1", Call: "c1", Tool: "read", Kind: EventStarted, Label: "Reading notes.md", Time: at}
	tests := []struct {
		file string
		v    any
	}{
		{"tool_reply.json", &ToolReply{
			Call:    "c1",
			Tool:    "read",
			Outcome: OutcomeOK,
			Content: []ContentPart{
				{Type: ContentText, Text: "hello"},
				{Type: ContentImage, MediaType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}},
				{Type: ContentImage, URL: "https://example.com/a.png"},
			},
			Details:    json.RawMessage(`{"bytes":5}`),
			Events:     []Event{{Turn: "t1", Call: "c1", Tool: "read", Kind: EventPresentation, Data: json.RawMessage(`{"path":"notes.md"}`), Time: at}},
			Completion: &Event{Turn: "t1", Call: "c1", Tool: "read", Kind: EventCompleted, Label: "Read notes.md", Time: at},
			Terminate:  true,
			Duration:   1500 * time.Microsecond,
		}},
		{"tool_reply_error.json", &ToolReply{Call: "c2", Tool: "write", Outcome: OutcomeInvalid, Error: "path: is required"}},
		{"event.json", &started},
		{"abort.json", &Abort{Turn: "t1", Reason: "user pressed stop", By: "cli"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := json.MarshalIndent(tt.v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", tt.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("JSON differs from %s:\ngot:\n%s\nwant:\n%s", path, got, want)
			}
			// Decode the compact form: indentation would stay inside the
			// json.RawMessage fields.
			compact, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			back := reflect.New(reflect.TypeOf(tt.v).Elem()).Interface()
			if err := json.Unmarshal(compact, back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, tt.v) {
				t.Errorf("round trip:\ngot  %+v\nwant %+v", back, tt.v)
			}
		})
	}
}

func TestOutcomeValid(t *testing.T) {
	t.Parallel()
	for _, o := range []Outcome{OutcomeOK, OutcomeError, OutcomeInvalid, OutcomeNotStarted, OutcomeStopped,
		OutcomeAbandoned, OutcomeTimeout, OutcomeUnavailable, OutcomePanic} {
		if !o.Valid() {
			t.Errorf("%q not valid", o)
		}
	}
	for _, o := range []Outcome{"", "OK", "aborted"} {
		if o.Valid() {
			t.Errorf("%q valid", o)
		}
	}
}

func TestChildModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec   TurnSpec
		model  string
		script string
	}{
		{TurnSpec{Model: "openai:gpt-5.4"}, "openai:gpt-5.4", ""},
		{TurnSpec{Script: []byte(`{"responses":[{"text":"a"}]}`)}, "", `{"responses":[{"text":"a"}]}`},
		{TurnSpec{Script: []byte(`{"responses":[{"text":"a"}],"child":{"responses":[{"text":"b"}]}}`)}, "", `{"responses":[{"text":"b"}]}`},
		{TurnSpec{Script: []byte(`{"responses":[{"text":"a"}],"child":null}`)}, "", `{"responses":[{"text":"a"}],"child":null}`},
	} {
		model, script := tc.spec.ChildModel()
		if model != tc.model || string(script) != tc.script {
			t.Errorf("ChildModel of %s/%s = %q, %s; want %q, %s", tc.spec.Model, tc.spec.Script, model, script, tc.model, tc.script)
		}
	}
}
