package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// object is a JSON object that keeps its keys in document order, so that a
// schema we build or rewrite reaches the model with its fields in the order
// the author wrote them.
type object struct {
	members []member
}

type member struct {
	key   string
	value any
}

func (o *object) get(key string) (any, bool) {
	for _, m := range o.members {
		if m.key == key {
			return m.value, true
		}
	}
	return nil, false
}

func (o *object) has(key string) bool {
	_, ok := o.get(key)
	return ok
}

// set replaces the value of key in place, or appends key at the end.
func (o *object) set(key string, value any) {
	for i := range o.members {
		if o.members[i].key == key {
			o.members[i].value = value
			return
		}
	}
	o.members = append(o.members, member{key, value})
}

func (o *object) del(key string) {
	for i := range o.members {
		if o.members[i].key == key {
			o.members = append(o.members[:i:i], o.members[i+1:]...)
			return
		}
	}
}

// decodeOrdered decodes one JSON value into *object, []any, string,
// json.Number, bool or nil. Duplicate keys are an error: a schema whose
// meaning depends on which duplicate a reader keeps is ambiguous.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key := kt.(string)
				if o.has(key) {
					return nil, fmt.Errorf("duplicate key %q", key)
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o.members = append(o.members, member{key, v})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return o, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected delimiter %q", t)
	default:
		return t, nil
	}
}

// encodeOrdered writes v compactly. Objects keep their member order; strings
// are escaped without HTML escaping, since the text goes to a model, not a page.
func encodeOrdered(v any) []byte {
	return appendValue(nil, v)
}

func appendValue(b []byte, v any) []byte {
	switch t := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, t)
	case json.Number:
		return append(b, t...)
	case string:
		return appendString(b, t)
	case *object:
		b = append(b, '{')
		for i, m := range t.members {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, m.key)
			b = append(b, ':')
			b = appendValue(b, m.value)
		}
		return append(b, '}')
	case []any:
		return appendArray(b, t, appendValue)
	case []string:
		return appendArray(b, t, appendString)
	default:
		// Only the types above are ever built by this package.
		panic(fmt.Sprintf("schema: cannot encode %T", v))
	}
}

// appendArray appends the JSON array of elems, each by appendElem.
func appendArray[E any](b []byte, elems []E, appendElem func([]byte, E) []byte) []byte {
	b = append(b, '[')
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendElem(b, e)
	}
	return append(b, ']')
}

const hexDigits = "0123456789abcdef"

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			// Valid JSON, but not valid JavaScript source: escape like encoding/json.
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// clone deep-copies a decoded ordered value.
func clone(v any) any {
	switch t := v.(type) {
	case *object:
		c := &object{members: make([]member, len(t.members))}
		for i, m := range t.members {
			c.members[i] = member{m.key, clone(m.value)}
		}
		return c
	case []any:
		c := make([]any, len(t))
		for i, e := range t {
			c[i] = clone(e)
		}
		return c
	default:
		return v
	}
}
