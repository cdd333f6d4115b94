package schema

import (
	"encoding/json"
	"errors"
	"math/big"
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
	// Integers written as floats (TestIntegralFloatArguments).
	f.Add(`{"path":"a","mode":"read","limit":2.0,"options":{"depth":1e1}}`, uint8(0), uint8(0))
	f.Add(`{"path":"a","mode":"read","limit":1e400}`, uint8(0), uint8(1))
	f.Add(`{"mode":"fast","target":3.0,"items":[{"id":1.0E2}]}`, uint8(2), uint8(1))
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

// FuzzPlainInteger: plainInteger writes a number as a plain integer only when
// it is that integer exactly, and does so for every integer of at most
// maxPlainDigits digits written with a fraction or an exponent of at most
// four digits.
func FuzzPlainInteger(f *testing.F) {
	for _, s := range []string{"2.0", "2e0", "1.0E2", "-3.000", "250e-1", "-0.0", "0e99999", "2.5", "1e-400", "1e400",
		"1e19", "1e20", "123.4500e2", "9.9999999999999999999e19", "7", "-1E+0005"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := decodeArgs([]byte(s))
		if err != nil {
			return
		}
		num, ok := v.(json.Number)
		if !ok || string(num) != s {
			return
		}
		got, ok := plainInteger(s)
		_, exp, _ := strings.Cut(strings.ToLower(s), "e")
		if len(strings.TrimLeft(exp, "+-")) > 4 {
			return // not read by big.Rat in reasonable time; plainInteger only says 0 or no
		}
		want, _ := new(big.Rat).SetString(s)
		if ok {
			if digits := strings.TrimPrefix(got, "-"); !isIntegerLiteral(got) || (len(digits) > 1 && digits[0] == '0') || got == "-0" {
				t.Fatalf("plainInteger(%s) = %s, not a plain integer", s, got)
			}
			r, _ := new(big.Rat).SetString(got)
			if r.Cmp(want) != 0 {
				t.Fatalf("plainInteger(%s) = %s, another number", s, got)
			}
			return
		}
		loose := strings.ContainsAny(s, ".eE")
		if loose && want.IsInt() && len(strings.TrimPrefix(want.Num().String(), "-")) <= maxPlainDigits {
			t.Fatalf("plainInteger(%s) left %s as written", s, want.Num())
		}
	})
}
