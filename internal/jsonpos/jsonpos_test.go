package jsonpos

import (
	"strings"
	"testing"
)

func TestDecodePositions(t *testing.T) {
	type doc struct {
		A int `json:"a"`
	}
	for _, c := range []struct{ in, want string }{
		{"{\n  \"a\": 1,\n  \"b\": }", "f.json:3:8: invalid character '}' looking for beginning of value"},
		{"{\"a\": \"x\"}", "f.json:1:10: cannot unmarshal string into Go struct field doc.a of type int"},
		{"{\n\"a\": 1", "f.json:2:7: the document ends early"},
		{"", "f.json:1:1: empty document"},
		{"{\"a\": 1} {", "f.json:1:10: more data after the JSON document"},
		{"{\"a\": 1,\n \"zz\": 2}", "f.json:2:2: unknown field \"zz\""},
	} {
		var d doc
		err := Decode("f.json", []byte(c.in), &d, true)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("Decode(%q) = %v, want %q…", c.in, err, c.want)
		}
	}
}
