package toolbus

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

type readArgs struct {
	Path  string `json:"path" jsonschema_description:"file to read"`
	Limit int    `json:"limit,omitempty" jsonschema:"minimum=1"`
}

func TestDefineTypedTool(t *testing.T) {
	t.Parallel()
	tool, err := Define(Def[readArgs]{
		Spec:                      Spec{Name: "read", Description: "Read a file", Category: "files", Mode: Parallel, ReadOnly: true},
		DescribeActivity:          func(a readArgs) string { return "Reading " + a.Path },
		DescribeCompletedActivity: func(a readArgs, r Result) string { return "Read " + a.Path + ": " + r.Text() },
		Execute: func(ctx context.Context, c Call, a readArgs) (Result, error) {
			return TextResult(strings.Repeat("x", a.Limit)), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(tool.Params.JSON(), &s); err != nil {
		t.Fatal(err)
	}
	if s["type"] != "object" || s["required"].([]any)[0] != "path" {
		t.Errorf("schema %s", tool.Params.JSON())
	}
	args := json.RawMessage(`{"path":"a.txt","limit":3}`)
	res, err := tool.Execute(context.Background(), Call{Args: args})
	if err != nil || res.Text() != "xxx" {
		t.Errorf("execute: %q, %v", res.Text(), err)
	}
	if got := tool.ActivityLabel(args); got != "Reading a.txt" {
		t.Errorf("activity label %q", got)
	}
	if got := tool.CompletedLabel(args, res); got != "Read a.txt: xxx" {
		t.Errorf("completed label %q", got)
	}
}

func TestDefineRefusals(t *testing.T) {
	t.Parallel()
	exec := func(ctx context.Context, c Call, a readArgs) (Result, error) { return Result{}, nil }
	for _, tc := range []struct {
		name string
		def  Def[readArgs]
		want string
	}{
		{"empty name", Def[readArgs]{Spec: Spec{Category: "c"}, Execute: exec}, "name is empty"},
		{"dotted name", Def[readArgs]{Spec: Spec{Name: "a.b", Category: "c"}, Execute: exec}, `name "a.b" may hold only`},
		{"no category", Def[readArgs]{Spec: Spec{Name: "a"}, Execute: exec}, "category is empty"},
		{"wildcard category", Def[readArgs]{Spec: Spec{Name: "a", Category: "*"}, Execute: exec}, `category "*"`},
		{"no execute", Def[readArgs]{Spec: Spec{Name: "a", Category: "c"}}, "Execute is nil"},
		{"array root", Def[readArgs]{Spec: Spec{Name: "a", Category: "c"}, Execute: exec, Schema: json.RawMessage(`{"type":"array"}`)},
			"function tool parameters must use a root object schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Define(tc.def)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	_, err := Define(Def[readArgs]{Spec: Spec{Name: "a", Category: "c"}, Execute: exec, Schema: json.RawMessage(`{"type":"string"}`)})
	if !errors.Is(err, schema.ErrRootNotObject) {
		t.Errorf("non-object root: %v does not wrap ErrRootNotObject", err)
	}
}

func TestDefineKeepsRawSchemaBytes(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`{ "type": "object",  "properties": {"n": {"type": "integer", "minimum": 2, "maximum": 9}} }`)
	tool, err := Define(Def[map[string]int]{Spec: Spec{Name: "n", Category: "c"}, Schema: raw,
		Execute: func(ctx context.Context, c Call, a map[string]int) (Result, error) { return Result{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(tool.Params.JSON()); got != string(raw) {
		t.Errorf("schema sent as %s, want the raw bytes %s", got, raw)
	}
}

func TestExecuteDecodeError(t *testing.T) {
	t.Parallel()
	tool := MustDefine(Def[readArgs]{Spec: Spec{Name: "read", Category: "c"},
		Execute: func(ctx context.Context, c Call, a readArgs) (Result, error) { return Result{}, nil }})
	_, err := tool.Execute(context.Background(), Call{Args: json.RawMessage(`{"path":1}`)})
	if err == nil || !strings.Contains(err.Error(), "decode arguments of read") {
		t.Errorf("err %v", err)
	}
	if got := tool.ActivityLabel(json.RawMessage(`{}`)); got != "read" {
		t.Errorf("default label %q", got)
	}
}

func TestModeText(t *testing.T) {
	t.Parallel()
	for _, m := range []Mode{Parallel, Sequential} {
		b, err := m.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Mode
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Errorf("%s round trip: %v %v", m, back, err)
		}
	}
	var m Mode
	if err := m.UnmarshalText([]byte("eventually")); err == nil {
		t.Error("accepted an unknown mode")
	}
}

func TestSetRefusesDuplicates(t *testing.T) {
	t.Parallel()
	mk := func(name string) *Tool {
		return MustDefine(Def[readArgs]{Spec: Spec{Name: name, Category: "c"},
			Execute: func(ctx context.Context, c Call, a readArgs) (Result, error) { return Result{}, nil }})
	}
	s, err := NewSet(&mk("a").Spec, &mk("b").Spec)
	if err != nil || s.Len() != 2 || strings.Join(s.Names(), ",") != "a,b" {
		t.Fatalf("set %v %v", s, err)
	}
	if _, ok := s.Lookup("", "b"); !ok {
		t.Error("lookup b failed")
	}
	if _, err := NewSet(&mk("a").Spec, &mk("a").Spec); err == nil {
		t.Error("duplicate names accepted")
	}
	// The same name in two namespaces is two tools.
	x, y := mk("a").Spec, mk("a").Spec
	x.Namespace, y.Namespace = "crm", "mail"
	s, err = NewSet(&mk("a").Spec, &x, &y)
	if err != nil || strings.Join(s.Names(), ",") != "a,crm.a,mail.a" {
		t.Fatalf("namespaced set %v %v", s, err)
	}
	if got, ok := s.Lookup("mail", "a"); !ok || got != &y {
		t.Errorf("lookup mail.a: %v %v", got, ok)
	}
	if _, err := NewSet(&x, &x); err == nil || !strings.Contains(err.Error(), `duplicate tool "crm.a"`) {
		t.Errorf("duplicate namespaced tool: %v", err)
	}
}

func TestResultHelpers(t *testing.T) {
	t.Parallel()
	r := Result{Content: []ContentPart{Text("one"), Image("image/png", []byte{1}), Text("two")}}
	if r.Text() != "one\ntwo" {
		t.Errorf("text %q", r.Text())
	}
	r = ErrorResult("bad").WithDetails(map[string]int{"n": 1})
	if !r.IsError || string(r.Details) != `{"n":1}` {
		t.Errorf("result %+v", r)
	}
}
