package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/kaptinlin/jsonschema"
)

// ErrRootNotObject is returned when a tool's parameter schema is not an
// object schema. Its text is what providers and the issue expect verbatim.
var ErrRootNotObject = errors.New("function tool parameters must use a root object schema")

// Schema is a tool's parameter schema: the JSON Schema the model sees, its
// compiled validator, and its strict projection. It is immutable after
// construction and safe for concurrent use.
type Schema struct {
	raw       []byte
	validator *jsonschema.Schema
	required  []string // the root's required property names, in schema order
	formats   bool     // validation asserts "format" (AssertFormats)

	// doc is raw decoded with its key order kept; strict and plan derive from
	// it. All three are computed on first use only: most tools are never
	// called in strict mode, and many are never called at all.
	doc    func() *object
	strict func() Projection
	plan   func() *argPlan
	sum    func() [sha256.Size]byte
	fast   func() *fastNode // nil when the schema needs the full validator
}

// FromJSON builds a Schema from a raw JSON Schema document. JSON returns raw
// byte for byte, so constraints such as minimum and maximum reach the model
// exactly as written.
//
// The root must declare "type": "object" (or a type array holding only
// "object"). A root without a type, even one with "properties", is refused:
// providers reject it too, and a validator would accept any non-object there.
// Such a root, or JSON that is not an object at all, yields ErrRootNotObject
// itself. Invalid JSON, a document that breaks the meta-schema, or one with a
// $ref that points outside the document yields a descriptive error.
func FromJSON(raw []byte) (*Schema, error) {
	if !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v)
		return nil, fmt.Errorf("schema is not valid JSON: %w", err)
	}
	var root map[string]json.RawMessage
	if err := json.Unmarshal(raw, &root); err != nil {
		return nil, ErrRootNotObject // valid JSON, but not an object: true, [], "x", ...
	}
	if !isObjectType(root["type"]) {
		return nil, ErrRootNotObject
	}
	var required []string
	if r, ok := root["required"]; ok {
		// The meta-schema check below refuses a "required" that is not an
		// array of strings; ignore the error here and let it explain.
		_ = json.Unmarshal(r, &required)
	}
	validator, err := cachedValidator(raw)
	if err != nil {
		return nil, err
	}
	return newSchema(bytes.Clone(raw), validator, required), nil
}

func newSchema(raw []byte, validator *jsonschema.Schema, required []string) *Schema {
	s := &Schema{raw: raw, validator: validator, required: required}
	s.doc = sync.OnceValue(func() *object {
		// compileValidator decoded these bytes already, and FromJSON
		// checked they hold an object, so neither can fail here.
		v, _ := decodeOrdered(s.raw)
		return v.(*object)
	})
	s.strict = sync.OnceValue(func() Projection { return project(s.doc()) })
	s.plan = sync.OnceValue(func() *argPlan { return newArgPlan(s.doc()) })
	s.sum = sync.OnceValue(func() [sha256.Size]byte { return sha256.Sum256(s.raw) })
	s.fast = sync.OnceValue(func() *fastNode { return compileFast(s.raw) })
	return s
}

// AssertFormats returns a Schema with the same document whose validation also asserts
// "format" for the formats the validator knows (date-time, date, time, duration, email,
// hostname, ipv4, ipv6, uri, uri-reference, uuid, ...): "yesterday" at a date-time is
// refused with a leaf naming the format. A format it does not know stays an annotation.
//
// Tool arguments keep format as an annotation (docs/protocol.md §13): hosts published
// their schemas on that understanding. A task's result is the runtime's own contract,
// checked as a strict provider would check it.
//
// The formats flag is not part of the JSON: a Schema decoded from its JSON
// (UnmarshalJSON) does not assert formats.
func (s *Schema) AssertFormats() (*Schema, error) {
	if s.formats {
		return s, nil
	}
	validator, err := cachedValidatorOf(s.raw, true)
	if err != nil {
		return nil, err
	}
	a := newSchema(s.raw, validator, s.required)
	a.formats = true
	// The fast path treats format as an annotation: it could pass what the asserting
	// validator refuses. Results are validated once or twice a task; no shortcut needed.
	a.fast = func() *fastNode { return nil }
	a.sum = sync.OnceValue(func() [sha256.Size]byte {
		return sha256.Sum256(append(bytes.Clone(s.raw), "\x00format-assertion"...))
	})
	return a, nil
}

// Sum is the SHA-256 of the schema document (JSON's bytes), or of the document with a
// mark when the schema asserts formats: two schemas with the same sum validate alike.
func (s *Schema) Sum() [sha256.Size]byte { return s.sum() }

// isObjectType reports whether a schema's "type" value is "object" or an
// array holding only "object".
func isObjectType(raw json.RawMessage) bool {
	if raw == nil {
		return false
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return one == "object"
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err == nil {
		return len(many) > 0 && !containsOther(many, "object")
	}
	return false
}

func containsOther(list []string, want string) bool {
	for _, s := range list {
		if s != want {
			return true
		}
	}
	return false
}

// MustFromJSON is FromJSON for schemas written into the program; it panics
// on error.
func MustFromJSON(raw []byte) *Schema {
	s, err := FromJSON(raw)
	if err != nil {
		panic(fmt.Sprintf("schema.MustFromJSON: %v", err))
	}
	return s
}

// For builds a Schema from the Go type T, which must be a struct (or a
// pointer to one); any other type, or a struct with its own JSON or text
// encoding (whose shape is unknown), yields ErrRootNotObject. See the
// package documentation for the struct tags it reads. The result is cached
// per type.
func For[T any]() (*Schema, error) {
	return forType(typeOf[T]())
}

// MustFor is For for types written into the program; it panics on error.
func MustFor[T any]() *Schema {
	s, err := For[T]()
	if err != nil {
		panic(fmt.Sprintf("schema.MustFor: %v", err))
	}
	return s
}

// JSON returns the schema as sent to the model in non-strict mode: for
// FromJSON the bytes it was given, for For the generated document. The
// slice is a copy; changing it does not change the Schema.
func (s *Schema) JSON() json.RawMessage {
	return bytes.Clone(s.raw)
}

// Strict returns the schema's strict-mode projection, computed once.
func (s *Schema) Strict() Projection {
	return s.strict()
}

// Validate checks args, a JSON document, against the schema with the cached
// compiled validator. It returns nil or a *ValidationError. It repairs
// nothing and strips nothing: Parse is the lenient entry point for model
// output; Validate is for arguments that already went through Parse, such as
// those a category actor receives over the bus.
func (s *Schema) Validate(args json.RawMessage) error {
	if textTooDeep(string(args)) {
		return &ValidationError{Leaves: []Leaf{{Path: "/", Message: tooDeepMsg}}, err: ErrTooDeep}
	}
	v, err := decodeArgs(args)
	if err != nil {
		return &ValidationError{Leaves: []Leaf{{Path: "/", Message: "not valid JSON: " + err.Error()}}}
	}
	return s.validate(v)
}

func (s *Schema) validate(v any) error {
	if f := s.fast(); f != nil && f.valid(v) {
		return nil // certainly valid; anything else gets kaptinlin's verdict and words
	}
	res := validateWith(s.validator, v)
	if res.IsValid() {
		return nil
	}
	return newValidationError(res, v)
}

// MarshalJSON encodes the schema as its raw document, byte for byte.
func (s *Schema) MarshalJSON() ([]byte, error) {
	if s == nil {
		return []byte("null"), nil
	}
	return s.JSON(), nil
}

// UnmarshalJSON builds the schema with [FromJSON], so a decoded schema has passed the same
// checks as a defined one. The raw bytes are kept as given, inner whitespace included.
func (s *Schema) UnmarshalJSON(b []byte) error {
	p, err := FromJSON(b)
	if err != nil {
		return err
	}
	*s = *newSchema(p.raw, p.validator, p.required)
	return nil
}
