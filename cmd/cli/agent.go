package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/jsonpos"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/web"
)

// agentUsage is the synopsis of the agent command.
const agentUsage = `set|get|list|rm [flags] [AGENT]`

func cmdAgent(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, e, "agent", agentUsage, agentAbout, "set, get, list or rm", subcommands{
		"set": agentSet, "get": agentGet, "list": agentList, "ls": agentList, "rm": agentRm, "delete": agentRm,
	}, args, stdout, stderr)
}

const agentAbout = "Reads and writes agent profiles, the JSON documents in the KV bucket\n" +
	bus.BucketAgents + " that say which external namespaces an agent's turns include\n" +
	"(docs/tools.md, \"Agent profiles\"). They live on the bus: every command needs\n" +
	"-server (or NATS_URL).\n" +
	"  toolbus agent set [-f FILE|-] [-namespace NS]... [-upfront NS]... [-web-search P[=URL]] [-web-fetch] [-skill NAME]... [-brain] AGENT\n" +
	"  toolbus agent get AGENT        prints the stored document\n" +
	"  toolbus agent list             one line an agent\n" +
	"  toolbus agent rm AGENT"

// listFlag collects a repeated string flag; a value may hold several, comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func agentSet(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agent set", "[flags] AGENT",
		"Writes an agent's profile, from a file (-f) or from flags, replacing the stored one.\n"+
			"A document is checked before anything is stored; a refusal names each problem by\n"+
			"its JSON path.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var (
		file     = fs.String("f", "", "read the profile document from this file (- for standard input)")
		deferred listFlag
		upfront  listFlag
	)
	fs.Var(&deferred, "namespace", "include this external namespace, deferred behind tool search (repeatable, or comma-separated)")
	fs.Var(&upfront, "upfront", "include this external namespace with its tools loaded up front (repeatable, or comma-separated)")
	approvals := fs.String("approvals", "", "which calls a person must approve first: never, destructive or writes (every tool that is not read-only)")
	webSearch := fs.String("web-search", "", "bind web_search to a provider: searxng=URL (your instance), brave or tavily (their public APIs; the key is the web host's), or brave=URL / tavily=URL for a compatible endpoint")
	webFetch := fs.Bool("web-fetch", false, "bind web_fetch: read public web pages")
	webPrivate := fs.Bool("web-fetch-private", false, "bind web_fetch and let it reach loopback, private and link-local addresses too (the nodes' own services among them): for trusted agents only")
	var skillNames listFlag
	fs.Var(&skillNames, "skill", "enable this skill, a folder skills/NAME/ of the agent's home (repeatable, or comma-separated; see 'toolbus skills')")
	brainOn := fs.Bool("brain", false, "enable the agent's knowledge store: its turns get recall and get_page over its pages (toolbus brain)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one agent id")
	}
	agent := pos[0]
	if err := checkAgentArg(agent); err != nil {
		return err
	}
	var doc []byte
	switch {
	case *file != "" && (len(deferred) > 0 || len(upfront) > 0 || *approvals != "" || *webSearch != "" || *webFetch || *webPrivate || len(skillNames) > 0 || *brainOn):
		return usagef("-f gives the whole document: leave out -namespace, -upfront, -approvals, -skill, -brain and the -web flags")
	case *file != "":
		if doc, err = readDoc(e.stdin, "profile", *file); err != nil {
			return err
		}
		// A syntax error is shown where it is; the profile's rules are the store's.
		if err := jsonpos.Decode(docName(*file), doc, new(json.RawMessage), false); err != nil {
			return fmt.Errorf("invalid agent profile: %w", err)
		}
		// The agent named on the command line is the key; the document must agree.
		var head struct {
			Agent string `json:"agent"`
		}
		if json.Unmarshal(doc, &head) == nil && head.Agent != "" && head.Agent != agent {
			return fmt.Errorf("the document is for agent %q, not %q", head.Agent, agent)
		}
	default:
		p := toolsets.Profile{Version: toolsets.ProfileVersion, Agent: agent, Approvals: *approvals, Skills: skillNames, Brain: *brainOn}
		for _, ns := range deferred {
			p.Namespaces = append(p.Namespaces, toolsets.NamespaceRef{Name: ns, Load: toolsets.LoadDeferred})
		}
		for _, ns := range upfront {
			p.Namespaces = append(p.Namespaces, toolsets.NamespaceRef{Name: ns, Load: toolsets.LoadUpfront})
		}
		if p.Web, err = webBinding(*webSearch, *webFetch, *webPrivate); err != nil {
			return err
		}
		if doc, err = p.Encode(); err != nil {
			return err
		}
	}
	nc, err := bf.dialFor(ctx, "agent set")
	if err != nil {
		return err
	}
	defer nc.Close()
	profiles, err := openProfiles(ctx, nc)
	if err != nil {
		return err
	}
	p, err := profiles.Put(ctx, doc)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "agent %s: profile stored (%s)\n", p.Agent, describeNamespaces(p))
	return nil
}

// readDoc reads a document from a file, or from stdin for "-".
func readDoc(stdin io.Reader, what, path string) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return b, nil
}

// docName names a document read by readDoc in errors: its path, or "stdin".
func docName(path string) string {
	if path == "-" {
		return "stdin"
	}
	return path
}

// webBinding is the web binding the -web flags ask for; nil for none.
func webBinding(search string, fetch, private bool) (*web.Binding, error) {
	if search == "" && !fetch && !private {
		return nil, nil
	}
	b := &web.Binding{}
	if search != "" {
		provider, u, _ := strings.Cut(search, "=")
		b.Search = &web.SearchBinding{Provider: strings.ToLower(strings.TrimSpace(provider)), URL: strings.TrimSpace(u)}
		if b.Search.Provider == web.SearXNG && b.Search.URL == "" {
			return nil, usagef("-web-search searxng needs the instance's URL: -web-search searxng=http://HOST:PORT")
		}
	}
	if fetch || private {
		b.Fetch = &web.FetchBinding{AllowPrivate: private}
	}
	return b, nil
}

// describeWeb says what a profile's web binding binds, for agent set and list.
func describeWeb(p *toolsets.Profile) string {
	if p.Web == nil || p.Web.Search == nil && p.Web.Fetch == nil {
		return ""
	}
	var parts []string
	if s := p.Web.Search; s != nil {
		part := "search " + s.Provider
		if s.URL != "" {
			part += " at " + redact.URL(s.URL)
		}
		parts = append(parts, part)
	}
	if f := p.Web.Fetch; f != nil {
		if f.AllowPrivate {
			parts = append(parts, "fetch (private addresses too)")
		} else {
			parts = append(parts, "fetch")
		}
	}
	return "; web: " + strings.Join(parts, ", ")
}

func describeNamespaces(p *toolsets.Profile) string {
	approvals := ""
	if p.Approvals != "" && p.Approvals != toolsets.ApproveNever {
		approvals = "; approvals: " + p.Approvals
	}
	if len(p.Skills) > 0 {
		approvals = "; skills " + strings.Join(p.Skills, ", ") + approvals
	}
	approvals += describeWeb(p)
	if jp := p.JobsPolicy(); jp.Spawn {
		approvals += fmt.Sprintf("; jobs: %d at once, %d an hour, kept %s", jp.MaxRunning, jp.MaxPerHour, shortDuration(jp.Keep))
	}
	if sp := p.SchedulePolicy(); sp.Enabled {
		approvals += "; schedules: overlap " + sp.Overlap
	}
	if p.Brain {
		approvals += "; brain on"
	}
	if len(p.Namespaces) == 0 {
		return "built-in tools only" + approvals
	}
	var parts []string
	for _, ns := range p.Namespaces {
		load := toolsets.LoadDeferred
		if !ns.Deferred() {
			load = toolsets.LoadUpfront
		}
		parts = append(parts, ns.Name+" ("+load+")")
	}
	return "namespaces " + strings.Join(parts, ", ") + approvals
}

// shortDuration drops a duration's zero minutes and seconds: 24h, 1h30m, 5m, 1m30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// agentStore parses the flags of a subcommand that works on the store, wants `agents`
// agent ids as arguments (0 or 1), and opens the store on the bus. The caller closes nc.
func agentStore(ctx context.Context, e *env, name, synopsis, about string, agents int, args []string, stderr io.Writer) (
	pos []string, profiles *toolsets.Profiles, nc *nats.Conn, err error) {
	fs := newFlagSet(name, synopsis, about, stderr)
	var bf busFlags
	bf.register(fs, e)
	if pos, err = parseArgs(fs, args); err != nil {
		return nil, nil, nil, err
	}
	switch {
	case agents == 0 && len(pos) > 0:
		return nil, nil, nil, usagef("unexpected arguments %q", pos)
	case agents == 1 && len(pos) != 1:
		return nil, nil, nil, usagef("want one agent id")
	case agents == 1:
		if err := checkAgentArg(pos[0]); err != nil {
			return nil, nil, nil, err
		}
	}
	profiles, nc, err = profilesOn(ctx, bf, name)
	return pos, profiles, nc, err
}

func agentGet(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	pos, profiles, nc, err := agentStore(ctx, e, "agent get", "[flags] AGENT", "Prints an agent's stored profile document.", 1, args, stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	raw, err := profiles.Raw(ctx, pos[0])
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(json.RawMessage(raw), "", "  ")
	if err != nil {
		b = raw // a document this build cannot read is shown as stored
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

func agentList(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	_, profiles, nc, err := agentStore(ctx, e, "agent list", "[flags]", "Lists the agents that have a profile.", 0, args, stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	list, lerr := profiles.List(ctx)
	if len(list) == 0 && lerr == nil {
		fmt.Fprintln(stderr, "no agent has a profile")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tVERSION\tNAMESPACES")
	for _, p := range list {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", p.Agent, p.Version, strings.TrimPrefix(describeNamespaces(p), "namespaces "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return lerr
}

func agentRm(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	pos, profiles, nc, err := agentStore(ctx, e, "agent rm", "[flags] AGENT", "Deletes an agent's profile; its turns then get built-in tools only.", 1, args, stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := profiles.Delete(ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "agent %s: profile deleted\n", pos[0])
	return nil
}

// checkAgentArg checks the AGENT argument of the agent subcommands.
func checkAgentArg(agent string) error {
	if err := bus.CheckAgent(agent); err != nil {
		return usagef("agent %q: %v", agent, err)
	}
	return nil
}

// profilesOn dials the bus and opens the profile bucket.
func profilesOn(ctx context.Context, bf busFlags, what string) (*toolsets.Profiles, *nats.Conn, error) {
	nc, err := bf.dialFor(ctx, what)
	if err != nil {
		return nil, nil, err
	}
	p, err := openProfiles(ctx, nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return p, nc, nil
}

// openProfiles opens the profile bucket of the bus, creating it if this is the first
// profile.
func openProfiles(ctx context.Context, nc *nats.Conn) (*toolsets.Profiles, error) {
	return client.New(nc).Profiles(ctx)
}

// dialFor dials -server, which the command needs.
func (b *busFlags) dialFor(ctx context.Context, what string) (*nats.Conn, error) {
	if b.server == "" {
		return nil, usagef("%s works on a running bus: pass -server URL (or set NATS_URL)", what)
	}
	return b.dial(ctx)
}

var _ flag.Value = (*listFlag)(nil)
