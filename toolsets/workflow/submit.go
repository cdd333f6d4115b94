package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/schema"
)

// SubmitName is the name of a task turn's local tool.
const SubmitName = "submit_result"

// submitDescription is what the model reads about submit_result.
const submitDescription = "Submit this task's result. The task ends when a result is accepted; a result that " +
	"does not match the schema is refused with the reasons, and you may fix it and submit again. " +
	"Put the whole result in \"result\"."

// resultProperty is the one parameter of submit_result, which holds the result.
const resultProperty = "result"

// MaxResultBytes bounds one task's result, as stored in its workflow's document.
const MaxResultBytes = 64 << 10

// SubmitSpec returns the spec of submit_result for a task whose results must pass
// result: the result schema wrapped as the one property "result" of the parameters
// object, sent strict (the strict projection of the wrapper). Its Category is left for
// the turn's assembly to set (the category of turn-local tools). A schema that breaks
// the rules of CheckResultSchema is refused with the reason.
func SubmitSpec(result json.RawMessage) (*toolbus.Spec, error) {
	params, err := Params(result)
	if err != nil {
		return nil, err
	}
	return &toolbus.Spec{
		Name:        SubmitName,
		Description: submitDescription,
		Params:      params,
		Strict:      true,
		// One after the other, so that of two submissions in one response the first
		// accepted one ends the task.
		Mode: toolbus.Sequential,
	}, nil
}

// Params is the parameter schema of submit_result for a result schema, checked as
// CheckResultSchema says. Its validation asserts formats (schema.Schema.AssertFormats).
func Params(result json.RawMessage) (*schema.Schema, error) {
	if _, err := schema.FromJSON(result); err != nil {
		if errors.Is(err, schema.ErrRootNotObject) {
			return nil, errors.New(`at /: a result schema's root must be an object schema ("type": "object")`)
		}
		return nil, fmt.Errorf("at /: %w", err)
	}
	raw, err := wrap(result)
	if err != nil {
		return nil, err
	}
	params, err := schema.FromJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("at /: %w", err)
	}
	if p := params.Strict(); p.Err != nil {
		return nil, unwrapPath(p.Err)
	}
	// A strict provider checks the formats it allows (date-time, email, uuid, ...), and a
	// result is read by programs that trust them: formats are asserted here, where tool
	// arguments leave them annotations. A refused submission is an error result the
	// model reads, and it may submit again.
	params, err = params.AssertFormats()
	if err != nil {
		return nil, fmt.Errorf("at /: %w", err)
	}
	return params, nil
}

// CheckResultSchema reports what keeps a raw JSON Schema from being a task's result
// schema, naming the schema path: its root must be an object schema, it must compile
// (references inside the schema only; remote ones are never loaded), and it must have a
// strict projection (every object closable, one type per subschema, no keyword strict
// mode lacks), because submit_result is always sent strict.
func CheckResultSchema(result json.RawMessage) error {
	_, err := Params(result)
	return err
}

// wrap puts a result schema under the property "result" of a closed parameters object.
// Its $defs (and definitions) move to the wrapper's root, where "#/$defs/…" references
// find them and strict mode allows them; $schema and $id stay out (the wrapper is one
// document of the default dialect). A reference to the result schema's own root ("#")
// would point at the wrapper instead, so it is refused.
func wrap(result json.RawMessage) ([]byte, error) {
	members, err := objectMembers(result)
	if err != nil {
		return nil, fmt.Errorf("at /: %w", err)
	}
	if rootRef(result) {
		return nil, errors.New(`a reference to the schema's own root ("$ref": "#") cannot be kept when the result is wrapped for submit_result; move the recursive part into $defs and refer to it there`)
	}
	var inner, defs bytes.Buffer
	inner.WriteByte('{')
	for _, m := range members {
		switch m.key {
		case "$schema", "$id":
			continue
		case "$defs", "definitions":
			if defs.Len() > 0 {
				defs.WriteByte(',')
			}
			writeMember(&defs, m.key, m.value)
			continue
		}
		if inner.Len() > 1 {
			inner.WriteByte(',')
		}
		writeMember(&inner, m.key, m.value)
	}
	inner.WriteByte('}')
	var out bytes.Buffer
	out.WriteString(`{"type":"object","properties":{"` + resultProperty + `":`)
	out.Write(inner.Bytes())
	out.WriteString(`},"required":["` + resultProperty + `"],"additionalProperties":false`)
	if defs.Len() > 0 {
		out.WriteByte(',')
		out.Write(defs.Bytes())
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

type member struct {
	key   string
	value json.RawMessage
}

// objectMembers splits a JSON object into its members, in order, values compacted.
func objectMembers(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			return nil, err
		}
		out = append(out, member{key: key, value: c.Bytes()})
	}
	return out, nil
}

// rootRef reports whether a schema holds "$ref": "#" anywhere.
func rootRef(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok && (r == "#" || r == "#/") {
				return true
			}
			for _, c := range v {
				if walk(c) {
					return true
				}
			}
		case []any:
			for _, c := range v {
				if walk(c) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

// wrapperPrefix is where the result schema sits in submit_result's parameters.
const wrapperPrefix = "/properties/" + resultProperty

// unwrapPath rewrites a strict-projection error's path from the wrapper's to the result
// schema's ("at /properties/result/properties/x" becomes "at /properties/x").
func unwrapPath(err error) error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, schema.ErrNotStrictable.Error()+": ")
	if rest, ok := strings.CutPrefix(msg, "at "+wrapperPrefix); ok {
		if strings.HasPrefix(rest, ":") {
			rest = "/" + rest
		}
		msg = "at " + rest
	}
	return fmt.Errorf("cannot be sent strict: %s", msg)
}

// Value returns the result inside submit_result's arguments.
func Value(args json.RawMessage) (json.RawMessage, error) {
	var a map[string]json.RawMessage
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, fmt.Errorf("submission: %w", err)
	}
	v, ok := a[resultProperty]
	if !ok {
		return nil, errors.New(`submission: no "result"`)
	}
	return v, nil
}

// Validate checks a submission (submit_result's arguments) against the task's result
// schema as persisted, afresh: the turn's own copy of the schema may differ. The error
// lists each leaf "path: message".
func Validate(result, args json.RawMessage) error {
	params, err := Params(result)
	if err != nil {
		return fmt.Errorf("the persisted result schema is unusable: %w", err)
	}
	return params.Validate(args)
}

// writeMember writes one object member, "key":value, to b.
func writeMember(b *bytes.Buffer, key string, value json.RawMessage) {
	k, _ := json.Marshal(key)
	b.Write(k)
	b.WriteByte(':')
	b.Write(value)
}
