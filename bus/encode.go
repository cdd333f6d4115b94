package bus

import (
	"encoding/json"
	"time"
	"unicode/utf8"
)

// AppendJSON appends e's JSON encoding to b: the bytes json.Marshal produces, without its
// reflection. A host publishes two or more events per call, which nobody may be watching;
// they must cost little to build. An event with Data goes through json.Marshal, which
// also checks and compacts the raw data.
func (e *Event) AppendJSON(b []byte) ([]byte, error) {
	if len(e.Data) > 0 || e.Time.Year() < 0 || e.Time.Year() > 9999 {
		data, err := json.Marshal(e)
		return append(b, data...), err
	}
	b = append(b, `{"turn_id":`...)
	b = appendJSONString(b, e.Turn)
	b = append(b, `,"call_id":`...)
	b = appendJSONString(b, e.Call)
	b = append(b, `,"tool":`...)
	b = appendJSONString(b, e.Tool)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, string(e.Kind))
	if e.Label != "" {
		b = append(b, `,"label":`...)
		b = appendJSONString(b, e.Label)
	}
	b = append(b, `,"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...), nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as encoding/json writes a string: HTML-safe (<, > and &
// escaped), invalid UTF-8 replaced by U+FFFD, U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
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
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
