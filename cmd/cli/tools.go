package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/toolsets"
)

func cmdTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tools", "[flags]",
		"Lists the tools a text turn assembles, in the order the model receives them.\n"+
			"With -json, prints each tool's definition as a model request carries it: for a\n"+
			"strict tool, the strict projection of its schema.", stderr)
	var (
		asJSON = fs.Bool("json", false, "print the tool definitions as JSON")
		agent  = fs.String("agent", defaultAgent, "assemble the tools of this agent")
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments %q", pos)
	}
	if err := checkAgent(*agent); err != nil {
		return err
	}
	// The same assembly a node's turn makes (Node.TurnTools without a custom
	// assembler); listing tools needs no bus.
	set, err := toolsets.TextTurn(toolsets.TurnContext{Agent: *agent})
	if err != nil {
		return err
	}
	if *asJSON {
		return printToolDefs(stdout, set)
	}
	return printToolTable(stdout, set)
}

// toolDef is a function definition as a Responses API request carries it,
// with the tool's namespace as a field rather than as an enclosing
// namespace tool.
type toolDef struct {
	Type         string          `json:"type"`
	Name         string          `json:"name"`
	Namespace    string          `json:"namespace,omitempty"`
	Description  string          `json:"description,omitempty"`
	Parameters   json.RawMessage `json:"parameters"`
	Strict       bool            `json:"strict"`
	DeferLoading bool            `json:"defer_loading,omitempty"`
	// StrictFallback says why a Strict tool goes out non-strict.
	StrictFallback string `json:"strict_fallback,omitempty"`
}

// definition renders a tool as the gateways do: the strict projection for a
// Strict tool whose schema allows one, otherwise the schema as given.
func definition(t *toolbus.Tool) toolDef {
	d := toolDef{
		Type: "function", Name: t.Name, Namespace: t.Namespace, Description: t.Description,
		DeferLoading: t.DeferLoading, Parameters: json.RawMessage(`{"type":"object","properties":{}}`),
	}
	if t.Params == nil {
		return d
	}
	d.Parameters = t.Params.JSON()
	if t.Strict {
		if p := t.Params.Strict(); p.Err == nil {
			d.Parameters, d.Strict = p.JSON, true
		} else {
			d.StrictFallback = p.Err.Error()
		}
	}
	return d
}

func printToolDefs(w io.Writer, set *toolbus.Set) error {
	defs := make([]toolDef, 0, set.Len())
	for _, t := range set.Tools() {
		defs = append(defs, definition(t))
	}
	b, err := json.MarshalIndent(defs, "", "  ")
	if err != nil {
		return fmt.Errorf("encode tool definitions: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// maxDescription bounds the description column of the table.
const maxDescription = 72

func printToolTable(w io.Writer, set *toolbus.Set) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCATEGORY\tMODE\tEFFECT\tDESCRIPTION")
	for _, t := range set.Tools() {
		name := t.Name
		if t.Namespace != "" {
			name = t.Namespace + "." + t.Name
		}
		effect := "-"
		switch {
		case t.Destructive:
			effect = "destructive"
		case t.ReadOnly:
			effect = "read-only"
		}
		desc, _, _ := strings.Cut(t.Description, "\n")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, t.Category, t.Mode, effect, truncate(desc, maxDescription))
	}
	return tw.Flush()
}
