package schema

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Integral numbers. JSON Schema counts 2.0 (and 2e0, 1.0E2) as an integer, so
// {"limit": 2.0} passes "type": "integer"; but a tool that decodes the
// arguments into an int field then fails ("cannot unmarshal number 2.0 into
// ... int"). Parse therefore writes such a number as the plain integer it is
// (2, 100) where the schema says integer, after validation and before
// encoding Args.JSON. The value is the same number, so what validated still
// validates; only its spelling changes, as with the sorted keys and dropped
// whitespace of Args.JSON. It is a normalization, not a repair: the model's
// text was already valid, so no rung is recorded.

// maxPlainDigits bounds the integers written out: 20 digits hold every int64
// and uint64. A longer one (1e400) is left as the model wrote it, which a
// tool that cannot hold it refuses as it would have anyway.
const maxPlainDigits = 20

// solve computes, once for the plan, each node's acc (what accepts reports,
// as a least fixpoint over alts, so cycles need no guard) and mustInt.
// Both are worklist passes, linear in the number of nodes and edges.
func (b *shapeBuilder) solve() {
	parents := map[*shapeNode][]*shapeNode{}
	var work []*shapeNode
	for _, n := range b.all {
		if n.hasType || len(n.alts) == 0 {
			n.acc = n.types
			work = append(work, n)
			continue
		}
		for _, a := range n.alts {
			parents[a] = append(parents[a], n)
		}
	}
	for len(work) > 0 {
		a := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range parents[a] {
			if p.acc|a.acc != p.acc {
				p.acc |= a.acc
				work = append(work, p)
			}
		}
	}

	// mustInt holds where the node's own type admits only integers, where
	// one of its refs (which all apply) is mustInt, or where, in one of its
	// groups, every branch that can accept a number is mustInt (a valid
	// number matched one of them).
	refParents := map[*shapeNode][]*shapeNode{}
	type group struct {
		owner *shapeNode
		left  int // branches that may take a number and are not yet mustInt
	}
	var groups []group
	inGroups := map[*shapeNode][]int{}
	for _, n := range b.all {
		if n.intOnly {
			n.mustInt = true
			work = append(work, n)
		}
		for _, r := range n.refs {
			refParents[r] = append(refParents[r], n)
		}
		for _, g := range n.groups {
			i := len(groups)
			groups = append(groups, group{owner: n})
			for _, br := range g {
				if br.acc&tNumber != 0 {
					groups[i].left++
					inGroups[br] = append(inGroups[br], i)
				}
			}
		}
	}
	set := func(n *shapeNode) {
		if !n.mustInt {
			n.mustInt = true
			work = append(work, n)
		}
	}
	for len(work) > 0 {
		x := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range refParents[x] {
			set(p)
		}
		for _, i := range inGroups[x] {
			if groups[i].left--; groups[i].left == 0 {
				set(groups[i].owner)
			}
		}
	}
}

// integralize rewrites, in place, every integral number in v written with a
// fraction or an exponent where the schema says integer (see the top of this
// file), and reports whether it changed any.
func (n *shapeNode) integralize(v any) bool {
	if !hasLooseNumber(v) {
		return false // the usual case: nothing to look up
	}
	_, changed := integralAt(v, []*shapeNode{n})
	return changed
}

// integralAt returns v with its integral numbers rewritten, where nodes all
// describe v. It follows what certainly applies to v: properties (or a
// schema-valued additionalProperties), items past any prefixItems, $ref and
// allOf, and of an anyOf or oneOf the one branch whose type can take v, if
// only one can. Schemas it does not follow only keep a number as written.
func integralAt(v any, nodes []*shapeNode) (any, bool) {
	all := applying(v, nodes)
	switch x := v.(type) {
	case json.Number:
		for _, n := range all {
			if n.mustInt {
				if s, ok := plainInteger(string(x)); ok {
					return json.Number(s), true
				}
				break
			}
		}
	case map[string]any:
		changed := false
		for k, e := range x {
			var children []*shapeNode
			for _, n := range all {
				if c := n.props[k]; c != nil {
					children = append(children, c)
				} else if n.additional != nil {
					children = append(children, n.additional)
				}
			}
			if len(children) == 0 {
				continue
			}
			if r, ok := integralAt(e, children); ok {
				x[k], changed = r, true
			}
		}
		return x, changed
	case []any:
		changed := false
		for i, e := range x {
			var children []*shapeNode
			for _, n := range all {
				if n.items != nil && i >= n.prefix {
					children = append(children, n.items)
				}
			}
			if len(children) == 0 {
				continue
			}
			if r, ok := integralAt(e, children); ok {
				x[i], changed = r, true
			}
		}
		return x, changed
	}
	return v, false
}

// applying closes nodes over what certainly applies to v with them.
func applying(v any, nodes []*shapeNode) []*shapeNode {
	var bit uint8
	switch v.(type) {
	case map[string]any:
		bit = tObject
	case []any:
		bit = tArray
	case string:
		bit = tString
	case json.Number:
		bit = tNumber
	default:
		bit = tOther
	}
	var all []*shapeNode
	seen := map[*shapeNode]bool{}
	stack := append([]*shapeNode(nil), nodes...)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[n] {
			continue
		}
		seen[n] = true
		all = append(all, n)
		stack = append(stack, n.refs...)
		for _, g := range n.groups {
			var only *shapeNode
			count := 0
			for _, br := range g {
				if br.acc&bit != 0 {
					only, count = br, count+1
				}
			}
			if count == 1 {
				stack = append(stack, only)
			}
		}
	}
	return all
}

// hasLooseNumber reports whether v holds a number written with a fraction or
// an exponent.
func hasLooseNumber(v any) bool {
	switch x := v.(type) {
	case json.Number:
		return strings.ContainsAny(string(x), ".eE")
	case map[string]any:
		for _, e := range x {
			if hasLooseNumber(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasLooseNumber(e) {
				return true
			}
		}
	}
	return false
}

// plainInteger returns the JSON number s, written with a fraction or an
// exponent, as the plain integer it equals: 2.0 is 2, 1.0E2 is 100, 250e-1 is
// 25, -0.0 is 0. It reports false for a number already plain, for one that
// is not an integer (2.5, 1e-400), and for an integer of more than
// maxPlainDigits digits (1e400), which it never writes out.
func plainInteger(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	mant, expText, hasExp := strings.Cut(strings.TrimPrefix(s, "-"), "e")
	if !hasExp {
		mant, expText, hasExp = strings.Cut(mant, "E")
	}
	whole, frac, hasFrac := strings.Cut(mant, ".")
	if !hasExp && !hasFrac {
		return "", false
	}
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return "0", true // any zero, whatever its exponent
	}
	exp := 0
	if hasExp {
		e := strings.TrimPrefix(expText, "+")
		if len(strings.TrimPrefix(e, "-")) > 4 {
			return "", false // |exponent| of 10,000 or more: a tiny fraction or a huge integer
		}
		var err error
		if exp, err = strconv.Atoi(e); err != nil {
			return "", false
		}
	}
	exp -= len(frac)
	if exp < 0 {
		cut := len(digits) + exp // digits before the point
		if cut <= 0 || strings.Trim(digits[cut:], "0") != "" {
			return "", false
		}
		digits = digits[:cut]
	} else {
		if len(digits)+exp > maxPlainDigits {
			return "", false
		}
		digits += strings.Repeat("0", exp)
	}
	if len(digits) > maxPlainDigits {
		return "", false
	}
	if neg {
		return "-" + digits, true
	}
	return digits, true
}
