package computer

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/internal/label"
	"github.com/toolbus/toolbus/schema"
)

// Specs returns the specs of the computer tools configured by cfg, in the order the model
// sees them.
func Specs(cfg Config) []*toolbus.Spec {
	return specs(cfg.withDefaults())
}

// specs are the tools' specs; Tools adds the functions.
func specs(c Config) []*toolbus.Spec {
	return []*toolbus.Spec{
		{
			Name: "list_files",
			Description: "List the files and directories in a directory of your home directory (the agent home). " +
				"Directories end in '/', files show their size. Paths are relative to the home and can be passed to read_file.",
			Mode:     toolbus.Parallel,
			ReadOnly: true,
			Category: Category,
			Params:   schema.MustFor[listArgs](),
		},
		{
			Name: "read_file",
			Description: "Read a text file in the agent home. Lines come numbered (number, tab, text) and the result says how many lines the file has; " +
				"read long files in parts with offset and limit. Binary files are refused.",
			Mode:     toolbus.Parallel,
			ReadOnly: true,
			Category: Category,
			Params:   schema.MustFor[readArgs](),
		},
		{
			Name: "write_file",
			Description: "Write a text file in the agent home, replacing it or, with append, adding to its end. " +
				"Missing parent directories are created.",
			Mode:        toolbus.Sequential,
			Destructive: true,
			Category:    Category,
			Params:      schema.MustFor[writeArgs](),
		},
		{
			Name: "run_command",
			Description: fmt.Sprintf("Run a shell command (/bin/sh -c) in the agent home and return its exit code and output (stdout and stderr together). "+
				"The command runs without a terminal or input, with a %s timeout unless timeout_seconds says otherwise (at most %s); "+
				"long output keeps its beginning and end. Background processes are stopped when the command ends.%s",
				formatDuration(c.CommandTimeout), formatDuration(c.MaxCommandTimeout), sandboxNote(c)),
			Mode:        toolbus.Sequential,
			Destructive: true,
			Category:    Category,
			Timeout:     c.MaxCommandTimeout + 3*c.KillGrace + 5*time.Second,
			Params:      schema.MustFor[commandArgs](),
		},
	}
}

// Tools returns the computer tools configured by cfg, in the order the model sees them.
func Tools(cfg Config) []*toolbus.Tool {
	c := cfg.withDefaults()
	specs := specs(c)
	// The sandbox is checked once, when the host builds its tools; if it cannot run,
	// run_command refuses every call with the reason and the fix. So is what the host's
	// cgroups allow (logged once when commands cannot get all their limits).
	sb, sbErr := c.sandbox()
	if err := c.validate(); err != nil {
		sbErr = err
	} else if sbErr == nil {
		c.hostCgroups()
	}
	return []*toolbus.Tool{
		toolbus.MustDefine(toolbus.Def[listArgs]{
			Spec: *specs[0],
			DescribeActivity: func(a listArgs) string {
				return "Listing " + display(cleanArg(a.Path))
			},
			DescribeCompletedActivity: func(a listArgs, res toolbus.Result) string {
				d, ok := label.DetailsOf[ListDetails](res.Details)
				if !ok {
					return "Could not list " + display(cleanArg(a.Path))
				}
				n := len(d.Entries) + d.Omitted
				if a.Recursive {
					return fmt.Sprintf("Listed %s under %s", plural(n, "entry", "entries"), display(d.Path))
				}
				return fmt.Sprintf("Listed %s in %s", plural(n, "entry", "entries"), display(d.Path))
			},
			Execute: c.listFiles,
		}),
		toolbus.MustDefine(toolbus.Def[readArgs]{
			Spec: *specs[1],
			DescribeActivity: func(a readArgs) string {
				return "Reading " + cleanArg(a.Path)
			},
			DescribeCompletedActivity: func(a readArgs, res toolbus.Result) string {
				d, ok := label.DetailsOf[ReadDetails](res.Details)
				if !ok {
					return "Could not read " + cleanArg(a.Path)
				}
				return fmt.Sprintf("Read %s of %s", plural(d.Lines(), "line", "lines"), d.Path)
			},
			Execute: c.readFile,
		}),
		toolbus.MustDefine(toolbus.Def[writeArgs]{
			Spec: *specs[2],
			DescribeActivity: func(a writeArgs) string {
				if a.Append {
					return "Appending to " + cleanArg(a.Path)
				}
				return "Writing " + cleanArg(a.Path)
			},
			DescribeCompletedActivity: func(a writeArgs, res toolbus.Result) string {
				d, ok := label.DetailsOf[WriteDetails](res.Details)
				switch {
				case !ok:
					return "Could not write " + cleanArg(a.Path)
				case d.Append && !d.Created:
					return fmt.Sprintf("Appended %s to %s", plural(d.Lines, "line", "lines"), d.Path)
				}
				return fmt.Sprintf("Wrote %s to %s", plural(d.Lines, "line", "lines"), d.Path)
			},
			Execute: c.writeFile,
		}),
		toolbus.MustDefine(toolbus.Def[commandArgs]{
			Spec: *specs[3],
			// The command's own timeout governs; the call's deadline leaves room for it and for
			// stopping the process group.

			DescribeActivity: func(a commandArgs) string {
				return fmt.Sprintf("Running `%s`", shortCommand(a.Command))
			},
			DescribeCompletedActivity: func(a commandArgs, res toolbus.Result) string {
				cmd := shortCommand(a.Command)
				d, ok := label.DetailsOf[CommandDetails](res.Details)
				switch {
				case !ok:
					return fmt.Sprintf("Could not run `%s`", cmd)
				case d.TimedOut:
					return fmt.Sprintf("Timed out running `%s` after %s", cmd, formatDuration(d.Duration()))
				case d.Cancelled:
					return fmt.Sprintf("Stopped `%s` after %s", cmd, formatDuration(d.Duration()))
				case d.Limits.reached(limitMemory):
					return fmt.Sprintf("Ran `%s` (out of memory)", cmd)
				case d.Limits.reached(limitPids):
					return fmt.Sprintf("Ran `%s` (too many processes)", cmd)
				case d.Signal != "":
					return fmt.Sprintf("Ran `%s` (killed by %s)", cmd, d.Signal)
				}
				return fmt.Sprintf("Ran `%s` (exit %d)", cmd, d.ExitCode)
			},
			Execute: func(ctx context.Context, call toolbus.Call, a commandArgs) (toolbus.Result, error) {
				if sbErr != nil {
					return toolbus.Result{}, sbErr
				}
				return c.runCommand(ctx, sb, call, a)
			},
		}),
	}
}

// cleanArg is a path argument as labels show it, before it is resolved.
func cleanArg(p string) string {
	if p == "" {
		return "."
	}
	return path.Clean(p)
}

// sandboxNote tells the model what the sandbox allows, and the command limits.
func sandboxNote(c Config) string {
	note := limitsNote(c.Limits.Effective(), c.Sandbox.Mode != SandboxOff)
	if c.Sandbox.Mode == SandboxOff {
		return note
	}
	return " The command runs in a sandbox: the agent home is the only lasting place it can write to " +
		"(/tmp is private to the command and emptied when it ends), the rest of the system is read-only, " +
		"and the network is off unless the agent is allowed it." + note
}

// limitsNote tells the model the host's command limits (an agent may have others).
func limitsNote(l Limits, tmp bool) string {
	var parts []string
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("%d processes and threads at once", l.Pids))
	}
	if l.Memory > 0 {
		parts = append(parts, formatSize(l.Memory)+" of memory")
	}
	if l.CPUSeconds > 0 {
		parts = append(parts, cpuTime(l.CPUSeconds)+" of CPU time per process")
	}
	if l.FileSize > 0 {
		parts = append(parts, formatSize(l.FileSize)+" per file")
	}
	if tmp && l.TmpSize > 0 {
		parts = append(parts, formatSize(l.TmpSize)+" in /tmp (which counts as memory)")
	}
	if len(parts) == 0 {
		return ""
	}
	return " Each command is limited to " + strings.Join(parts, ", ") + "; the result says which limit a command reached."
}
