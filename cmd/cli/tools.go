package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets"
)

// Wire formats tools -json prints.
const (
	apiResponses = "responses"
	apiChat      = "chat"
	apiAnthropic = "anthropic"
)

func cmdTools(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tools", "[flags]",
		"Lists the tools a turn assembles, in the order the model receives them.\n"+
			"Without -server: the built-in tools. With -server: also the external\n"+
			"namespaces the agent's profile names (see 'toolbus agent'), read from the\n"+
			"catalog of the bus; a named namespace that no host serves is reported.\n"+
			"With -catalog: every tool served on the bus, by category, with its hosts.\n"+
			"With -json, prints the \"tools\" array of a model request byte for byte as the\n"+
			"gateway sends it (indented): with -api responses, namespaced tools grouped into\n"+
			"namespace tools and deferred ones behind tool_search; with -api chat, plain\n"+
			"functions (namespaced ones as namespace__name) as in a turn's first request;\n"+
			"with -api anthropic, the Messages API's tools (namespace__name, deferred ones\n"+
			"behind its hosted tool search, the cache_control breakpoint on the last).\n"+
			"A strict tool carries the strict projection of its schema.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var (
		asJSON  = fs.Bool("json", false, "print the tool definitions as the model API receives them")
		api     = fs.String("api", apiResponses, "with -json: the API whose format to print, responses, chat or anthropic")
		hosted  = fs.Bool("hosted-tool-search", false, "with -json -api responses: print the tool_search tool as the provider-hosted one (as run -hosted-tool-search sends it)")
		agent   = fs.String("agent", defaultAgent, "assemble the tools of this agent (its profile needs -server)")
		kind    = fs.String("kind", string(bus.TurnMain), "the kind of turn to assemble: main, job or task")
		listBus = fs.Bool("catalog", false, "list every tool served on the bus (needs -server)")
		result  = fs.String("result-schema", exampleResultSchema, "with -kind task: the task's result schema (JSON), from which its submit_result is built")
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	set := flagsSet(fs)
	switch {
	case len(pos) > 0:
		return usagef("unexpected arguments %q", pos)
	case *api != apiResponses && *api != apiChat && *api != apiAnthropic:
		return usagef("-api %q: want %s, %s or %s", *api, apiResponses, apiChat, apiAnthropic)
	case (set["api"] || set["hosted-tool-search"]) && !*asJSON:
		return usagef("-api and -hosted-tool-search choose the format of -json: add -json")
	case *hosted && *api != apiResponses:
		return usagef("-hosted-tool-search is a Responses API choice: with -api %s the tool search is always the same", *api)
	case !bus.TurnKind(*kind).Valid():
		return usagef("-kind %q: want main, job or task", *kind)
	case *listBus && bf.server == "":
		return usagef("-catalog lists the tools served on a running bus: it needs -server")
	case *listBus && (*asJSON || set["agent"] || set["kind"]):
		return usagef("-catalog lists every served tool; -json, -agent and -kind are for one turn's tools")
	case set["result-schema"] && *kind != string(bus.TurnTask):
		return usagef("-result-schema is a task turn's: add -kind task")
	}
	if err := checkAgent(*agent); err != nil {
		return err
	}
	spec := bus.TurnSpec{Kind: bus.TurnKind(*kind), Agent: *agent}
	spec.Normalize()
	if spec.Kind == bus.TurnTask {
		spec.Workflow, spec.Task, spec.ResultSchema = "workflow", "task", json.RawMessage(*result)
		if !set["result-schema"] {
			fmt.Fprintf(stderr, "toolbus: a task turn's submit_result follows its task's result schema; shown for %s (-result-schema)\n", exampleResultSchema)
		}
	}
	if bf.server == "" {
		// The same assembly a node makes for an agent without a profile; listing the
		// built-in tools needs no bus.
		if set["agent"] {
			fmt.Fprintf(stderr, "toolbus: without -server no profile is read: the built-in tools of a %s turn\n", spec.Kind)
		}
		kit, err := toolsets.Assemble(spec, nil, nil, toolsets.Options{})
		if err != nil {
			return err
		}
		return printKit(stdout, stderr, kit, *asJSON, *api, *hosted)
	}
	nc, err := bf.dial(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	cat := catalog.New(nc, catalog.Options{Logger: newLogger(stderr)})
	if err := cat.Refresh(ctx); err != nil {
		return err
	}
	if *listBus {
		return printCatalog(stdout, stderr, cat)
	}
	profile, err := readProfile(ctx, nc, *agent)
	if err != nil {
		return err
	}
	if profile == nil {
		fmt.Fprintf(stderr, "toolbus: agent %s has no profile: built-in tools only\n", *agent)
	}
	kit, err := toolsets.Assemble(spec, profile, cat, toolsets.Options{})
	if err != nil {
		return err
	}
	return printKit(stdout, stderr, kit, *asJSON, *api, *hosted)
}

// exampleResultSchema is the result schema `tools -kind task` shows submit_result for.
const exampleResultSchema = `{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`

// readProfile reads an agent's profile from the bus; nil when it has none.
func readProfile(ctx context.Context, nc *nats.Conn, agent string) (*toolsets.Profile, error) {
	profiles, err := openProfiles(ctx, nc)
	if err != nil {
		return nil, err
	}
	p, err := profiles.Get(ctx, agent)
	if errors.Is(err, toolsets.ErrNoProfile) {
		return nil, nil
	}
	return p, err
}

// printKit prints a kit's tools, table or definitions, and its notes on stderr.
func printKit(stdout, stderr io.Writer, kit *toolsets.Kit, asJSON bool, api string, hosted bool) error {
	for _, n := range kit.Notes {
		fmt.Fprintln(stderr, "toolbus: note:", n)
	}
	if asJSON {
		return printToolDefs(stdout, stderr, kit.Tools, api, hosted)
	}
	return printToolTable(stdout, kit.Tools.Specs(), nil)
}

// printCatalog lists every tool served on the bus, then what the catalog refused.
func printCatalog(stdout, stderr io.Writer, cat *catalog.Catalog) error {
	var specs []*toolbus.Spec
	hosts := map[string]string{}
	for _, c := range cat.Categories() {
		for _, line := range c.Problems() {
			fmt.Fprintln(stderr, "toolbus:", line)
		}
		if c.Err != nil {
			continue
		}
		var names []string
		for _, h := range c.Hosts {
			names = append(names, cmp.Or(h.Node, h.ID))
		}
		hosts[c.Name] = strings.Join(names, ",")
		specs = append(specs, c.Specs...)
	}
	if len(specs) == 0 {
		fmt.Fprintln(stderr, "toolbus: no tool category is served on the bus")
		return nil
	}
	return printToolTable(stdout, specs, hosts)
}

// printToolDefs prints the tool definitions of one API, produced by the
// gateway itself, and notes on stderr each Strict tool that goes out
// non-strict.
func printToolDefs(stdout, stderr io.Writer, set *toolbus.Set, api string, hosted bool) error {
	specs := set.Specs()
	var (
		defs json.RawMessage
		err  error
	)
	switch api {
	case apiChat:
		defs, err = gateway.ChatToolDefinitions(specs)
	case apiAnthropic:
		defs, err = gateway.AnthropicToolDefinitions(specs)
	default:
		defs, err = gateway.ResponsesToolDefinitions(specs, hosted)
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
	for _, t := range specs {
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

// printToolTable prints one line a tool; with hosts (by category), a HOSTS column too.
func printToolTable(w io.Writer, specs []*toolbus.Spec, hosts map[string]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if hosts != nil {
		fmt.Fprintln(tw, "NAME\tCATEGORY\tMODE\tEFFECT\tHOSTS\tDESCRIPTION")
	} else {
		fmt.Fprintln(tw, "NAME\tCATEGORY\tMODE\tEFFECT\tDESCRIPTION")
	}
	for _, t := range specs {
		name := t.QualifiedName()
		if t.DeferLoading {
			name += " (deferred)"
		}
		effect := "-"
		switch {
		case t.Destructive:
			effect = "destructive"
		case t.ReadOnly:
			effect = "read-only"
		}
		desc, _, _ := strings.Cut(t.Description, "\n")
		if hosts != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, t.Category, t.Mode, effect, hosts[t.Category], truncate(desc, maxDescription))
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, t.Category, t.Mode, effect, truncate(desc, maxDescription))
		}
	}
	return tw.Flush()
}
