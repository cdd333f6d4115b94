package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/toolsets/skills"
)

// skillsUsage is the synopsis of the skills command.
const skillsUsage = `list|show [flags] [SKILL]`

const skillsAbout = "Lists and shows an agent's skills: folders skills/<name>/ of the agent's home, each\n" +
	"with a SKILL.md (front matter with name, description and the MCP servers the skill\n" +
	"needs, then instructions). The agent's profile enables them ('toolbus agent set\n" +
	"-skill NAME'); with -server, the profile says which are enabled.\n" +
	"The home is read on this machine: -home, or -home-root/AGENT as a node computes it\n" +
	"(default: the home root of a node run without -home or -home-root).\n" +
	"  toolbus skills list [-agent A] [-json]    every skill present or enabled, with its problems\n" +
	"  toolbus skills show [-agent A] [-file PATH] SKILL   what load_skill returns"

func cmdSkills(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, e, "skills", skillsUsage, skillsAbout, "list or show", subcommands{
		"list": skillsList, "ls": skillsList, "show": skillsShow,
	}, args, stdout, stderr)
}

// skillFlags find an agent's home and, with -server, its profile.
type skillFlags struct {
	bf             busFlags
	agent          string
	home, homeRoot string
}

func (f *skillFlags) register(fs *flag.FlagSet, e *env) {
	f.bf.register(fs, e)
	fs.StringVar(&f.agent, "agent", defaultAgent, "the agent whose skills to read")
	fs.StringVar(&f.home, "home", "", "the agent's home (as a node's -home gives every agent)")
	fs.StringVar(&f.homeRoot, "home-root", "", "the folder of the agents' homes, as the node's -home-root (default "+node.DefaultHomeRoot()+")")
}

// check checks the flags and returns the agent's home.
func (f *skillFlags) check() (string, error) {
	if err := checkAgent(f.agent); err != nil {
		return "", err
	}
	switch {
	case f.home != "" && f.homeRoot != "":
		return "", usagef("-home is the agent's home, -home-root the folder of every agent's: give one")
	case f.home != "":
		return filepath.Abs(f.home)
	case f.homeRoot == "":
		f.homeRoot = node.DefaultHomeRoot()
	}
	return filepath.Abs(filepath.Join(f.homeRoot, f.agent))
}

// open checks the flags and reads, with -server, which skills the agent's profile
// enables: the home to read, the enabled names, and whether a profile said so.
func (f *skillFlags) open(ctx context.Context) (home string, enabled []string, profileRead bool, err error) {
	if home, err = f.check(); err != nil {
		return "", nil, false, err
	}
	enabled, profileRead, err = f.enabled(ctx)
	return home, enabled, profileRead, err
}

// enabled reads the agent's enabled skills from its profile, with -server; ok is false
// without -server.
func (f *skillFlags) enabled(ctx context.Context) (names []string, ok bool, err error) {
	if f.bf.server == "" {
		return nil, false, nil
	}
	nc, err := f.bf.dial(ctx)
	if err != nil {
		return nil, false, err
	}
	defer nc.Close()
	p, err := readProfile(ctx, nc, f.agent)
	if err != nil || p == nil {
		return nil, err == nil, err
	}
	return p.Skills, true, nil
}

// skillEntry is one line of skills list, and its -json element.
type skillEntry struct {
	Name string `json:"name"`
	// Enabled is null when no profile was read (no -server).
	Enabled     *bool    `json:"enabled"`
	Present     bool     `json:"present"`
	Description string   `json:"description,omitempty"`
	Servers     []string `json:"mcp_servers,omitempty"`
	Files       int      `json:"files,omitempty"`
	Problem     string   `json:"problem,omitempty"`
}

func skillsList(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("skills list", "[flags]",
		"Lists the skills present in the agent's home and those its profile enables (with\n"+
			"-server), each with its description and MCP servers, or what is wrong with it.", stderr)
	var f skillFlags
	f.register(fs, e)
	asJSON := fs.Bool("json", false, "print the list as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments %q", pos)
	}
	home, enabled, profileRead, err := f.open(ctx)
	if err != nil {
		return err
	}
	present, err := skills.Present(home)
	if err != nil {
		return err
	}
	names := slices.Clone(enabled)
	for _, n := range present {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	loaded, problems := skills.Load(home, names)
	entries := make([]skillEntry, 0, len(names))
	for _, n := range names {
		e := skillEntry{Name: n, Present: slices.Contains(present, n)}
		if profileRead {
			on := slices.Contains(enabled, n)
			e.Enabled = &on
		}
		for _, s := range loaded {
			if s.Name == n {
				e.Description, e.Files = s.Description, len(s.Files)
				for _, srv := range s.Servers {
					e.Servers = append(e.Servers, srv.Name)
				}
			}
		}
		for _, err := range problems {
			if p := (*skills.Problem)(nil); errors.As(err, &p) && p.Skill == n {
				e.Problem = p.Error()
			}
		}
		entries = append(entries, e)
	}

	if *asJSON {
		b, err := json.MarshalIndent(struct {
			Agent       string       `json:"agent"`
			Home        string       `json:"home"`
			ProfileRead bool         `json:"profile_read"`
			Skills      []skillEntry `json:"skills"`
		}{f.agent, home, profileRead, entries}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	fmt.Fprintf(stderr, "agent %s, home %s\n", f.agent, home)
	if !profileRead {
		fmt.Fprintln(stderr, "toolbus: without -server no profile is read: ENABLED shows ?")
	} else if enabled == nil {
		fmt.Fprintf(stderr, "toolbus: agent %s enables no skill (toolbus agent set -skill NAME %s)\n", f.agent, f.agent)
	}
	if len(entries) == 0 {
		fmt.Fprintf(stderr, "no skill: none in %s\n", filepath.Join(home, skills.Dir))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SKILL\tENABLED\tMCP SERVERS\tDESCRIPTION")
	for _, e := range entries {
		on := "?"
		if e.Enabled != nil {
			on = map[bool]string{true: "yes", false: "no"}[*e.Enabled]
		}
		servers := strings.Join(e.Servers, ",")
		if servers == "" {
			servers = "-"
		}
		desc := truncate(e.Description, maxDescription)
		if e.Problem != "" {
			desc = "PROBLEM " + e.Problem
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Name, on, servers, desc)
	}
	return tw.Flush()
}

func skillsShow(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("skills show", "[flags] SKILL",
		"Prints a skill as load_skill returns it to the model: its instructions, the files of\n"+
			"its folder and how to reach its MCP servers with mcporter; with -file, that file of\n"+
			"its folder. A skill that cannot be loaded is an error that says why.", stderr)
	var f skillFlags
	f.register(fs, e)
	file := fs.String("file", "", "print this file of the skill's folder instead (a path relative to it)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one skill name")
	}
	name := pos[0]
	if err := skills.CheckName(name); err != nil {
		return usagef("%v", err)
	}
	home, enabled, profileRead, err := f.open(ctx)
	if err != nil {
		return err
	}
	on := slices.Contains(enabled, name)
	switch {
	case !profileRead:
		fmt.Fprintf(stderr, "toolbus: note: skill %s: enabled: unknown (no -server: the profile of agent %s was not read)\n", name, f.agent)
	case !on:
		fmt.Fprintf(stderr, "toolbus: note: skill %s is not enabled for agent %s, so its turns cannot load it (toolbus agent set -skill %s %s)\n", name, f.agent, name, f.agent)
	}
	var text string
	if *file != "" {
		if text, err = skills.ReadFile(home, name, *file); err != nil {
			return err
		}
	} else {
		got, problems := skills.Load(home, []string{name})
		var p *skills.Problem
		if len(problems) > 0 && !on && errors.As(problems[0], &p) && errors.Is(p, skills.ErrNotFound) {
			// Load's message says the skill is enabled, which only a profile can say.
			return fmt.Errorf("%s: no skill %s in the agent home %s: this file does not exist", p.File, name, home)
		}
		if len(problems) > 0 {
			return problems[0]
		}
		text = got[0].Text()
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	_, err = io.WriteString(stdout, text)
	return err
}
