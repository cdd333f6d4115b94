// Package jsonpos decodes the JSON documents people write (scripts, workflow files,
// profiles) and reports a mistake with the line and column it is at:
// "script.json:3:14: invalid character '}' looking for beginning of value".
package jsonpos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Decode decodes the JSON document b, named name in errors (a file's path), into v.
// Strict refuses fields v has no place for. Data after the document is refused too.
func Decode(name string, b []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return Error(name, b, dec.InputOffset(), err)
	}
	rest := b[dec.InputOffset():]
	if trimmed := bytes.TrimLeft(rest, " \t\r\n"); len(trimmed) > 0 {
		off := int64(len(b) - len(trimmed))
		return &PosError{Name: name, Pos: Position(b, off), Msg: "more data after the JSON document"}
	}
	return nil
}

// Error places a decoding error in b: at the offset a syntax or type error carries,
// at the end for a document that ends early, else at off (the decoder's offset when
// it failed, as for an unknown field).
func Error(name string, b []byte, off int64, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	msg := strings.TrimPrefix(err.Error(), "json: ")
	switch {
	case errors.Is(err, io.EOF):
		off, msg = int64(len(b)), "empty document: want a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF) || msg == "unexpected end of JSON input":
		off, msg = int64(len(b)), "the document ends early (an unclosed bracket or string)"
	case errors.As(err, &se):
		off = se.Offset - 1 // the offending byte is the last one read
	case errors.As(err, &te):
		off = te.Offset
	case strings.HasPrefix(msg, "unknown field "):
		// The decoder is past the field's value: point at its key.
		key := strings.TrimPrefix(msg, "unknown field ")
		if i := bytes.LastIndex(b[:max(0, min(off, int64(len(b))))], []byte(key)); i >= 0 {
			off = int64(i)
		}
	}
	return &PosError{Name: name, Pos: Position(b, off), Msg: msg, Err: err}
}

// PosError is a decoding error with its place.
type PosError struct {
	Name string
	Pos  string // "line:column"
	Msg  string
	Err  error
}

func (e *PosError) Error() string { return e.Name + ":" + e.Pos + ": " + e.Msg }

func (e *PosError) Unwrap() error { return e.Err }

// Position is the 1-based "line:column" of byte offset off of b (columns count bytes).
func Position(b []byte, off int64) string {
	off = max(0, min(off, int64(len(b))))
	line := 1 + bytes.Count(b[:off], []byte{'\n'})
	col := off - int64(bytes.LastIndexByte(b[:off], '\n'))
	return fmt.Sprintf("%d:%d", line, col)
}
