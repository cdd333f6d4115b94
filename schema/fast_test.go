package schema

import (
	"testing"
)

// boundsSchema holds every bound and limit a fastNode knows.
var boundsSchema = []byte(`{"type":"object","properties":{
  "n":{"type":"number","exclusiveMinimum":0,"maximum":1.5},
  "i":{"type":["integer","null"],"minimum":-3,"exclusiveMaximum":10},
  "s":{"type":"string","minLength":2,"maxLength":4},
  "a":{"type":"array","minItems":1,"maxItems":2,"items":{"type":"integer"}},
  "any":{},
  "t":true,
  "m":{"type":"object","additionalProperties":{"type":"string","enum":["x","y"]}}
},"additionalProperties":false}`)

// fastSchemas are the schemas FuzzFastAgrees and TestFastAgrees draw from: each
// compiles to a fastNode.
var fastSchemas = [][]byte{fileSchema, noArgsSchema, numberSchema, benchSchema, boundsSchema,
	[]byte(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"day":{"type":"string","format":"date","description":"a day"}},"required":["day"]}`),
}

// TestFastCompiles: the keywords most tool schemas are made of compile; any other keyword,
// anywhere, leaves the schema to the full validator.
func TestFastCompiles(t *testing.T) {
	t.Parallel()
	for i, raw := range fastSchemas {
		if compileFast(raw) == nil {
			t.Errorf("fastSchemas[%d] did not compile: %s", i, raw)
		}
	}
	type reflected struct {
		Path  string   `json:"path" jsonschema:"minLength=1"`
		Limit int      `json:"limit,omitempty" jsonschema:"minimum=1,maximum=100"`
		Tags  []string `json:"tags,omitempty"`
		Deep  struct {
			On bool `json:"on"`
		} `json:"deep"`
	}
	if s := MustFor[reflected](); s.fast() == nil {
		t.Errorf("a schema from For did not compile: %s", s.JSON())
	}
	for _, raw := range []string{
		`{"type":"object","properties":{"p":{"type":"string","pattern":"^a"}}}`,
		`{"type":"object","properties":{"p":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string"}}}`,
		`{"type":"object","anyOf":[{"required":["a"]},{"required":["b"]}]}`,
		`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"number","maximum":3,"exclusiveMaximum":true}}}`,
		`{"type":"object","properties":{"t":{"type":"array","items":[{"type":"string"}]}}}`,
		`{"type":"object","properties":{"e":{"enum":[1,2]}}}`,
		`{"type":"object","properties":{"c":{"const":"x"}}}`,
		`{"type":"object","properties":{"n":{"type":"number","minimum":0.12345678901234567}}}`,
		`{"type":"object","properties":{"n":{"type":"number","minimum":1,"exclusiveMinimum":0}}}`,
		`{"type":"object","properties":{"x":false}}`,
		`{"type":"object","x-vendor":true}`,
	} {
		if compileFast([]byte(raw)) != nil {
			t.Errorf("compiled, want the full validator: %s", raw)
		}
	}
}

// TestFastAgrees: where the fastNode says valid, kaptinlin does too; and for what tools
// are usually sent, the fastNode answers without kaptinlin.
func TestFastAgrees(t *testing.T) {
	t.Parallel()
	tests := []struct {
		schema []byte
		args   string
		fast   bool // the fastNode alone accepts it
	}{
		{fileSchema, `{"path":"a","mode":"read"}`, true},
		{fileSchema, `{"path":"a","mode":"read","limit":3,"tags":["x"],"options":{"recursive":true,"depth":2}}`, true},
		{fileSchema, `{"path":"","mode":"read"}`, false},
		{fileSchema, `{"path":"a","mode":"append"}`, false},
		{fileSchema, `{"path":"a"}`, false},
		{fileSchema, `{"path":"a","mode":"read","extra":1}`, false},
		{fileSchema, `{"path":"a","mode":"read","limit":0}`, false},
		{fileSchema, `{"path":"a","mode":"read","limit":2.5}`, false},
		{fileSchema, `{"path":"a","mode":"read","limit":2.0}`, false}, // an integer, but left to kaptinlin
		{fileSchema, `{"path":"a","mode":"read","options":{"deep":1}}`, false},
		{fileSchema, `{"path":"a","mode":"read","tags":["x",1]}`, false},
		{fileSchema, `{"path":7,"mode":"read"}`, false},
		{noArgsSchema, `{}`, true},
		{noArgsSchema, `{"verbose":true,"other":[1,{"x":null}]}`, true},
		{noArgsSchema, `{"verbose":"yes"}`, false},
		{numberSchema, `{"n":-1.5e300}`, true},
		{numberSchema, `{"n":"1"}`, false},
		{numberSchema, `{"n":1e400}`, false},                                                     // past float64's range: kaptinlin reads it (TestFastRangeHandsOver)
		{fileSchema, `{"path":"a","mode":"read","limit":123456789012345678901234567890}`, false}, // too long to compare with its minimum
		{fileSchema, `{"path":"a","mode":"read","options":{"depth":123456789012345678901234567890}}`, true},
		{fileSchema, `{"path":"a","mode":"read","options":{"depth":-0}}`, true},
		{boundsSchema, `{"n":1.5,"i":9,"s":"ab","a":[1,2],"any":{"q":[]},"t":null,"m":{"k":"x"}}`, true},
		{boundsSchema, `{"i":null}`, true},
		{boundsSchema, `{"n":0}`, false},
		{boundsSchema, `{"n":1.5000001}`, false},
		{boundsSchema, `{"n":0.1234567890123456789}`, false}, // too long to compare exactly: kaptinlin says
		{boundsSchema, `{"i":10}`, false},
		{boundsSchema, `{"i":-4}`, false},
		{boundsSchema, `{"s":"a"}`, false},
		{boundsSchema, `{"s":"abcde"}`, false},
		{boundsSchema, `{"s":"éé"}`, false}, // two characters, four bytes: left to kaptinlin
		{boundsSchema, `{"a":[]}`, false},
		{boundsSchema, `{"a":[1,2,3]}`, false},
		{boundsSchema, `{"m":{"k":"z"}}`, false},
		{boundsSchema, `{"m":{"k":1}}`, false},
		{fastSchemas[5], `{"day":"not a date"}`, true}, // format is an annotation
	}
	for _, tc := range tests {
		s := MustFromJSON(tc.schema)
		v, err := decodeArgs([]byte(tc.args))
		if err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		fast := s.fast().valid(v)
		if fast != tc.fast {
			t.Errorf("%s: fastNode valid = %v, want %v", tc.args, fast, tc.fast)
		}
		if full := validateWith(s.validator, v).IsValid(); fast && !full {
			t.Errorf("%s: the fastNode accepts what kaptinlin refuses (schema %s)", tc.args, tc.schema)
		}
	}
}

// FuzzFastAgrees: a fastNode never accepts arguments kaptinlin refuses, for any schema
// it compiles: the fuzzer mutates schemas and arguments alike.
func FuzzFastAgrees(f *testing.F) {
	for _, raw := range fastSchemas {
		for _, args := range []string{`{}`, `{"path":"a","mode":"read","limit":3}`, `{"n":1,"i":-3,"s":"abc","a":[0],"m":{"a":"y"}}`,
			`{"path":"src/main.go","mode":"read","limit":200,"tags":["go","main"],"options":{"recursive":false}}`, `{"day":"2026-11-30"}`} {
			f.Add(string(raw), args)
		}
	}
	// Numbers float64 rounds: TestFastRangeHandsOver.
	for _, bound := range []string{`"maximum":0`, `"minimum":0`, `"exclusiveMinimum":0`, `"maximum":1e-400`, `"minimum":-4e-320`} {
		raw := `{"type":"object","properties":{"n":{"type":"number",` + bound + `}}}`
		for _, n := range []string{`1e-400`, `-1e-400`, `4e-320`, `-4e-320`, `1e400`, `1e-1000001`, `0e100000`, `-0.0`} {
			f.Add(raw, `{"n":`+n+`}`)
		}
	}
	f.Fuzz(func(t *testing.T, raw, args string) {
		fast := compileFast([]byte(raw))
		if fast == nil {
			return
		}
		s, err := FromJSON([]byte(raw))
		if err != nil {
			return
		}
		v, err := decodeArgs([]byte(args))
		if err != nil {
			return
		}
		if fast.valid(v) && !validateWith(s.validator, v).IsValid() {
			t.Fatalf("the fastNode accepts %s, which kaptinlin refuses against %s", args, raw)
		}
	})
}

// TestFastRangeHandsOver: a number outside float64's normal range, which float64
// would round (1e-400 to 0, 1e400 to +Inf, 4e-320 to a subnormal with fewer digits),
// is left to kaptinlin's exact reading, so the two never disagree; and so is a bound
// written that way.
func TestFastRangeHandsOver(t *testing.T) {
	t.Parallel()
	const (
		max0   = `{"type":"object","properties":{"n":{"type":"number","maximum":0}}}`
		min0   = `{"type":"object","properties":{"n":{"type":"number","minimum":0}}}`
		exMin0 = `{"type":"object","properties":{"n":{"type":"number","exclusiveMinimum":0}}}`
		plain  = `{"type":"object","properties":{"n":{"type":"number"}}}`
		intMax = `{"type":"object","properties":{"n":{"type":"integer","maximum":900719925474099}}}`
	)
	tests := []struct {
		schema, args string
		fast, valid  bool // the fastNode accepts it; kaptinlin does
	}{
		{max0, `{"n":1e-400}`, false, false}, // the case: it read as 0
		{min0, `{"n":-1e-400}`, false, false},
		{exMin0, `{"n":1e-400}`, false, true},
		{max0, `{"n":4e-320}`, false, false}, // subnormal
		{max0, `{"n":-4e-320}`, false, true},
		{min0, `{"n":2.2250738585072014e-308}`, false, true}, // the smallest normal, but too long to compare exactly
		{min0, `{"n":3e-308}`, true, true},                   // normal
		{max0, `{"n":-1e-1000001}`, false, false},            // no number to kaptinlin, so not "number"
		{min0, `{"n":1e-1000001}`, false, false},
		{plain, `{"n":1e1000001}`, false, false}, // unbounded, and still not "number" to kaptinlin
		{plain, `{"n":1e400}`, false, true},
		{plain, `{"n":1e-400}`, false, true},
		{plain, `{"n":1e308}`, true, true},
		{max0, `{"n":0e5}`, true, true}, // zero, however written
		{max0, `{"n":-0.0}`, true, true},
		{max0, `{"n":0e100000}`, false, true}, // zero, but an exponent past four digits
		{intMax, `{"n":900719925474099}`, true, true},
		{intMax, `{"n":9007199254740993}`, false, false}, // beyond 2^53: too long to compare
	}
	for _, tc := range tests {
		s := MustFromJSON([]byte(tc.schema))
		v, err := decodeArgs([]byte(tc.args))
		if err != nil {
			t.Fatal(err)
		}
		f := s.fast()
		if f == nil {
			t.Fatalf("%s did not compile", tc.schema)
		}
		if got := f.valid(v); got != tc.fast {
			t.Errorf("%s against %s: fastNode valid = %v, want %v", tc.args, tc.schema, got, tc.fast)
		}
		if got := validateWith(s.validator, v).IsValid(); got != tc.valid {
			t.Errorf("%s against %s: kaptinlin valid = %v, want %v", tc.args, tc.schema, got, tc.valid)
		}
		if err := s.Validate([]byte(tc.args)); (err == nil) != tc.valid {
			t.Errorf("%s against %s: Validate = %v, want valid %v", tc.args, tc.schema, err, tc.valid)
		}
		if _, err := s.Parse(tc.args, ParseOptions{}); (err == nil) != tc.valid {
			t.Errorf("%s against %s: Parse = %v, want valid %v", tc.args, tc.schema, err, tc.valid)
		}
	}
	// A bound that float64 cannot hold exactly leaves the schema to kaptinlin.
	for _, bound := range []string{`1e-400`, `-4e-320`, `1e400`, `0e100000`} {
		raw := `{"type":"object","properties":{"n":{"type":"number","minimum":` + bound + `}}}`
		if compileFast([]byte(raw)) != nil {
			t.Errorf("compiled, want the full validator: %s", raw)
		}
	}
}
