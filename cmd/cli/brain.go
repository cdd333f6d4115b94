package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/brain"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

const brainAbout = "Keeps an agent's knowledge pages, which its turns search with recall and read with\n" +
	"get_page when its profile enables the brain (toolbus agent set -brain). Pages live in\n" +
	"the KV bucket " + bus.BucketBrain + " (large ones in the object store " + bus.ObjectBrain + "):\n" +
	"every command needs -server (or NATS_URL).\n" +
	"  toolbus brain add [-id ID] [-title T] [-tag T]... [-replace] [FILE|-]\n" +
	"  toolbus brain list             one line a page\n" +
	"  toolbus brain show ID          prints the page's text\n" +
	"  toolbus brain rm ID"

func cmdBrain(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, e, "brain", "add|list|show|rm [flags] [ARG]", brainAbout, "add, list, show or rm", subcommands{
		"add": brainAdd, "list": brainList, "ls": brainList, "show": brainShow, "cat": brainShow,
		"rm": brainRm, "delete": brainRm,
	}, args, stdout, stderr)
}

// brainFlags are the flags every brain subcommand takes.
type brainFlags struct {
	bus    busFlags
	agent  *string
	asJSON *bool
}

// newBrainFlags makes a brain subcommand's flag set with the flags every one takes.
func newBrainFlags(e *env, name, synopsis, about string, stderr io.Writer) (*brainFlags, *flag.FlagSet) {
	fs := newFlagSet(name, synopsis, about, stderr)
	f := &brainFlags{}
	f.bus.register(fs, e)
	f.agent = fs.String("agent", defaultAgent, "the agent whose pages these are")
	f.asJSON = fs.Bool("json", false, "print JSON instead of text")
	return f, fs
}

// open dials the bus and opens the agent's knowledge store; the caller closes both.
func (f *brainFlags) open(ctx context.Context, what string) (*brain.Store, *nats.Conn, error) {
	if err := checkAgent(*f.agent); err != nil {
		return nil, nil, err
	}
	if *f.agent == "" {
		return nil, nil, usagef("-agent: the knowledge store keeps pages per agent; name one")
	}
	nc, err := f.bus.dialFor(ctx, what)
	if err != nil {
		return nil, nil, err
	}
	js, err := client.New(nc).JetStream()
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	s, err := brain.Open(ctx, js, brain.Options{})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return s, nc, nil
}

func brainAdd(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	bf, fs := newBrainFlags(e, "brain add", "[flags] [FILE|-]",
		"Adds a page to the agent's knowledge store, its text from FILE or standard input.\n"+
			"The title is -title, else the text's first line when it is a Markdown heading\n"+
			"(\"# Title\"); the id is -id, else made from the title. An id the agent already\n"+
			"uses is refused unless -replace.", stderr)
	var (
		id      = fs.String("id", "", "the page's id (letters, digits, '-' and '_'; default: made from the title)")
		title   = fs.String("title", "", "the page's title (default: the text's first line if it is a Markdown heading)")
		replace = fs.Bool("replace", false, "replace the agent's page of the same id, if there is one")
		tags    listFlag
	)
	fs.Var(&tags, "tag", "tag the page (repeatable, or comma-separated); recall can keep to pages with given tags")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("want at most one file (or - for standard input)")
	}
	var text []byte
	source := "standard input"
	if len(pos) == 0 || pos[0] == "-" {
		text, err = io.ReadAll(e.stdin)
	} else {
		source = pos[0]
		text, err = os.ReadFile(pos[0])
	}
	if err != nil {
		return fmt.Errorf("read the page: %w", err)
	}
	if strings.TrimSpace(string(text)) == "" {
		return fmt.Errorf("brain add: the page is empty: %s holds no text", source)
	}
	p := brain.Page{ID: *id, Title: *title, Text: string(text), Tags: tags}
	if p.Title == "" {
		first, _, _ := strings.Cut(p.Text, "\n")
		if h, ok := strings.CutPrefix(first, "# "); ok {
			p.Title = strings.TrimSpace(h)
		}
	}
	if p.Title == "" {
		return usagef("the page needs a title: pass -title, or start the text with a Markdown heading (# Title)")
	}
	if p.ID == "" {
		if p.ID = brain.Slug(p.Title); p.ID == "" {
			return usagef("no id can be made from the title %q: pass -id", p.Title)
		}
	}
	if err := brain.CheckID(p.ID); err != nil {
		return usagef("-id: %v", strings.TrimPrefix(err.Error(), brain.ErrBadPage.Error()+": "))
	}
	s, nc, err := bf.open(ctx, "brain add")
	if err != nil {
		return err
	}
	defer nc.Close()
	defer s.Close()
	verb := "added"
	stored, err := s.Create(ctx, *bf.agent, p)
	if errors.Is(err, brain.ErrExists) {
		if !*replace {
			return fmt.Errorf("agent %s already has a page %s: pass -replace to replace it, or -id to add another", *bf.agent, p.ID)
		}
		verb = "replaced"
		stored, err = s.Put(ctx, *bf.agent, p)
	}
	if err != nil {
		return err
	}
	if *bf.asJSON {
		return printJSON(stdout, brain.Info{ID: stored.ID, Title: stored.Title, Tags: stored.Tags, Updated: stored.Updated, Size: len(stored.Text)})
	}
	fmt.Fprintf(stderr, "agent %s: page %s %s (%s%s)\n", *bf.agent, stored.ID, verb, sizeOf(len(stored.Text)), tagList(stored.Tags, ", tags "))
	return nil
}

func brainList(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	bf, fs := newBrainFlags(e, "brain list", "[flags]", "Lists the agent's pages: id, title, tags, size and when each was last written.", stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments %q", pos)
	}
	s, nc, err := bf.open(ctx, "brain list")
	if err != nil {
		return err
	}
	defer nc.Close()
	defer s.Close()
	list, err := s.List(ctx, *bf.agent)
	if err != nil {
		return err
	}
	if *bf.asJSON {
		if list == nil {
			list = []brain.Info{}
		}
		return printJSON(stdout, list)
	}
	if len(list) == 0 {
		fmt.Fprintf(stderr, "agent %s has no pages\n", *bf.agent)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTITLE\tTAGS\tSIZE\tUPDATED")
	now := time.Now()
	for _, p := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s ago\n", p.ID, truncate(p.Title, 50), dash(strings.Join(p.Tags, ",")), sizeOf(p.Size), formatElapsed(now.Sub(p.Updated)))
	}
	return tw.Flush()
}

func brainShow(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	bf, fs := newBrainFlags(e, "brain show", "[flags] ID",
		"Prints a page's text as stored, and its title, tags and age on standard error;\n"+
			"with -json, the whole page as JSON.", stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one page id")
	}
	s, nc, err := bf.open(ctx, "brain show")
	if err != nil {
		return err
	}
	defer nc.Close()
	defer s.Close()
	p, err := s.Get(ctx, *bf.agent, pos[0])
	if err != nil {
		return err
	}
	if *bf.asJSON {
		return printJSON(stdout, p)
	}
	fmt.Fprintf(stderr, "page %s: %s (%s%s, updated %s ago)\n", p.ID, p.Title, sizeOf(len(p.Text)), tagList(p.Tags, ", tags "), formatElapsed(time.Since(p.Updated)))
	_, err = io.WriteString(stdout, p.Text)
	return err
}

func brainRm(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	bf, fs := newBrainFlags(e, "brain rm", "[flags] ID...", "Deletes pages of the agent.", stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("want the id of a page to delete")
	}
	s, nc, err := bf.open(ctx, "brain rm")
	if err != nil {
		return err
	}
	defer nc.Close()
	defer s.Close()
	var errs []error
	var deleted []string
	for _, id := range pos {
		if err := s.Delete(ctx, *bf.agent, id); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, id)
		if !*bf.asJSON {
			fmt.Fprintf(stderr, "agent %s: page %s deleted\n", *bf.agent, id)
		}
	}
	if *bf.asJSON {
		if deleted == nil {
			deleted = []string{}
		}
		if err := printJSON(stdout, map[string]any{"agent": *bf.agent, "deleted": deleted}); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// sizeOf is a byte count for people: 812 B, 14.2 KB, 3.1 MB.
func sizeOf(n int) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000_000:
		return fmt.Sprintf("%.1f KB", float64(n)/1000)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1000_000)
}

// tagList is ", tags a, b" (prefix and the tags), or "" for none.
func tagList(tags []string, prefix string) string {
	if len(tags) == 0 {
		return ""
	}
	return prefix + strings.Join(tags, ", ")
}
