package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	accepts := func(v *jsonschema.Schema, x any) bool { return validateWith(v, deepCopy(x)).IsValid() }
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
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	// 3000 instances a schema; 600 under -race or -short. The check runs in one
	// goroutine, so the race detector finds nothing in it that a run without it would
	// miss, and makes it about ten times slower (7 s for 3000). The full count runs
	// without -race (go test ./schema: under 1 s), and .ci/run's fuzzing runs
	// FuzzStrictEquivalence, the same property, on 10 000 inputs more. 600 still draw
	// both outcomes of each schema often (checked below).
	n := 3000
	if raceEnabled || testing.Short() {
		n = 600
	}
	for i, raw := range equivalenceSchemas {
		s := MustFromJSON(raw)
		accepted := 0
		for range n {
			inst := genInstance(r, s.doc(), s.doc(), 0)
			if validateWith(s.validator, deepCopy(inst)).IsValid() {
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

// fanOutSchema is the shape of a $ref expansion bomb: n definitions, each
// with two properties that both refer to the next, so 2^n paths lead to the
// last one. required makes both properties required (nothing nullable below
// the root), else both are optional.
func fanOutSchema(n int, required bool) []byte {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"root":{"$ref":"#/$defs/d0","title":"t"}},"$defs":{`)
	for i := range n {
		req := ""
		if required {
			req = `,"required":["a","b"]`
		}
		fmt.Fprintf(&b, `"d%d":{"type":"object","properties":{"a":{"$ref":"#/$defs/d%d","title":"t"},"b":{"$ref":"#/$defs/d%d"}}%s},`, i, i+1, i+1, req)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}}}`, n)
	return []byte(b.String())
}

// TestStrictBudget: a schema whose $ref graph stands for exponentially many
// places is projected (or refused) with work bounded by the limits, not by
// the number of places: before, 30 fanned-out definitions did not finish.
func TestStrictBudget(t *testing.T) {
	t.Parallel()
	t.Run("fan-out over the limit", func(t *testing.T) {
		raw := fanOutSchema(30, false)
		s := MustFromJSON(raw)
		doc := s.doc()
		var st walkStats
		var p Projection
		start := time.Now()
		p = projectWith(doc, &st)
		elapsed := time.Since(start)
		if !errors.Is(p.Err, ErrNotStrictable) || !errors.Is(p.Err, ErrStrictTooComplex) {
			t.Fatalf("Err = %v, want ErrNotStrictable and ErrStrictTooComplex", p.Err)
		}
		if want := "schema cannot be made strict: too complex for strict mode: following $ref, more than 5000 keys would be made nullable (the limit)"; p.Err.Error() != want {
			t.Fatalf("Err = %q\nwant  %q", p.Err, want)
		}
		if p.JSON != nil || p.Nullable != nil || p.nulls != nil {
			t.Fatal("a refused projection carries a result")
		}
		// The walk lists 5000 places, each reached through at most two
		// subschemas not yet visited there.
		if st.visits > 3*maxStrictNullable {
			t.Fatalf("the walk visited %d subschemas, want at most %d", st.visits, 3*maxStrictNullable)
		}
		// The count above is what is checked; the time, well under the 100 ms
		// the issue asks for (about 10 ms, 20-40 ms with -race on a busy
		// machine), is only logged, so that a loaded machine fails nothing.
		t.Logf("%d bytes of schema: refused after %d visits in %v", len(raw), st.visits, elapsed)
		// The public entry point says the same, and callers send the schema
		// non-strict.
		if err := s.Strict().Err; !errors.Is(err, ErrStrictTooComplex) {
			t.Fatalf("Strict().Err = %v", err)
		}
	})
	t.Run("fan-out with nothing nullable below", func(t *testing.T) {
		s := MustFromJSON(fanOutSchema(30, true))
		var st walkStats
		p := projectWith(s.doc(), &st)
		if p.Err != nil {
			t.Fatal(p.Err)
		}
		if !slices.Equal(p.Nullable, []string{"/root"}) {
			t.Fatalf("Nullable = %q, want [/root]", p.Nullable)
		}
		if st.visits != 1 {
			t.Fatalf("the walk visited %d subschemas, want 1: no definition holds a nullable key", st.visits)
		}
	})
	t.Run("fan-out of alternatives at one place", func(t *testing.T) {
		// Each level is an anyOf of two references to the next: 2^30
		// routes, all to the same place.
		var b strings.Builder
		b.WriteString(`{"type":"object","properties":{"x":{"$ref":"#/$defs/d0"}},"required":["x"],"$defs":{`)
		for i := range 30 {
			fmt.Fprintf(&b, `"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
		}
		b.WriteString(`"d30":{"type":"object","properties":{"k":{"type":"string"}}}}}`)
		s := MustFromJSON([]byte(b.String()))
		var st walkStats
		p := projectWith(s.doc(), &st)
		if p.Err != nil {
			t.Fatal(p.Err)
		}
		if !slices.Equal(p.Nullable, []string{"/x/k"}) {
			t.Fatalf("Nullable = %q, want [/x/k]", p.Nullable)
		}
		if st.visits > 200 {
			t.Fatalf("the walk visited %d subschemas, want about 3 a level", st.visits)
		}
		// strip looks at each subschema once per value too.
		v := map[string]any{"x": map[string]any{"k": nil}}
		st = walkStats{}
		if !p.nulls.strip(v, &st) || len(v["x"].(map[string]any)) != 0 {
			t.Fatalf("strip left %v", v)
		}
		if st.visits > 200 {
			t.Fatalf("strip visited %d subschemas, want about 3 a level", st.visits)
		}
	})
	t.Run("recursive anyOf, deep instance", func(t *testing.T) {
		// X is A or B, and both hold an x that is X again: strip used to
		// look at X twice for each level of the value, 2^depth in all.
		s := MustFromJSON([]byte(`{"type":"object","properties":{"x":{"$ref":"#/$defs/X"}},"$defs":{
			"X":{"anyOf":[{"$ref":"#/$defs/A"},{"$ref":"#/$defs/B"}]},
			"A":{"type":"object","properties":{"x":{"$ref":"#/$defs/X"},"a":{"type":"string"}}},
			"B":{"type":"object","properties":{"x":{"$ref":"#/$defs/X"},"b":{"type":"string"}}}}}`))
		p := s.Strict()
		if p.Err != nil {
			t.Fatal(p.Err)
		}
		const depth = 60
		inner := map[string]any{"a": nil, "b": nil}
		v := map[string]any{"x": inner}
		for range depth {
			inner["x"] = map[string]any{"a": nil, "b": nil}
			inner = inner["x"].(map[string]any)
		}
		var st walkStats
		if !p.nulls.strip(v, &st) {
			t.Fatal("strip removed nothing")
		}
		if len(inner) != 0 {
			t.Fatalf("the deepest level kept %v", inner)
		}
		if st.visits > 10*depth {
			t.Fatalf("strip visited %d subschemas for %d levels", st.visits, depth)
		}
	})
	t.Run("visit limit", func(t *testing.T) {
		// More alternatives at one place than the walk may visit, each
		// with the same nullable key: few places, too much work.
		root := &nullTree{}
		for range maxStrictVisits + 1 {
			root.alts = append(root.alts, &nullTree{keys: []string{"k"}})
		}
		var st walkStats
		_, err := root.paths(&st)
		if !errors.Is(err, ErrStrictTooComplex) || !strings.Contains(err.Error(), "more than 100000 subschemas") {
			t.Fatalf("err = %v", err)
		}
		if st.visits != maxStrictVisits+1 {
			t.Fatalf("visits = %d", st.visits)
		}
	})
	t.Run("pointer bytes limit", func(t *testing.T) {
		// 20 definitions nested through one property with a 10 KB name:
		// one nullable key, but 2 MB of JSON pointers on the way to it.
		name := strings.Repeat("n", 10<<10)
		var b strings.Builder
		b.WriteString(`{"type":"object","properties":{"r":{"$ref":"#/$defs/d0"}},"required":["r"],"$defs":{`)
		for i := range 20 {
			fmt.Fprintf(&b, `"d%d":{"type":"object","properties":{%q:{"$ref":"#/$defs/d%d"}},"required":[%q]},`, i, name, i+1, name)
		}
		b.WriteString(`"d20":{"type":"object","properties":{"k":{"type":"string"}}}}}`)
		p := MustFromJSON([]byte(b.String())).Strict()
		if !errors.Is(p.Err, ErrStrictTooComplex) || !strings.Contains(p.Err.Error(), "more than 1048576 bytes of JSON pointers") {
			t.Fatalf("Err = %v", p.Err)
		}
	})
}

// routePaths is paths as it was first written: every route from the root
// that does not enter a tree already on it, walked out in full. It takes
// time exponential in the schema, so it serves only to check paths on
// small graphs.
func routePaths(root *nullTree) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(t *nullTree, at string, route []*nullTree)
	walk = func(t *nullTree, at string, route []*nullTree) {
		if slices.Contains(route, t) {
			return
		}
		route = append(route, t)
		for _, k := range t.keys {
			if p := at + "/" + escapePointer(k); !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
		for _, name := range t.names {
			walk(t.props[name], at+"/"+escapePointer(name), route)
		}
		if t.items != nil {
			walk(t.items, at+"/*", route)
		}
		for _, a := range t.alts {
			walk(a, at, route)
		}
	}
	walk(root, "", nil)
	return out
}

// randomNullTree builds a graph of up to n trees with random keys,
// properties, items and alternatives; cyclic lets edges go anywhere,
// otherwise only forward.
func randomNullTree(r *rand.Rand, n int, cyclic bool) *nullTree {
	nodes := make([]*nullTree, n)
	for i := range nodes {
		nodes[i] = &nullTree{}
	}
	for i, t := range nodes {
		pick := func() *nullTree {
			if cyclic {
				return nodes[r.IntN(n)]
			}
			if i+1 == n {
				return nil
			}
			return nodes[i+1+r.IntN(n-i-1)]
		}
		if r.IntN(3) == 0 {
			t.keys = []string{[]string{"a", "b", "c"}[r.IntN(3)]}
		}
		for range r.IntN(3) {
			if c := pick(); c != nil {
				t.child([]string{"a", "b", "x"}[r.IntN(3)], c)
			}
		}
		if r.IntN(4) == 0 {
			t.items = pick()
		}
		for range r.IntN(3) {
			if c := pick(); c != nil {
				t.alts = append(t.alts, c)
			}
		}
	}
	return nodes[0]
}

// TestNullablePathsMatchRoutes: the bounded walk lists exactly what walking
// out every route lists, in the same order, with and without cycles.
func TestNullablePathsMatchRoutes(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	for _, cyclic := range []bool{false, true} {
		for range 3000 {
			g := randomNullTree(r, 2+r.IntN(12), cyclic)
			got, err := g.paths(nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := routePaths(g); !slices.Equal(got, want) {
				t.Fatalf("cyclic %v: paths = %q, every route gives %q", cyclic, got, want)
			}
		}
	}
}

// routeStrip is strip as it was first written: every alternative followed
// at each value, as often as routes lead to it; exponential in the depth of
// the value for some schemas, so only a reference for small ones.
func routeStrip(t *nullTree, v any, seen map[*nullTree]bool) bool {
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
				removed = routeStrip(c, x, nil) || removed
			}
		}
	case []any:
		if t.items != nil {
			for _, x := range v {
				removed = routeStrip(t.items, x, nil) || removed
			}
		}
	}
	if len(t.alts) > 0 {
		if seen == nil {
			seen = map[*nullTree]bool{}
		}
		seen[t] = true
		for _, a := range t.alts {
			removed = routeStrip(a, v, seen) || removed
		}
	}
	return removed
}

func randomValue(r *rand.Rand, depth int) any {
	switch {
	case depth > 4 || r.IntN(4) == 0:
		return []any{nil, nil, "s", json.Number("1")}[r.IntN(4)]
	case r.IntN(4) == 0:
		a := []any{}
		for range r.IntN(3) {
			a = append(a, randomValue(r, depth+1))
		}
		return a
	}
	m := map[string]any{}
	for _, k := range []string{"a", "b", "c", "x"} {
		if r.IntN(2) == 0 {
			m[k] = randomValue(r, depth+1)
		}
	}
	return m
}

// TestStripMatchesRoutes: strip, looking at each tree once per value,
// removes exactly what following every route removes.
func TestStripMatchesRoutes(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	for _, cyclic := range []bool{false, true} {
		for range 3000 {
			g := randomNullTree(r, 2+r.IntN(12), cyclic)
			v := randomValue(r, 0)
			want, got := deepCopy(v), deepCopy(v)
			removedWant := routeStrip(g, want, nil)
			if removedGot := g.strip(got, nil); removedGot != removedWant || !reflect.DeepEqual(got, want) {
				t.Fatalf("cyclic %v: strip gives %v (removed %v), every route %v (removed %v)", cyclic, got, removedGot, want, removedWant)
			}
		}
	}
}
