package schema

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// ladderCase is one model output and exactly what Parse must make of it:
// either the canonical arguments and the rungs used, or the error kind and
// the full message the model will read.
type ladderCase struct {
	name   string
	schema []byte // fileSchema when nil
	in     string
	opts   ParseOptions

	want      string // canonical JSON; empty when an error is expected
	rungs     []Rung
	truncated bool

	kind ErrorKind
	msg  string
	// errRungs, when set, are the rungs an error reports; the error's
	// Truncated flag must then equal truncated.
	errRungs []Rung
	// value, when set, is the ArgumentError.Value of a schema refusal.
	value string
}

const notJSON = "arguments are not valid JSON: "

var ladderCases = []ladderCase{
	// 1. as is
	{name: "clean", in: `{"path":"a.txt","mode":"read"}`,
		want: `{"mode":"read","path":"a.txt"}`, rungs: []Rung{RungAsIs}},
	{name: "clean, spaced and nested", in: " {\n  \"path\": \"a.txt\",\n  \"mode\": \"write\",\n  \"options\": {\"recursive\": true, \"depth\": 2}\n}\n",
		want: `{"mode":"write","options":{"depth":2,"recursive":true},"path":"a.txt"}`, rungs: []Rung{RungAsIs}},
	{name: "duplicate key keeps the last, canonical output has one", in: `{"path":"a","path":"b","mode":"read"}`,
		want: `{"mode":"read","path":"b"}`, rungs: []Rung{RungAsIs}},
	{name: "html characters are not escaped", in: `{"path":"<a&b>","mode":"read"}`,
		want: `{"mode":"read","path":"<a&b>"}`, rungs: []Rung{RungAsIs}},
	{name: "big integers stay exact", in: `{"path":"a","mode":"read","limit":12345678901234567890}`,
		want: `{"limit":12345678901234567890,"mode":"read","path":"a"}`, rungs: []Rung{RungAsIs}},

	// 2. extract
	{name: "fence with language tag", in: "```json\n{\"path\":\"a\",\"mode\":\"read\"}\n```",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract}},
	{name: "fence without language tag", in: "```\n{\"path\":\"a\",\"mode\":\"read\"}\n```",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract}},
	{name: "fence on one line", in: "```json {\"path\":\"a\",\"mode\":\"read\"}```",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract}},
	{name: "prose before", in: `Sure, here are the arguments: {"path":"a","mode":"read"}`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract}},
	{name: "prose after", in: `{"path":"a","mode":"read"} I hope this helps!`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract}},
	{name: "prose around a fence", in: "Here you go:\n```json\n{\"path\":\"a\",\"mode\":\"read\"}\n```\nLet me know if you need more.",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract}},
	{name: "braces in prose are not objects", in: `Use {path} as given: {"path":"a","mode":"read"}`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract}},
	{name: "fence inside a string is kept", in: "Call: {\"path\":\"a```b\",\"mode\":\"read\"}",
		want: "{\"mode\":\"read\",\"path\":\"a```b\"}", rungs: []Rung{RungExtract}},
	{name: "extra closing brace", in: `{"path":"a","mode":"read"}}`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract}},

	// 3. repair
	{name: "trailing commas", in: `{"path":"a","mode":"read","tags":["x","y",],}`,
		want: `{"mode":"read","path":"a","tags":["x","y"]}`, rungs: []Rung{RungRepair}},
	{name: "fence and trailing comma", in: "```json\n{\"path\":\"a\",\"mode\":\"read\",}\n```",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract, RungRepair}},
	{name: "single quotes", in: `{'path': 'a', 'mode': 'read'}`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungRepair}},
	{name: "comments", in: "{\"path\": \"a\", // the file\n \"mode\": /* how */ \"read\"}",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungRepair}},
	{name: "python constants", in: `{"path":"a","mode":"read","options":{"recursive":True}}`,
		want: `{"mode":"read","options":{"recursive":true},"path":"a"}`, rungs: []Rung{RungRepair}},
	{name: "unescaped quotes", in: `{"path":"say "hi".txt","mode":"read"}`,
		want: `{"mode":"read","path":"say \"hi\".txt"}`, rungs: []Rung{RungRepair}},
	{name: "raw newline in a string", in: "{\"path\":\"a\nb\",\"mode\":\"read\"}",
		want: `{"mode":"read","path":"a\nb"}`, rungs: []Rung{RungRepair}},
	{name: "unquoted keys", in: `{path: "a", mode: "read"}`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungRepair}},

	// 3. repair of truncated text
	{name: "truncated string", in: `{"mode":"read","path":"src/ma`,
		want: `{"mode":"read","path":"src/ma"}`, rungs: []Rung{RungRepair}, truncated: true},
	{name: "truncated array", in: `{"path":"a","mode":"read","tags":["x","y"`,
		want: `{"mode":"read","path":"a","tags":["x","y"]}`, rungs: []Rung{RungRepair}, truncated: true},
	{name: "truncated object", in: `{"path":"a","mode":"read","options":{"recursive":true`,
		want: `{"mode":"read","options":{"recursive":true},"path":"a"}`, rungs: []Rung{RungRepair}, truncated: true},
	{name: "truncated key is dropped, not null", in: `{"path":"a","mode":"read","lim`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungRepair}, truncated: true},
	{name: "truncated after colon is dropped", in: `{"path":"a","mode":"read","limit":`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungRepair}, truncated: true},
	{name: "truncated literal is dropped", in: `{"path":"a","mode":"read","options":{"recursive":tru`,
		want: `{"mode":"read","options":{},"path":"a"}`, rungs: []Rung{RungRepair}, truncated: true},
	{name: "truncated array element literal is dropped", in: `{"path":"a","mode":"read","tags":["x",nu`,
		want: `{"mode":"read","path":"a","tags":["x"]}`, rungs: []Rung{RungRepair}, truncated: true},
	{name: "fence with a missing brace makes no empty key", in: "```json\n{\"path\":\"a\",\"mode\":\"read\",\"options\":{\"recursive\":true}\n```",
		want: `{"mode":"read","options":{"recursive":true},"path":"a"}`, rungs: []Rung{RungExtract, RungRepair}, truncated: true},
	{name: "truncated and destructive is refused", in: `{"path":"a","mode":"write","tags":["x"`, opts: ParseOptions{Destructive: true},
		kind: KindTruncated, msg: "arguments were cut off (truncated); re-issue the call with the complete arguments"},
	{name: "provider truncation and destructive is refused", in: `{"path":"a","mode":"write"}`, opts: ParseOptions{Truncated: true, Destructive: true},
		kind: KindTruncated, msg: "arguments were cut off (truncated); re-issue the call with the complete arguments"},
	{name: "provider truncation, not destructive, is marked", in: `{"path":"a","mode":"write"}`, opts: ParseOptions{Truncated: true},
		want: `{"mode":"write","path":"a"}`, rungs: []Rung{RungAsIs}, truncated: true},
	{name: "truncated and invalid says both", in: `{"path":"a`,
		kind: KindSchema, msg: "arguments were cut off (truncated) and do not match the schema; re-issue the call with complete arguments:\n- /: required property 'mode' is missing"},

	// 4. unwrap
	{name: "double-encoded", in: `"{\"path\":\"a\",\"mode\":\"read\"}"`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungAsIs, RungUnwrap}},
	{name: "double-encoded twice", in: `"\"{\\\"path\\\":\\\"a\\\",\\\"mode\\\":\\\"read\\\"}\""`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungAsIs, RungUnwrap}},
	{name: "stringified object in an object field", in: `{"path":"a","mode":"read","options":"{\"recursive\":true}"}`,
		want: `{"mode":"read","options":{"recursive":true},"path":"a"}`, rungs: []Rung{RungAsIs, RungUnwrap}},
	{name: "stringified array in an array field", in: `{"path":"a","mode":"read","tags":"[\"x\",\"y\"]"}`,
		want: `{"mode":"read","path":"a","tags":["x","y"]}`, rungs: []Rung{RungAsIs, RungUnwrap}},
	{name: "JSON text in a string field stays a string", in: `{"path":"{\"x\":1}","mode":"read"}`,
		want: `{"mode":"read","path":"{\"x\":1}"}`, rungs: []Rung{RungAsIs}},
	{name: "fenced double-encoded", in: "```json\n\"{\\\"path\\\":\\\"a\\\",\\\"mode\\\":\\\"read\\\"}\"\n```",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungRepair, RungUnwrap}},

	// 5. strict nulls
	{name: "strict nulls stripped", in: `{"path":"a","mode":"read","limit":null,"tags":null,"options":{"recursive":null,"depth":3}}`, opts: ParseOptions{Strict: true},
		want: `{"mode":"read","options":{"depth":3},"path":"a"}`, rungs: []Rung{RungAsIs, RungStripNulls}},
	{name: "strict without nulls records no strip", in: `{"path":"a","mode":"read"}`, opts: ParseOptions{Strict: true},
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungAsIs}},
	{name: "strict null at a required key is kept and refused", in: `{"path":null,"mode":"read"}`, opts: ParseOptions{Strict: true},
		kind: KindSchema, msg: "arguments do not match the schema:\n- /path: value is null but should be string"},
	{name: "null at an optional key without strict is refused", in: `{"path":"a","mode":"read","limit":null}`,
		kind: KindSchema, msg: "arguments do not match the schema:\n- /limit: value is null but should be integer"},

	// refusals
	{name: "concatenated objects", in: `{"path":"a","mode":"read"}{"path":"b","mode":"read"}`,
		kind: KindMultiple, msg: "arguments hold two JSON objects; send exactly one object"},
	{name: "newline-delimited objects", in: "{\"path\":\"a\",\"mode\":\"read\"}\n{\"path\":\"b\",\"mode\":\"read\"}\n{\"path\":\"c\",\"mode\":\"read\"}",
		kind: KindMultiple, msg: "arguments hold 3 JSON objects; send exactly one object"},
	{name: "empty", in: "",
		kind: KindEmpty, msg: "arguments are empty; this tool requires: path, mode"},
	{name: "blank", in: " \n\t ",
		kind: KindEmpty, msg: "arguments are empty; this tool requires: path, mode"},
	{name: "null", in: "null",
		kind: KindEmpty, msg: "arguments are empty; this tool requires: path, mode"},
	{name: "empty, nothing required", schema: noArgsSchema, in: "",
		want: `{}`, rungs: []Rung{RungEmpty}},
	{name: "null, nothing required", schema: noArgsSchema, in: "null",
		want: `{}`, rungs: []Rung{RungEmpty}},
	{name: "empty object, nothing required", schema: noArgsSchema, in: "{}",
		want: `{}`, rungs: []Rung{RungAsIs}},
	{name: "array at the root", in: `[{"path":"a","mode":"read"}]`,
		kind: KindNotObject, msg: "arguments must be a JSON object, got an array"},
	{name: "number at the root", in: `42`,
		kind: KindNotObject, msg: "arguments must be a JSON object, got a number"},
	{name: "boolean at the root", in: `true`,
		kind: KindNotObject, msg: "arguments must be a JSON object, got a boolean"},
	{name: "prose without an object", in: `I cannot do that.`,
		kind: KindNotObject, msg: `arguments must be a JSON object such as {"path": …}, got text that is not JSON; this tool requires: path, mode`},
	{name: "a JSON string", in: `"read a"`,
		kind: KindNotObject, msg: `arguments must be a JSON object such as {"path": …}, got a string; this tool requires: path, mode`},
	{name: "unrepairable", in: "}{",
		kind: KindSyntax, msg: notJSON + "invalid character '}' looking for beginning of value (after byte 1)"},
	{name: "schema violations list leaf paths", in: `{"path":"","mode":"delete","limit":0,"tags":["x",2],"options":{"recursive":"yes","deep":1},"extra":true}`,
		kind: KindSchema, msg: "arguments do not match the schema:" +
			"\n- /extra: property is not allowed (not declared in the schema)" +
			"\n- /limit: 0 should be at least 1" +
			"\n- /mode: value delete should be one of the allowed values: read, write" +
			"\n- /options/deep: property is not allowed (not declared in the schema)" +
			"\n- /options/recursive: value is string but should be boolean" +
			"\n- /path: value should be at least 1 characters" +
			"\n- /tags/1: value is integer but should be string"},
	{name: "missing required and a bad value", in: `{"mode":"append"}`,
		kind: KindSchema, msg: "arguments do not match the schema:" +
			"\n- /: required property 'path' is missing" +
			"\n- /mode: value append should be one of the allowed values: read, write"},
	{name: "a schema refusal keeps the value it refused", in: "```json\n{'path': 'a', 'mode': 'delete',}\n```",
		kind: KindSchema, msg: "arguments do not match the schema:\n- /mode: value delete should be one of the allowed values: read, write",
		value: `{"mode":"delete","path":"a"}`},

	// Issue 9, point 6: a stricter ladder. An escape JSON lacks keeps its
	// backslash, or is refused when another language reads it as a
	// character; jsonrepair would drop the backslash.
	{name: "invalid escape keeps its backslash", in: `{"path":"^\d{3}","mode":"read"}`,
		want: `{"mode":"read","path":"^\\d{3}"}`, rungs: []Rung{RungRepair, RungKeepBackslash}},
	{name: "windows path keeps its backslashes", in: `{"path":"C:\Users\me\xampp","mode":"read"}`,
		want: `{"mode":"read","path":"C:\\Users\\me\\xampp"}`, rungs: []Rung{RungRepair, RungKeepBackslash}},
	{name: "invalid escapes kept through other repairs", in: `{'path': '^\d+\.txt$', mode: 'read',}`,
		want: `{"mode":"read","path":"^\\d+\\.txt$"}`, rungs: []Rung{RungRepair, RungKeepBackslash}},
	{name: "valid escapes untouched by other repairs", in: `{"path":"tab\there \u00e9 \"q\" \\d","mode":"read",}`,
		want: `{"mode":"read","path":"tab\there é \"q\" \\d"}`, rungs: []Rung{RungRepair}},
	{name: "escaped path not doubled by another repair", in: `{"path":"/usr/local/bin\\tool","mode":"read",}`,
		want: `{"mode":"read","path":"/usr/local/bin\\tool"}`, rungs: []Rung{RungRepair}},
	{name: "array string ending in a comma keeps it", in: `{"path":"a","mode":"read","tags":["x,","y",]}`,
		want: `{"mode":"read","path":"a","tags":["x,","y"]}`, rungs: []Rung{RungRepair}},
	{name: "escaped quote in a single-quoted string", in: `{'path': 'it\'s', 'mode': 'read'}`,
		want: `{"mode":"read","path":"it's"}`, rungs: []Rung{RungRepair}},
	{name: "hex escape is refused", in: `{"path":"a\x41","mode":"read"}`,
		kind: KindSyntax, msg: notJSON + `the escape \x41 in a string (at byte 10) is not a JSON escape, and could mean a character or a backslash; write the character itself, or \\ for a backslash`,
		errRungs: []Rung{}},
	{name: "octal escape is refused", in: `{"path":"\101","mode":"read"}`,
		kind: KindSyntax, msg: notJSON + `the escape \101 in a string (at byte 9) is not a JSON escape, and could mean a character or a backslash; write the character itself, or \\ for a backslash`},
	{name: "escaped apostrophe in a double-quoted string is refused", in: `{"path":"it\'s","mode":"read"}`,
		kind: KindSyntax, msg: notJSON + `the escape \' in a string (at byte 11) is not a JSON escape, and could mean a character or a backslash; write the character itself, or \\ for a backslash`},
	{name: "escaped once more than JSON", in: `{\"path\":\"^\\d{3}\",\"mode\":\"read\"}`,
		want: `{"mode":"read","path":"^\\d{3}"}`, rungs: []Rung{RungRepair, RungKeepBackslash, RungUnwrap}},
	{name: "escape cut off at the end is dropped", in: `{"mode":"read","path":"a\u00`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungRepair}, truncated: true},

	// Numbers written as another language would are the numbers they are;
	// NaN, Infinity and a maybe-octal leading zero are refused, never
	// turned into strings.
	{name: "hex number", in: `{"path":"a","mode":"read","limit":0x10}`,
		want: `{"limit":16,"mode":"read","path":"a"}`, rungs: []Rung{RungRepair}},
	{name: "leading zeros", in: `{"path":"a","mode":"read","limit":007}`,
		want: `{"limit":7,"mode":"read","path":"a"}`, rungs: []Rung{RungRepair}},
	{name: "leading plus", in: `{"path":"a","mode":"read","limit":+5}`,
		want: `{"limit":5,"mode":"read","path":"a"}`, rungs: []Rung{RungRepair}},
	{name: "binary, octal and signed hex", schema: numberSchema, in: `{"n": [0b101, 0o17, -0x1F]}`,
		kind: KindSchema, msg: "arguments do not match the schema:\n- /n: value is array but should be number",
		value: `{"n":[5,15,-31]}`},
	{name: "leading dot", schema: numberSchema, in: `{"n": -.5e1}`,
		want: `{"n":-0.5e1}`, rungs: []Rung{RungRepair}},
	{name: "big hex stays exact", schema: numberSchema, in: `{"n": 0xFFFFFFFFFFFFFFFFFF}`,
		want: `{"n":4722366482869645213695}`, rungs: []Rung{RungRepair}},
	{name: "NaN is refused", in: `{"path":"a","mode":"read","limit":NaN}`,
		kind: KindSyntax, msg: notJSON + "NaN (at byte 34) is not a number JSON can hold; send a finite number instead",
		errRungs: []Rung{}},
	{name: "negative Infinity is refused", schema: numberSchema, in: `{"n": -Infinity}`,
		kind: KindSyntax, msg: notJSON + "-Infinity (at byte 6) is not a number JSON can hold; send a finite number instead"},
	{name: "maybe-octal leading zero is refused", in: `{"path":"a","mode":"read","limit":010}`,
		kind: KindSyntax, msg: notJSON + "010 (at byte 34) has a leading zero, so it could be octal (8) or decimal (10); write it without leading zeros"},
	{name: "number then unquoted text stays text", in: `{"path":"a","mode":"read","limit":0x10 apples}`,
		kind: KindSchema, msg: "arguments do not match the schema:\n- /limit: value is string but should be integer",
		value: `{"limit":"0x10 apples","mode":"read","path":"a"}`},

	// A closer that does not match its opener is repaired, not taken for
	// truncation: the text did not end early.
	{name: "mismatched closer is not truncation", in: `{"path":"a","mode":"read","tags":["x","y"}`,
		want: `{"mode":"read","path":"a","tags":["x","y"]}`, rungs: []Rung{RungRepair}},
	{name: "mismatched closer runs a destructive tool", in: `{"path":"a","mode":"write","tags":["x"}`, opts: ParseOptions{Destructive: true},
		want: `{"mode":"write","path":"a","tags":["x"]}`, rungs: []Rung{RungRepair}},
	{name: "closer typed for the wrong kind", in: `{"path":"a","mode":"read","options":{"recursive":true]}`,
		want: `{"mode":"read","options":{"recursive":true},"path":"a"}`, rungs: []Rung{RungRepair}},
	{name: "mismatched closer in a fence", in: "```json\n{\"path\":\"a\",\"mode\":\"read\",\"tags\":[\"x\"}\n```",
		want: `{"mode":"read","path":"a","tags":["x"]}`, rungs: []Rung{RungExtract, RungRepair}},
	{name: "mismatched closer then prose is refused, not cut", in: `{"path":"a","mode":"read","tags":["x"} thanks`,
		kind: KindSyntax, msg: notJSON + "invalid character '}' after array element (after byte 38)"},
	{name: "unescaped quotes in code are refused, not split", in: "{\"path\":\"main.go\",\"mode\":\"write\",\"tags\":[\"f(\"x\")\n}\n\"]}",
		kind: KindNotObject, msg: "arguments must be a JSON object, got an array"},
	{name: "mismatched closer of an array at the root", in: `["a","b"}`,
		kind: KindNotObject, msg: "arguments must be a JSON object, got an array", errRungs: []Rung{RungRepair}},
	{name: "an unclosed array inside a closed object is truncated", in: `{"path":"a","mode":"write","tags":["x"`, opts: ParseOptions{Destructive: true},
		kind: KindTruncated, msg: "arguments were cut off (truncated); re-issue the call with the complete arguments",
		errRungs: []Rung{}, truncated: true},

	// Objects with bare or curly-quoted keys are found wherever models put
	// them.
	{name: "bare keys after prose", in: `Sure: {path: "a", mode: "read"}`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract, RungRepair}},
	{name: "curly-quoted keys in prose", in: `Here: {“path”: “a”, “mode”: “read”} done.`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract, RungRepair}},
	{name: "bare keys in a fence", in: "```json\n{path: \"a\", mode: \"read\"}\n```",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract, RungRepair}},
	{name: "bare keys in an XML-ish wrapper", in: `<args>{path: "a", mode: "read"}</args>`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract, RungRepair}},
	{name: "tool_call wrapper", in: "<tool_call>\n{\"path\": \"a\", \"mode\": \"read\"}\n</tool_call>",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract}},
	{name: "wrapper around an unclosed object", in: `<args>{"path": "a", "mode": "read"</args>`,
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract, RungRepair}, truncated: true},
	{name: "byte-order mark", in: "\uFEFF{\"path\":\"a\",\"mode\":\"read\"}",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract}},
	{name: "bare keys after a byte-order mark", in: "\uFEFF{path: \"a\", mode: \"read\"}",
		want: `{"mode":"read","path":"a"}`, rungs: []Rung{RungExtract, RungRepair}},

	// Size and work are bounded before jsonrepair runs.
	{name: "valid JSON of any size passes as is", in: `{"path":"` + strings.Repeat("a", 2*MaxRepairBytes) + `","mode":"read"}`,
		want: `{"mode":"read","path":"` + strings.Repeat("a", 2*MaxRepairBytes) + `"}`, rungs: []Rung{RungAsIs}},
	{name: "invalid JSON over the size cap is refused", in: `{"path":"a",` + strings.Repeat(" ", MaxRepairBytes) + `}`,
		kind: KindTooLarge, msg: "arguments are not valid JSON and too long to repair: 65549 bytes, over the limit of 65536; send them as valid JSON",
		errRungs: []Rung{}},
	{name: "repair over the work budget is refused", in: "{" + strings.Repeat("a:1,", 16000) + "}",
		kind: KindTooCostly, msg: notJSON + "invalid character 'a' looking for beginning of object key string (after byte 2), and repairing them would take more work than the ladder allows; send them as valid JSON"},
	{name: "nesting deeper than MaxDepth is refused before anything else", in: strings.Repeat("[", MaxDepth+1),
		kind: KindTooDeep, msg: "arguments nested deeper than 64 levels: objects and arrays may nest 64 deep at most; send a flatter value",
		errRungs: []Rung{}},
}

func TestParseLadder(t *testing.T) {
	t.Parallel()
	if len(ladderCases) < 30 {
		t.Fatalf("only %d ladder cases", len(ladderCases))
	}
	for _, tc := range ladderCases {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.schema
			if raw == nil {
				raw = fileSchema
			}
			s := MustFromJSON(raw)
			got, err := s.Parse(tc.in, tc.opts)
			if tc.kind != "" {
				var ae *ArgumentError
				if !errors.As(err, &ae) {
					t.Fatalf("Parse = %s, %v; want %s error", got.JSON, err, tc.kind)
				}
				if ae.Kind != tc.kind || ae.Error() != tc.msg {
					t.Fatalf("error = %s %q\nwant    %s %q", ae.Kind, ae.Error(), tc.kind, tc.msg)
				}
				if tc.errRungs != nil && (!slices.Equal(ae.Rungs, tc.errRungs) || ae.Truncated != tc.truncated) {
					t.Fatalf("error rungs = %v truncated=%v, want %v truncated=%v", ae.Rungs, ae.Truncated, tc.errRungs, tc.truncated)
				}
				if tc.value != "" && string(ae.Value) != tc.value {
					t.Fatalf("error value = %s, want %s", ae.Value, tc.value)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if string(got.JSON) != tc.want || !slices.Equal(got.Rungs, tc.rungs) || got.Truncated != tc.truncated {
				t.Fatalf("Parse = %s %v truncated=%v\nwant    %s %v truncated=%v", got.JSON, got.Rungs, got.Truncated, tc.want, tc.rungs, tc.truncated)
			}
			if err := s.Validate(got.JSON); err != nil {
				t.Fatalf("returned arguments do not validate: %v", err)
			}
		})
	}
}

func TestParseErrorDetails(t *testing.T) {
	t.Parallel()
	s := MustFromJSON(fileSchema)

	_, err := s.Parse(`{"path":"a","mode":"write","tags":["x"`, ParseOptions{Destructive: true})
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated destructive call: errors.Is(err, ErrTruncated) = false for %v", err)
	}
	var ae *ArgumentError
	if !errors.As(err, &ae) || !ae.Truncated {
		t.Fatalf("truncated destructive call: want ArgumentError with Truncated, got %#v", err)
	}

	_, err = s.Parse("```json\n{\"path\":\"\",\"mode\":\"read\",}\n```", ParseOptions{})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("schema failure does not unwrap to *ValidationError: %v", err)
	}
	if !errors.As(err, &ae) || !slices.Equal(ae.Rungs, []Rung{RungExtract, RungRepair}) {
		t.Fatalf("rungs before the failure = %v, want [extract repair]", ae.Rungs)
	}
	if want := []Leaf{{"/path", "value should be at least 1 characters"}}; !slices.Equal(ae.Leaves, want) {
		t.Fatalf("leaves = %v, want %v", ae.Leaves, want)
	}
	if want := `{"mode":"read","path":""}`; string(ae.Value) != want {
		t.Fatalf("value that failed validation = %s, want %s", ae.Value, want)
	}

	_, err = s.Parse(`{"path":"a","mode":"write","tags":["x"`, ParseOptions{Destructive: true})
	if !errors.As(err, &ae) || ae.Value != nil {
		t.Fatalf("a refusal before validation has a value: %s", ae.Value)
	}
}

// TestParseEscapes is the escape policy, one escape at a time, inside a
// string that also needs another repair (a trailing comma). want is the
// string as decoded; empty means refused as ambiguous.
func TestParseEscapes(t *testing.T) {
	t.Parallel()
	s := MustFromJSON([]byte(`{"type":"object","properties":{"p":{"type":"string"}}}`))
	for _, tc := range []struct {
		in, want string
		kept     bool
	}{
		// JSON's own escapes mean what JSON says.
		{in: `"a\nb\t\"\\\/\b\f\r"`, want: "a\nb\t\"\\/\b\f\r"},
		{in: `"\u00e9\ud83d\ude00"`, want: "é😀"},
		// Escapes no common string syntax reads as another character: the
		// backslash is kept.
		{in: `"\d\s\w\.\(\)\[\]\{\}\$\^\|\?\*\+\-"`, want: `\d\s\w\.\(\)\[\]\{\}\$\^\|\?\*\+\-`, kept: true},
		{in: `"C:\Users\me\xampp\8\9\e\ "`, want: `C:\Users\me\xampp\8\9\e\ `, kept: true},
		{in: `"\users \U123 \Nope \x4g"`, want: `\users \U123 \Nope \x4g`, kept: true},
		{in: `"end\\"`, want: `end\`},
		// A string's own quote, escaped.
		{in: `'it\'s'`, want: "it's"},
		{in: `‘it\’s’`, want: "it’s"},
		{in: `“say \”hi\””`, want: "say ”hi”"},
		{in: `'say \"hi\"'`, want: `say "hi"`},
		// Escapes some syntax reads as another character: refused.
		{in: `"\x41"`}, {in: `"\0"`}, {in: `"\101"`}, {in: `"\7"`}, {in: `"\a"`}, {in: `"\v"`},
		{in: `"\u{41}"`}, {in: `"\u12"`}, {in: `"\U0001F600"`}, {in: `"\N{DASH}"`},
		{in: `"it\'s"`}, {in: `“it\'s”`}, {in: "\"line\\\nbreak\""},
	} {
		got, err := s.Parse(`{"p": `+tc.in+`,}`, ParseOptions{})
		if tc.want == "" {
			var ae *ArgumentError
			if !errors.As(err, &ae) || ae.Kind != KindSyntax || !strings.Contains(ae.Msg, "is not a JSON escape") {
				t.Errorf("%s: Parse = %s, %v; want an ambiguous-escape refusal", tc.in, got.JSON, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		want, _ := canonical(map[string]any{"p": tc.want})
		if string(got.JSON) != string(want) || slices.Contains(got.Rungs, RungKeepBackslash) != tc.kept {
			t.Errorf("%s: Parse = %s %v, want %s (kept backslash: %v)", tc.in, got.JSON, got.Rungs, want, tc.kept)
		}
	}
}

// TestFixNumber is every number form the repair rung reads, bare as a
// model wrote it: the JSON number it becomes ("" when it is left alone) or
// the start of why it is refused.
func TestFixNumber(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, repl, problem string }{
		{in: "12"}, {in: "-0"}, {in: "1.5e3"}, {in: "5."}, {in: "1_000"}, {in: "0x"}, {in: "0x1g"}, {in: "0b102"},
		{in: "12px"}, {in: "2024-01-05"}, {in: "..."}, {in: "-"}, {in: "+"}, {in: "1e"},
		{in: "0x10", repl: "16"}, {in: "0X1f", repl: "31"}, {in: "-0x10", repl: "-16"}, {in: "+0x10", repl: "16"},
		{in: "0o17", repl: "15"}, {in: "0b101", repl: "5"},
		{in: "0xFFFFFFFFFFFFFFFFFFFF", repl: "1208925819614629174706175"},
		{in: "007", repl: "7"}, {in: "-007", repl: "-7"}, {in: "00", repl: "0"}, {in: "08", repl: "8"}, {in: "09.5", repl: "9.5"},
		{in: "010.5", repl: "10.5"}, {in: "007e2", repl: "7e2"}, {in: "00.5", repl: "0.5"},
		{in: "+5", repl: "5"}, {in: "+0", repl: "0"}, {in: "+5.", repl: "5.0"}, {in: "+1e5", repl: "1e5"},
		{in: ".5", repl: "0.5"}, {in: "-.5", repl: "-0.5"}, {in: "+.5e-3", repl: "0.5e-3"},
		{in: "NaN", problem: "is not a number JSON can hold"}, {in: "-nan", problem: "is not a number JSON can hold"},
		{in: "Infinity", problem: "is not a number JSON can hold"}, {in: "+inf", problem: "is not a number JSON can hold"},
		{in: "010", problem: "has a leading zero, so it could be octal (8) or decimal (10)"},
		{in: "-0777", problem: "has a leading zero, so it could be octal (511) or decimal (777)"},
		{in: "0777777777777777777777777", problem: "has a leading zero, so it could be octal (4722366482869645213695) or decimal (777777777777777777777777)"},
	} {
		repl, problem := fixNumber(tc.in)
		if repl != tc.repl || !strings.HasPrefix(problem, tc.problem) || (tc.problem == "") != (problem == "") {
			t.Errorf("fixNumber(%q) = %q, %q; want %q, %q...", tc.in, repl, problem, tc.repl, tc.problem)
		}
	}
}

// TestParseDoesNotRepairWhatIsValid checks that the ladder stops at the
// first rung that works: valid input is never handed to jsonrepair, whose
// output for it could differ (it rewrites some escapes and numbers). A
// number keeps its spelling, except an integer where the schema says
// integer (TestIntegralFloatArguments), which is no repair either.
func TestParseDoesNotRepairWhatIsValid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ schema, in, want string }{
		{string(fileSchema), `{"path":"tab\there \u00e9","mode":"read","limit":1.0e1}`, `{"limit":10,"mode":"read","path":"tab\there é"}`},
		{string(numberSchema), `{"n":1.0e1}`, `{"n":1.0e1}`},
	} {
		got, err := MustFromJSON([]byte(tc.schema)).Parse(tc.in, ParseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(got.JSON) != tc.want || !slices.Equal(got.Rungs, []Rung{RungAsIs}) {
			t.Fatalf("Parse(%s) = %s %v, want %s [as_is]", tc.in, got.JSON, got.Rungs, tc.want)
		}
	}
}
