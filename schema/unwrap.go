package schema

import (
	"strings"
)

// argPlan is what the ladder needs to know about a schema beyond its
// validator: where it wants objects or arrays, so that a field holding
// stringified JSON there can be decoded, and where it wants integers, so
// that an integer written 2.0 reaches the tool as 2.
type argPlan struct {
	shape *shapeNode
}

// JSON types, as bits.
const (
	tObject = 1 << iota
	tArray
	tString
	tNumber // "number" or "integer"
	tOther  // "boolean" or "null"
	tAll    = tObject | tArray | tString | tNumber | tOther
)

// shapeNode mirrors one subschema. alts are schemas that apply to the same
// value: $ref targets and anyOf/oneOf/allOf branches. Through $ref the nodes
// can form cycles; every walk carries a guard.
type shapeNode struct {
	types   uint8 // from "type"; tAll when the schema has none
	hasType bool
	props   map[string]*shapeNode
	items   *shapeNode
	alts    []*shapeNode

	// For integral numbers (integral.go). alts split into the schemas that
	// all apply (refs: $ref, allOf) and the lists of which one or more do
	// (groups: each anyOf, each oneOf).
	intOnly    bool       // "type" admits numbers as integers only
	additional *shapeNode // a schema-valued additionalProperties, unless patternProperties is there too
	prefix     int        // items applies from this index on (the length of prefixItems)
	refs       []*shapeNode
	groups     [][]*shapeNode
	acc        uint8 // accepts(), computed once for the whole plan
	mustInt    bool  // a number valid here is an integer, by some intOnly that certainly applies
}

func newArgPlan(doc *object) *argPlan {
	b := &shapeBuilder{refs: map[string]*shapeNode{}}
	root := &shapeNode{}
	b.refs["#"] = root
	// Every $ref target exists before anything is filled, so references
	// resolve whatever order the document declares things in.
	var defs []member
	var nodes []*shapeNode
	for _, defsKey := range []string{"$defs", "definitions"} {
		if d, ok := doc.get(defsKey); ok {
			if d, ok := d.(*object); ok {
				for _, m := range d.members {
					n := &shapeNode{}
					b.refs["#/"+defsKey+"/"+escapePointer(m.key)] = n
					defs, nodes = append(defs, m), append(nodes, n)
				}
			}
		}
	}
	b.fill(root, doc)
	for i, m := range defs {
		b.fill(nodes[i], m.value)
	}
	b.all = append(b.all, root)
	b.all = append(b.all, nodes...)
	b.solve()
	return &argPlan{shape: root}
}

type shapeBuilder struct {
	refs map[string]*shapeNode
	all  []*shapeNode // every node filled
}

func (b *shapeBuilder) node() *shapeNode {
	n := &shapeNode{}
	b.all = append(b.all, n)
	return n
}

func (b *shapeBuilder) fill(n *shapeNode, node any) {
	n.types = tAll
	o, ok := node.(*object)
	if !ok {
		return
	}
	if t, ok := o.get("type"); ok {
		n.hasType = true
		n.types = 0
		var names []any
		switch t := t.(type) {
		case string:
			names = []any{t}
		case []any:
			names = t
		}
		integer, number := false, false
		for _, name := range names {
			switch name {
			case "object":
				n.types |= tObject
			case "array":
				n.types |= tArray
			case "string":
				n.types |= tString
			case "integer":
				n.types |= tNumber
				integer = true
			case "number":
				n.types |= tNumber
				number = true
			default:
				n.types |= tOther
			}
		}
		n.intOnly = integer && !number
	}
	if props, ok := o.get("properties"); ok {
		if po, ok := props.(*object); ok {
			n.props = make(map[string]*shapeNode, len(po.members))
			for _, m := range po.members {
				c := b.node()
				b.fill(c, m.value)
				n.props[m.key] = c
			}
		}
	}
	if ap, ok := o.get("additionalProperties"); ok && !o.has("patternProperties") {
		if _, ok := ap.(*object); ok {
			n.additional = b.node()
			b.fill(n.additional, ap)
		}
	}
	if items, ok := o.get("items"); ok {
		if _, ok := items.(*object); ok {
			n.items = b.node()
			b.fill(n.items, items)
		}
	}
	if prefix, ok := o.get("prefixItems"); ok {
		list, _ := prefix.([]any)
		n.prefix = len(list)
	}
	if ref, ok := o.get("$ref"); ok {
		if s, _ := ref.(string); b.refs[s] != nil {
			n.alts = append(n.alts, b.refs[s])
			n.refs = append(n.refs, b.refs[s])
		}
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if list, ok := o.get(k); ok {
			branches, _ := list.([]any)
			var group []*shapeNode
			for _, br := range branches {
				c := b.node()
				b.fill(c, br)
				n.alts = append(n.alts, c)
				group = append(group, c)
			}
			if k == "allOf" {
				n.refs = append(n.refs, group...)
			} else if len(group) > 0 {
				n.groups = append(n.groups, group)
			}
		}
	}
}

// accepts returns the JSON types a value here may have, as far as "type"
// keywords say.
func (n *shapeNode) accepts(seen map[*shapeNode]bool) uint8 {
	if n.hasType || len(n.alts) == 0 {
		return n.types
	}
	if seen[n] {
		return 0
	}
	seen[n] = true
	var t uint8
	for _, a := range n.alts {
		t |= a.accepts(seen)
	}
	return t
}

// prop collects the nodes that describe property name of a value here.
func (n *shapeNode) prop(name string, seen map[*shapeNode]bool, out []*shapeNode) []*shapeNode {
	if seen[n] {
		return out
	}
	seen[n] = true
	if c := n.props[name]; c != nil {
		out = append(out, c)
	}
	for _, a := range n.alts {
		out = a.prop(name, seen, out)
	}
	return out
}

func (n *shapeNode) item(seen map[*shapeNode]bool, out []*shapeNode) []*shapeNode {
	if seen[n] {
		return out
	}
	seen[n] = true
	if n.items != nil {
		out = append(out, n.items)
	}
	for _, a := range n.alts {
		out = a.item(seen, out)
	}
	return out
}

// unwrapFields decodes, in place, string values where the schema wants an
// object or an array and no string: a model that stringified a nested
// object ("options": "{\"deep\": true}"). One level of encoding per field;
// it reports whether it changed anything.
func (n *shapeNode) unwrapFields(v any) bool {
	return unwrapAt(v, []*shapeNode{n})
}

func unwrapAt(v any, nodes []*shapeNode) bool {
	changed := false
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			var children []*shapeNode
			seen := map[*shapeNode]bool{}
			for _, n := range nodes {
				children = n.prop(k, seen, children)
			}
			if len(children) == 0 {
				continue
			}
			if d, ok := decodeStringified(x, children); ok {
				v[k], x, changed = d, d, true
			}
			changed = unwrapAt(x, children) || changed
		}
	case []any:
		var children []*shapeNode
		seen := map[*shapeNode]bool{}
		for _, n := range nodes {
			children = n.item(seen, children)
		}
		if len(children) == 0 {
			return false
		}
		for i, x := range v {
			if d, ok := decodeStringified(x, children); ok {
				v[i], x, changed = d, d, true
			}
			changed = unwrapAt(x, children) || changed
		}
	}
	return changed
}

// decodeStringified decodes x when it is a string holding the object or
// array that nodes want, and none of them accepts a string.
func decodeStringified(x any, nodes []*shapeNode) (any, bool) {
	s, ok := x.(string)
	if !ok {
		return nil, false
	}
	var want uint8
	for _, n := range nodes {
		want |= n.accepts(map[*shapeNode]bool{})
	}
	if want&tString != 0 || want&(tObject|tArray) == 0 {
		return nil, false
	}
	s = strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(s, "{") && want&tObject != 0:
	case strings.HasPrefix(s, "[") && want&tArray != 0:
	default:
		return nil, false
	}
	d, err := decodeArgs([]byte(s))
	if err != nil {
		return nil, false
	}
	return d, true
}
