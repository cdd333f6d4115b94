package toolbus

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	gojsonschema "github.com/google/jsonschema-go/jsonschema"
)

// weatherArgs is written as the MCP go-sdk and ADK examples write their
// argument structs: google/jsonschema-go tags, a description with no
// key=value, commas included.
type weatherArgs struct {
	City  string   `json:"city" jsonschema:"the city's name, in English"`
	Days  int      `json:"days,omitempty" jsonschema:"how many days ahead (0 is today)"`
	Units string   `json:"units,omitempty" jsonschema:"metric or imperial"`
	Tags  []string `json:"tags,omitempty" jsonschema:"free labels"`
}

// mixedArgs has both forms in one struct: ours (which google/jsonschema-go
// refuses) beside theirs.
type mixedArgs struct {
	weatherArgs
	Limit int `json:"limit,omitempty" jsonschema:"minimum=1,maximum=10"`
	Note  int `json:"note,omitempty" jsonschema:"required"`
}

func TestJSONSchemaGoTags(t *testing.T) {
	t.Parallel()
	tool, err := Define(Def[mixedArgs]{
		Spec: Spec{Name: "weather", Description: "Weather", Category: "forecast"},
		Execute: func(ctx context.Context, c Call, a mixedArgs) (Result, error) {
			return TextResult(a.City), nil
		},
	})
	if err != nil {
		t.Fatalf("Define refused the google/jsonschema-go tag form: %v", err)
	}
	var ours struct {
		Properties map[string]struct {
			Description string          `json:"description"`
			Minimum     json.Number     `json:"minimum"`
			Items       json.RawMessage `json:"items"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(tool.Params.JSON(), &ours); err != nil {
		t.Fatal(err)
	}
	// The package the tags were written for reads the same descriptions.
	theirs, err := gojsonschema.For[weatherArgs](nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"city", "days", "units", "tags"} {
		want := theirs.Properties[name].Description
		if want == "" {
			t.Fatalf("google/jsonschema-go gives %q no description: the test reads its tags wrong", name)
		}
		if got := ours.Properties[name].Description; got != want {
			t.Errorf("%s: description %q, google/jsonschema-go says %q", name, got, want)
		}
	}
	if ours.Properties["limit"].Minimum != "1" || ours.Properties["limit"].Description != "" {
		t.Errorf("keyword form beside it: limit %+v", ours.Properties["limit"])
	}
	if !strings.Contains(strings.Join(ours.Required, ","), "note") || !strings.Contains(strings.Join(ours.Required, ","), "city") {
		t.Errorf("required %v, want city and note among them", ours.Required)
	}

	// A description tag and a description beside it: which one the model
	// would see is not obvious, so Define says so.
	type twice struct {
		A string `json:"a" jsonschema:"one text" jsonschema_description:"another"`
	}
	_, err = Define(Def[twice]{Spec: Spec{Name: "t", Category: "c"},
		Execute: func(ctx context.Context, c Call, a twice) (Result, error) { return Result{}, nil }})
	if err == nil || !strings.Contains(err.Error(), "keep one") {
		t.Errorf("two descriptions: %v", err)
	}
	// A keyword form with a typo is still refused, not taken for text.
	type typo struct {
		A int `json:"a" jsonschema:"minimun=1"`
	}
	_, err = Define(Def[typo]{Spec: Spec{Name: "t", Category: "c"},
		Execute: func(ctx context.Context, c Call, a typo) (Result, error) { return Result{}, nil }})
	if err == nil || !strings.Contains(err.Error(), `unknown keyword "minimun"`) {
		t.Errorf("typo in a keyword: %v", err)
	}
}
