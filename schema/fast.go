package schema

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// A fastNode is a schema node compiled for the keywords nearly every tool schema is made
// of: type, properties, required, additionalProperties, items, a string enum, numeric
// bounds, and length and size limits. kaptinlin's validator builds an evaluation tree
// for every instance (about 20 µs and 200 allocations for a five-property schema, more
// than a whole bus round trip); a fastNode walks the decoded arguments with no
// allocation.
//
// It only ever says "valid". When it cannot tell, because the instance breaks a rule or
// sits where its arithmetic is not exact, the caller asks kaptinlin, whose verdict and
// error text stand. So a fastNode must never accept what kaptinlin refuses: FuzzFastAgrees
// checks exactly that. A schema with any keyword outside this set gets no fastNode.
type fastNode struct {
	types        typeSet
	props        map[string]*fastNode
	required     []string
	noAdditional bool
	additional   *fastNode // nil: any additional property
	items        *fastNode // nil: any item
	enum         []string  // with hasEnum: the only values allowed
	hasEnum      bool
	min, max     *fastBound
	minLen       int // -1: none, also for the three below
	maxLen       int
	minItems     int
	maxItems     int
}

type typeSet uint8

const (
	fObject typeSet = 1 << iota
	fArray
	fString
	fInteger
	fNumber
	fBoolean
	fNull
	fAny typeSet = 0 // no "type" keyword
)

var typeNames = map[string]typeSet{
	"object": fObject, "array": fArray, "string": fString, "integer": fInteger,
	"number": fNumber, "boolean": fBoolean, "null": fNull,
}

func (t typeSet) allows(u typeSet) bool { return t == fAny || t&u != 0 }

// fastBound is a minimum or maximum. Bounds and values of at most maxExactDigits
// characters compare exactly as float64: distinct decimals that short stay distinct
// and in order, as long as they are in float64's normal range (fastFloat).
type fastBound struct {
	v         float64
	exclusive bool
}

const maxExactDigits = 15

// annotations are keywords that never change whether an instance is valid. format is
// one here: this package never asserts it (docs/protocol.md).
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$comment": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "format": true,
}

// compileFast compiles a schema document, or returns nil when any part of it is outside
// what a fastNode knows.
func compileFast(raw []byte) *fastNode {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil
	}
	if d, ok := doc["$schema"]; ok {
		// Older drafts read some keywords differently (draft-04's boolean
		// exclusiveMaximum): those schemas keep the full validator.
		uri, _ := d.(string)
		switch strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(uri, "https://"), "http://"), "#") {
		case "json-schema.org/draft/2020-12/schema":
		default:
			return nil
		}
		delete(doc, "$schema")
	}
	n, ok := fastCompile(doc)
	if !ok {
		return nil
	}
	return n
}

func fastCompile(v any) (*fastNode, bool) {
	switch s := v.(type) {
	case bool:
		// true is the schema that allows anything; false, nothing (left to kaptinlin).
		return &fastNode{minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}, s
	case map[string]any:
		n := &fastNode{minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}
		for k, val := range s {
			if annotations[k] {
				continue
			}
			if !n.keyword(k, val) {
				return nil, false
			}
		}
		return n, true
	}
	return nil, false
}

// keyword compiles one keyword into n, reporting false for one it does not know or a
// value it does not expect.
func (n *fastNode) keyword(k string, val any) bool {
	switch k {
	case "type":
		switch t := val.(type) {
		case string:
			n.types = typeNames[t]
			return n.types != 0
		case []any:
			for _, e := range t {
				name, _ := e.(string)
				if typeNames[name] == 0 {
					return false
				}
				n.types |= typeNames[name]
			}
			return n.types != 0
		}
		return false
	case "properties":
		props, ok := val.(map[string]any)
		if !ok {
			return false
		}
		n.props = make(map[string]*fastNode, len(props))
		for name, p := range props {
			c, ok := fastCompile(p)
			if !ok {
				return false
			}
			n.props[name] = c
		}
		return true
	case "required":
		list, ok := val.([]any)
		if !ok {
			return false
		}
		for _, e := range list {
			name, ok := e.(string)
			if !ok {
				return false
			}
			n.required = append(n.required, name)
		}
		return true
	case "additionalProperties":
		if b, ok := val.(bool); ok {
			n.noAdditional = !b
			return true
		}
		c, ok := fastCompile(val)
		n.additional = c
		return ok
	case "items":
		if _, ok := val.([]any); ok {
			return false // a tuple, as older drafts wrote it
		}
		c, ok := fastCompile(val)
		n.items = c
		return ok
	case "enum":
		list, ok := val.([]any)
		if !ok {
			return false
		}
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				return false
			}
			n.enum = append(n.enum, s)
		}
		n.hasEnum = true
		return true
	case "minimum", "exclusiveMinimum":
		b, ok := fastBoundOf(val, k == "exclusiveMinimum")
		if ok && n.min != nil {
			return false // both: left to kaptinlin
		}
		n.min = b
		return ok
	case "maximum", "exclusiveMaximum":
		b, ok := fastBoundOf(val, k == "exclusiveMaximum")
		if ok && n.max != nil {
			return false
		}
		n.max = b
		return ok
	case "minLength":
		return fastCount(val, &n.minLen)
	case "maxLength":
		return fastCount(val, &n.maxLen)
	case "minItems":
		return fastCount(val, &n.minItems)
	case "maxItems":
		return fastCount(val, &n.maxItems)
	}
	return false
}

func fastBoundOf(val any, exclusive bool) (*fastBound, bool) {
	num, ok := val.(json.Number)
	if !ok || len(num) > maxExactDigits {
		return nil, false
	}
	f, ok := fastFloat(string(num))
	if !ok {
		return nil, false
	}
	return &fastBound{v: f, exclusive: exclusive}, true
}

// minNormal is the smallest positive normal float64. Below it float64 keeps fewer
// than 15 digits, and below half the smallest subnormal a nonzero number reads as 0.
const minNormal = 0x1p-1022

// fastFloat reads a JSON number as float64, reporting false for one outside float64's
// normal range: one that overflows to ±Inf, a nonzero one that is subnormal or
// underflows to 0 (1e-400 reads as 0, and would pass "maximum": 0), and a zero with an
// exponent too long for kaptinlin's reading. Such numbers are left to kaptinlin, which
// reads every number exactly and calls one with an exponent past a million no number
// at all. A zero is only ever 0 (or -0, equal to it).
func fastFloat(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil:
		return 0, false // out of range (±Inf), or not a number
	case f == 0:
		return 0, isZeroLiteral(s)
	case math.Abs(f) < minNormal:
		return 0, false
	}
	return f, true
}

// isZeroLiteral reports whether the JSON number s is a zero (0, -0.0, 0e5) with an
// exponent of at most four digits.
func isZeroLiteral(s string) bool {
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	if len(strings.TrimLeft(exp, "+-")) > 4 {
		return false
	}
	return strings.Trim(mant, "-0.") == ""
}

func fastCount(val any, dst *int) bool {
	num, ok := val.(json.Number)
	if !ok {
		return false
	}
	c, err := strconv.Atoi(string(num))
	if err != nil || c < 0 {
		return false
	}
	*dst = c
	return true
}

// valid reports whether v, decoded with json.Number, is certainly valid; false means
// "ask the full validator", not "invalid".
func (n *fastNode) valid(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		if !n.types.allows(fObject) || n.hasEnum {
			return false
		}
		for _, name := range n.required {
			if _, ok := x[name]; !ok {
				return false
			}
		}
		for k, val := range x {
			if c, ok := n.props[k]; ok {
				if !c.valid(val) {
					return false
				}
				continue
			}
			if n.noAdditional {
				return false
			}
			if n.additional != nil && !n.additional.valid(val) {
				return false
			}
		}
		return true
	case []any:
		if !n.types.allows(fArray) || n.hasEnum || (n.minItems >= 0 && len(x) < n.minItems) || (n.maxItems >= 0 && len(x) > n.maxItems) {
			return false
		}
		if n.items != nil {
			for _, e := range x {
				if !n.items.valid(e) {
					return false
				}
			}
		}
		return true
	case string:
		if !n.types.allows(fString) {
			return false
		}
		if n.hasEnum {
			found := false
			for _, e := range n.enum {
				if e == x {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
		if n.minLen >= 0 || n.maxLen >= 0 {
			// Lengths count characters; for ASCII that is bytes. Others are left to
			// kaptinlin.
			for i := 0; i < len(x); i++ {
				if x[i] >= 0x80 {
					return false
				}
			}
			if (n.minLen >= 0 && len(x) < n.minLen) || (n.maxLen >= 0 && len(x) > n.maxLen) {
				return false
			}
		}
		return true
	case json.Number:
		switch {
		case n.hasEnum:
			return false
		case n.types.allows(fNumber):
		case n.types.allows(fInteger):
			if !isIntegerLiteral(string(x)) {
				return false // 1.0 and 1e2 are integers too, by kaptinlin's reckoning or not
			}
		default:
			return false
		}
		// Every number, bounded or not, must be in float64's normal range: outside
		// it, float64 no longer orders numbers as kaptinlin's exact reading does,
		// and far outside it kaptinlin reads no number at all.
		f, ok := fastFloat(string(x))
		if !ok {
			return false
		}
		if n.min == nil && n.max == nil {
			return true
		}
		if len(x) > maxExactDigits {
			return false
		}
		if b := n.min; b != nil && (f < b.v || (b.exclusive && f == b.v)) {
			return false
		}
		if b := n.max; b != nil && (f > b.v || (b.exclusive && f == b.v)) {
			return false
		}
		return true
	case bool:
		return n.typeOnly(fBoolean)
	case nil:
		return n.typeOnly(fNull)
	}
	return false
}

// typeOnly is valid for an instance of type t that only n's type and enum constrain.
func (n *fastNode) typeOnly(t typeSet) bool {
	return n.types.allows(t) && !n.hasEnum
}

// isIntegerLiteral reports whether s is a JSON number with no fraction or exponent.
func isIntegerLiteral(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
