package toolbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/toolbus/toolbus"
)

// Define a tool: its data (a Spec), a Go type whose tags give the parameter schema, and
// the function that runs a call. Execute gets arguments already validated against the
// schema and decoded into that type.
func ExampleDefine() {
	type weatherArgs struct {
		City  string `json:"city" jsonschema_description:"the city's name"`
		Units string `json:"units,omitempty" jsonschema:"enum=metric,enum=imperial"`
	}
	weather, err := toolbus.Define(toolbus.Def[weatherArgs]{
		Spec: toolbus.Spec{Name: "weather", Description: "Today's weather in a city.",
			Category: "forecast", Mode: toolbus.Parallel, ReadOnly: true},
		DescribeActivity: func(a weatherArgs) string { return "Looking up the weather in " + a.City },
		Execute: func(ctx context.Context, call toolbus.Call, a weatherArgs) (toolbus.Result, error) {
			return toolbus.TextResult("Sunny, 21°C in " + a.City), nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	params, _ := json.Marshal(weather.Params)
	fmt.Println(string(params))

	args := json.RawMessage(`{"city": "Oslo"}`)
	fmt.Println(weather.ActivityLabel(args))
	res, err := weather.Execute(context.Background(), toolbus.Call{Tool: weather.Name, Args: args})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Text())
	// Output:
	// {"type":"object","properties":{"city":{"type":"string","description":"the city's name"},"units":{"type":"string","enum":["metric","imperial"]}},"required":["city"],"additionalProperties":false}
	// Looking up the weather in Oslo
	// Sunny, 21°C in Oslo
}
