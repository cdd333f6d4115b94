package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Projection is a schema rewritten for a provider's strict mode (OpenAI
// "strict": true), where decoding is constrained to the schema and so the
// schema must be closed and fully required.
type Projection struct {
	// JSON is the strict schema, nil when Err is set.
	JSON json.RawMessage
	// Nullable lists the keys made nullable, as JSON pointers into the
	// arguments: "/limit", "/options/depth"; "*" stands for every element
	// of an array ("/files/*/mode"). Parse with ParseOptions.Strict removes
	// a null it finds at one of these keys, since there null means "absent".
	Nullable []string
	// Err says why the schema cannot be made strict; the caller then sends
	// the original schema with strict off.
	Err error

	nulls *nullTree
}

// ErrNotStrictable is matched (errors.Is) by every Projection.Err.
var ErrNotStrictable = errors.New("schema cannot be made strict")

// strictUnsupported are keywords strict mode has no equivalent for. Dropping
// them would let the model send what the original schema refuses, so a schema
// using one is sent non-strict instead.
var strictUnsupported = []string{
	"allOf", "not", "if", "then", "else",
	"patternProperties", "propertyNames", "unevaluatedProperties",
	"minProperties", "maxProperties",
	"dependentRequired", "dependentSchemas", "dependencies",
	"prefixItems", "additionalItems", "unevaluatedItems",
	"contains", "minContains", "maxContains", "uniqueItems",
	"$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
}

// strictFormats are the string formats strict mode accepts. Other formats
// are dropped from the projection: this package validates with format as an
// annotation (kaptinlin's default), so dropping one changes nothing that is
// accepted.
var strictFormats = map[string]bool{
	"date-time": true, "time": true, "date": true, "duration": true,
	"email": true, "hostname": true, "ipv4": true, "ipv6": true, "uuid": true,
}

// refAnnotations may sit next to a $ref; they do not constrain the value.
var refAnnotations = map[string]bool{"$ref": true, "description": true, "title": true, "$comment": true, "examples": true}

// project computes the strict projection of a decoded schema:
//   - every object is closed ("additionalProperties": false) and lists every
//     property in "required";
//   - a property that was optional and did not accept null is made nullable:
//     "type": "T" becomes ["T","null"] (and null joins its enum), an anyOf
//     gains {"type":"null"}, anything else ($ref, const) is wrapped in
//     {"anyOf":[..., {"type":"null"}]}; its key is recorded in Nullable;
//   - "oneOf" becomes "anyOf" (the original still validates, so overlapping
//     branches are still refused after the model answers); "default" is
//     dropped; formats strict mode lacks are dropped;
//   - this recurses through properties, items, anyOf/oneOf, $defs and
//     definitions, and follows local $ref.
//
// A schema cannot be made strict, and Err says where and why, when it uses a
// keyword in strictUnsupported, a boolean subschema, a remote $ref, a
// non-false additionalProperties, a nested object with no properties (strict
// mode would only allow {}), an array without a single items schema, a
// subschema without a type (nor anyOf, $ref, enum or const to infer it from),
// or a type union other than [T, "null"]. Provider size limits (number of
// properties, nesting depth, enum sizes) are not checked here.
func project(doc *object) Projection {
	p := &projector{refs: map[string]*nullTree{}}
	out := clone(doc).(*object)
	root := &nullTree{}
	p.refs["#"] = root
	for _, defsKey := range []string{"$defs", "definitions"} {
		if defs, ok := out.get(defsKey); ok {
			if defsObj, ok := defs.(*object); ok {
				for _, m := range defsObj.members {
					p.refs["#/"+defsKey+"/"+escapePointer(m.key)] = &nullTree{}
				}
			}
		}
	}
	if err := p.schema(out, "", root, true); err != nil {
		return Projection{Err: fmt.Errorf("%w: %w", ErrNotStrictable, err)}
	}
	return Projection{
		JSON:     encodeOrdered(out),
		Nullable: root.paths(),
		nulls:    root,
	}
}

type projector struct {
	refs map[string]*nullTree // "#", "#/$defs/X", "#/definitions/X"
}

func (p *projector) schema(node any, at string, tree *nullTree, root bool) error {
	where := at
	if where == "" {
		where = "/"
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("at %s: %s", where, fmt.Sprintf(format, args...))
	}
	o, ok := node.(*object)
	if !ok {
		return fail("boolean schemas are not supported in strict mode")
	}
	for _, k := range strictUnsupported {
		if o.has(k) {
			return fail("strict mode does not support %q", k)
		}
	}
	o.del("default")
	if o.has("oneOf") {
		if o.has("anyOf") {
			return fail("both anyOf and oneOf")
		}
		for i := range o.members {
			if o.members[i].key == "oneOf" {
				o.members[i].key = "anyOf"
			}
		}
	}
	if f, ok := o.get("format"); ok {
		if s, _ := f.(string); !strictFormats[s] {
			o.del("format")
		}
	}
	for _, defsKey := range []string{"$defs", "definitions"} {
		defs, ok := o.get(defsKey)
		if !ok {
			continue
		}
		defsObj, ok := defs.(*object)
		if !ok {
			return fail("%s must be an object", defsKey)
		}
		for _, m := range defsObj.members {
			t := p.refs["#/"+defsKey+"/"+escapePointer(m.key)]
			if t == nil || !root {
				return fail("%s are supported at the root only", defsKey)
			}
			if err := p.schema(m.value, at+"/"+defsKey+"/"+escapePointer(m.key), t, false); err != nil {
				return err
			}
		}
	}
	if ref, ok := o.get("$ref"); ok {
		s, _ := ref.(string)
		target, ok := p.refs[s]
		if !ok {
			return fail("$ref %q: only references to # and #/$defs/... are supported", s)
		}
		for _, m := range o.members {
			if !refAnnotations[m.key] && (!root || (m.key != "$defs" && m.key != "definitions")) {
				return fail("keyword %q next to $ref is not supported in strict mode", m.key)
			}
		}
		tree.alts = append(tree.alts, target)
		return nil
	}
	if branches, ok := o.get("anyOf"); ok {
		for _, k := range []string{"type", "properties", "required", "additionalProperties", "items", "enum", "const"} {
			if o.has(k) {
				return fail("keyword %q next to anyOf is not supported in strict mode", k)
			}
		}
		list, ok := branches.([]any)
		if !ok || len(list) == 0 {
			return fail("anyOf must be a non-empty array")
		}
		for i, b := range list {
			bt := &nullTree{}
			if err := p.schema(b, at+"/anyOf/"+strconv.Itoa(i), bt, false); err != nil {
				return err
			}
			tree.alts = append(tree.alts, bt)
		}
		return nil
	}

	kind, err := strictKind(o)
	if err != nil {
		return fail("%v", err)
	}
	for _, k := range []string{"properties", "required", "additionalProperties"} {
		if o.has(k) && kind != "object" {
			return fail("%q does not apply to type %s", k, kind)
		}
	}
	if o.has("items") && kind != "array" {
		return fail("%q does not apply to type %s", "items", kind)
	}
	switch kind {
	case "object":
		return p.object(o, at, tree, root, fail)
	case "array":
		items, ok := o.get("items")
		if !ok {
			return fail("an array needs an items schema in strict mode")
		}
		if _, ok := items.(*object); !ok {
			return fail("items must be a single schema in strict mode")
		}
		tree.items = &nullTree{}
		return p.schema(items, at+"/items", tree.items, false)
	}
	return nil
}

func (p *projector) object(o *object, at string, tree *nullTree, root bool, fail func(string, ...any) error) error {
	switch ap, ok := o.get("additionalProperties"); {
	case !ok:
		// An open object is closed: strict mode requires it. The model can
		// no longer send undeclared keys, which the schema never described.
		if !root && !o.has("properties") {
			return fail("an object with no properties would only allow {} in strict mode")
		}
		o.set("additionalProperties", false)
	case ap != false:
		return fail("additionalProperties must be false in strict mode")
	}
	var props *object
	if v, ok := o.get("properties"); ok {
		if props, ok = v.(*object); !ok {
			return fail("properties must be an object")
		}
	} else {
		props = &object{}
		o.set("properties", props)
	}
	required := map[string]bool{}
	if v, ok := o.get("required"); ok {
		list, _ := v.([]any)
		for _, n := range list {
			name, _ := n.(string)
			if !props.has(name) {
				return fail("required property %q is not declared in properties", name)
			}
			required[name] = true
		}
	}
	names := make([]any, 0, len(props.members))
	for i, m := range props.members {
		child := &nullTree{}
		if err := p.schema(m.value, at+"/properties/"+escapePointer(m.key), child, false); err != nil {
			return err
		}
		tree.child(m.key, child)
		if !required[m.key] && !acceptsNull(m.value) {
			props.members[i].value = nullable(m.value.(*object))
			tree.keys = append(tree.keys, m.key)
		}
		names = append(names, m.key)
	}
	o.set("required", names)
	return nil
}

// strictKind returns the one non-null type of o, inferring it from enum or
// const when "type" is absent (and writing it into o).
func strictKind(o *object) (string, error) {
	t, ok := o.get("type")
	if !ok {
		var values []any
		if e, ok := o.get("enum"); ok {
			values, _ = e.([]any)
		} else if c, ok := o.get("const"); ok {
			values = []any{c}
		}
		kind := literalsKind(values)
		if kind == "" {
			return "", errors.New(`a schema needs a "type" (or anyOf, $ref, or an enum of one type) in strict mode`)
		}
		o.set("type", kind)
		return kind, nil
	}
	switch t := t.(type) {
	case string:
		return t, nil
	case []any:
		kind := ""
		for _, v := range t {
			s, _ := v.(string)
			if s == "null" {
				continue
			}
			if kind != "" {
				return "", errors.New(`a type union other than [T, "null"] is not supported in strict mode; use anyOf`)
			}
			kind = s
		}
		if kind == "" {
			kind = "null"
		}
		return kind, nil
	}
	return "", errors.New(`"type" must be a string or an array`)
}

// literalsKind returns the JSON type shared by all values, or "".
func literalsKind(values []any) string {
	kind := ""
	for _, v := range values {
		var k string
		switch v.(type) {
		case string:
			k = "string"
		case json.Number:
			k = "number"
		case bool:
			k = "boolean"
		case nil:
			continue
		default:
			return ""
		}
		if kind != "" && kind != k {
			return ""
		}
		kind = k
	}
	return kind
}

// acceptsNull reports whether a schema, as written, already accepts null at
// its top level. Such an optional property is left as it is: the model sends
// null, which the original accepts, so there is nothing to strip.
func acceptsNull(node any) bool {
	o, ok := node.(*object)
	if !ok {
		return node == true
	}
	if c, ok := o.get("const"); ok {
		return c == nil
	}
	if e, ok := o.get("enum"); ok {
		list, _ := e.([]any)
		hasNull := false
		for _, v := range list {
			hasNull = hasNull || v == nil
		}
		if !hasNull {
			return false
		}
	}
	if t, ok := o.get("type"); ok {
		switch t := t.(type) {
		case string:
			return t == "null"
		case []any:
			for _, v := range t {
				if v == "null" {
					return true
				}
			}
		}
		return false
	}
	if branches, ok := o.get("anyOf"); ok {
		list, _ := branches.([]any)
		for _, b := range list {
			if acceptsNull(b) {
				return true
			}
		}
		return false
	}
	// A $ref is not followed here; wrapping it in anyOf with null is right
	// whether or not its target accepts null. Anything else left constrains
	// no type, so null passes it.
	return !o.has("$ref")
}

// nullable returns s changed to also accept null, as the smallest edit
// strict mode understands. It may return a new wrapper object.
func nullable(s *object) *object {
	if s.has("const") || s.has("$ref") {
		w := &object{}
		w.set("anyOf", []any{s, nullSchema()})
		return w
	}
	switch t, _ := s.get("type"); t := t.(type) {
	case string:
		if t != "null" {
			s.set("type", []any{t, "null"})
		}
		addNullToEnum(s)
		return s
	case []any:
		for _, v := range t {
			if v == "null" {
				addNullToEnum(s)
				return s
			}
		}
		s.set("type", append(t[:len(t):len(t)], "null"))
		addNullToEnum(s)
		return s
	}
	if branches, ok := s.get("anyOf"); ok {
		list, _ := branches.([]any)
		s.set("anyOf", append(list[:len(list):len(list)], nullSchema()))
		return s
	}
	if s.has("enum") {
		addNullToEnum(s)
		return s
	}
	w := &object{}
	w.set("anyOf", []any{s, nullSchema()})
	return w
}

func nullSchema() *object {
	n := &object{}
	n.set("type", "null")
	return n
}

func addNullToEnum(s *object) {
	e, ok := s.get("enum")
	if !ok {
		return
	}
	list, _ := e.([]any)
	for _, v := range list {
		if v == nil {
			return
		}
	}
	s.set("enum", append(list[:len(list):len(list)], nil))
}

func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// nullTree records, for one place in the arguments, which keys the strict
// projection made nullable there and where to look further down. A $ref or
// anyOf adds alternatives that apply to the same value; through $ref the
// trees can form cycles, which the instance (always finite) bounds.
type nullTree struct {
	keys  []string
	props map[string]*nullTree
	names []string // props keys in schema order
	items *nullTree
	alts  []*nullTree
}

func (t *nullTree) child(name string, c *nullTree) {
	if t.props == nil {
		t.props = map[string]*nullTree{}
	}
	if _, ok := t.props[name]; !ok {
		t.names = append(t.names, name)
	}
	t.props[name] = c
}

// strip deletes null values at keys made nullable and reports whether it
// removed any. seen guards against alternative cycles at one value.
func (t *nullTree) strip(v any, seen map[*nullTree]bool) bool {
	if seen[t] {
		return false
	}
	removed := false
	switch v := v.(type) {
	case map[string]any:
		for _, k := range t.keys {
			if x, ok := v[k]; ok && x == nil {
				delete(v, k)
				removed = true
			}
		}
		for name, c := range t.props {
			if x, ok := v[name]; ok && x != nil {
				removed = c.strip(x, nil) || removed
			}
		}
	case []any:
		if t.items != nil {
			for _, x := range v {
				removed = t.items.strip(x, nil) || removed
			}
		}
	}
	if len(t.alts) > 0 {
		if seen == nil {
			seen = map[*nullTree]bool{}
		}
		seen[t] = true
		for _, a := range t.alts {
			removed = a.strip(v, seen) || removed
		}
	}
	return removed
}

// paths lists the keys made nullable as JSON pointers, in schema order.
func (t *nullTree) paths() []string {
	var out []string
	seen := map[string]bool{}
	var walk func(t *nullTree, at string, stack []*nullTree)
	walk = func(t *nullTree, at string, stack []*nullTree) {
		for _, s := range stack {
			if s == t {
				return
			}
		}
		stack = append(stack, t)
		for _, k := range t.keys {
			p := at + "/" + escapePointer(k)
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
		for _, name := range t.names {
			walk(t.props[name], at+"/"+escapePointer(name), stack)
		}
		if t.items != nil {
			walk(t.items, at+"/*", stack)
		}
		for _, a := range t.alts {
			walk(a, at, stack)
		}
	}
	walk(t, "", nil)
	return out
}
