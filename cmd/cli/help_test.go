package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/node"
)

// shellWords splits a command line as a shell would for the lines of the help and
// the README: words, '…' and "…" quoting, a # comment outside quotes.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				j = len(line) - i - 1
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			i = len(line)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// commandLine is a toolbus command line of an example: its words after "toolbus",
// without the environment assignments before it; nil when line runs something else.
func commandLine(line string) []string {
	w := shellWords(strings.TrimPrefix(strings.TrimSpace(line), "$ "))
	for len(w) > 0 {
		switch {
		case w[0] == "env":
			w = w[1:]
		case w[0] == "-u" && len(w) > 1:
			w = w[2:]
		case strings.Contains(w[0], "=") && !strings.HasPrefix(w[0], "-"):
			w = w[1:]
		case w[0] == "toolbus":
			return w[1:]
		case len(w) > 2 && w[0] == "go" && w[1] == "run" && w[2] == "./cmd/cli":
			return w[3:]
		default:
			return nil
		}
	}
	return nil
}

// exampleLines are the toolbus command lines of the help: the examples of
// `toolbus -h`, and the one of each command's and subcommand's -h.
func exampleLines(t *testing.T) []string {
	t.Helper()
	var b bytes.Buffer
	usage(&b)
	_, ex, ok := strings.Cut(b.String(), "\nExamples:\n")
	if !ok {
		t.Fatal("toolbus -h has no examples")
	}
	ex, _, _ = strings.Cut(ex, "\n\n")
	lines := strings.Split(ex, "\n")
	for _, e := range examples {
		lines = append(lines, e)
	}
	return append(lines, node.Example)
}

// readmeLines are the toolbus command lines of the README's shell blocks and of its
// transcripts ($ lines).
func readmeLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var lang string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "```") && !in:
			in, lang = true, strings.TrimPrefix(l, "```")
		case strings.HasPrefix(l, "```"):
			in = false
		case in && (lang == "sh" || strings.HasPrefix(l, "$ ")):
			lines = append(lines, l)
		}
	}
	return lines
}

// parsesAsShown parses a command line with the flag set of its command, as the
// command would: a refused flag or value is the error.
func parsesAsShown(t *testing.T, words []string) error {
	t.Helper()
	if len(words) == 0 {
		return nil
	}
	if words[0] == "node" {
		fs := node.FlagSet("toolbus node", io.Discard)
		return fs.Parse(words[1:])
	}
	// The command's flag set is the one its -h makes.
	name := words[:1]
	if len(words) > 1 && !strings.HasPrefix(words[1], "-") && examples[words[0]+" "+words[1]] != "" {
		name = words[:2]
	}
	var made []*flag.FlagSet
	flagSetMade = func(fs *flag.FlagSet) { made = append(made, fs) }
	defer func() { flagSetMade = nil }()
	if code, _, stderr := cli(testContext(t), append(append([]string{}, name...), "-h")...); code != exitOK || len(made) == 0 {
		t.Fatalf("%s -h: exit %d, %d flag sets:\n%s", strings.Join(name, " "), code, len(made), stderr)
	}
	fs := made[len(made)-1]
	fs.SetOutput(io.Discard)
	_, err := parseArgs(fs, words[len(name):])
	if ee, ok := err.(*exitError); ok && ee.err == nil {
		return flagError(fs, words[len(name):])
	}
	return err
}

// flagError is the flag package's own error for args, for the test's message.
func flagError(fs *flag.FlagSet, args []string) error {
	fs.Usage = func() {}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			return nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

// Every example of the help and every toolbus command of the README parses with its
// command's flags: none passes a flag the command refuses (as -pass secret was).
func TestHelpExamplesParse(t *testing.T) {
	var n int
	for _, src := range []struct {
		what  string
		lines []string
	}{{"-h", exampleLines(t)}, {"README.md", readmeLines(t)}} {
		for _, line := range src.lines {
			words := commandLine(line)
			if words == nil {
				continue
			}
			n++
			if err := parsesAsShown(t, words); err != nil {
				t.Errorf("%s: %q: %v", src.what, line, err)
			}
		}
	}
	if n < 30 {
		t.Errorf("only %d example command lines found", n)
	}
}

func TestShellWords(t *testing.T) {
	got := shellWords(`toolbus call -home x read_file '{"path": "a b"}'   # a comment`)
	want := []string{"toolbus", "call", "-home", "x", "read_file", `{"path": "a b"}`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("shellWords = %q, want %q", got, want)
	}
	if w := commandLine(`$ env -u OPENAI_API_KEY toolbus run -model openai:gpt-x "hi"`); strings.Join(w, " ") != "run -model openai:gpt-x hi" {
		t.Errorf("commandLine = %q", w)
	}
}

// A command group's -h lists its subcommands, not an empty list of flags; a bad flag
// prints its error and where the usage is, not the usage.
func TestGroupHelpAndFlagErrors(t *testing.T) {
	ctx := testContext(t)
	for _, g := range []string{"agent", "brain", "jobs", "schedules", "skills", "workflow"} {
		code, _, stderr := cli(ctx, g, "-h")
		if code != exitOK || strings.Contains(stderr, "Flags:") || !strings.Contains(stderr, "Subcommands: ") ||
			!strings.Contains(stderr, "Run 'toolbus "+g+" SUBCOMMAND -h' for a subcommand's flags.") {
			t.Errorf("%s -h: exit %d\n%s", g, code, stderr)
		}
	}
	for _, args := range [][]string{{"tools", "-nope"}, {"run", "-request-timeout", "soon", "hi"}, {"node", "-max-turns", "x"}, {"agent", "set", "-nope"}} {
		code, _, stderr := cli(ctx, args...)
		name := args[0]
		if args[0] == "agent" {
			name = "agent set"
		}
		if code != exitUsage || strings.Contains(stderr, "Usage:") || !strings.HasSuffix(stderr, "\nRun 'toolbus "+name+" -h' for usage.\n") ||
			strings.Count(stderr, "\n") != 2 {
			t.Errorf("%q: exit %d, stderr:\n%s", args, code, stderr)
		}
	}
}

func TestVersion(t *testing.T) {
	code, stdout, _ := cli(testContext(t), "version")
	if code != exitOK || !strings.HasPrefix(stdout, "toolbus github.com/toolbus/toolbus ") {
		t.Errorf("version: exit %d, %q", code, stdout)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/toolbus/toolbus", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "4e2fa0d"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionLine(bi), "toolbus github.com/toolbus/toolbus v0.3.0, revision 4e2fa0d (2026-01-02T03:04:05Z, modified), go1.26.8"; got != want {
		t.Errorf("versionLine = %q, want %q", got, want)
	}
}

// A bad -model is refused before the embedded node starts, as a usage error when the
// spec is of no known kind.
func TestBadModelBeforeStart(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	for _, c := range []struct {
		model, stderr string
		code          int
	}{
		{"gpt-x", `toolbus run: -model unknown model spec "gpt-x"`, exitUsage},
		{"openai:", `toolbus run: -model model spec "openai:" names no model`, exitUsage},
		{"openai:gpt-x", "toolbus: -model openai:gpt-x: responses gateway for gpt-x: no API key: set OPENAI_API_KEY\n", exitFailed},
	} {
		// No OPENAI_API_KEY in the run's environment.
		code, _, stderr := cliEnv(ctx, testEnv(nil, ""), "run", "-model", c.model, "hi")
		if code != c.code || !strings.HasPrefix(stderr, c.stderr) {
			t.Errorf("-model %s: exit %d, stderr:\n%s\nwant %d, %q", c.model, code, stderr, c.code, c.stderr)
		}
	}
}
