// Package jsonfast reads and writes the JSON of the hot path (tool arguments, replies,
// events) by hand, giving exactly what encoding/json gives or declining. Every reader
// here reports false on input it does not handle in full (invalid JSON among it), so
// the caller falls back to encoding/json, whose value and error stand; every writer
// writes the bytes encoding/json writes. The fuzz targets check both against
// encoding/json.
package jsonfast

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner reads JSON from B, at I.
type Scanner struct {
	B []byte
	I int
}

// WS skips white space.
func (s *Scanner) WS() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Next skips white space and reports whether the next byte is c, consuming it if so.
func (s *Scanner) Next(c byte) bool {
	s.WS()
	if s.I < len(s.B) && s.B[s.I] == c {
		s.I++
		return true
	}
	return false
}

// End skips white space and reports whether the input is all read.
func (s *Scanner) End() bool {
	s.WS()
	return s.I == len(s.B)
}

// Key reads an object key and the colon after it. Its bytes may be the input's: they
// are valid until the input changes.
func (s *Scanner) Key() ([]byte, bool) {
	k, ok := s.Raw()
	if !ok || !s.Next(':') {
		return nil, false
	}
	return k, true
}

// Raw reads a string like Str, returning the input's own bytes when it has no escapes.
func (s *Scanner) Raw() ([]byte, bool) {
	s.WS()
	if s.I >= len(s.B) || s.B[s.I] != '"' {
		return nil, false
	}
	start := s.I + 1
	for j := start; j < len(s.B); j++ {
		switch c := s.B[j]; {
		case c == '"':
			if !utf8.Valid(s.B[start:j]) {
				return nil, false
			}
			s.I = j + 1
			return s.B[start:j], true
		case c == '\\':
			str, ok := s.Str()
			return []byte(str), ok
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// Str reads a string. It declines strings encoding/json would change (invalid UTF-8,
// surrogate escapes) or refuse.
func (s *Scanner) Str() (string, bool) {
	s.WS()
	if s.I >= len(s.B) || s.B[s.I] != '"' {
		return "", false
	}
	s.I++
	start := s.I
	for s.I < len(s.B) {
		c := s.B[s.I]
		switch {
		case c == '"':
			str := s.B[start:s.I]
			s.I++
			if !utf8.Valid(str) {
				return "", false
			}
			return string(str), true
		case c == '\\':
			return s.escaped(start)
		case c < 0x20:
			return "", false
		}
		s.I++
	}
	return "", false
}

// escaped reads the rest of a string that has escapes, from its first one at s.I.
func (s *Scanner) escaped(start int) (string, bool) {
	out := make([]byte, 0, s.I-start+16)
	out = append(out, s.B[start:s.I]...)
	for s.I < len(s.B) {
		c := s.B[s.I]
		switch {
		case c == '"':
			s.I++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			s.I++
			continue
		}
		if s.I+1 >= len(s.B) {
			return "", false
		}
		e := s.B[s.I+1]
		s.I += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if s.I+4 > len(s.B) {
				return "", false
			}
			v, err := strconv.ParseUint(string(s.B[s.I:s.I+4]), 16, 16)
			if err != nil || utf16.IsSurrogate(rune(v)) {
				return "", false
			}
			s.I += 4
			out = utf8.AppendRune(out, rune(v))
		default:
			return "", false
		}
	}
	return "", false
}

// Object reads an object, calling field for each key to read its value; it reports
// false when field does, or on anything but a well-formed object.
func (s *Scanner) Object(field func(key []byte) bool) bool {
	if !s.Next('{') {
		return false
	}
	if s.Next('}') {
		return true
	}
	for {
		k, ok := s.Key()
		if !ok || !field(k) {
			return false
		}
		if s.Next(',') {
			continue
		}
		return s.Next('}')
	}
}

// Array reads an array, calling elem to read each element; it reports false when elem
// does, or on anything but a well-formed array.
func (s *Scanner) Array(elem func() bool) bool {
	if !s.Next('[') {
		return false
	}
	if s.Next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.Next(',') {
			continue
		}
		return s.Next(']')
	}
}

// Literal reads lit if it comes next.
func (s *Scanner) Literal(lit string) bool {
	s.WS()
	if len(s.B)-s.I >= len(lit) && string(s.B[s.I:s.I+len(lit)]) == lit {
		s.I += len(lit)
		return true
	}
	return false
}

// Bool reads true or false.
func (s *Scanner) Bool() (bool, bool) {
	switch {
	case s.Literal("true"):
		return true, true
	case s.Literal("false"):
		return false, true
	}
	return false, false
}

// Int reads a number that is a plain integer (no fraction or exponent) into an int64.
func (s *Scanner) Int() (int64, bool) {
	s.WS()
	start := s.I
	if !s.integerPart() {
		return 0, false
	}
	if s.I < len(s.B) {
		switch s.B[s.I] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(s.B[start:s.I]), 10, 64)
	return n, err == nil
}

// integerPart reads an optional minus and the digits of a JSON number, refusing a
// leading zero before more digits.
func (s *Scanner) integerPart() bool {
	if s.I < len(s.B) && s.B[s.I] == '-' {
		s.I++
	}
	digits := s.I
	for s.I < len(s.B) && s.B[s.I] >= '0' && s.B[s.I] <= '9' {
		s.I++
	}
	return s.I > digits && (s.B[digits] != '0' || s.I-digits == 1)
}

// Number reads any JSON number as its text.
func (s *Scanner) Number() (json.Number, bool) {
	s.WS()
	start := s.I
	if !s.integerPart() {
		return "", false
	}
	if s.I < len(s.B) && s.B[s.I] == '.' {
		s.I++
		if !s.digits() {
			return "", false
		}
	}
	if s.I < len(s.B) && (s.B[s.I] == 'e' || s.B[s.I] == 'E') {
		s.I++
		if s.I < len(s.B) && (s.B[s.I] == '+' || s.B[s.I] == '-') {
			s.I++
		}
		if !s.digits() {
			return "", false
		}
	}
	return json.Number(s.B[start:s.I]), true
}

func (s *Scanner) digits() bool {
	start := s.I
	for s.I < len(s.B) && s.B[s.I] >= '0' && s.B[s.I] <= '9' {
		s.I++
	}
	return s.I > start
}

// Skip reads one value of any kind without keeping it, and reports false where
// DecodeValue would: on anything encoding/json would refuse or read otherwise (invalid
// UTF-8 in strings among it), or deeper than maxDepth. Strings without escapes cost no
// allocation.
func (s *Scanner) Skip() bool { return s.skip(0) }

func (s *Scanner) skip(depth int) bool {
	if depth > maxDepth {
		return false
	}
	s.WS()
	if s.I >= len(s.B) {
		return false
	}
	switch c := s.B[s.I]; {
	case c == '{':
		return s.Object(func([]byte) bool { return s.skip(depth + 1) })
	case c == '[':
		return s.Array(func() bool { return s.skip(depth + 1) })
	case c == '"':
		_, ok := s.Raw()
		return ok
	case c == 't' || c == 'f':
		_, ok := s.Bool()
		return ok
	case c == 'n':
		return s.Literal("null")
	default:
		_, ok := s.Number()
		return ok
	}
}

// maxDepth bounds nesting; deeper documents go to encoding/json, which has its own limit.
const maxDepth = 100

// DecodeValue decodes exactly one JSON value as encoding/json's Decoder with UseNumber
// does into an any: map[string]any, []any, json.Number, string, bool or nil.
func DecodeValue(b []byte) (any, bool) {
	s := Scanner{B: b}
	v, ok := s.value(0)
	if !ok || !s.End() {
		return nil, false
	}
	return v, true
}

func (s *Scanner) value(depth int) (any, bool) {
	if depth > maxDepth {
		return nil, false
	}
	s.WS()
	if s.I >= len(s.B) {
		return nil, false
	}
	switch c := s.B[s.I]; {
	case c == '{':
		m := map[string]any{}
		ok := s.Object(func(k []byte) bool {
			v, ok := s.value(depth + 1)
			m[string(k)] = v
			return ok
		})
		return m, ok
	case c == '[':
		a := []any{}
		ok := s.Array(func() bool {
			v, ok := s.value(depth + 1)
			a = append(a, v)
			return ok
		})
		return a, ok
	case c == '"':
		return s.Str()
	case c == 't' || c == 'f':
		return s.Bool()
	case c == 'n':
		return nil, s.Literal("null")
	default:
		return s.Number()
	}
}

// AppendString appends str as encoding/json writes a string: invalid UTF-8 replaced by
// U+FFFD, U+2028 and U+2029 escaped, and with escapeHTML <, > and & escaped too (as
// json.Marshal does; an Encoder with SetEscapeHTML(false) does not).
func AppendString(b []byte, str string, escapeHTML bool) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(str); {
		if c := str[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!escapeHTML || (c != '<' && c != '>' && c != '&')) {
				i++
				continue
			}
			b = append(b, str[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(str[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, str[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, str[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, str[start:]...)
	return append(b, '"')
}

// AppendValue appends v (as DecodeValue makes them) compactly, keys sorted, without
// escaping HTML: what a json.Encoder with SetEscapeHTML(false) writes, less its newline.
// It declines other types and numbers that are not valid JSON.
func AppendValue(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		return strconv.AppendBool(b, x), true
	case string:
		return AppendString(b, x, false), true
	case json.Number:
		s := Scanner{B: []byte(x)}
		if _, ok := s.Number(); !ok || s.I != len(x) {
			return b, false
		}
		return append(b, x...), true
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = AppendValue(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendString(b, k, false)
			b = append(b, ':')
			var ok bool
			if b, ok = AppendValue(b, x[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}
