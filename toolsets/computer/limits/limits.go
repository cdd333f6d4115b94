// Package limits holds what one run_command command of the computer category may use:
// the Limits an agent's profile and a node's configuration set, with their defaults and
// their check. It is apart from package computer, which applies them (control groups,
// rlimits), so that what reads profiles links none of that.
package limits

import (
	"fmt"
	"strings"
)

// Defaults of [Limits], for a zero field of the computer category's Config.Limits.
//
//   - 512 processes and threads: what a build on a many-core host runs at once (a JVM or a
//     Go or Rust toolchain has dozens of threads per process), and a small fraction of the
//     host's pid space: a fork bomb stops there.
//   - 2 GiB of memory: a Go, Rust or TypeScript build or a pip install fits; ten commands
//     at once still leave most of a 24 GiB host to the node and its JetStream store.
//   - 10 min of CPU time per process: what the longest command timeout allows one process
//     anyway; the limit binds when a node raises MaxCommandTimeout.
//   - 1 GiB per file: a data set or an archive fits; a runaway `yes > file` stops there.
//   - 256 MiB of /tmp: scratch space for builds and unpacked archives; /tmp is memory
//     (a tmpfs, counted against the memory limit), and lasting data belongs in the home.
const (
	DefaultPids       = 512
	DefaultMemory     = 2 << 30
	DefaultCPUSeconds = 600
	DefaultFileSize   = 1 << 30
	DefaultTmpSize    = 256 << 20
)

// The smallest limits a command can start within: bubblewrap's init and the shell are two
// processes and a few MiB before the command does anything.
const (
	MinPids   = 8
	MinMemory = 16 << 20
	// minMemoryText is MinMemory as the computer category writes sizes.
	minMemoryText = "16.0 MiB"
)

// Limits bound what one run_command command may use. In the computer category's Config.Limits a zero
// field takes its default (DefaultPids, …); in a call's CallSandbox.Limits a zero field
// takes the node's value. A negative field turns that limit off.
//
// Processes and memory are counted for the command as a whole, in a control group of its
// own (cgroup v1 or v2, nested in the node's); where the node cannot create one, memory
// falls back to a per-process rlimit (RLIMIT_DATA) and processes to RLIMIT_NPROC (which
// counts per sandbox, but bare counts every process of the node's user, and does not bind
// a node that runs as root). CPU time and file size are rlimits of each
// process. Each run_command result says in its details which limits applied and how
// (computer.AppliedLimits).
type Limits struct {
	// Pids bounds the processes and threads the command has at once (the pids
	// controller): past it, fork and clone fail with EAGAIN ("Resource temporarily
	// unavailable").
	Pids int64 `json:"pids,omitempty"`
	// Memory bounds the command's memory in bytes, its files in /tmp included (the memory
	// controller, swap included): past it the kernel kills one of its processes (SIGKILL).
	Memory int64 `json:"memory_bytes,omitempty"`
	// CPUSeconds bounds the CPU time of each process of the command (RLIMIT_CPU): SIGXCPU
	// at the limit, SIGKILL two seconds of CPU time later.
	CPUSeconds int64 `json:"cpu_seconds,omitempty"`
	// FileSize bounds the size of each file the command writes, in bytes (RLIMIT_FSIZE): a
	// write past it fails (EFBIG, "File too large") and the process gets SIGXFSZ.
	FileSize int64 `json:"file_size_bytes,omitempty"`
	// TmpSize bounds the private /tmp of a sandboxed command, in bytes (the size of its
	// tmpfs): past it, writes fail with ENOSPC ("No space left on device").
	TmpSize int64 `json:"tmp_bytes,omitempty"`
}

// Over is l with the zero fields taken from base.
func (l Limits) Over(base Limits) Limits {
	pick := func(v, b int64) int64 {
		if v != 0 {
			return v
		}
		return b
	}
	return Limits{
		Pids:       pick(l.Pids, base.Pids),
		Memory:     pick(l.Memory, base.Memory),
		CPUSeconds: pick(l.CPUSeconds, base.CPUSeconds),
		FileSize:   pick(l.FileSize, base.FileSize),
		TmpSize:    pick(l.TmpSize, base.TmpSize),
	}
}

// WithDefaults is l with the defaults for its zero fields.
func (l Limits) WithDefaults() Limits {
	return l.Over(Limits{Pids: DefaultPids, Memory: DefaultMemory, CPUSeconds: DefaultCPUSeconds, FileSize: DefaultFileSize, TmpSize: DefaultTmpSize})
}

// Effective is l with the limits turned off (negative) at zero: zero means none.
func (l Limits) Effective() Limits {
	off := func(v int64) int64 { return max(v, 0) }
	return Limits{Pids: off(l.Pids), Memory: off(l.Memory), CPUSeconds: off(l.CPUSeconds), FileSize: off(l.FileSize), TmpSize: off(l.TmpSize)}
}

// Validate refuses a limit too small for a command to start within: fewer than MinPids
// processes or less than MinMemory of memory. Zero (the default) and negative (off)
// fields are valid.
func (l Limits) Validate() error {
	var problems []string
	if l.Pids > 0 && l.Pids < MinPids {
		problems = append(problems, fmt.Sprintf("pids %d is below the minimum of %d", l.Pids, MinPids))
	}
	if l.Memory > 0 && l.Memory < MinMemory {
		problems = append(problems, fmt.Sprintf("memory_bytes %d is below the minimum of %d (%s)", l.Memory, MinMemory, minMemoryText))
	}
	if len(problems) > 0 {
		return fmt.Errorf("command limits: %s (0 takes the default, a negative value turns a limit off)", strings.Join(problems, "; "))
	}
	return nil
}
