package computer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolbus/toolbus"
)

// defaultPath is the command PATH when the host process has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// progressEvery is how often a running command reports progress.
const progressEvery = time.Second

type commandArgs struct {
	Command        string `json:"command" jsonschema:"minLength=1" jsonschema_description:"The shell command, run with /bin/sh -c in the agent home."`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"minimum=1" jsonschema_description:"Stop the command after this many seconds. Capped by the host's maximum."`
	Cwd            string `json:"cwd,omitempty" jsonschema_description:"The working directory, relative to the agent home. Default: the home itself."`
}

// CommandDetails are the details of a run_command result.
type CommandDetails struct {
	Command string `json:"command"`
	Cwd     string `json:"cwd"` // relative to the agent home
	// ExitCode is the shell's exit status, -1 when a signal ended it.
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	TimeoutMS  int64  `json:"timeout_ms"`
	// TimeoutCapped says the command asked for more time than the host allows.
	TimeoutCapped bool `json:"timeout_capped,omitempty"`
	TimedOut      bool `json:"timed_out,omitempty"`
	// Cancelled says the call was aborted or reached its deadline while the command ran.
	Cancelled   bool  `json:"cancelled,omitempty"`
	OutputBytes int64 `json:"output_bytes"`
	OutputCut   int64 `json:"output_cut,omitempty"`
	// Sandbox is how the command ran: "bwrap" or "off".
	Sandbox SandboxMode `json:"sandbox"`
	// Network says whether the command could reach the network.
	Network bool `json:"network,omitempty"`
	// Limits are the limits the command ran within, how each was enforced and which it
	// reached.
	Limits *AppliedLimits `json:"limits,omitempty"`
}

// Duration is how long the command ran.
func (d CommandDetails) Duration() time.Duration {
	return time.Duration(d.DurationMS) * time.Millisecond
}

var errTimedOut = errors.New("command timed out")

// runCommand runs a command in sb, or bare when sb is nil.
func (c Config) runCommand(ctx context.Context, sb *sandbox, call toolbus.Call, a commandArgs) (toolbus.Result, error) {
	h, err := c.openHome(call)
	if err != nil {
		return toolbus.Result{}, err
	}
	defer h.Close()
	var opt CallSandbox
	if c.CallOptions != nil {
		opt = c.CallOptions(call.Agent)
	}
	if err := callEnv(opt.Env); err != nil {
		return toolbus.Result{}, err
	}
	if sb != nil {
		if err := checkHome(h.dir); err != nil {
			return toolbus.Result{}, err
		}
	}
	d := CommandDetails{Command: a.Command, Cwd: ".", ExitCode: -1, Sandbox: SandboxOff, Network: opt.Network || sb == nil}
	if sb != nil {
		d.Sandbox = SandboxBwrap
	}
	dir := h.dir
	if a.Cwd != "" {
		t, fi, err := h.stat(a.Cwd)
		if err != nil {
			return toolbus.Result{}, err
		}
		if !fi.IsDir() {
			return toolbus.Result{}, fmt.Errorf("cwd %s is not a directory", t.shown)
		}
		dir, d.Cwd = t.abs, t.shown
	}
	timeout := c.CommandTimeout
	if a.TimeoutSeconds > 0 {
		timeout = time.Duration(a.TimeoutSeconds) * time.Second
		if timeout > c.MaxCommandTimeout {
			timeout, d.TimeoutCapped = c.MaxCommandTimeout, true
		}
	}
	d.TimeoutMS = timeout.Milliseconds()

	lim, err := c.prepareLimits(call.ID, opt, sb)
	if err != nil {
		return toolbus.Result{}, err
	}
	out := newCapture(c.MaxOutput)
	run, err := c.start(ctx, sb, a.Command, dir, h.dir, opt, lim, timeout, out)
	if err != nil {
		lim.abandon()
		if ctx.Err() != nil {
			// Cancelled (an abort) before the shell was started.
			d.Cancelled = true
			return toolbus.ErrorResult("The command was not started: the call was cancelled first.").WithDetails(d), nil
		}
		return toolbus.Result{}, err
	}
	stopProgress := reportProgress(call, shortCommand(a.Command), run.started, out)
	waitErr := run.wait()
	stopProgress()

	d.DurationMS = time.Since(run.started).Milliseconds()
	output, cut := out.Output()
	d.OutputBytes, d.OutputCut = out.Total(), cut
	if run.cancelled.Load() {
		if ctx.Err() != nil {
			d.Cancelled = true
		} else {
			d.TimedOut = true
		}
	}
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		d.ExitCode = 0
	case errors.As(waitErr, &ee):
		d.ExitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			d.Signal = signalName(ws.Signal())
		}
	case d.TimedOut || d.Cancelled:
		// The shell exited zero after the stop signal; the status is the cancellation's.
	default:
		return toolbus.Result{}, fmt.Errorf("run command: %w", waitErr)
	}
	lim.signalled(&d)
	d.Limits = lim.details()

	var b strings.Builder
	took := formatDuration(d.Duration())
	switch {
	case d.TimedOut:
		fmt.Fprintf(&b, "Timed out after %s; the command and its child processes were stopped.", formatDuration(timeout))
	case d.Cancelled:
		fmt.Fprintf(&b, "Stopped after %s: the call was cancelled (%v).", took, context.Cause(ctx))
	case d.Signal != "":
		fmt.Fprintf(&b, "Killed by signal %s after %s.", d.Signal, took)
	default:
		fmt.Fprintf(&b, "Exit code %d (%s).", d.ExitCode, took)
	}
	if d.TimeoutCapped {
		fmt.Fprintf(&b, " The timeout was capped at %s, the host's maximum.", formatDuration(timeout))
	}
	for _, note := range limitNotes(d.Limits, output) {
		b.WriteString(" " + note)
	}
	if output == "" {
		b.WriteString("\n(no output)")
	} else {
		b.WriteString("\nOutput (stdout and stderr):\n")
		b.WriteString(strings.TrimSuffix(output, "\n"))
	}
	res := toolbus.TextResult(b.String())
	// A process the memory limit killed, or a fork refused, leaves the command's work
	// undone whatever its status.
	res.IsError = d.ExitCode != 0 || d.TimedOut || d.Cancelled || len(d.Limits.Reached) > 0
	return res.WithDetails(d), nil
}

// process is a started command: a shell in a process group of its own, or bubblewrap
// running the shell in a sandbox.
type process struct {
	cmd     *exec.Cmd
	started time.Time
	out     *os.File      // read end of the output pipe
	copied  chan struct{} // closed when every writer has closed the pipe
	grace   time.Duration
	cancel  context.CancelFunc
	// cancelled says the stop signal was sent because the context ended, at stopAt.
	cancelled atomic.Bool
	stopAt    time.Time
	// pgid is the bare shell's process group.
	pgid      int
	sandboxed bool
	// box is the sandbox, nil when bare or when bubblewrap failed to make one; set
	// before ready is closed.
	box   *box
	ready chan struct{}
	// limits are the command's limits; its cgroup goes when the command has ended.
	limits *commandLimits
}

// bareWrapper runs a bare command once the node has put the shell in the command's cgroup
// and set its rlimits: it waits for a line on fd 3, then becomes the command's shell.
const bareWrapper = `IFS= read -r _ <&3 || exit 125; exec 3<&-; exec /bin/sh -c "$1"`

// start runs command under /bin/sh, in sb or, when sb is nil, bare in its own process
// group. Output goes through a pipe the caller owns rather than one exec.Cmd owns, so
// that Wait returns when the shell (or bubblewrap) exits and the leftovers can be dealt
// with before the pipe is drained.
//
// The context's end sends SIGTERM to every process of the command (bare: its process
// group; sandboxed: every process in the sandbox, however it detached); KillGrace later,
// exec kills the shell or bubblewrap, and wait kills whatever is left.
//
// The command's limits apply before it runs: the process started (bubblewrap's sandbox
// child, or the bare wrapper shell) waits on a pipe, bubblewrap with --block-fd, until
// the node has moved it into the command's cgroup and set its rlimits; whatever it starts
// from then on inherits both. (Adding a process to a cgroup v1 after it started would
// race with its first forks; clone3 into a cgroup exists for v2 only.)
func (c Config) start(ctx context.Context, sb *sandbox, command, dir, home string, opt CallSandbox, lim *commandLimits, timeout time.Duration, out io.Writer) (*process, error) {
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, errTimedOut)
	pr, pw, err := os.Pipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("run command: output pipe: %w", err)
	}
	// The started process waits on blockR until the node writes a line to blockW.
	blockR, blockW, err := os.Pipe()
	if err != nil {
		pr.Close()
		pw.Close()
		cancel()
		return nil, fmt.Errorf("run command: start pipe: %w", err)
	}
	p := &process{out: pr, copied: make(chan struct{}), grace: c.KillGrace, cancel: cancel, sandboxed: sb != nil, ready: make(chan struct{}), limits: lim}
	var (
		cmd          *exec.Cmd
		infoR, infoW *os.File // bubblewrap's report of the sandbox it made
	)
	if sb == nil {
		cmd = exec.CommandContext(runCtx, "/bin/sh", "-c", bareWrapper, "sh", command)
		cmd.ExtraFiles = []*os.File{blockR} // fd 3
		cmd.Dir = dir
		cmd.Env = bareEnv(home, opt.Env)
		cmd.Cancel = func() error {
			p.stopping()
			return signalGroup(cmd.Process.Pid, syscall.SIGTERM)
		}
	} else {
		if infoR, infoW, err = os.Pipe(); err != nil {
			pr.Close()
			pw.Close()
			blockR.Close()
			blockW.Close()
			cancel()
			return nil, fmt.Errorf("run command: sandbox info pipe: %w", err)
		}
		env := sandboxEnv(home, sb.path)
		maps.Copy(env, opt.Env)
		// The node starts bubblewrap itself, with an empty environment (its init's
		// /proc/1/environ is the sandbox's to read): bwrap --die-with-parent then dies
		// with the node, and the sandbox with bwrap.
		args := append(sb.options(home, dir, opt.Network, env, lim.lim.TmpSize), "--info-fd", "3", "--block-fd", "4", "--", "/bin/sh", "-c", command)
		cmd = exec.CommandContext(runCtx, sb.bwrap, args...)
		cmd.Env = []string{}
		cmd.ExtraFiles = []*os.File{infoW, blockR} // fd 3, fd 4
		cmd.Cancel = func() error {
			p.stopping()
			<-p.ready
			if p.box != nil {
				p.box.terminate()
			}
			return nil
		}
	}
	cmd.Stdout, cmd.Stderr = pw, pw // one pipe keeps stdout and stderr in the order they were written
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// If the shell or bubblewrap outlives SIGTERM by the grace period, exec kills it.
	cmd.WaitDelay = c.KillGrace
	p.cmd = cmd
	p.started = time.Now()
	err = cmd.Start()
	pw.Close()
	blockR.Close()
	if infoW != nil {
		infoW.Close()
	}
	if err != nil {
		pr.Close()
		blockW.Close()
		if infoR != nil {
			infoR.Close()
		}
		cancel()
		return nil, fmt.Errorf("run command: %w", err)
	}
	p.pgid = cmd.Process.Pid // Setpgid makes the shell or bubblewrap the group leader
	if infoR != nil {
		// bwrap reports right after it made the namespaces; should it die before, its
		// blocked child would hold the pipe open.
		_ = infoR.SetReadDeadline(time.Now().Add(10 * time.Second))
		p.box = readBox(infoR)
		infoR.Close()
	}
	// The process that runs the command, still waiting: bubblewrap's sandbox child (the
	// sandbox's pid 1, which forks the shell) or the bare wrapper shell.
	switch {
	case sb == nil:
		lim.enter(cmd.Process.Pid)
	case p.box != nil:
		lim.enter(p.box.init)
	default:
		// Bubblewrap made no sandbox: it failed, and says why on the output; or it said
		// nothing in time, and its child must not run the command outside its limits
		// (it reads the end of the pipe as a go): kill it, and the child dies with it.
		_ = cmd.Process.Kill()
	}
	_, _ = blockW.Write([]byte("\n"))
	blockW.Close()
	close(p.ready)
	go func() {
		defer close(p.copied)
		_, _ = io.Copy(out, pr)
	}()
	return p, nil
}

// stopping records that the context ended and the stop signal goes out now.
func (p *process) stopping() {
	p.stopAt = time.Now()
	p.cancelled.Store(true)
}

// wait waits for the shell, then stops whatever it left running. Sandboxed, the sandbox
// goes as a whole: its init is killed, which kills every process in it. Bare, the
// process group gets SIGTERM, up to the grace period (what is left of it after a
// cancellation) to close the output pipe, then SIGKILL. A command's background processes
// do not outlive the call.
func (p *process) wait() error {
	defer p.cancel()
	err := p.cmd.Wait()
	switch {
	case p.box != nil:
		p.box.kill(p.grace)
	case !p.sandboxed:
		p.stopGroup()
	}
	// What is left in the command's cgroup (bare: processes that left the group) dies
	// with it.
	p.limits.finish(p.grace)
	// A process that left the group (setsid) may still hold the pipe: stop reading after
	// the grace period rather than wait for it.
	_ = p.out.SetReadDeadline(time.Now().Add(p.grace))
	<-p.copied
	p.out.Close()
	return err
}

// stopGroup stops what a bare shell left in its process group.
func (p *process) stopGroup() {
	grace := p.grace
	if p.cancelled.Load() {
		grace = max(0, p.grace-time.Since(p.stopAt))
	}
	if signalGroup(p.pgid, syscall.SIGTERM) == nil {
		timer := time.NewTimer(grace)
		select {
		case <-p.copied:
		case <-timer.C:
		}
		timer.Stop()
		_ = signalGroup(p.pgid, syscall.SIGKILL)
	}
}

// signalGroup signals every process in the group; os.ErrProcessDone when none is left.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// bareEnv is the whole environment of a command run without a sandbox: the host's
// secrets stay with the host, though the command can still find them there.
func bareEnv(home string, extra map[string]string) []string {
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb"}
	if env["PATH"] == "" {
		env["PATH"] = defaultPath
	}
	maps.Copy(env, extra)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// reportProgress sends a progress label every progressEvery until the returned stop is
// called; stop waits for the reporter to finish.
func reportProgress(call toolbus.Call, label string, started time.Time, out *capture) (stop func()) {
	if call.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				call.Progress(fmt.Sprintf("Running `%s`: %s, %s of output", label,
					formatDuration(time.Since(started).Round(time.Second)), formatSize(out.Total())))
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGXCPU:
		return "SIGXCPU"
	case syscall.SIGXFSZ:
		return "SIGXFSZ"
	}
	return fmt.Sprintf("%d (%s)", int(s), s)
}

// CommandLatencies runs `true` through run_command n times in home, configured by cfg, and
// returns how long each call took. The bench command compares the sandbox with bare
// processes with it.
func CommandLatencies(ctx context.Context, cfg Config, home string, n int) ([]time.Duration, error) {
	c := cfg.withDefaults()
	sb, err := c.sandbox()
	if err != nil {
		return nil, err
	}
	call := toolbus.Call{Tool: "run_command", Home: home, Args: []byte(`{"command":"true"}`)}
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		res, err := c.runCommand(ctx, sb, call, commandArgs{Command: "true"})
		if err != nil {
			return nil, err
		}
		if res.IsError {
			return nil, fmt.Errorf("run_command true: %s", res.Text())
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
