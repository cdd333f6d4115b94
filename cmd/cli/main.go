// Command toolbus is the command line of toolbus: it runs a turn and shows its
// activities live, lists the tools a turn assembles, calls one tool, aborts or
// watches turns on a running bus, runs a node, and benchmarks the runtime.
//
//	toolbus run -model script:examples/demo/script.json -home examples/demo/home "Look around and check the project"
//	toolbus tools
//	toolbus call -home . read_file '{"path": "go.mod"}'
//	toolbus watch -server nats://127.0.0.1:4222
//	toolbus node -name n1 -listen 127.0.0.1:4222 -user ops -pass-file ops.pass
//
// Build it under its name with `go build -o toolbus ./cmd/cli`.
//
// Without -server, run and call start an embedded bus and node in the process,
// which needs nothing else and opens no port.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolbus/toolbus/internal/suggest"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1   // an error, or a turn that failed or hit its step limit
	exitUsage       = 2   // bad flags or arguments
	exitInterrupted = 130 // 128 + SIGINT, as shells report an interrupted command
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	// The first Ctrl-C cancels ctx, which a running turn takes as "abort and
	// show how the calls ended"; the second exits at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		<-sigs
		os.Exit(exitInterrupted)
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand. It returns nil on success, an error to report,
// or an *exitError when it has already reported what happened.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"run", "run one agent turn and show its activities live", cmdRun},
	{"node", "run a node: it serves tools and runs turns for the commands given -server", cmdNode},
	{"tools", "list the tools a turn assembles, as the model receives them", cmdTools},
	{"call", "validate arguments and call one tool through the bus", cmdCall},
	{"conform", "check a category's host against the host contract (needs -server)", cmdConform},
	{"mcp", "serve the bus's tools to MCP clients, over stdio or streamable HTTP", cmdMCP},
	{"agent", "set, get, list or remove agent profiles (needs -server)", cmdAgent},
	{"skills", "list an agent's skills, or show one as load_skill returns it", cmdSkills},
	{"brain", "add, list, show or remove an agent's knowledge pages (needs -server)", cmdBrain},
	{"abort", "abort a running turn (needs -server)", cmdAbort},
	{"approve", "approve or refuse a call a turn holds for approval (needs -server)", cmdApprove},
	{"turns", "list the durable turns of a bus: state, node, step, age (needs -server)", cmdTurns},
	{"resume", "queue again a turn whose node was lost (needs -server)", cmdResume},
	{"jobs", "list, show or cancel background jobs (needs -server)", cmdJobs},
	{"schedules", "list, show or remove schedules (needs -server)", cmdSchedules},
	{"watch", "print the events of one turn or of all turns (needs -server)", cmdWatch},
	{"workflow", "start a workflow and follow it; view, list or cancel workflows (these need -server)", cmdWorkflow},
	{"console", "serve the web console: turns, timelines, approvals, workflows, jobs, nodes", cmdConsole},
	{"bench", "run the performance suite", runBench},
	{"version", "print the module version and the VCS revision this program was built from", cmdVersion},
}

// env is what the commands read of their process besides the arguments: its
// environment variables (the flags' defaults, the model gateway's keys and endpoints,
// TERM, NO_COLOR, USER) and its standard input (brain add, agent set -f -, workflow
// start -). run gives them the process's; a test passes one of its own to runEnv, so
// that a test that sets a variable or feeds standard input can still run in parallel:
// t.Setenv and a swapped os.Stdin change the whole process, and the testing package
// refuses t.Setenv in a parallel test.
//
// The packages the commands call read a few variables themselves, which no test of
// this package sets: `toolbus node` all of its own (package node), the embedded node
// the keys it redacts (redact.SecretEnv) and OTEL_*, the NATS_PASSWORD and
// TOOLBUS_CONSOLE_PASSWORD behind the -pass-file flags (internal/secretflag), and the
// web search keys (web.KeysFromEnv).
type env struct {
	getenv func(string) string // os.Getenv's contract: "" for a variable not set
	// stdin is standard input. `toolbus run` asks on it for approvals only when it is an
	// *os.File on a terminal, as the process's os.Stdin can be.
	stdin io.Reader
}

// processEnv is the process's environment and standard input, for main.
func processEnv() *env { return &env{getenv: os.Getenv, stdin: os.Stdin} }

// run runs the command line args in the process's environment and returns the
// process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(ctx, processEnv(), args, stdout, stderr)
}

// runEnv is run in the environment e.
func runEnv(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == name {
			return exitCode(stderr, c.name, c.run(ctx, e, args[1:], stdout, stderr))
		}
	}
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	fmt.Fprintf(stderr, "toolbus: unknown command %q%s\n\n", name, suggest.DidYouMean(name, names))
	usage(stderr)
	return exitUsage
}

// exitCode reports err, if it still needs reporting, and maps it to an exit code.
func exitCode(stderr io.Writer, name string, err error) int {
	var (
		ue *usageError
		ee *exitError
	)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "toolbus %s: %s\nRun 'toolbus %s -h' for usage.\n", name, ue.msg, name)
		return exitUsage
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintln(stderr, "toolbus:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "toolbus:", err)
	return exitFailed
}

// usageError is a mistake in a command's flags or arguments.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError ends a command with a given code; err, when set, is reported.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usage(w io.Writer) {
	fmt.Fprint(w, `toolbus runs agent turns whose tools are served over a NATS bus.

Usage: toolbus <command> [flags] [args]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `  help      show this help

Without -server, run and call start an embedded bus and node in the process
(no port, a temporary store). With -server (or NATS_URL) they use the nodes of
a running bus; start one with 'toolbus node'.

Examples:
  toolbus run -model script:examples/demo/script.json -home examples/demo/home "Look around and check the project"
  toolbus run -model openai:gpt-5.4 "Summarise the README"      (needs OPENAI_API_KEY)
  toolbus run -model chat:llama3.1 -base-url http://localhost:11434/v1 "Summarise the README"
  toolbus node -name n1 -listen 127.0.0.1:4222 -user ops -pass-file ops.pass
  toolbus tools -json
  toolbus call -home examples/demo/home read_file '{"path": "README.md"}'
  toolbus watch -server nats://127.0.0.1:4222

Run 'toolbus <command> -h' for a command's flags.
`)
}

// examples holds one example of each command, by the name its flag set has;
// every command's -h shows it (node.Example is the node's).
var examples = map[string]string{
	"run":             `toolbus run -model openai:gpt-5.4 -home ~/project "Summarise the README"`,
	"tools":           "toolbus tools -json -api chat",
	"call":            `toolbus call -home examples/demo/home read_file '{"path": "README.md"}'`,
	"agent":           "toolbus agent set -server nats://127.0.0.1:4222 -namespace crm demo-agent",
	"agent set":       "toolbus agent set -server nats://127.0.0.1:4222 -namespace crm demo-agent",
	"agent get":       "toolbus agent get -server nats://127.0.0.1:4222 demo-agent",
	"agent list":      "toolbus agent list -server nats://127.0.0.1:4222",
	"agent rm":        "toolbus agent rm -server nats://127.0.0.1:4222 demo-agent",
	"skills":          "toolbus skills list -server nats://127.0.0.1:4222 -agent demo-agent",
	"skills list":     "toolbus skills list -server nats://127.0.0.1:4222 -agent demo-agent",
	"skills show":     "toolbus skills show -agent demo-agent notes",
	"brain":           `toolbus brain add -server nats://127.0.0.1:4222 -agent demo-agent -tag ops deploy.md`,
	"brain add":       `toolbus brain add -server nats://127.0.0.1:4222 -agent demo-agent -tag ops deploy.md`,
	"brain list":      "toolbus brain list -server nats://127.0.0.1:4222 -agent demo-agent",
	"brain show":      "toolbus brain show -server nats://127.0.0.1:4222 -agent demo-agent deploy",
	"brain rm":        "toolbus brain rm -server nats://127.0.0.1:4222 -agent demo-agent deploy",
	"abort":           "toolbus abort -server nats://127.0.0.1:4222 -reason 'wrong file' TURN",
	"conform":         "toolbus conform -server nats://127.0.0.1:4222 -category crm -slow-tool slow_report -slow-args '{\"seconds\": 30}'",
	"mcp":             "toolbus mcp -server nats://127.0.0.1:4222 -agent demo-agent",
	"approve":         "toolbus approve -server nats://127.0.0.1:4222 -refuse -reason 'not on a Friday' TURN CALL",
	"turns":           "toolbus turns -server nats://127.0.0.1:4222",
	"resume":          "toolbus resume -server nats://127.0.0.1:4222 TURN",
	"watch":           "toolbus watch -server nats://127.0.0.1:4222",
	"console":         "toolbus console -server nats://127.0.0.1:4222 -user ops -pass-file ops.pass",
	"workflow":        "toolbus workflow start examples/workflow/compare.json",
	"workflow start":  "toolbus workflow start -server nats://127.0.0.1:4222 -model openai:gpt-5.4 compare.json",
	"workflow view":   "toolbus workflow view -server nats://127.0.0.1:4222 -follow ID",
	"workflow list":   "toolbus workflow list -server nats://127.0.0.1:4222 -state running",
	"workflow cancel": "toolbus workflow cancel -server nats://127.0.0.1:4222 -reason 'not needed' ID",
	"bench":           "toolbus bench -only turn -n 500",
	"version":         "toolbus version",

	"jobs":           "toolbus jobs list -server nats://127.0.0.1:4222 -agent demo-agent",
	"jobs list":      "toolbus jobs list -server nats://127.0.0.1:4222 -agent demo-agent",
	"jobs show":      "toolbus jobs show -server nats://127.0.0.1:4222 JOB",
	"jobs cancel":    "toolbus jobs cancel -server nats://127.0.0.1:4222 -reason 'not needed' JOB",
	"schedules":      "toolbus schedules list -server nats://127.0.0.1:4222",
	"schedules list": "toolbus schedules list -server nats://127.0.0.1:4222 -json",
	"schedules show": "toolbus schedules show -server nats://127.0.0.1:4222 SCHEDULE",
	"schedules rm":   "toolbus schedules rm -server nats://127.0.0.1:4222 SCHEDULE",
}

// flagSetMade, when set (by tests), is told of every flag set newFlagSet makes.
var flagSetMade func(*flag.FlagSet)

// newFlagSet makes a command's flag set. Every command's usage has one layout:
// synopsis, about, one example, then every flag, written with one dash (the
// flag package takes two as well).
func newFlagSet(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if flagSetMade != nil {
		flagSetMade(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: toolbus %s %s\n\n%s\n\n", name, synopsis, about)
		if ex := examples[name]; ex != "" {
			fmt.Fprintf(fs.Output(), "Example:\n  %s\n\n", ex)
		}
		var flags int
		fs.VisitAll(func(*flag.Flag) { flags++ })
		if flags == 0 {
			fmt.Fprint(fs.Output(), "Flags:\n  none\n")
			return
		}
		fmt.Fprint(fs.Output(), "Flags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags placed before, between or after the positional
// arguments, which the flag package alone stops at; after "--" everything is
// positional. A flag error has already been printed.
//
// -h prints the whole usage; a flag the flag package refuses prints its error and
// one line that says where the usage is, not the usage itself.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	full := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = full }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				full()
				return nil, err
			}
			if hint := suggest.Flag(fs, err); hint != "" {
				fmt.Fprintln(fs.Output(), hint)
			}
			fmt.Fprintf(fs.Output(), "Run 'toolbus %s -h' for usage.\n", fs.Name())
			return nil, &exitError{code: exitUsage}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// flagsSet lists the flags given on the command line.
func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}
