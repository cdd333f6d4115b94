package computer

import (
	"log/slog"
	"time"
)

// Category is the tool category the computer tools belong to.
const Category = "computer"

// Defaults applied to zero fields of [Config].
const (
	DefaultCommandTimeout    = 2 * time.Minute
	DefaultMaxCommandTimeout = 10 * time.Minute
	DefaultMaxOutput         = 32 << 10
	DefaultMaxFileSize       = 10 << 20
	DefaultKillGrace         = 2 * time.Second
)

// Config configures the computer tools. The zero value is usable: every zero field takes
// its default.
type Config struct {
	// HomeRoot, when set, is the directory that holds the agent homes. A call whose Home
	// lies outside it is refused, and a call without a Home works in HomeRoot/<agent>.
	HomeRoot string
	// CommandTimeout bounds a command that asks for no timeout of its own.
	CommandTimeout time.Duration
	// MaxCommandTimeout caps the timeout a command may ask for, and CommandTimeout.
	MaxCommandTimeout time.Duration
	// MaxOutput is the number of bytes of a command's output, a file's text or a listing
	// that the model sees.
	MaxOutput int
	// MaxFileSize is the largest file read_file reads and write_file writes, in bytes.
	MaxFileSize int64
	// KillGrace is how long processes get between SIGTERM and SIGKILL. An aborted or timed
	// out command is gone at most KillGrace (and a few milliseconds) after its call's
	// context ends: a turn's abort grace must be longer (actors.DefaultAbortGrace).
	KillGrace time.Duration
	// Sandbox says how run_command isolates commands; the zero value runs each in a
	// bubblewrap sandbox, and refuses every call when bubblewrap cannot run.
	Sandbox SandboxConfig
	// CallOptions, when set, gives each run_command call its sandbox options from the
	// calling agent's id; nil gives every call the defaults (no network, no variables of
	// its own, the node's Limits).
	CallOptions func(agent string) CallSandbox
	// Limits bound each command: its processes, memory, CPU time, file size and /tmp. A
	// zero field takes its default (DefaultPids, DefaultMemory, DefaultCPUSeconds,
	// DefaultFileSize, DefaultTmpSize); a negative one turns that limit off. A call's
	// options (CallSandbox.Limits) override them field by field.
	Limits Limits
	// Log is where the tools log what the model does not see, such as limits the host
	// cannot enforce; nil is slog.Default().
	Log *slog.Logger

	// cgroups, when set, stands in for the probe of the host's cgroups (tests: a host
	// without them, beside tests that use the real ones).
	cgroups *cgroupHost
}

// log is the tools' logger.
func (c Config) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

// validate refuses a configuration run_command cannot run commands with.
func (c Config) validate() error {
	return c.Limits.Validate()
}

func (c Config) withDefaults() Config {
	// The maximum is the cap: a default timeout never exceeds it, and an unset maximum
	// makes room for a longer default.
	if c.MaxCommandTimeout <= 0 {
		c.MaxCommandTimeout = max(DefaultMaxCommandTimeout, c.CommandTimeout)
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = DefaultCommandTimeout
	}
	c.CommandTimeout = min(c.CommandTimeout, c.MaxCommandTimeout)
	if c.MaxOutput <= 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	if c.MaxFileSize <= 0 {
		c.MaxFileSize = DefaultMaxFileSize
	}
	if c.KillGrace <= 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.Sandbox.Mode == "" {
		c.Sandbox.Mode = SandboxBwrap
	}
	if c.Sandbox.Bwrap == "" {
		c.Sandbox.Bwrap = "bwrap"
	}
	c.Limits = c.Limits.WithDefaults()
	return c
}
