package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzParse drives the ladder with arbitrary text. Whatever it returns
// without error must validate against the schema; a destructive call must
// never come back marked truncated; every failure is an *ArgumentError; no
// placeholder of the repair rung is left in a value.
func FuzzParse(f *testing.F) {
	for _, tc := range ladderCases {
		var flags uint8
		if tc.opts.Strict {
			flags |= 1
		}
		if tc.opts.Truncated {
			flags |= 2
		}
		if tc.opts.Destructive {
			flags |= 4
		}
		which := uint8(0)
		if tc.schema != nil {
			which = 1
		}
		f.Add(tc.in, which, flags)
	}
	schemas := []*Schema{MustFromJSON(fileSchema), MustFromJSON(noArgsSchema), MustFromJSON(richSchema)}
	f.Fuzz(func(t *testing.T, in string, which, flags uint8) {
		s := schemas[int(which)%len(schemas)]
		opts := ParseOptions{Strict: flags&1 != 0, Truncated: flags&2 != 0, Destructive: flags&4 != 0}
		args, err := s.Parse(in, opts)
		if err != nil {
			var ae *ArgumentError
			if !errors.As(err, &ae) || ae.Error() == "" {
				t.Fatalf("Parse(%q) error %T %v is not a described *ArgumentError", in, err, err)
			}
			return
		}
		if err := s.Validate(args.JSON); err != nil {
			t.Fatalf("Parse(%q) = %s, which does not validate: %v", in, args.JSON, err)
		}
		if args.JSON[0] != '{' {
			t.Fatalf("Parse(%q) = %s, not an object", in, args.JSON)
		}
		if opts.Destructive && args.Truncated {
			t.Fatalf("Parse(%q) accepted a truncated call to a destructive tool", in)
		}
		if len(args.Rungs) == 0 {
			t.Fatalf("Parse(%q) recorded no rung", in)
		}
		if strings.Contains(string(args.JSON), marker) && !strings.Contains(in, marker) {
			t.Fatalf("Parse(%q) = %s, which holds a placeholder", in, args.JSON)
		}
	})
}

// FuzzRepairKeepsStrings checks what the ladder must never do: change a
// value. Any string, written as models write one (JSON-encoded, but with a
// single backslash where JSON lacks the escape, as in ^\d or C:\Users),
// inside an object that needs repair, comes back exactly as it was.
func FuzzRepairKeepsStrings(f *testing.F) {
	for _, s := range []string{`^\d{3}$`, `C:\Users\me\x4g`, "it's", `say "hi", then 'bye'`, "é😀\u2028",
		`\x41 \101 \u{41}`, "", `/usr/local/bin\tool`, "x,", "a\uE0001", "“curly”", "tab\tend\\"} {
		for style := range uint8(4) {
			f.Add(s, style)
		}
	}
	s := MustFromJSON([]byte(`{"type":"object","properties":{"p":{"type":"string"},"q":{"type":"integer"}}}`))
	f.Fuzz(func(t *testing.T, str string, style uint8) {
		lit := appendString(nil, str)
		var want string
		if err := json.Unmarshal(lit, &want); err != nil { // invalid UTF-8 became U+FFFD
			t.Fatal(err)
		}
		model := underEscape(string(lit))
		var in string
		switch style % 4 {
		case 0: // a trailing comma
			in = `{"p": ` + model + `,}`
		case 1: // bare keys and a number with a leading zero
			in = `{p: ` + model + `, q: 007}`
		case 2: // prose, a fence, and a missing brace
			in = "Sure:\n```json\n{\"p\": " + model + "\n```"
		case 3: // cut off after the string
			in = `{"q": 1, "p": ` + model
		}
		args, err := s.Parse(in, ParseOptions{})
		if err != nil {
			t.Fatalf("Parse(%q) refused %q: %v", in, str, err)
		}
		var got struct{ P *string }
		if err := json.Unmarshal(args.JSON, &got); err != nil || got.P == nil || *got.P != want {
			t.Fatalf("Parse(%q) = %s, want p = %q", in, args.JSON, want)
		}
	})
}

// underEscape writes a JSON string literal as a model often does: an
// escaped backslash before a character that no common syntax escapes
// (\\d) becomes a single one (\d).
func underEscape(lit string) string {
	const plain = "cdeghijklmopqswyzABCDEFGHIJKLMOPQRSTVWXYZ89.()[]{}$^|?*+-#%&,:;<=>@_~! "
	var b strings.Builder
	for i := 0; i < len(lit); i++ {
		if lit[i] == '\\' && i+2 < len(lit) && lit[i+1] == '\\' && strings.IndexByte(plain, lit[i+2]) >= 0 {
			b.WriteByte('\\')
			i++
			continue
		}
		b.WriteByte(lit[i])
		if lit[i] == '\\' && i+1 < len(lit) {
			b.WriteByte(lit[i+1])
			i++
		}
	}
	return b.String()
}
