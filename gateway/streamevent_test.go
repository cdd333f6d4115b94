package gateway

import (
	"encoding/json"
	"reflect"
	"testing"
)

// streamEventCases are events of a Responses stream, and events of the forms the hand
// reader must leave to encoding/json (nulls, keys in other case, escapes, malformed).
var streamEventCases = []string{
	`{"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":{"id":"fc_0","type":"function_call","status":"completed","arguments":"{\"path\":\"a/b/c.txt\",\"limit\":10}","call_id":"call_0","name":"tool_0"}}`,
	`{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hello \u00e9 \ud83d\ude00","logprobs":[],"obfuscation":"x1"}`,
	`{"type":"response.completed","response":{"id":"resp_1","object":"response","output":[],"usage":{"input_tokens":3}}}`,
	`{"type":"error","code":"server_error","message":"boom","param":null}`,
	`{"type":"response.output_item.done","output_index":2,"item":null}`,
	`{"Type":"response.output_item.done","output_index":0}`,
	`{"type":"response.output_item.done","OUTPUT_INDEX":3}`,
	`{"type":"x","output_index":1.0}`,
	`{"type":"x","output_index":99999999999999999999}`,
	`{"type":"x","delta":"bad \xff"}`,
	`{"type":"x","delta":null,"code":null}`,
	`{"t\u0079pe":"x"}`,
	`{"type":"x","error":{"message":"nope"}}`,
	`{"type":"x",}`, `[1]`, `{"type":"x"} {}`, `{"type":"x","item":{"a":[1,{"b":null}]},"item":{"c":true}}`,
}

// TestStreamEventRead: what streamEvent.read reads equals encoding/json's reading of the
// event; what it declines, encoding/json reads or refuses.
func TestStreamEventRead(t *testing.T) {
	t.Parallel()
	read := 0
	for _, in := range streamEventCases {
		if checkStreamEvent(t, []byte(in)) {
			read++
		}
	}
	if read < 5 {
		t.Errorf("read %d of the events by hand, want the usual ones", read)
	}
}

func checkStreamEvent(t *testing.T, in []byte) bool {
	t.Helper()
	type plain streamEvent
	var want streamEvent
	err := json.Unmarshal(in, (*plain)(&want))
	var got streamEvent
	hasError, ok := got.read(in)
	if !ok {
		if !reflect.DeepEqual(got, streamEvent{}) {
			t.Fatalf("read(%q) declined it and changed the event: %+v", in, got)
		}
		return false
	}
	if err != nil {
		t.Fatalf("read(%q) = %+v, encoding/json refuses it: %v", in, got, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read(%q):\n got %+v\nwant %+v", in, got, want)
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(in, &members) == nil {
		if _, e := members["error"]; e != hasError {
			t.Fatalf("read(%q) says it has an error member: %v", in, hasError)
		}
	}
	// The item's head, when there is one.
	if len(got.Item) > 0 {
		var wantHead callHead
		herr := json.Unmarshal(got.Item, &wantHead)
		head, args, argsRead, err := decodeCallHead(got.Item)
		if (err != nil) != (herr != nil) || err == nil && !reflect.DeepEqual(head, wantHead) {
			t.Fatalf("decodeCallHead(%s) = %+v %v, encoding/json %+v %v", got.Item, head, err, wantHead, herr)
		}
		if argsRead {
			var wantArgs string
			if json.Unmarshal(wantHead.Arguments, &wantArgs) != nil || args != wantArgs {
				t.Fatalf("decodeCallHead(%s) read the arguments %q, encoding/json %q", got.Item, args, wantArgs)
			}
		}
	}
	return true
}

func FuzzStreamEventRead(f *testing.F) {
	for _, in := range streamEventCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkStreamEvent(t, in) })
}
