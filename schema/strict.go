package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	// Err says why the schema cannot be made strict, or that it is too
	// complex to (ErrStrictTooComplex); the caller then sends the original
	// schema with strict off.
	Err error

	nulls *nullTree
}

// ErrNotStrictable is matched (errors.Is) by every Projection.Err.
var ErrNotStrictable = errors.New("schema cannot be made strict")

// ErrStrictTooComplex is matched (errors.Is), with ErrNotStrictable, by a
// Projection.Err that reports a schema over the projection's work limits:
// one whose $ref graph expands to more places than a strict projection may
// list (see the limits below). Callers treat it like any other Err: the
// schema goes out non-strict, or is refused where strict is required.
var ErrStrictTooComplex = errors.New("too complex for strict mode")

// Limits on the walk that lists Projection.Nullable. Through $ref a schema of
// a few kilobytes can stand for exponentially many places (definitions whose
// two properties each refer to the next: 2^n paths for n definitions), and
// listing them took minutes, or did not end. The walk (paths) skips what it
// would list again and what lists nothing, so it is linear in what it lists
// for a schema without recursion, and stops at the first limit it passes,
// so Strict answers in milliseconds whatever the schema.
const (
	// maxStrictNullable bounds len(Projection.Nullable). OpenAI's strict
	// mode allows 5000 object properties in a schema, so a projection with
	// more optional places than that is not one a provider takes anyway.
	maxStrictNullable = 5000
	// maxStrictVisits bounds the (subschema, place) pairs the walk visits,
	// as openai-agents bounds its strict conversion to 100,000 nodes.
	maxStrictVisits = 100_000
	// maxStrictPointerBytes bounds the total length of the JSON pointers
	// the walk builds, which long property names nested deep would
	// otherwise make quadratic in the schema's size.
	maxStrictPointerBytes = 1 << 20
)

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
// or a type union other than [T, "null"]. It cannot either, with Err
// matching ErrStrictTooComplex, when listing Nullable passes one of the
// limits above. Provider size limits (number of properties, nesting depth,
// enum sizes) are not otherwise checked here.
func project(doc *object) Projection {
	return projectWith(doc, nil)
}

// projectWith is project, adding the work of the Nullable walk to st when
// st is not nil.
func projectWith(doc *object, st *walkStats) Projection {
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
	nullablePaths, err := root.paths(st)
	if err != nil {
		return Projection{Err: fmt.Errorf("%w: %w", ErrNotStrictable, err)}
	}
	return Projection{
		JSON:     encodeOrdered(out),
		Nullable: nullablePaths,
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

// walkStats counts the work of the walks over a nullTree, for tests.
type walkStats struct {
	visits int // (subschema, place) pairs visited by paths; (subschema, value) pairs by strip
}

func (st *walkStats) visit() {
	if st != nil {
		st.visits++
	}
}

// strip deletes null values at keys made nullable and reports whether it
// removed any.
func (t *nullTree) strip(v any, st *walkStats) bool {
	return stripAt(v, []*nullTree{t}, st)
}

// stripAt strips v, which the trees in ts (and their alternatives) all
// describe. Each tree is looked at once per value however many alternatives
// lead to it, so the work is the size of v times the size of the schema: an
// anyOf of two definitions that both recur would otherwise double it at
// every level of v.
func stripAt(v any, ts []*nullTree, st *walkStats) bool {
	switch v.(type) {
	case map[string]any, []any:
	default:
		return false // nothing below a scalar
	}
	var all []*nullTree
	var seen map[*nullTree]bool // past a few trees; before, all is searched
	for stack := slices.Clone(ts); len(stack) > 0; {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch {
		case seen != nil:
			if seen[t] {
				continue
			}
			seen[t] = true
		case slices.Contains(all, t):
			continue
		case len(all) == 8:
			seen = map[*nullTree]bool{t: true}
			for _, a := range all {
				seen[a] = true
			}
		}
		st.visit()
		all = append(all, t)
		for i := len(t.alts) - 1; i >= 0; i-- {
			stack = append(stack, t.alts[i])
		}
	}
	removed := false
	switch v := v.(type) {
	case map[string]any:
		for _, t := range all {
			for _, k := range t.keys {
				if x, ok := v[k]; ok && x == nil {
					delete(v, k)
					removed = true
				}
			}
		}
		var children map[string][]*nullTree
		for _, t := range all {
			for _, name := range t.names {
				if x, ok := v[name]; ok && x != nil {
					if children == nil {
						children = map[string][]*nullTree{}
					}
					children[name] = append(children[name], t.props[name])
				}
			}
		}
		for name, cs := range children {
			removed = stripAt(v[name], cs, st) || removed
		}
	case []any:
		var items []*nullTree
		for _, t := range all {
			if t.items != nil {
				items = append(items, t.items)
			}
		}
		if len(items) > 0 {
			for _, x := range v {
				removed = stripAt(x, items, st) || removed
			}
		}
	}
	return removed
}

// paths lists the keys made nullable as JSON pointers, in schema order, or
// says which limit listing them passed. The list is that of every route from
// the root that does not enter a subschema already on it (so recursion is
// listed once around), but the walk does not take every route: a subschema
// below which no key was made nullable is not entered, and one already
// walked at the same place is not walked again unless a subschema that cut
// that walk short (being on its route) is off the route now. Without cycles
// nothing is ever cut, so each (subschema, place) is walked once, and the
// work is linear in what is listed; the limits bound the rest.
func (t *nullTree) paths(st *walkStats) ([]string, error) {
	w := &pathWalk{
		live:    t.live(),
		emitted: map[string]bool{},
		done:    map[walkKey][]*nullTree{},
		onRoute: map[*nullTree]bool{},
		st:      st,
	}
	if _, err := w.walk(t, ""); err != nil {
		return nil, err
	}
	return w.out, nil
}

type walkKey struct {
	t  *nullTree
	at string
}

type pathWalk struct {
	live    map[*nullTree]bool // trees from which some key made nullable is reachable
	emitted map[string]bool
	// done holds the (tree, place) pairs walked, each with the trees that
	// cut its walk short: on its route, so not entered again. While all of
	// them are on the route, walking it again lists nothing new.
	done    map[walkKey][]*nullTree
	onRoute map[*nullTree]bool
	out     []string
	visits  int
	bytes   int
	st      *walkStats
}

// walk lists what is below t at place at, and returns the trees above t on
// the route that cut it short.
func (w *pathWalk) walk(t *nullTree, at string) ([]*nullTree, error) {
	if !w.live[t] {
		return nil, nil
	}
	if w.onRoute[t] {
		return []*nullTree{t}, nil
	}
	key := walkKey{t, at}
	if cuts, ok := w.done[key]; ok && w.allOnRoute(cuts) {
		return cuts, nil
	}
	w.st.visit()
	if w.visits++; w.visits > maxStrictVisits {
		return nil, fmt.Errorf("%w: following $ref, listing its nullable keys visits more than %d subschemas (the limit)",
			ErrStrictTooComplex, maxStrictVisits)
	}
	if w.bytes += len(at); w.bytes > maxStrictPointerBytes {
		return nil, fmt.Errorf("%w: following $ref, listing its nullable keys builds more than %d bytes of JSON pointers (the limit)",
			ErrStrictTooComplex, maxStrictPointerBytes)
	}
	for _, k := range t.keys {
		p := at + "/" + escapePointer(k)
		if w.emitted[p] {
			continue
		}
		if len(w.out) == maxStrictNullable {
			return nil, fmt.Errorf("%w: following $ref, more than %d keys would be made nullable (the limit)",
				ErrStrictTooComplex, maxStrictNullable)
		}
		w.emitted[p] = true
		w.out = append(w.out, p)
	}
	w.onRoute[t] = true
	var cuts []*nullTree
	next := func(c *nullTree, at string) error {
		more, err := w.walk(c, at)
		for _, m := range more {
			if m != t && !slices.Contains(cuts, m) {
				cuts = append(cuts, m)
			}
		}
		return err
	}
	err := func() error {
		for _, name := range t.names {
			if err := next(t.props[name], at+"/"+escapePointer(name)); err != nil {
				return err
			}
		}
		if t.items != nil {
			if err := next(t.items, at+"/*"); err != nil {
				return err
			}
		}
		for _, a := range t.alts {
			if err := next(a, at); err != nil {
				return err
			}
		}
		return nil
	}()
	delete(w.onRoute, t)
	w.done[key] = cuts
	return cuts, err
}

func (w *pathWalk) allOnRoute(ts []*nullTree) bool {
	for _, t := range ts {
		if !w.onRoute[t] {
			return false
		}
	}
	return true
}

// live returns the trees reachable from t from which a tree with keys can
// be reached, in time linear in the graph (cycles included).
func (t *nullTree) live() map[*nullTree]bool {
	parents := map[*nullTree][]*nullTree{t: nil}
	var keyed []*nullTree
	stack := []*nullTree{t}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if len(n.keys) > 0 {
			keyed = append(keyed, n)
		}
		edge := func(c *nullTree) {
			if _, ok := parents[c]; !ok {
				stack = append(stack, c)
			}
			parents[c] = append(parents[c], n)
		}
		for _, name := range n.names {
			edge(n.props[name])
		}
		if n.items != nil {
			edge(n.items)
		}
		for _, a := range n.alts {
			edge(a)
		}
	}
	live := map[*nullTree]bool{}
	for len(keyed) > 0 {
		n := keyed[len(keyed)-1]
		keyed = keyed[:len(keyed)-1]
		if live[n] {
			continue
		}
		live[n] = true
		keyed = append(keyed, parents[n]...)
	}
	return live
}
