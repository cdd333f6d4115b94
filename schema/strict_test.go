package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kaptinlin/jsonschema"
)

type strictOptions struct {
	Recursive bool `json:"recursive" jsonschema_description:"walk subdirectories"`
	Depth     *int `json:"depth,omitempty" jsonschema:"minimum=1"`
}

type strictArgs struct {
	Path    string        `json:"path" jsonschema:"minLength=1"`
	Mode    string        `json:"mode,omitempty" jsonschema:"enum=read,enum=write,default=read"`
	Limit   *int          `json:"limit,omitempty" jsonschema:"minimum=1,maximum=1000"`
	Tags    []string      `json:"tags,omitempty" jsonschema:"maxItems=3"`
	Options strictOptions `json:"options"`
}

// richSchema exercises every rewrite: oneOf, default, enum, const, $ref with
// recursion, a property that already accepts null, a format strict mode
// lacks, open objects, arrays of objects.
var richSchema = []byte(`{
 "type":"object",
 "properties":{
   "mode":{"type":"string","enum":["fast","slow"],"default":"fast"},
   "target":{"oneOf":[{"type":"string"},{"type":"integer"}]},
   "node":{"$ref":"#/$defs/node"},
   "kind":{"const":"x"},
   "note":{"type":["string","null"]},
   "url":{"type":"string","format":"uri"},
   "items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"label":{"type":"string"}},"required":["id"]}}
 },
 "required":["mode"],
 "$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"child":{"$ref":"#/$defs/node"}},"required":["name"]}}
}`)

func TestStrictGolden(t *testing.T) {
	tests := []struct {
		name     string
		schema   *Schema
		json     string
		nullable []string
	}{
		{
			name:   "from Go type",
			schema: MustFor[strictArgs](),
			json: `{"type":"object","properties":{` +
				`"path":{"type":"string","minLength":1},` +
				`"mode":{"type":["string","null"],"enum":["read","write",null]},` +
				`"limit":{"type":["integer","null"],"minimum":1,"maximum":1000},` +
				`"tags":{"type":["array","null"],"items":{"type":"string"},"maxItems":3},` +
				`"options":{"type":"object","properties":{"recursive":{"type":"boolean","description":"walk subdirectories"},"depth":{"type":["integer","null"],"minimum":1}},"required":["recursive","depth"],"additionalProperties":false}` +
				`},"required":["path","mode","limit","tags","options"],"additionalProperties":false}`,
			nullable: []string{"/mode", "/limit", "/tags", "/options/depth"},
		},
		{
			name:   "raw with every rewrite",
			schema: MustFromJSON(richSchema),
			json: `{"type":"object","properties":{` +
				`"mode":{"type":"string","enum":["fast","slow"]},` +
				`"target":{"anyOf":[{"type":"string"},{"type":"integer"},{"type":"null"}]},` +
				`"node":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]},` +
				`"kind":{"anyOf":[{"const":"x","type":"string"},{"type":"null"}]},` +
				`"note":{"type":["string","null"]},` +
				`"url":{"type":["string","null"]},` +
				`"items":{"type":["array","null"],"items":{"type":"object","properties":{"id":{"type":"integer"},"label":{"type":["string","null"]}},"required":["id","label"],"additionalProperties":false}}` +
				`},"required":["mode","target","node","kind","note","url","items"],` +
				`"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"child":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["name","child"],"additionalProperties":false}},` +
				`"additionalProperties":false}`,
			nullable: []string{"/target", "/node", "/kind", "/url", "/items", "/node/child", "/items/*/label"},
		},
		{
			name:     "no properties at the root",
			schema:   MustFromJSON([]byte(`{"type":"object"}`)),
			json:     `{"type":"object","additionalProperties":false,"properties":{},"required":[]}`,
			nullable: nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.schema.Strict()
			if p.Err != nil {
				t.Fatal(p.Err)
			}
			if string(p.JSON) != tc.json {
				t.Fatalf("strict JSON =\n%s\nwant\n%s", p.JSON, tc.json)
			}
			if !slices.Equal(p.Nullable, tc.nullable) {
				t.Fatalf("Nullable = %q, want %q", p.Nullable, tc.nullable)
			}
			if _, err := FromJSON(p.JSON); err != nil {
				t.Fatalf("strict JSON is not a valid schema: %v", err)
			}
		})
	}
}

func TestStrictRefusals(t *testing.T) {
	tests := []struct{ name, schema, msg string }{
		{"map", `{"type":"object","properties":{"m":{"type":"object","additionalProperties":{"type":"integer"}}}}`,
			"at /properties/m: additionalProperties must be false in strict mode"},
		{"open by choice", `{"type":"object","additionalProperties":true}`,
			"at /: additionalProperties must be false in strict mode"},
		{"patternProperties", `{"type":"object","properties":{"m":{"type":"object","properties":{},"patternProperties":{"^x":{}}}}}`,
			`at /properties/m: strict mode does not support "patternProperties"`},
		{"free-form nested object", `{"type":"object","properties":{"meta":{"type":"object"}}}`,
			"at /properties/meta: an object with no properties would only allow {} in strict mode"},
		{"allOf", `{"type":"object","properties":{"a":{"allOf":[{"type":"string"},{"minLength":1}]}}}`,
			`at /properties/a: strict mode does not support "allOf"`},
		{"uniqueItems", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string"},"uniqueItems":true}}}`,
			`at /properties/a: strict mode does not support "uniqueItems"`},
		{"type union", `{"type":"object","properties":{"a":{"type":["string","integer"]}}}`,
			`at /properties/a: a type union other than [T, "null"] is not supported in strict mode; use anyOf`},
		{"no type", `{"type":"object","properties":{"a":{"description":"anything"}}}`,
			`at /properties/a: a schema needs a "type" (or anyOf, $ref, or an enum of one type) in strict mode`},
		{"mixed enum", `{"type":"object","properties":{"a":{"enum":["x",1]}}}`,
			`at /properties/a: a schema needs a "type" (or anyOf, $ref, or an enum of one type) in strict mode`},
		{"array without items", `{"type":"object","properties":{"a":{"type":"array"}}}`,
			"at /properties/a: an array needs an items schema in strict mode"},
		{"boolean subschema", `{"type":"object","properties":{"a":true}}`,
			"at /properties/a: boolean schemas are not supported in strict mode"},
		{"required but undeclared", `{"type":"object","properties":{},"required":["x"]}`,
			`at /: required property "x" is not declared in properties`},
		{"ref into properties", `{"type":"object","properties":{"a":{"type":"string"},"b":{"$ref":"#/properties/a"}}}`,
			`at /properties/b: $ref "#/properties/a": only references to # and #/$defs/... are supported`},
		{"ref with siblings", `{"type":"object","properties":{"a":{"$ref":"#/$defs/s","minLength":1}},"$defs":{"s":{"type":"string"}}}`,
			`at /properties/a: keyword "minLength" next to $ref is not supported in strict mode`},
		{"anyOf with siblings", `{"type":"object","properties":{"a":{"type":"string","anyOf":[{"minLength":1},{"maxLength":0}]}}}`,
			`at /properties/a: keyword "type" next to anyOf is not supported in strict mode`},
		{"nested $defs", `{"type":"object","properties":{"a":{"type":"object","properties":{},"$defs":{"x":{"type":"string"}}}}}`,
			"at /properties/a: $defs are supported at the root only"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := MustFromJSON([]byte(tc.schema)).Strict()
			if !errors.Is(p.Err, ErrNotStrictable) {
				t.Fatalf("Err = %v, want ErrNotStrictable", p.Err)
			}
			if want := "schema cannot be made strict: " + tc.msg; p.Err.Error() != want {
				t.Fatalf("Err = %q\nwant  %q", p.Err, want)
			}
			if p.JSON != nil || p.Nullable != nil {
				t.Fatalf("a refused projection carries JSON %s / Nullable %v", p.JSON, p.Nullable)
			}
		})
	}
}

func TestStrictIsComputedOnce(t *testing.T) {
	s := MustFromJSON(richSchema)
	a, b := s.Strict(), s.Strict()
	if &a.JSON[0] != &b.JSON[0] {
		t.Fatal("Strict recomputed the projection")
	}
}

// equivalenceSchemas are the schemas the strict-equivalence property is
// checked on. Their objects are closed, and their oneOf branches disjoint:
// closing an open object and turning oneOf into anyOf are the two rewrites
// that deliberately change what is accepted (see project), and the
// original schema still judges the result after the model answers.
var equivalenceSchemas = [][]byte{
	fileSchema,
	richClosed,
	[]byte(`{"type":"object","properties":{"level":{"type":"integer","enum":[1,2,3]},"ratio":{"type":"number","minimum":0,"exclusiveMaximum":1},"flag":{"type":"boolean"},"pair":{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2}},"required":["flag"],"additionalProperties":false}`),
	[]byte(`{"type":"object","properties":{"who":{"oneOf":[{"type":"string","minLength":2},{"type":"object","properties":{"id":{"type":"integer"},"alias":{"type":"string"}},"required":["id"],"additionalProperties":false}]},"note":{"type":["string","null"]},"fixed":{"const":"x"}},"additionalProperties":false}`),
}

var richClosed = []byte(`{
 "type":"object",
 "properties":{
   "mode":{"type":"string","enum":["fast","slow"],"default":"fast"},
   "target":{"oneOf":[{"type":"string"},{"type":"integer"}]},
   "node":{"$ref":"#/$defs/node"},
   "items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"label":{"type":"string"}},"required":["id"],"additionalProperties":false}}
 },
 "required":["mode"],
 "additionalProperties":false,
 "$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"child":{"$ref":"#/$defs/node"}},"required":["name"],"additionalProperties":false}}
}`)

// checkStrictEquivalence states the property. In strict mode a null at a
// key the projection made nullable means "absent", so instances are taken
// in that normal form (such nulls removed: I = strip(instance)). Then the
// original accepts I if and only if the strict schema accepts I' (I with
// every absent optional key set to null) and stripping I' gives back an
// instance the original accepts. Also, nothing the original accepts as
// given is refused by the strict schema once absent keys are filled.
func checkStrictEquivalence(t *testing.T, s *Schema, instance any) {
	t.Helper()
	p := s.Strict()
	if p.Err != nil {
		t.Fatal(p.Err)
	}
	strict, err := cachedValidator(p.JSON)
	if err != nil {
		t.Fatal(err)
	}
	accepts := func(v *jsonschema.Schema, x any) bool { return v.Validate(deepCopy(x)).IsValid() }
	fill := func(x any) any {
		c := deepCopy(x)
		fillAbsent(c, s.doc(), s.doc())
		return c
	}
	strip := func(x any) any {
		c := deepCopy(x)
		p.nulls.strip(c, nil)
		return c
	}

	norm := strip(instance)
	orig := accepts(s.validator, norm)
	filled := fill(norm)
	strictOK := accepts(strict, filled)
	roundTrip := accepts(s.validator, strip(filled))
	if orig != (strictOK && roundTrip) {
		in, _ := json.Marshal(norm)
		fi, _ := json.Marshal(filled)
		t.Fatalf("instance %s: original accepts=%v, strict accepts %s=%v, stripped accepted=%v", in, orig, fi, strictOK, roundTrip)
	}
	if accepts(s.validator, instance) && !accepts(strict, fill(instance)) {
		in, _ := json.Marshal(instance)
		t.Fatalf("instance %s: the original accepts it, the strict schema refuses it with absent keys filled", in)
	}
}

// fillAbsent sets every absent optional property to null, following the
// original schema (node) through $ref and object-typed anyOf/oneOf branches.
func fillAbsent(v any, node any, root *object) {
	o, ok := node.(*object)
	if !ok {
		return
	}
	if ref, ok := o.get("$ref"); ok {
		fillAbsent(v, resolveLocalRef(root, ref.(string)), root)
		return
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if branches, ok := o.get(k); ok {
			for _, b := range branches.([]any) {
				if bo := b.(*object); bo.has("properties") {
					if _, isMap := v.(map[string]any); isMap {
						fillAbsent(v, bo, root)
					}
				}
			}
		}
	}
	switch v := v.(type) {
	case map[string]any:
		props, _ := o.get("properties")
		po, _ := props.(*object)
		if po == nil {
			return
		}
		required := map[string]bool{}
		if r, ok := o.get("required"); ok {
			for _, n := range r.([]any) {
				required[n.(string)] = true
			}
		}
		for _, m := range po.members {
			if x, present := v[m.key]; present {
				fillAbsent(x, m.value, root)
			} else if !required[m.key] {
				v[m.key] = nil
			}
		}
	case []any:
		if items, ok := o.get("items"); ok {
			for _, x := range v {
				fillAbsent(x, items, root)
			}
		}
	}
}

func resolveLocalRef(root *object, ref string) any {
	if ref == "#" {
		return root
	}
	var defsKey, name string
	if _, err := fmt.Sscanf(ref, "#/%s", &name); err != nil {
		return nil
	}
	for _, k := range []string{"$defs/", "definitions/"} {
		if len(name) > len(k) && name[:len(k)] == k {
			defsKey, name = k[:len(k)-1], name[len(k):]
		}
	}
	defs, _ := root.get(defsKey)
	d, _ := defs.(*object)
	if d == nil {
		return nil
	}
	v, _ := d.get(name)
	return v
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(v))
		for k, x := range v {
			c[k] = deepCopy(x)
		}
		return c
	case []any:
		c := make([]any, len(v))
		for i, x := range v {
			c[i] = deepCopy(x)
		}
		return c
	}
	return v
}

// genInstance generates a value for a schema node: mostly shaped like the
// schema (so that valid instances are common), sometimes absent keys,
// nulls, wrong types and undeclared keys (so that invalid ones are too).
func genInstance(r *rand.Rand, node any, root *object, depth int) any {
	o, _ := node.(*object)
	if o == nil || depth > 4 || r.IntN(12) == 0 {
		return genScalar(r)
	}
	if ref, ok := o.get("$ref"); ok {
		return genInstance(r, resolveLocalRef(root, ref.(string)), root, depth+1)
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if b, ok := o.get(k); ok {
			list := b.([]any)
			return genInstance(r, list[r.IntN(len(list))], root, depth+1)
		}
	}
	if e, ok := o.get("enum"); ok {
		list := e.([]any)
		return list[r.IntN(len(list))]
	}
	if c, ok := o.get("const"); ok {
		return c
	}
	typ, _ := o.get("type")
	if list, ok := typ.([]any); ok {
		typ = list[r.IntN(len(list))]
	}
	switch typ {
	case "object":
		m := map[string]any{}
		if props, ok := o.get("properties"); ok {
			for _, p := range props.(*object).members {
				switch r.IntN(10) {
				case 0, 1, 2:
					// absent
				case 3:
					m[p.key] = nil
				default:
					m[p.key] = genInstance(r, p.value, root, depth+1)
				}
			}
		}
		if r.IntN(10) == 0 {
			m["undeclared"] = genScalar(r)
		}
		return m
	case "array":
		items, _ := o.get("items")
		n := r.IntN(4)
		a := make([]any, n)
		for i := range a {
			a[i] = genInstance(r, items, root, depth+1)
		}
		return a
	case "string":
		return []string{"", "a", "ab", "read", "fast", "x"}[r.IntN(6)]
	case "integer":
		return json.Number([]string{"-1", "0", "1", "2", "3", "2000"}[r.IntN(6)])
	case "number":
		return json.Number([]string{"0", "0.5", "1", "-0.25"}[r.IntN(4)])
	case "boolean":
		return r.IntN(2) == 0
	}
	return genScalar(r)
}

func genScalar(r *rand.Rand) any {
	return []any{nil, true, "s", json.Number("7"), json.Number("1.5"), []any{}, map[string]any{}}[r.IntN(7)]
}

func TestStrictEquivalenceProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i, raw := range equivalenceSchemas {
		s := MustFromJSON(raw)
		accepted := 0
		const n = 3000
		for range n {
			inst := genInstance(r, s.doc(), s.doc(), 0)
			if s.validator.Validate(deepCopy(inst)).IsValid() {
				accepted++
			}
			checkStrictEquivalence(t, s, inst)
		}
		// The property is only meaningful if both outcomes occur often.
		if accepted < n/20 || accepted > n-n/20 {
			t.Errorf("schema %d: %d of %d generated instances valid; the generator no longer tests both sides", i, accepted, n)
		}
	}
}

func FuzzStrictEquivalence(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for i, raw := range equivalenceSchemas {
		s := MustFromJSON(raw)
		for range 8 {
			b, _ := json.Marshal(genInstance(r, s.doc(), s.doc(), 0))
			f.Add(uint8(i), b)
		}
	}
	schemas := make([]*Schema, len(equivalenceSchemas))
	for i, raw := range equivalenceSchemas {
		schemas[i] = MustFromJSON(raw)
	}
	f.Fuzz(func(t *testing.T, which uint8, instance []byte) {
		v, err := decodeArgs(instance)
		if err != nil {
			return
		}
		checkStrictEquivalence(t, schemas[int(which)%len(schemas)], v)
	})
}
