package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestFromJSONRootMustBeObject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  string
	}{
		{"array type", `{"type":"array","items":{"type":"string"}}`},
		{"string type", `{"type":"string"}`},
		{"no type, properties only", `{"properties":{"a":{"type":"string"}}}`},
		{"empty schema", `{}`},
		{"nullable object", `{"type":["object","null"]}`},
		{"anyOf root", `{"anyOf":[{"type":"object"},{"type":"string"}]}`},
		{"boolean schema", `true`},
		{"JSON array", `[{"type":"object"}]`},
		{"JSON string", `"object"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := FromJSON([]byte(tc.raw))
			if !errors.Is(err, ErrRootNotObject) {
				t.Fatalf("FromJSON(%s) = %v, %v; want ErrRootNotObject", tc.raw, s, err)
			}
			if err.Error() != "function tool parameters must use a root object schema" {
				t.Fatalf("message = %q", err.Error())
			}
		})
	}
	for _, ok := range []string{`{"type":"object"}`, `{"type":["object"]}`, `{"type":"object","properties":{}}`} {
		if _, err := FromJSON([]byte(ok)); err != nil {
			t.Errorf("FromJSON(%s): %v", ok, err)
		}
	}
}

func TestFromJSONRefusesBadSchemas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, raw, wantSubstr string
	}{
		{"not JSON", `{"type":"object",}`, "schema is not valid JSON"},
		{"bad type name", `{"type":"object","properties":{"a":{"type":"strin"}}}`, "meta-schema"},
		{"minimum not a number", `{"type":"object","properties":{"a":{"type":"integer","minimum":"1"}}}`, "meta-schema"},
		{"required not an array", `{"type":"object","required":"a"}`, "meta-schema"},
		{"remote $ref", `{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}`, `unresolved $ref "https://example.com/a.json"`},
		{"dangling local $ref", `{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`, "unresolved $ref"},
		{"unknown dialect", `{"$schema":"https://example.com/my-dialect","type":"object"}`, "meta-schema"},
		{"bad pattern", `{"type":"object","properties":{"a":{"type":"string","pattern":"("}}}`, "compile schema"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromJSON([]byte(tc.raw))
			if err == nil || !strings.Contains(err.Error(), tc.wantSubstr) {
				t.Fatalf("FromJSON(%s) error = %v; want it to mention %q", tc.raw, err, tc.wantSubstr)
			}
			if errors.Is(err, ErrRootNotObject) {
				t.Fatalf("error %v wrongly matches ErrRootNotObject", err)
			}
		})
	}
}

func TestFromJSONAcceptsDialectsAndLocalRefs(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"$ref":"#/definitions/A"}},"definitions":{"A":{"type":"string"}}}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"$defs":{"A":{"type":"string"}}}`,
		`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"integer","minimum":1,"exclusiveMinimum":true}}}`,
		`{"type":"object","properties":{"node":{"$ref":"#/$defs/node"}},"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}}}}}`,
	} {
		if _, err := FromJSON([]byte(raw)); err != nil {
			t.Errorf("FromJSON(%s): %v", raw, err)
		}
	}
}

func TestJSONIsByteForByte(t *testing.T) {
	t.Parallel()
	raw := []byte("{\n  \"type\" : \"object\",\n  \"required\": [\"n\"],\n  \"properties\": {\"n\": {\"maximum\": 10, \"type\": \"integer\", \"minimum\": 1}}\n}\n")
	s := MustFromJSON(raw)
	got := s.JSON()
	if !bytes.Equal(got, raw) {
		t.Fatalf("JSON() = %q\nwant     %q", got, raw)
	}
	got[0] = 'X'
	raw[1] = 'X'
	if !bytes.Equal(s.JSON(), []byte("{\n  \"type\" : \"object\",\n  \"required\": [\"n\"],\n  \"properties\": {\"n\": {\"maximum\": 10, \"type\": \"integer\", \"minimum\": 1}}\n}\n")) {
		t.Fatal("changing the returned or the given slice changed the Schema")
	}
}

func TestValidatorsAreSharedByContent(t *testing.T) {
	t.Parallel()
	a := MustFromJSON(fileSchema)
	b := MustFromJSON(bytes.Clone(fileSchema))
	if a.validator != b.validator {
		t.Fatal("two schemas with the same bytes hold different compiled validators")
	}
	c := MustFromJSON(append(bytes.Clone(fileSchema), ' '))
	if c.validator == a.validator {
		t.Fatal("different bytes share a validator")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	s := MustFromJSON(fileSchema)
	tests := []struct {
		name   string
		args   string
		leaves []Leaf
	}{
		{"valid", `{"path":"a","mode":"read","options":{"depth":1}}`, nil},
		{"not JSON", `{"path":`, []Leaf{{"/", "not valid JSON: unexpected EOF"}}},
		{"not an object", `[1]`, []Leaf{{"/", "value is array but should be object"}}},
		{"nested leaf", `{"path":"a","mode":"read","options":{"depth":"deep"}}`, []Leaf{{"/options/depth", "value is string but should be integer"}}},
		{"key with a slash", `{"path":"a","mode":"read","a/b":1}`, []Leaf{{"/a~1b", "property is not allowed (not declared in the schema)"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Validate([]byte(tc.args))
			if tc.leaves == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate = %v, want *ValidationError", err)
			}
			if len(ve.Leaves) != len(tc.leaves) {
				t.Fatalf("leaves = %v, want %v", ve.Leaves, tc.leaves)
			}
			for i := range tc.leaves {
				if ve.Leaves[i] != tc.leaves[i] {
					t.Fatalf("leaves = %v, want %v", ve.Leaves, tc.leaves)
				}
			}
		})
	}
}

func TestValidationErrorListsAtMostTen(t *testing.T) {
	t.Parallel()
	s := MustFromJSON([]byte(`{"type":"object","additionalProperties":{"type":"integer"}}`))
	err := s.Validate([]byte(`{"a":"x","b":"x","c":"x","d":"x","e":"x","f":"x","g":"x","h":"x","i":"x","j":"x","k":"x","l":"x"}`))
	want := "arguments do not match the schema:"
	for _, k := range "abcdefghij" {
		want += "\n- /" + string(k) + ": value is string but should be integer"
	}
	want += "\n... and 2 more"
	if err == nil || err.Error() != want {
		t.Fatalf("error =\n%v\nwant\n%s", err, want)
	}
}

// TestConcurrentUse runs every entry point of one Schema from several
// goroutines; go test -race checks the lazily built parts.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	s := MustFromJSON([]byte(`{"type":"object","properties":{"q":{"type":"string"},"n":{"type":"integer"}},"required":["q"]}`))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if p := s.Strict(); p.Err != nil {
					t.Error(p.Err)
					return
				}
				a, err := s.Parse("```json\n{\"q\":\"x\",\"n\":null,}\n```", ParseOptions{Strict: true})
				if err != nil {
					t.Error(err)
					return
				}
				if err := s.Validate(a.JSON); err != nil {
					t.Error(err)
					return
				}
				if _, err := FromJSON(s.JSON()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestFromJSONRefusesDuplicateKeys(t *testing.T) {
	t.Parallel()
	_, err := FromJSON([]byte(`{"type":"object","properties":{"a":{"type":"string","type":"integer"}}}`))
	if err == nil || !strings.Contains(err.Error(), `duplicate key "type"`) {
		t.Fatalf("FromJSON with a duplicate key = %v", err)
	}
}

// TestValidateConcurrently validates against one schema from many goroutines, with
// arguments the fast path leaves to kaptinlin's validator, which compiles a pattern and
// a patternProperties key on first use (under -race, a race without validateWith's lock).
func TestValidateConcurrently(t *testing.T) {
	t.Parallel()
	s := MustFromJSON([]byte(`{"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z]+$"}},
		"patternProperties":{"^x-":{"type":"string","pattern":"^v"}}}`))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			args := fmt.Sprintf(`{"id":"BAD%d","x-a":"w"}`, i)
			if err := s.Validate(json.RawMessage(args)); err == nil {
				t.Errorf("%s: valid, want refused", args)
			}
		})
	}
	wg.Wait()
}
