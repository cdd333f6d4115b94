package schema

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestIntegralFloatArguments: JSON Schema counts 2.0 as an integer, so it
// validates, and a tool with an int field then failed to decode it. Parse
// writes it as 2 wherever the schema certainly says integer, and nowhere else.
func TestIntegralFloatArguments(t *testing.T) {
	t.Parallel()
	s := MustFromJSON([]byte(`{"type":"object","properties":{"limit":{"type":"integer","minimum":1}},"required":["limit"]}`))
	args, err := s.Parse(`{"limit": 2.0}`, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tool struct {
		Limit int `json:"limit"`
	}
	if err := json.Unmarshal(args.JSON, &tool); err != nil || tool.Limit != 2 {
		t.Fatalf("Parse = %s, which a tool decodes to %+v, %v", args.JSON, tool, err)
	}
	if !slices.Equal(args.Rungs, []Rung{RungAsIs}) {
		t.Fatalf("rungs %v, want [as_is]: valid text is not repaired", args.Rungs)
	}

	const defs = `"$defs":{"n":{"type":"integer"},"obj":{"type":"object","properties":{"n":{"type":"integer"},"f":{"type":"number"}}}}`
	tests := []struct{ name, schema, in, want string }{
		{"spellings", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"},"d":{"type":"integer"},"e":{"type":"integer"},"f":{"type":"integer"},"g":{"type":"integer"}}}`,
			`{"a":2e0,"b":1.0E2,"c":-3.000,"d":250e-1,"e":-0.0,"f":0.0001e4,"g":7}`, `{"a":2,"b":100,"c":-3,"d":25,"e":0,"f":1,"g":7}`},
		{"nullable integer", `{"type":"object","properties":{"n":{"type":["integer","null"]}}}`, `{"n":5.0}`, `{"n":5}`},
		{"nested and in arrays", `{"type":"object","properties":{"o":{"type":"object","properties":{"n":{"type":"integer"},"list":{"type":"array","items":{"type":"integer"}}}}}}`,
			`{"o":{"n":1.0,"list":[1.0,2,3e0]}}`, `{"o":{"list":[1,2,3],"n":1}}`},
		{"additionalProperties", `{"type":"object","additionalProperties":{"type":"integer"}}`, `{"x":4.0,"y":5.00}`, `{"x":4,"y":5}`},
		{"prefixItems then items", `{"type":"object","properties":{"t":{"type":"array","prefixItems":[{"type":"number"}],"items":{"type":"integer"}}}}`,
			`{"t":[1.0,2.0,3.0]}`, `{"t":[1.0,2,3]}`},
		{"through $ref", `{"type":"object","properties":{"n":{"$ref":"#/$defs/n"},"o":{"$ref":"#/$defs/obj"}},` + defs + `}`,
			`{"n":6.0,"o":{"n":7.0,"f":8.0}}`, `{"n":6,"o":{"f":8.0,"n":7}}`},
		{"allOf", `{"type":"object","properties":{"n":{"allOf":[{"type":"number"},{"type":"integer"}]}}}`, `{"n":9.0}`, `{"n":9}`},
		{"anyOf of integer or null", `{"type":"object","properties":{"n":{"anyOf":[{"type":"integer"},{"type":"null"}]}}}`, `{"n":10.0}`, `{"n":10}`},
		{"anyOf where only the integer takes numbers", `{"type":"object","properties":{"n":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/n"}]}},` + defs + `}`, `{"n":11.0}`, `{"n":11}`},
		{"oneOf: the one object branch", `{"type":"object","properties":{"o":{"oneOf":[{"type":"string"},{"type":"object","properties":{"n":{"type":"integer"}}}]}}}`,
			`{"o":{"n":12.0}}`, `{"o":{"n":12}}`},
		// Not certainly an integer: kept as written.
		{"number", `{"type":"object","properties":{"n":{"type":"number"}}}`, `{"n":2.0}`, `{"n":2.0}`},
		{"no type", `{"type":"object","properties":{"n":{}}}`, `{"n":2.0}`, `{"n":2.0}`},
		{"integer or number", `{"type":"object","properties":{"n":{"anyOf":[{"type":"integer"},{"type":"number"}]}}}`, `{"n":2.0}`, `{"n":2.0}`},
		{"two object branches", `{"type":"object","properties":{"o":{"anyOf":[{"type":"object","properties":{"n":{"type":"integer"}}},{"type":"object","properties":{"m":{"type":"integer"}}}]}}}`,
			`{"o":{"n":2.0}}`, `{"o":{"n":2.0}}`},
		{"undeclared key", `{"type":"object","properties":{"n":{"type":"integer"}}}`, `{"m":2.0}`, `{"m":2.0}`},
		{"patternProperties", `{"type":"object","patternProperties":{"^x":{"type":"number"}},"additionalProperties":{"type":"integer"}}`, `{"x":2.0}`, `{"x":2.0}`},
		// Too long to write out: left as the model wrote it, not rounded.
		{"huge", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}}}`,
			`{"a":1e400,"b":1e20,"c":1e19}`, `{"a":1e400,"b":1e20,"c":10000000000000000000}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := MustFromJSON([]byte(tc.schema))
			args, err := s.Parse(tc.in, ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if string(args.JSON) != tc.want {
				t.Fatalf("Parse(%s) = %s, want %s", tc.in, args.JSON, tc.want)
			}
			if err := s.Validate(args.JSON); err != nil {
				t.Fatalf("%s no longer validates: %v", args.JSON, err)
			}
		})
	}
}

func TestPlainInteger(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"2.0": "2", "2e0": "2", "1.0E2": "100", "-3.000": "-3", "250e-1": "25", "-0.0": "0", "0e99999": "0",
		"0.0001e4": "1", "1E+2": "100", "123.4500e2": "12345", "1e19": "10000000000000000000",
		"2": "", "-7": "", "2.5": "", "1e-400": "", "1e20": "", "1e400": "", "1e99999": "", "5e-1": "", "10e-2": "",
	} {
		got, ok := plainInteger(in)
		if want == "" {
			if ok {
				t.Errorf("plainInteger(%s) = %s, want it left as written", in, got)
			}
			continue
		}
		if !ok || got != want {
			t.Errorf("plainInteger(%s) = %s, %v, want %s", in, got, ok, want)
		}
	}
}
