package computer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SandboxMode says how run_command isolates the commands it runs. A *SandboxMode is a
// flag.Value, so a command line takes it as it is.
type SandboxMode string

const (
	// SandboxBwrap runs every command in a bubblewrap sandbox; the default.
	SandboxBwrap SandboxMode = "bwrap"
	// SandboxOff runs commands as bare processes of the host, which can reach whatever the
	// host's user can: other homes, the host's processes and environment, the network.
	SandboxOff SandboxMode = "off"
)

func (m SandboxMode) String() string { return string(m) }

// Set accepts "bwrap" or "off".
func (m *SandboxMode) Set(s string) error {
	switch SandboxMode(s) {
	case SandboxBwrap, SandboxOff:
		*m = SandboxMode(s)
		return nil
	}
	return fmt.Errorf("unknown sandbox mode %q: want bwrap or off", s)
}

// SandboxConfig configures the sandbox of run_command. In the bwrap mode each command runs
// in bubblewrap (https://github.com/containers/bubblewrap) with:
//
//   - the agent home read-write, at its own path, as the working directory; the system
//     directories /usr, /bin, /sbin and /lib* read-only, and of /etc only the files a shell
//     and common tools need (sandboxEtc); nothing else of the host: no other home, none of
//     the node's files;
//   - a private /tmp (a tmpfs gone when the command ends, of Limits.TmpSize bytes at
//     most), a minimal /dev, a read-only root;
//   - its own user, PID, IPC, UTS and cgroup namespaces, every capability dropped, no new
//     user namespaces inside, a new session (no terminal of the node's to write to);
//   - a fresh /proc that shows the sandbox's processes only;
//   - no network (a network namespace of its own) unless the call's options allow it;
//   - the environment of sandboxEnv: nothing of the node's.
//
// The sandbox dies as a whole: when the command's shell exits, whatever it left behind is
// killed with it (a PID namespace ends with its init), and bubblewrap dies with the node.
type SandboxConfig struct {
	// Mode is SandboxBwrap (the default) or SandboxOff.
	Mode SandboxMode
	// Bwrap is the bubblewrap executable: a path, or a name looked up in PATH (default
	// "bwrap").
	Bwrap string
	// ReadOnly are more host paths the sandbox shows read-only at the same place, such as a
	// toolchain under /opt or a folder of tools installed with `npm install -g --prefix`.
	// The bin folder of each, where it has one, goes on the commands' PATH before the
	// system's, in this order. A path that does not exist makes the sandbox unavailable.
	ReadOnly []string
}

// CallSandbox are the sandbox options of one run_command call; the zero value is the
// default: no network, no variables beyond sandboxEnv's.
type CallSandbox struct {
	// Network lets the command use the host's network.
	Network bool
	// Env are variables added to the command's environment; they win over the defaults.
	Env map[string]string
	// Limits are the agent's command limits: a zero field takes the node's
	// (Config.Limits), a negative one turns that limit off.
	Limits Limits
}

// ErrSandboxUnavailable is the error of every run_command call when the sandbox cannot
// run: bubblewrap is missing, or cannot create namespaces on this host.
var ErrSandboxUnavailable = errors.New("command sandbox unavailable")

// sandboxEnv is the whole environment of a sandboxed command before the call's variables:
// the node's own (API keys, bus credentials, its PATH) never reaches it. path are folders
// that go before the default PATH.
func sandboxEnv(home string, path []string) map[string]string {
	return map[string]string{
		"PATH":   strings.Join(append(slices.Clone(path), defaultPath), ":"),
		"HOME":   home,
		"LANG":   "C.UTF-8",
		"LC_ALL": "C.UTF-8",
		"TERM":   "dumb",
		"TMPDIR": "/tmp", // the sandbox's private tmpfs
	}
}

// sandboxSystem are the system directories the sandbox shows read-only: a directory is
// bound, a symbolic link (merged /usr) is recreated, a missing one is left out.
var sandboxSystem = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// sandboxEtc are the parts of /etc the sandbox shows read-only, where they exist: what the
// shell, the dynamic linker, name resolution, TLS and Debian's alternatives need. Nothing
// else of /etc: it holds the host's secrets (shadow, ssl/private, pip and npm
// credentials) and its configuration.
var sandboxEtc = []string{
	"/etc/alternatives", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
	"/etc/hosts", "/etc/host.conf", "/etc/resolv.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/localtime", "/etc/timezone", "/etc/locale.alias",
	"/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates",
	"/etc/mime.types", "/etc/magic", "/etc/magic.mime", "/etc/terminfo",
	"/etc/os-release", "/etc/debian_version", "/etc/lsb-release", "/etc/shells", "/etc/gitconfig",
}

// sandboxMounts are the places the sandbox mounts itself; a home that holds one of them
// would cover it (a home of / would show the host's /proc).
var sandboxMounts = []string{"/", "/proc", "/dev", "/tmp", "/usr", "/etc"}

// sandbox is a checked bubblewrap setup, shared by every command of a host.
type sandbox struct {
	bwrap  string   // the executable, resolved
	system []string // bwrap arguments that show the system read-only
	extra  []string // and SandboxConfig.ReadOnly, after /tmp (which could cover them)
	path   []string // the bin folders of SandboxConfig.ReadOnly, for PATH
	// tmpSize says bubblewrap can size the tmpfs of /tmp (--size, bubblewrap 0.8); when it
	// cannot, tmpSizeWhy is its message.
	tmpSize    bool
	tmpSizeWhy string
}

// checked are the results of sandbox checks, by configuration: a host checks once.
var checked struct {
	sync.Mutex
	m map[string]*checkResult
}

type checkResult struct {
	sb  *sandbox
	err error
}

// CheckSandbox says whether run_command can run commands as cfg asks: nil when the
// sandbox is off or works, an error wrapping ErrSandboxUnavailable that says what is wrong
// and how to fix it otherwise, or the error of limits too small to run a command within
// (Limits.Validate). The check runs bubblewrap once (/bin/true in a sandbox),
// the first time a configuration is checked; its result holds for the life of the
// process.
func CheckSandbox(cfg Config) error {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return err
	}
	_, err := c.sandbox()
	return err
}

// sandbox returns the checked sandbox of c, nil when the sandbox is off.
func (c Config) sandbox() (*sandbox, error) {
	s := c.Sandbox
	switch s.Mode {
	case SandboxOff:
		return nil, nil
	case SandboxBwrap:
	default:
		return nil, fmt.Errorf("%w: unknown sandbox mode %q (want bwrap or off)", ErrSandboxUnavailable, s.Mode)
	}
	key := strings.Join(append([]string{s.Bwrap}, s.ReadOnly...), "\x00")
	checked.Lock()
	defer checked.Unlock()
	if r, ok := checked.m[key]; ok {
		return r.sb, r.err
	}
	sb, err := checkBwrap(s)
	if checked.m == nil {
		checked.m = map[string]*checkResult{}
	}
	checked.m[key] = &checkResult{sb, err}
	return sb, err
}

// howToFix ends every sandbox error.
const howToFix = `; install it ("apt-get install bubblewrap") or start the node with -sandbox=off to run commands without a sandbox`

// checkBwrap finds bubblewrap and runs /bin/true in the sandbox every command gets.
func checkBwrap(s SandboxConfig) (*sandbox, error) {
	path, err := exec.LookPath(s.Bwrap)
	if err != nil {
		where := s.Bwrap + " is not in PATH"
		if strings.ContainsRune(s.Bwrap, '/') {
			where = fmt.Sprintf("%s: %v", s.Bwrap, pathErr(errors.Unwrap(err)))
		}
		return nil, fmt.Errorf("%w: bubblewrap is not installed (%s)%s", ErrSandboxUnavailable, where, howToFix)
	}
	sb := &sandbox{bwrap: path}
	for _, dir := range sandboxSystem {
		fi, err := os.Lstat(dir)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(dir)
			if err == nil {
				sb.system = append(sb.system, "--symlink", target, dir)
			}
		case fi.IsDir():
			sb.system = append(sb.system, "--ro-bind", dir, dir)
		}
	}
	sb.system = append(sb.system, "--dir", "/etc")
	for _, p := range sandboxEtc {
		sb.system = append(sb.system, "--ro-bind-try", p, p)
	}
	for _, p := range s.ReadOnly {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("%w: read-only path %q is not absolute", ErrSandboxUnavailable, p)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: read-only path %s: %v", ErrSandboxUnavailable, p, pathErr(err))
		}
		sb.extra = append(sb.extra, "--ro-bind", p, p)
		if fi, err := os.Stat(filepath.Join(p, "bin")); err == nil && fi.IsDir() {
			sb.path = append(sb.path, filepath.Join(p, "bin"))
		}
	}

	sb.tmpSize = true
	why, err := sb.try(path, 1<<20)
	if err != nil {
		// An older bubblewrap cannot size /tmp: the sandbox works, without that limit.
		if _, plainErr := sb.try(path, 0); plainErr == nil {
			sb.tmpSize, sb.tmpSizeWhy, err = false, ": "+why, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s cannot create a sandbox on this host: %s; "+
			"it needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0; "+
			"inside a container, one that allows them), or start the node with -sandbox=off to run commands without a sandbox",
			ErrSandboxUnavailable, path, why)
	}
	return sb, nil
}

// try runs /bin/true in the sandbox every command gets, with a /tmp of tmp bytes (0: not
// sized); on failure, why is bubblewrap's message.
func (sb *sandbox) try(bwrap string, tmp int64) (why string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bwrap, append(sb.options("", "/", false, nil, tmp), "--", "/bin/true")...)
	cmd.Env = []string{}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A bwrap that dies between making its namespace and starting it leaves the child
	// blocked, holding the output pipe: stop reading a second after bwrap is gone.
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		why := strings.TrimSpace(out.String())
		if why == "" {
			why = err.Error()
		}
		return why, err
	}
	return "", nil
}

// options are bubblewrap's options (the arguments before "--") for a command run in home
// (absolute, links resolved; "" for none) with the working directory cwd, the environment
// env and a /tmp of tmp bytes (0: the tmpfs default, half the host's memory).
func (sb *sandbox) options(home, cwd string, network bool, env map[string]string, tmp int64) []string {
	a := []string{
		"--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--hostname", "sandbox", "--cap-drop", "ALL", "--new-session",
		// bwrap and its init die with their parent: the node, which starts bwrap itself.
		// (The kernel watches the thread that forked bwrap; Go keeps its threads unless a
		// goroutine exits locked to one, which nothing here does.)
		"--die-with-parent",
	}
	if !network {
		a = append(a, "--unshare-net")
	}
	a = append(a, sb.system...)
	a = append(a, "--proc", "/proc", "--dev", "/dev")
	if tmp > 0 && sb.tmpSize {
		a = append(a, "--size", strconv.FormatInt(tmp, 10))
	}
	a = append(a, "--tmpfs", "/tmp")
	a = append(a, sb.extra...)
	if home != "" {
		a = append(a, "--bind", home, home)
	}
	a = append(a, "--remount-ro", "/", "--chdir", cwd, "--clearenv")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		a = append(a, "--setenv", k, env[k])
	}
	return a
}

// checkHome refuses a home that would cover a mount of the sandbox.
func checkHome(home string) error {
	for _, m := range sandboxMounts {
		if within(home, m) {
			return fmt.Errorf("the agent home %s holds %s, which the command sandbox mounts itself: give the agent a home of its own below it", home, m)
		}
	}
	return nil
}

// callEnv checks the variables of a call's options.
func callEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("the call's sandbox options set an invalid variable %q", k)
		}
	}
	return nil
}

// box is a running sandbox: its init (pid 1 inside), held by a pidfd so that its pid
// cannot be reused under us, and its PID namespace, which holds every process the command
// started, however it detached.
type box struct {
	init  int
	fd    int    // pidfd of the init; -1 once it is gone
	pidns string // as /proc/<pid>/ns/pid reads: "pid:[inode]"
}

// readBox reads what bubblewrap says about the sandbox it made; nil when bubblewrap
// failed before making one (it then says why on the command's output).
func readBox(r io.Reader) *box {
	var info struct {
		Pid   int    `json:"child-pid"`
		PidNS uint64 `json:"pid-namespace"`
	}
	if err := json.NewDecoder(r).Decode(&info); err != nil || info.Pid <= 0 {
		return nil
	}
	b := &box{init: info.Pid, fd: -1, pidns: fmt.Sprintf("pid:[%d]", info.PidNS)}
	if fd, err := unix.PidfdOpen(b.init, 0); err == nil {
		if b.holds(b.init) {
			b.fd = fd
		} else {
			unix.Close(fd) // the init was gone and its pid taken before we looked
		}
	}
	return b
}

// holds reports whether pid is a process in the sandbox.
func (b *box) holds(pid int) bool {
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	return err == nil && ns == b.pidns
}

// terminate sends SIGTERM to every process in the sandbox but its init, found by their
// PID namespace: detached ones (setsid, double forks) too.
func (b *box) terminate() {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == b.init || !b.holds(pid) {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if b.holds(pid) { // still the same process, now that the pidfd pins it
			_ = unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0)
		}
		unix.Close(fd)
	}
}

// kill kills the sandbox's init, which takes every process of the sandbox with it, and
// waits up to grace for them to be gone.
func (b *box) kill(grace time.Duration) {
	if b.fd < 0 {
		return
	}
	_ = unix.PidfdSendSignal(b.fd, unix.SIGKILL, nil, 0)
	// The pidfd turns readable when the init has exited, which it does only once the
	// kernel has killed the rest of its namespace.
	fds := []unix.PollFd{{Fd: int32(b.fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(grace)
	for {
		n, err := unix.Poll(fds, int(max(time.Until(deadline), 0).Milliseconds()))
		if n > 0 || (err != nil && err != unix.EINTR) || !time.Now().Before(deadline) {
			break
		}
	}
	unix.Close(b.fd)
	b.fd = -1
}
