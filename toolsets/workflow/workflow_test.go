package workflow

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSubmitSpecWrapsTheSchema(t *testing.T) {
	t.Parallel()
	result := `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"properties":{"item":{"$ref":"#/$defs/item"},"tags":{"type":"array","items":{"type":"string"}}},` +
		`"required":["item"],"$defs":{"item":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}}`
	s, err := SubmitSpec(json.RawMessage(result))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"object","properties":{"result":{"type":"object","properties":{"item":{"$ref":"#/$defs/item"},` +
		`"tags":{"type":"array","items":{"type":"string"}}},"required":["item"]}},"required":["result"],"additionalProperties":false,` +
		`"$defs":{"item":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}}`
	if got := string(s.Params.JSON()); got != want {
		t.Errorf("parameters\n got %s\nwant %s", got, want)
	}
	if !s.Strict || s.Name != SubmitName || s.Params.Strict().Err != nil {
		t.Errorf("spec %+v, strict projection error %v", s, s.Params.Strict().Err)
	}
	// The turn validates against the wrapper: a reference into $defs still holds.
	if err := s.Params.Validate(json.RawMessage(`{"result":{"item":{"name":1}}}`)); err == nil || !strings.Contains(err.Error(), "- /result/item/name: ") {
		t.Errorf("a bad name: %v", err)
	}
	if err := s.Params.Validate(json.RawMessage(`{"result":{"item":{"name":"x"},"tags":["a"]}}`)); err != nil {
		t.Errorf("a good result: %v", err)
	}
	if v, err := Value(json.RawMessage(`{"result":{"a":1}}`)); err != nil || string(v) != `{"a":1}` {
		t.Errorf("Value: %s %v", v, err)
	}
}

func TestCheckResultSchemaNamesThePath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		schema, want string
	}{
		{`{"type":"array","items":{"type":"string"}}`, `at /: a result schema's root must be an object schema ("type": "object")`},
		{`{"properties":{"a":{"type":"string"}}}`, `root must be an object schema`},
		{`{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},"uniqueItems":true}}}`,
			`cannot be sent strict: at /properties/tags: strict mode does not support "uniqueItems"`},
		{`{"type":"object"}`, `cannot be sent strict: at /: an object with no properties would only allow {} in strict mode`},
		{`{"type":"object","properties":{"a":{"type":["string","integer"]}}}`, `at /properties/a: a type union other than [T, "null"]`},
		{`{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}`, `remote ones are never loaded`},
		{`{"type":"object","properties":{"next":{"$ref":"#"}}}`, `("$ref": "#") cannot be kept`},
		{`{"type":"object","properties":{"a":{"type":"string","minLength":"x"}}}`, `at /: `},
	} {
		err := CheckResultSchema(json.RawMessage(tc.schema))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.schema, err, tc.want)
		}
	}
	if err := CheckResultSchema(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"]}`)); err != nil {
		t.Errorf("a good schema: %v", err)
	}
}

func TestDefinitionCheck(t *testing.T) {
	t.Parallel()
	good := json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}`)
	def := Definition{Title: "", Tasks: []TaskDef{
		{ID: "a", Instructions: "A", ResultSchema: good},
		{ID: "a", Instructions: "again", ResultSchema: good},
		{ID: "b.c", Instructions: "B", ResultSchema: good},
		{ID: "d", Instructions: "use {{tasks.a.result}} and {{tasks.e.result.x}} and {{tasks.a.bad}}", ResultSchema: good, DependsOn: []string{"e", "e", "nope"}},
		{ID: "e", Instructions: "E", ResultSchema: json.RawMessage(`{"type":"object","properties":{"t":{"type":"array","items":{"type":"string"},"uniqueItems":true}}}`),
			DependsOn: []string{"d"}, MaxAttempts: 9},
		{ID: "f", Instructions: " ", DependsOn: []string{"f"}},
	}}
	err := def.Check()
	if err == nil {
		t.Fatal("a bad definition passed")
	}
	for _, want := range []string{
		"title is empty",
		"task a: the id is used twice",
		`task 3: task id "b.c" has '.' at position 2`,
		"task d: instructions use the result of a, which d does not depend on",
		"task d: {{tasks.a.bad}} is not a reference",
		"task d: names the dependency e twice",
		`task d: depends on "nope", which is not a task of this workflow`,
		`task e: result_schema: cannot be sent strict: at /properties/t: strict mode does not support "uniqueItems"`,
		"task e: max_attempts 9 is out of range",
		"task f: instructions are empty",
		"task f: depends on itself",
		"task f: result_schema is missing",
		"the dependencies form a cycle: d → e → d",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q:\n%v", want, err)
		}
	}
	ok := Definition{Title: "t", Tasks: []TaskDef{
		{ID: "a", Instructions: "A", ResultSchema: good},
		{ID: "b", Instructions: "after {{ tasks.a.result.x }}", ResultSchema: good, DependsOn: []string{"a"}, MaxAttempts: 3},
	}}
	if err := ok.Check(); err != nil {
		t.Errorf("a good definition: %v", err)
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	results := map[string]json.RawMessage{
		"a": json.RawMessage(`{ "name": "bleve", "stars": 10, "tags": ["search"], "owner": {"login": "blevesearch"} }`),
	}
	got := Render("All: {{tasks.a.result}}. Name: {{tasks.a.result.name}}. Stars: {{ tasks.a.result.stars }}. "+
		"Tags: {{tasks.a.result.tags}}. Login: {{tasks.a.result.owner.login}}. Missing: {{tasks.a.result.nope}}. "+
		"Other: {{tasks.z.result}}.", results)
	want := `All: {"name":"bleve","stars":10,"tags":["search"],"owner":{"login":"blevesearch"}}. Name: bleve. Stars: 10. ` +
		`Tags: ["search"]. Login: blevesearch. Missing: null. Other: {{tasks.z.result}}.`
	if got != want {
		t.Errorf("Render\n got %s\nwant %s", got, want)
	}
}
