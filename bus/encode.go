package bus

import (
	"encoding/json"
	"strconv"
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

// AppendJSON appends r's JSON encoding to b: the bytes json.Marshal produces. A host
// encodes one reply per call; the common ones (text content, no details, events or
// abort) are written without reflection, the others go through json.Marshal.
func (r *ToolReply) AppendJSON(b []byte) ([]byte, error) {
	if len(r.Details) > 0 || len(r.Events) > 0 || r.Completion != nil || r.Abort != nil {
		data, err := json.Marshal(r)
		return append(b, data...), err
	}
	for _, p := range r.Content {
		if len(p.Data) > 0 {
			data, err := json.Marshal(r)
			return append(b, data...), err
		}
	}
	b = append(b, `{"call_id":`...)
	b = appendJSONString(b, r.Call)
	b = append(b, `,"tool":`...)
	b = appendJSONString(b, r.Tool)
	b = append(b, `,"outcome":`...)
	b = appendJSONString(b, string(r.Outcome))
	if len(r.Content) > 0 {
		b = append(b, `,"content":[`...)
		for i, p := range r.Content {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":`...)
			b = appendJSONString(b, p.Type)
			if p.Text != "" {
				b = append(b, `,"text":`...)
				b = appendJSONString(b, p.Text)
			}
			if p.MediaType != "" {
				b = append(b, `,"media_type":`...)
				b = appendJSONString(b, p.MediaType)
			}
			if p.URL != "" {
				b = append(b, `,"url":`...)
				b = appendJSONString(b, p.URL)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.Terminate {
		b = append(b, `,"terminate":true`...)
	}
	if r.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, r.Error)
	}
	if r.Label != "" {
		b = append(b, `,"label":`...)
		b = appendJSONString(b, r.Label)
	}
	b = append(b, `,"duration_ns":`...)
	b = strconv.AppendInt(b, int64(r.Duration), 10)
	return append(b, '}'), nil
}
