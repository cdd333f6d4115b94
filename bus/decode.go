package bus

import (
	"encoding/json"
	"time"

	"github.com/toolbus/toolbus/internal/jsonfast"
)

// DecodeToolReply decodes a reply as json.Unmarshal does: the same value, and an error
// exactly when json.Unmarshal gives one. A turn decodes one reply per call, and
// json.Unmarshal spends 4 µs and 15 allocations on a typical one, a fifth of a raw bus
// round trip. Replies with only the fields a host usually sends (ids, outcome, text
// content, error, label, duration) are read by hand; anything else (details, events,
// an abort, image data, a key spelled otherwise or given twice, a surrogate escape,
// invalid UTF-8 or invalid JSON) goes to json.Unmarshal, whose verdict and value stand.
func DecodeToolReply(data []byte, r *ToolReply) error {
	s := jsonfast.Scanner{B: data}
	if decodeReply(&s, r) {
		return nil
	}
	*r = ToolReply{}
	return json.Unmarshal(data, r)
}

// replyKeys number the keys decodeReply reads.
var replyKeys = map[string]uint{
	"call_id": 0, "tool": 1, "outcome": 2, "error": 3, "label": 4, "terminate": 5, "duration_ns": 6, "content": 7,
}

// outcomes are the defined outcomes, which decoding does not allocate.
var outcomes = [...]Outcome{OutcomeOK, OutcomeError, OutcomeInvalid, OutcomeNotStarted, OutcomeStopped,
	OutcomeAbandoned, OutcomeTimeout, OutcomeUnavailable, OutcomePanic, OutcomeRefused}

// decodeReply reports false where json.Unmarshal is to take over.
func decodeReply(s *jsonfast.Scanner, r *ToolReply) bool {
	return s.Object(fieldsOnce(replyKeys, func(k uint) bool {
		var ok bool
		switch k {
		case 0:
			r.Call, ok = s.Str()
		case 1:
			r.Tool, ok = s.Str()
		case 2:
			r.Outcome, ok = decodeOutcome(s)
		case 3:
			r.Error, ok = s.Str()
		case 4:
			r.Label, ok = s.Str()
		case 5:
			r.Terminate, ok = s.Bool()
		case 6:
			var n int64
			n, ok = s.Int()
			r.Duration = time.Duration(n)
		case 7:
			r.Content, ok = decodeContent(s)
		}
		return ok
	})) && s.End()
}

// fieldsOnce reads an object's fields with read, by their number in keys; a key not in
// keys, or one given twice (json.Unmarshal's merging rules are its own), declines.
func fieldsOnce(keys map[string]uint, read func(k uint) bool) func(key []byte) bool {
	var seen uint
	return func(key []byte) bool {
		k, known := keys[string(key)]
		if !known || seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		return read(k)
	}
}

func decodeOutcome(s *jsonfast.Scanner) (Outcome, bool) {
	b, ok := s.Raw()
	if !ok {
		return "", false
	}
	for _, o := range outcomes {
		if string(b) == string(o) {
			return o, true
		}
	}
	return Outcome(b), true
}

// contentKeys number the keys decodeContent reads; data (bytes in base64) is left to
// json.Unmarshal.
var contentKeys = map[string]uint{"type": 0, "text": 1, "media_type": 2, "url": 3}

func decodeContent(s *jsonfast.Scanner) ([]ContentPart, bool) {
	parts := []ContentPart{}
	ok := s.Array(func() bool {
		var p ContentPart
		ok := s.Object(fieldsOnce(contentKeys, func(k uint) bool {
			var ok bool
			switch k {
			case 0:
				p.Type, ok = s.Str()
			case 1:
				p.Text, ok = s.Str()
			case 2:
				p.MediaType, ok = s.Str()
			case 3:
				p.URL, ok = s.Str()
			}
			return ok
		}))
		parts = append(parts, p)
		return ok
	})
	return parts, ok
}
