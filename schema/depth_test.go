package schema

import (
	"errors"
	"strings"
	"testing"
)

// TestArgumentDepthBound: arguments nested deeper than MaxDepth are refused before they
// are decoded or validated, with an error the model reads; arguments 60 deep against a
// recursive anyOf schema still validate. 10 000 levels against that schema cost the
// validator over a second of CPU (quadratic, in the turn and again in the host).
func TestArgumentDepthBound(t *testing.T) {
	t.Parallel()
	tree := MustFromJSON([]byte(`{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}},"$defs":{"n":{"anyOf":[` +
		`{"type":"object","properties":{"c":{"$ref":"#/$defs/n"}}},{"type":"array","items":{"$ref":"#/$defs/n"}}]}}}`))
	objects := func(levels int, leaf string) string { // levels-1 objects holding "c", then leaf
		return strings.Repeat(`{"c":`, levels-1) + leaf + strings.Repeat("}", levels-1)
	}
	arrays := func(levels int) string { // the root object, then arrays
		return `{"c":` + strings.Repeat("[", levels-1) + strings.Repeat("]", levels-1) + "}"
	}
	refused := func(name, args string, opts ParseOptions) {
		t.Helper()
		_, err := tree.Parse(args, opts)
		var ae *ArgumentError
		if !errors.As(err, &ae) || ae.Kind != KindTooDeep || !errors.Is(err, ErrTooDeep) ||
			!strings.HasPrefix(err.Error(), "arguments nested deeper than 64 levels") {
			t.Errorf("%s: %v, want %s", name, err, KindTooDeep)
		}
	}
	for _, c := range []struct {
		name string
		args string
		ok   bool
	}{
		{"objects 60", objects(60, "{}"), true},
		{"objects 64", objects(64, "{}"), true}, // 63 with "c", and the {} at the bottom
		{"arrays 64", arrays(64), true},
		{"objects 65", objects(65, "{}"), false},
		{"arrays 65", arrays(65), false},
		{"objects 10000", objects(10000, "{}"), false},
		{"invalid 10000", objects(10000, `"x"`), false},
		{"arrays 10000", arrays(10000), false},
		{"not JSON 10000", objects(10000, "{}")[:50000], false}, // cut off: the ladder would repair it
	} {
		if c.ok {
			if _, err := tree.Parse(c.args, ParseOptions{}); err != nil {
				t.Errorf("%s: %.300v", c.name, err)
			}
			if err := tree.Validate([]byte(c.args)); err != nil {
				t.Errorf("Validate %s: %.300v", c.name, err)
			}
			continue
		}
		refused(c.name, c.args, ParseOptions{})
		if c.name != "not JSON 10000" {
			err := tree.Validate([]byte(c.args))
			if !errors.Is(err, ErrTooDeep) || !strings.Contains(err.Error(), "- /: arguments nested deeper than 64 levels") {
				t.Errorf("Validate %s: %.300v", c.name, err)
			}
		}
	}
	// Brackets inside strings do not count.
	if _, err := tree.Parse(`{"note":"`+strings.Repeat("[{", 1000)+`"}`, ParseOptions{}); err != nil {
		t.Errorf("brackets in a string: %.300v", err)
	}
	// Nesting that arrives inside a string is bounded too: arguments encoded twice, and a
	// stringified object at a field that wants one.
	quoted := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
	refused("encoded twice", quoted(objects(100, "{}")), ParseOptions{})
	refused("stringified field", `{"c":`+quoted(objects(100, "{}"))+`}`, ParseOptions{})
	if _, err := tree.Parse(quoted(objects(60, "{}")), ParseOptions{}); err != nil {
		t.Errorf("encoded twice, 60 deep: %.300v", err)
	}
}
