package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets"
)

// Wire formats tools -json prints.
const (
	apiResponses = "responses"
	apiChat      = "chat"
)

func cmdTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tools", "[flags]",
		"Lists the tools a text turn assembles, in the order the model receives them.\n"+
			"With -json, prints the \"tools\" array of a model request byte for byte as the\n"+
			"gateway sends it (indented): with -api responses, namespaced tools grouped into\n"+
			"namespace tools and deferred ones behind tool_search; with -api chat, plain\n"+
			"functions as in a turn's first request. A strict tool carries the strict\n"+
			"projection of its schema.", stderr)
	var (
		asJSON = fs.Bool("json", false, "print the tool definitions as the model API receives them")
		api    = fs.String("api", apiResponses, "with -json: the API whose format to print, responses or chat")
		hosted = fs.Bool("hosted-tool-search", false, "with -json -api responses: print the tool_search tool as the provider-hosted one (as run -hosted-tool-search sends it)")
		agent  = fs.String("agent", defaultAgent, "assemble the tools of this agent")
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	set := flagsSet(fs)
	switch {
	case len(pos) > 0:
		return usagef("unexpected arguments %q", pos)
	case *api != apiResponses && *api != apiChat:
		return usagef("-api %q: want %s or %s", *api, apiResponses, apiChat)
	case (set["api"] || set["hosted-tool-search"]) && !*asJSON:
		return usagef("-api and -hosted-tool-search choose the format of -json: add -json")
	case *hosted && *api == apiChat:
		return usagef("-hosted-tool-search is a Responses API feature: Chat Completions has no hosted tool search")
	}
	if err := checkAgent(*agent); err != nil {
		return err
	}
	// The same assembly a node's turn makes (Node.TurnTools without a custom
	// assembler); listing tools needs no bus.
	tools, err := toolsets.TextTurn(toolsets.TurnContext{Agent: *agent})
	if err != nil {
		return err
	}
	if *asJSON {
		return printToolDefs(stdout, stderr, tools, *api, *hosted)
	}
	return printToolTable(stdout, tools)
}

// printToolDefs prints the tool definitions of one API, produced by the
// gateway itself, and notes on stderr each Strict tool that goes out
// non-strict.
func printToolDefs(stdout, stderr io.Writer, set *toolbus.Set, api string, hosted bool) error {
	var (
		defs json.RawMessage
		err  error
	)
	switch api {
	case apiChat:
		defs, err = gateway.ChatToolDefinitions(set.Tools())
	default:
		defs, err = gateway.ResponsesToolDefinitions(set.Tools(), hosted)
	}
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := json.Indent(&b, defs, "", "  "); err != nil {
		return fmt.Errorf("indent tool definitions: %w", err)
	}
	b.WriteByte('\n')
	if _, err := stdout.Write(b.Bytes()); err != nil {
		return err
	}
	for _, t := range set.Tools() {
		if t.Strict && t.Params != nil {
			if p := t.Params.Strict(); p.Err != nil {
				fmt.Fprintf(stderr, "toolbus: %s is sent non-strict: its schema cannot be made strict: %v\n", t.Name, p.Err)
			}
		}
	}
	return nil
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
