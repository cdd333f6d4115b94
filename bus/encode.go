package bus

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/internal/jsonfast"
)

// AppendJSON appends e's JSON encoding to b: the bytes json.Marshal produces, without its
// reflection. A host publishes two or more events per call, which nobody may be watching;
// they must cost little to build. An event with Data goes through json.Marshal, which
// also checks and compacts the raw data.
func (e *Event) AppendJSON(b []byte) ([]byte, error) {
	if len(e.Data) > 0 || e.Time.Year() < 0 || e.Time.Year() > 9999 {
		return appendMarshal(b, *e)
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

// appendMarshal appends json.Marshal's encoding of v. It takes a copy, made only on this
// path: given the pointer, json.Marshal would have the receiver of every AppendJSON call
// escape, the event or reply a host builds on its stack for each call moved to the heap
// whether it is encoded or not (two allocations a call).
func appendMarshal(b []byte, v any) ([]byte, error) {
	data, err := json.Marshal(v)
	return append(b, data...), err
}

// appendJSONString appends s as json.Marshal writes a string.
func appendJSONString(b []byte, s string) []byte { return jsonfast.AppendString(b, s, true) }

// AppendJSON appends r's JSON encoding to b: the bytes json.Marshal produces. A host
// encodes one reply per call; the common ones (text content, no details, events or
// abort) are written without reflection, the others go through json.Marshal.
func (r *ToolReply) AppendJSON(b []byte) ([]byte, error) {
	if len(r.Details) > 0 || len(r.Events) > 0 || r.Completion != nil || r.Abort != nil {
		return appendMarshal(b, *r)
	}
	for _, p := range r.Content {
		if len(p.Data) > 0 {
			return appendMarshal(b, *r)
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
