package bus

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

var replyCases = []ToolReply{
	{Call: "c12", Tool: "noop", Outcome: OutcomeOK, Content: []ContentPart{{Type: "text", Text: "ok"}}, Label: "noop", Duration: 1234},
	{Call: "c1", Tool: "run_command", Outcome: OutcomeError, Content: []ContentPart{{Type: "text", Text: "line 1\nline \"2\"\t<b>&</b> é 😀 \u2028 \x01"}, {Type: "image", MediaType: "image/png", URL: "https://x/y.png"}},
		Error: "exit status 1", Label: "Ran `make`", Terminate: true, Duration: -5},
	{Call: "c2", Tool: "t", Outcome: OutcomeStopped, Error: "call stopped: aborted", Abort: &Abort{Turn: "t1", Reason: "user"}},
	{Call: "c3", Tool: "t", Outcome: OutcomeOK, Details: json.RawMessage(`{"rows":3}`), Events: []Event{{Kind: EventPresentation, Label: "3 rows", Time: time.Unix(5, 0).UTC()}}},
	{Call: "c4", Tool: "t", Outcome: OutcomeOK, Content: []ContentPart{{Type: "image", MediaType: "image/png", Data: []byte{1, 2, 3}}}},
	{Content: []ContentPart{}},
	{},
}

// TestToolReplyCodec: AppendJSON writes what json.Marshal writes, and DecodeToolReply reads
// it back as json.Unmarshal does.
func TestToolReplyCodec(t *testing.T) {
	t.Parallel()
	for _, r := range replyCases {
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.AppendJSON(nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("AppendJSON(%+v):\n got %s (%v)\nwant %s", r, got, err, want)
		}
		checkDecode(t, want)
	}
	for _, data := range []string{
		` { "call_id" : "c\u0031" , "outcome":"ok","duration_ns":-0, "content":[ ] } `,
		`{"call_id":"a","call_id":"b"}`,
		`{"Call_ID":"a"}`,
		`{"call_id":"\ud83d\ude00"}`,
		`{"call_id":"\ud83d"}`,
		"{\"call_id\":\"bad \xff utf8\"}",
		`{"duration_ns":1.5}`,
		`{"duration_ns":1e3}`,
		`{"duration_ns":01}`,
		`{"duration_ns":99999999999999999999}`,
		`{"terminate":null}`,
		`{"content":null}`,
		`{"content":[{"type":"text","text":"a","text":"b"}]}`,
		`{"content":[{"type":"text","data":"AQID"}]}`,
		`{"call_id":"x"} trailing`,
		`{"call_id":"x",}`,
		`{"call_id":"tab	inside"}`,
		`{"call_id":"\x"}`,
		`[]`,
		``,
	} {
		checkDecode(t, []byte(data))
	}
}

func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	var want, got ToolReply
	werr := json.Unmarshal(data, &want)
	gerr := DecodeToolReply(data, &got)
	if (werr == nil) != (gerr == nil) || (werr == nil && !reflect.DeepEqual(got, want)) {
		t.Fatalf("DecodeToolReply(%q):\n got %+v (%v)\nwant %+v (%v)", data, got, gerr, want, werr)
	}
}

func FuzzDecodeToolReply(f *testing.F) {
	for _, r := range replyCases {
		data, _ := json.Marshal(&r)
		f.Add(data)
	}
	f.Add([]byte(`{"call_id":"c\u00e9\n","content":[{"type":"text","text":"\"\\\/\b\f\r\t"}],"terminate":false}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkDecode(t, data) })
}

func FuzzToolReplyAppendJSON(f *testing.F) {
	for _, r := range replyCases {
		var text string
		if len(r.Content) > 0 {
			text = r.Content[0].Text
		}
		f.Add(r.Call, text, r.Error, int64(r.Duration), r.Terminate)
	}
	f.Fuzz(func(t *testing.T, call, text, errText string, nanos int64, terminate bool) {
		r := ToolReply{Call: call, Tool: "tool", Outcome: OutcomeOK, Content: []ContentPart{{Type: "text", Text: text}},
			Error: errText, Terminate: terminate, Duration: time.Duration(nanos)}
		want, werr := json.Marshal(&r)
		got, gerr := r.AppendJSON(nil)
		if (werr == nil) != (gerr == nil) || (werr == nil && !bytes.Equal(got, want)) {
			t.Fatalf("AppendJSON:\n got %s (%v)\nwant %s (%v)", got, gerr, want, werr)
		}
		checkDecode(t, got)
	})
}

// BenchmarkToolReplyCodec is a host's encoding and a turn's decoding of a typical reply,
// against encoding/json.
func BenchmarkToolReplyCodec(b *testing.B) {
	r := replyCases[0]
	data, _ := json.Marshal(&r)
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			buf, _ = r.AppendJSON(buf[:0])
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(&r)
		}
	})
	b.Run("DecodeToolReply", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var x ToolReply
			if err := DecodeToolReply(data, &x); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var x ToolReply
			if err := json.Unmarshal(data, &x); err != nil {
				b.Fatal(err)
			}
		}
	})
}
