package schema

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
)

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

type forResult struct {
	schema *Schema
	err    error
}

var forCache sync.Map // reflect.Type -> forResult

func forType(t reflect.Type) (*Schema, error) {
	if r, ok := forCache.Load(t); ok {
		return r.(forResult).schema, r.(forResult).err
	}
	s, err := buildForType(t)
	r, _ := forCache.LoadOrStore(t, forResult{s, err})
	return r.(forResult).schema, r.(forResult).err
}

func buildForType(t reflect.Type) (*Schema, error) {
	if t == nil {
		return nil, ErrRootNotObject
	}
	base := t
	for base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	if base.Kind() != reflect.Struct || isSpecialType(base) {
		return nil, ErrRootNotObject
	}
	r := &reflector{}
	doc, err := r.structSchema(base)
	if err != nil {
		return nil, fmt.Errorf("schema for %s: %w", t, err)
	}
	raw := encodeOrdered(doc)
	s, err := FromJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("schema for %s: %w", t, err)
	}
	return s, nil
}

var (
	timeType        = reflect.TypeFor[time.Time]()
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	numberType      = reflect.TypeFor[json.Number]()
	marshalerType   = reflect.TypeFor[json.Marshaler]()
	textMarshalType = reflect.TypeFor[encoding.TextMarshaler]()
)

// isSpecialType reports types that encode as something other than their
// Go kind suggests.
func isSpecialType(t reflect.Type) bool {
	switch t {
	case timeType, rawMessageType, numberType:
		return true
	}
	return implements(t, marshalerType) || implements(t, textMarshalType)
}

func implements(t, iface reflect.Type) bool {
	return t.Implements(iface) || reflect.PointerTo(t).Implements(iface)
}

// reflector turns Go types into schemas. stack holds the struct types being
// expanded, to refuse recursive types (which inlining cannot express).
type reflector struct {
	stack []reflect.Type
}

// field is one JSON member of a struct, after embedded structs are promoted.
type field struct {
	name     string
	typ      reflect.Type
	depth    int  // embedding depth, for encoding/json's "shallowest wins" rule
	named    bool // the json tag gave a name
	optional bool
	quoted   bool // `json:",string"`: the scalar is sent as a string
	tags     reflect.StructTag
	path     string // Go field path, for error messages
}

func (r *reflector) structSchema(t reflect.Type) (*object, error) {
	for _, seen := range r.stack {
		if seen == t {
			return nil, fmt.Errorf("type %s refers to itself; recursive types cannot be inlined", t)
		}
	}
	r.stack = append(r.stack, t)
	defer func() { r.stack = r.stack[:len(r.stack)-1] }()

	var all []field
	if err := collectFields(t, 0, false, "", &all); err != nil {
		return nil, err
	}
	fields, err := dominantFields(all)
	if err != nil {
		return nil, err
	}

	props := &object{}
	var required []string
	for _, f := range fields {
		ps, forced, err := r.fieldSchema(f)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", f.path, err)
		}
		props.members = append(props.members, member{f.name, ps})
		if !f.optional || forced {
			required = append(required, f.name)
		}
	}
	o := &object{}
	o.set("type", "object")
	o.set("properties", props)
	if len(required) > 0 {
		o.set("required", required)
	}
	o.set("additionalProperties", false)
	return o, nil
}

// collectFields lists t's JSON members the way encoding/json does: exported
// fields, `json:"-"` skipped, untagged embedded structs promoted.
func collectFields(t reflect.Type, depth int, viaPointer bool, prefix string, out *[]field) error {
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := sf.Type
		if sf.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct && !isSpecialType(et) {
				if err := collectFields(et, depth+1, viaPointer || ft.Kind() == reflect.Pointer, prefix+sf.Name+".", out); err != nil {
					return err
				}
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		f := field{
			name:  name,
			typ:   ft,
			depth: depth,
			named: name != "",
			tags:  sf.Tag,
			path:  prefix + sf.Name,
		}
		if f.name == "" {
			f.name = sf.Name
		}
		f.optional = viaPointer || ft.Kind() == reflect.Pointer ||
			hasOption(opts, "omitempty") || hasOption(opts, "omitzero")
		f.quoted = hasOption(opts, "string") && quotable(ft)
		*out = append(*out, f)
	}
	return nil
}

// quotable reports the kinds `json:",string"` applies to.
func quotable(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String, reflect.Float32, reflect.Float64,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return false
}

func hasOption(opts, want string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == want {
			return true
		}
	}
	return false
}

// dominantFields applies encoding/json's rule for duplicate names: the
// shallowest field wins, and among equals the one named by a tag. Where
// encoding/json would silently drop both, this is an error: it is our own
// type, and a schema missing a field would be a quiet bug.
func dominantFields(all []field) ([]field, error) {
	var out []field
	index := map[string]int{}
	for _, f := range all {
		i, seen := index[f.name]
		if !seen {
			index[f.name] = len(out)
			out = append(out, f)
			continue
		}
		cur := out[i]
		switch {
		case f.depth < cur.depth, f.depth == cur.depth && f.named && !cur.named:
			out[i] = f
		case f.depth == cur.depth && f.named == cur.named:
			return nil, fmt.Errorf("fields %s and %s both encode as %q", cur.path, f.path, f.name)
		}
	}
	return out, nil
}

// fieldSchema returns the schema of one field and whether its tags force it
// to be required.
func (r *reflector) fieldSchema(f field) (*object, bool, error) {
	tags, err := parseTags(f.tags)
	if err != nil {
		return nil, false, err
	}
	s := &object{}
	if f.quoted {
		s.set("type", "string")
	} else if s, err = r.typeSchema(f.typ); err != nil {
		return nil, false, err
	}
	s, err = tags.apply(s)
	return s, tags.required, err
}

func (r *reflector) typeSchema(t reflect.Type) (*object, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s := &object{}
	switch t {
	case timeType:
		s.set("type", "string")
		s.set("format", "date-time")
		return s, nil
	case rawMessageType:
		return s, nil // any JSON value
	case numberType:
		s.set("type", "number")
		return s, nil
	}
	if implements(t, marshalerType) {
		return s, nil // its own encoding: nothing to say about the shape
	}
	if implements(t, textMarshalType) {
		s.set("type", "string")
		return s, nil
	}
	switch t.Kind() {
	case reflect.Bool:
		s.set("type", "boolean")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		s.set("type", "integer")
	case reflect.Float32, reflect.Float64:
		s.set("type", "number")
	case reflect.String:
		s.set("type", "string")
	case reflect.Interface:
		// any JSON value
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 && !implements(t.Elem(), marshalerType) && !implements(t.Elem(), textMarshalType) {
			s.set("type", "string")
			s.set("contentEncoding", "base64")
			return s, nil
		}
		items, err := r.typeSchema(t.Elem())
		if err != nil {
			return nil, err
		}
		s.set("type", "array")
		s.set("items", items)
		if t.Kind() == reflect.Array {
			n := json.Number(strconv.Itoa(t.Len()))
			s.set("minItems", n)
			s.set("maxItems", n)
		}
	case reflect.Map:
		switch k := t.Key(); {
		case k.Kind() == reflect.String, implements(k, textMarshalType),
			k.Kind() >= reflect.Int && k.Kind() <= reflect.Uintptr:
		default:
			return nil, fmt.Errorf("map key type %s does not encode as a JSON object key", k)
		}
		values, err := r.typeSchema(t.Elem())
		if err != nil {
			return nil, err
		}
		s.set("type", "object")
		s.set("additionalProperties", values)
	case reflect.Struct:
		return r.structSchema(t)
	default:
		return nil, fmt.Errorf("type %s has no JSON encoding", t)
	}
	return s, nil
}

// tagSet holds the parsed `jsonschema`, `jsonschema_description` and
// `description` tags of one field, keywords in tag order.
type tagSet struct {
	required bool
	nullable bool
	keywords []tagKeyword
}

type tagKeyword struct {
	key, value string
}

// Keywords and what they apply to. For a slice or array field, array
// keywords go on the array and value keywords on its items.
var (
	arrayKeywords  = map[string]bool{"minItems": true, "maxItems": true, "uniqueItems": true}
	numberKeywords = map[string]bool{"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true}
	lengthKeywords = map[string]bool{"minLength": true, "maxLength": true, "minItems": true, "maxItems": true, "minProperties": true, "maxProperties": true}
	textKeywords   = map[string]bool{"pattern": true, "format": true, "title": true, "description": true}
)

func parseTags(tag reflect.StructTag) (tagSet, error) {
	var ts tagSet
	raw := tag.Get("jsonschema")
	if isDescriptionTag(raw) {
		// The github.com/google/jsonschema-go form (the MCP go-sdk's and
		// ADK's): the whole tag is the field's description, commas included.
		for _, name := range []string{"jsonschema_description", "description"} {
			if _, ok := tag.Lookup(name); ok {
				return ts, fmt.Errorf("jsonschema tag %q is a description, and the field has a %s tag too: keep one", raw, name)
			}
		}
		ts.keywords = []tagKeyword{{"description", raw}}
		return ts, nil
	}
	for _, part := range splitUnescaped(raw) {
		if part == "" {
			continue
		}
		key, value, hasValue := strings.Cut(part, "=")
		switch {
		case key == "required" && !hasValue:
			ts.required = true
		case key == "nullable" && !hasValue:
			ts.nullable = true
		case key == "uniqueItems" && !hasValue:
			ts.keywords = append(ts.keywords, tagKeyword{key, "true"})
		case !hasValue:
			return ts, fmt.Errorf("jsonschema tag %q: want key=value", part)
		case key == "enum" || key == "default" || arrayKeywords[key] || numberKeywords[key] ||
			lengthKeywords[key] || textKeywords[key]:
			ts.keywords = append(ts.keywords, tagKeyword{key, value})
		default:
			return ts, fmt.Errorf("jsonschema tag: unknown keyword %q", key)
		}
	}
	// jsonschema_description (invopop) and description take free text,
	// commas included.
	// The description goes first, right after the type, where a model
	// reading the schema meets it before the constraints.
	for _, name := range []string{"jsonschema_description", "description"} {
		if d, ok := tag.Lookup(name); ok {
			ts.keywords = append([]tagKeyword{{"description", d}}, ts.keywords...)
			break
		}
	}
	return ts, nil
}

// isDescriptionTag reports whether a jsonschema tag is free text, as
// google/jsonschema-go reads it, rather than our comma-separated keywords.
// That package refuses a tag that starts with "WORD=" (no blank before the
// first '='), which keeps the two forms apart: a tag whose first word holds
// '=' is keywords, and so is one that starts with a bare flag of ours
// (required, nullable, uniqueItems); anything else is a description.
func isDescriptionTag(tag string) bool {
	if tag == "" {
		return false
	}
	if i := strings.IndexAny(tag, " \t\n="); i >= 0 && tag[i] == '=' {
		return false
	}
	first, _, _ := strings.Cut(tag, ",")
	switch first {
	case "required", "nullable", "uniqueItems":
		return false
	}
	return true
}

// splitUnescaped splits on commas not preceded by a backslash, and drops the
// backslash of "\,".
func splitUnescaped(s string) []string {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == ',':
			cur.WriteByte(',')
			i++
		case s[i] == ',':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(parts, cur.String())
}

// apply writes the tag keywords into s, the schema of the field's type, and
// returns the field's schema (a new one when nullable must wrap s).
func (ts tagSet) apply(s *object) (*object, error) {
	target := func(key string) *object {
		if key == "description" || key == "title" || key == "default" || arrayKeywords[key] {
			return s
		}
		// Value keywords on a slice field describe its elements.
		t := s
		for {
			typ, _ := t.get("type")
			items, ok := t.get("items")
			if typ != "array" || !ok {
				return t
			}
			t = items.(*object)
		}
	}
	var enums = map[*object][]any{}
	for _, kw := range ts.keywords {
		t := target(kw.key)
		switch {
		case kw.key == "enum":
			v, err := literal(t, kw.value)
			if err != nil {
				return nil, fmt.Errorf("enum %q: %w", kw.value, err)
			}
			enums[t] = append(enums[t], v)
			t.set("enum", enums[t])
		case kw.key == "default":
			v, err := literal(t, kw.value)
			if err != nil {
				return nil, fmt.Errorf("default %q: %w", kw.value, err)
			}
			t.set("default", v)
		case kw.key == "uniqueItems":
			t.set(kw.key, true)
		case numberKeywords[kw.key]:
			if _, err := strconv.ParseFloat(kw.value, 64); err != nil {
				return nil, fmt.Errorf("%s=%s: not a number", kw.key, kw.value)
			}
			t.set(kw.key, json.Number(kw.value))
		case lengthKeywords[kw.key]:
			if n, err := strconv.ParseUint(kw.value, 10, 63); err != nil || n > 1<<53 {
				return nil, fmt.Errorf("%s=%s: not a non-negative integer", kw.key, kw.value)
			}
			t.set(kw.key, json.Number(kw.value))
		default:
			t.set(kw.key, kw.value)
		}
	}
	if ts.nullable {
		return nullable(s), nil
	}
	return s, nil
}

// literal parses a tag value as a JSON value of the schema's type.
func literal(s *object, text string) (any, error) {
	typ, _ := s.get("type")
	switch typ {
	case "integer":
		if _, err := strconv.ParseInt(text, 10, 64); err != nil {
			return nil, fmt.Errorf("not an integer")
		}
		return json.Number(text), nil
	case "number":
		if _, err := strconv.ParseFloat(text, 64); err != nil {
			return nil, fmt.Errorf("not a number")
		}
		return json.Number(text), nil
	case "boolean":
		b, err := strconv.ParseBool(text)
		if err != nil {
			return nil, fmt.Errorf("not a boolean")
		}
		return b, nil
	case "string":
		return text, nil
	}
	return nil, fmt.Errorf("enum and default tags need a string, number, integer or boolean field")
}
