package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

type everyTagOptions struct {
	Recursive bool `json:"recursive" jsonschema_description:"walk subdirectories, depth first"`
	Depth     *int `json:"depth,omitempty" jsonschema:"minimum=1,maximum=16"`
}

type everyTagBase struct {
	Agent string `json:"agent" description:"who asks"`
}

type everyTag struct {
	everyTagBase
	Path      string            `json:"path" jsonschema:"minLength=1,maxLength=255,pattern=^[^/]" jsonschema_description:"file path, relative to the home"`
	Mode      string            `json:"mode" jsonschema:"enum=read,enum=write,default=read"`
	Level     int               `json:"level,omitempty" jsonschema:"enum=1,enum=2,enum=3,required"`
	Ratio     float64           `json:"ratio,omitzero" jsonschema:"exclusiveMinimum=0,exclusiveMaximum=1,multipleOf=0.25"`
	Limit     *int              `json:"limit,omitempty" jsonschema:"minimum=1,maximum=1000"`
	Tags      []string          `json:"tags,omitempty" jsonschema:"minItems=1,maxItems=3,uniqueItems,minLength=2"`
	Email     string            `json:"email,omitempty" jsonschema:"format=email,title=Contact"`
	Note      string            `json:"note,omitempty" jsonschema:"nullable,pattern=a\\,b"`
	When      time.Time         `json:"when"`
	Extra     json.RawMessage   `json:"extra,omitempty"`
	Any       any               `json:"any,omitempty"`
	Labels    map[string]int    `json:"labels,omitempty"`
	Point     [2]float64        `json:"point"`
	Blob      []byte            `json:"blob,omitempty"`
	Count     int64             `json:"count,string"`
	Options   everyTagOptions   `json:"options"`
	Children  []everyTagOptions `json:"children,omitempty"`
	Skipped   string            `json:"-"`
	unexposed string
	Untagged  bool
}

const everyTagGolden = `{"type":"object","properties":{` +
	`"agent":{"type":"string","description":"who asks"},` +
	`"path":{"type":"string","description":"file path, relative to the home","minLength":1,"maxLength":255,"pattern":"^[^/]"},` +
	`"mode":{"type":"string","enum":["read","write"],"default":"read"},` +
	`"level":{"type":"integer","enum":[1,2,3]},` +
	`"ratio":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1,"multipleOf":0.25},` +
	`"limit":{"type":"integer","minimum":1,"maximum":1000},` +
	`"tags":{"type":"array","items":{"type":"string","minLength":2},"minItems":1,"maxItems":3,"uniqueItems":true},` +
	`"email":{"type":"string","format":"email","title":"Contact"},` +
	`"note":{"type":["string","null"],"pattern":"a,b"},` +
	`"when":{"type":"string","format":"date-time"},` +
	`"extra":{},` +
	`"any":{},` +
	`"labels":{"type":"object","additionalProperties":{"type":"integer"}},` +
	`"point":{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":2},` +
	`"blob":{"type":"string","contentEncoding":"base64"},` +
	`"count":{"type":"string"},` +
	`"options":{"type":"object","properties":{"recursive":{"type":"boolean","description":"walk subdirectories, depth first"},"depth":{"type":"integer","minimum":1,"maximum":16}},"required":["recursive"],"additionalProperties":false},` +
	`"children":{"type":"array","items":{"type":"object","properties":{"recursive":{"type":"boolean","description":"walk subdirectories, depth first"},"depth":{"type":"integer","minimum":1,"maximum":16}},"required":["recursive"],"additionalProperties":false}},` +
	`"Untagged":{"type":"boolean"}` +
	`},"required":["agent","path","mode","level","when","point","count","options","Untagged"],"additionalProperties":false}`

func TestForGolden(t *testing.T) {
	t.Parallel()
	s, err := For[everyTag]()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(s.JSON()); got != everyTagGolden {
		t.Fatalf("For[everyTag] =\n%s\nwant\n%s", got, everyTagGolden)
	}
	// A pointer type gives the same schema, from the cache for its type.
	p, err := For[*everyTag]()
	if err != nil || string(p.JSON()) != everyTagGolden {
		t.Fatalf("For[*everyTag] = %s, %v", p.JSON(), err)
	}
	if again := MustFor[everyTag](); again != s {
		t.Fatal("For is not cached per type")
	}
}

func TestForValidatesWhatEncodingJSONProduces(t *testing.T) {
	t.Parallel()
	depth := 2
	v := everyTag{
		everyTagBase: everyTagBase{Agent: "a"},
		Path:         "x", Mode: "read", Level: 2, Ratio: 0.5,
		Tags: []string{"ab"}, Note: "a,b", When: time.Unix(0, 0).UTC(),
		Extra: json.RawMessage(`[1]`), Any: map[string]any{"k": 1},
		Labels: map[string]int{"x": 1}, Blob: []byte("hi"), Count: 7,
		Options:  everyTagOptions{Recursive: true, Depth: &depth},
		Children: []everyTagOptions{{Recursive: false}},
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := MustFor[everyTag]().Validate(b); err != nil {
		t.Fatalf("encoding/json output of the type does not validate: %v\n%s", err, b)
	}
}

type selfRef struct {
	Name string   `json:"name"`
	Next *selfRef `json:"next,omitempty"`
}

type mutualA struct {
	B []mutualB `json:"b"`
}
type mutualB struct {
	A map[string]mutualA `json:"a"`
}

type badTag struct {
	N int `json:"n" jsonschema:"minimum=low"`
}

type unknownTag struct {
	N int `json:"n" jsonschema:"minimun=1"`
}

type badEnum struct {
	N int `json:"n" jsonschema:"enum=one"`
}

type ambiguousA struct {
	Name string
}
type ambiguousB struct {
	Name int
}
type ambiguous struct {
	ambiguousA
	ambiguousB
}

type shadowedBase struct {
	Title string
}

type shadowed struct {
	shadowedBase
	Title int
}

type withChan struct {
	C chan int `json:"c"`
}

func TestForErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		for_ func() (*Schema, error)
		want string
	}{
		{"int", For[int], ErrRootNotObject.Error()},
		{"slice", For[[]everyTag], ErrRootNotObject.Error()},
		{"map", For[map[string]any], ErrRootNotObject.Error()},
		{"time", For[time.Time], ErrRootNotObject.Error()},
		{"recursive", For[selfRef], "refers to itself"},
		{"mutually recursive", For[mutualA], "refers to itself"},
		{"bad number", For[badTag], "minimum=low: not a number"},
		{"unknown keyword", For[unknownTag], `unknown keyword "minimun"`},
		{"enum of the wrong type", For[badEnum], "not an integer"},
		{"ambiguous promoted fields", For[ambiguous], `both encode as "Name"`},
		{"channel", For[withChan], "has no JSON encoding"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.for_()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want error containing %q", s, err, tc.want)
			}
			if tc.want == ErrRootNotObject.Error() && (!errors.Is(err, ErrRootNotObject) || err.Error() != tc.want) {
				t.Fatalf("got %v; want exactly ErrRootNotObject", err)
			}
		})
	}
}

func TestForShallowFieldWins(t *testing.T) {
	t.Parallel()
	s := MustFor[shadowed]()
	want := `{"type":"object","properties":{"Title":{"type":"integer"}},"required":["Title"],"additionalProperties":false}`
	if got := string(s.JSON()); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestMustPanics(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"MustFor":      func() { MustFor[int]() },
		"MustFromJSON": func() { MustFromJSON([]byte(`{"type":"array"}`)) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), ErrRootNotObject.Error()) {
					t.Errorf("%s: recovered %v", name, r)
				}
			}()
			f()
		}()
	}
}
