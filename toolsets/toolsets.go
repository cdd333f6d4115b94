package toolsets

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/toolsets/computer"
	"github.com/toolbus/toolbus/toolsets/todo"
)

// TurnContext is what the category creators need to know about a turn. The turn side may
// leave out the handles only execution needs (Todos): it uses the tools' schemas and labels.
type TurnContext struct {
	Agent string
	// Todos is the todo bucket; nil on the turn side.
	Todos    jetstream.KeyValue
	Computer computer.Config
	// External are tools of external namespaces, served by other processes; they come last.
	External []*toolbus.Tool

	// The categories still to come take their inputs here, each with its creator in the
	// table below, in the order todo, computer, web, schedule, jobs, workflow, skills:
	//   web:      the worker's bound web_search / web_fetch providers (no provider, no tool);
	//   schedule: the schedule store;
	//   jobs:     whether this turn may spawn background jobs (a job's own turn may not);
	//   workflow: whether this is the main text turn (workflow tools exist only there);
	//   skills:   the agent's enabled skills.
}

// category is one tool category this build can host.
type category struct {
	name string
	// tools returns the category's tools for a turn; forHost says the tools will be
	// executed here, so handles the turn side may omit are required.
	tools func(tc TurnContext, forHost bool) ([]*toolbus.Tool, error)
}

// categories is the fixed assembly order of a text turn.
var categories = []category{
	{name: todo.Category, tools: func(tc TurnContext, forHost bool) ([]*toolbus.Tool, error) {
		if forHost && tc.Todos == nil {
			return nil, errors.New("the todo category needs a todo bucket (TurnContext.Todos)")
		}
		return todo.Tools(tc.Todos), nil
	}},
	{name: computer.Category, tools: func(tc TurnContext, _ bool) ([]*toolbus.Tool, error) {
		return computer.Tools(tc.Computer), nil
	}},
}

// Categories lists the tool categories this build can host, in assembly order.
func Categories() []string {
	names := make([]string, len(categories))
	for i, c := range categories {
		names[i] = c.name
	}
	return names
}

// TextTurn assembles the tools of a main text turn: todo, computer, then tc.External.
// External tools may not claim a built-in category (their calls would reach its host, which
// does not know them), and no two tools may share a name.
func TextTurn(tc TurnContext) (*toolbus.Set, error) {
	var tools []*toolbus.Tool
	for _, c := range categories {
		ts, err := c.tools(tc, false)
		if err != nil {
			return nil, fmt.Errorf("assemble %s tools: %w", c.name, err)
		}
		tools = append(tools, ts...)
	}
	for i, t := range tc.External {
		if t == nil {
			return nil, fmt.Errorf("assemble external tools: tool %d is nil", i)
		}
		if isBuiltin(t.Category) {
			return nil, fmt.Errorf("assemble external tools: %s claims the built-in category %q", t.Name, t.Category)
		}
		tools = append(tools, t)
	}
	set, err := toolbus.NewSet(tools...)
	if err != nil {
		return nil, fmt.Errorf("assemble turn tools: %w", err)
	}
	return set, nil
}

// ForCategory returns the tools a host of category executes.
func ForCategory(name string, tc TurnContext) ([]*toolbus.Tool, error) {
	for _, c := range categories {
		if c.name == name {
			tools, err := c.tools(tc, true)
			if err != nil {
				return nil, fmt.Errorf("category %s: %w", name, err)
			}
			return tools, nil
		}
	}
	return nil, fmt.Errorf("unknown tool category %q (this build hosts %s)", name, strings.Join(Categories(), ", "))
}

func isBuiltin(name string) bool {
	for _, c := range categories {
		if c.name == name {
			return true
		}
	}
	return false
}
