package computer

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	ocispec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/toolbus/toolbus/toolsets/computer/limits"
)

// Limits bound what one run_command command may use (package limits, where the profile
// reads them); its defaults and minimums are there.
type Limits = limits.Limits

// Defaults and minimums of [Limits] (package limits).
const (
	DefaultPids       = limits.DefaultPids
	DefaultMemory     = limits.DefaultMemory
	DefaultCPUSeconds = limits.DefaultCPUSeconds
	DefaultFileSize   = limits.DefaultFileSize
	DefaultTmpSize    = limits.DefaultTmpSize
	MinPids           = limits.MinPids
	MinMemory         = limits.MinMemory
)

// The names of the limits in details, as their JSON fields.
const (
	limitPids     = "pids"
	limitMemory   = "memory_bytes"
	limitCPU      = "cpu_seconds"
	limitFileSize = "file_size_bytes"
	limitTmp      = "tmp_bytes"
)

// AppliedLimits are the limits a command ran within, in its details (CommandDetails.Limits).
type AppliedLimits struct {
	// Limits are the values in force; a limit that is off is absent.
	Limits
	// Via says, for each limit in force, how it was enforced: "cgroup v1" or "cgroup v2"
	// (for the command as a whole), "rlimit" (per process), "tmpfs" (the size of /tmp).
	Via map[string]string `json:"via,omitempty"`
	// Unenforced says, for each limit that could not be applied, why not.
	Unenforced map[string]string `json:"unenforced,omitempty"`
	// NoCgroup says why the command had no cgroup, when its process or memory limit
	// needed one: those limits then fell back to rlimits, or were not enforced.
	NoCgroup string `json:"no_cgroup,omitempty"`
	// Reached names the limits the command ran into: "pids" (a fork failed), "memory_bytes"
	// (the kernel killed a process), "cpu_seconds" or "file_size_bytes" (the command's
	// status is that of SIGXCPU or SIGXFSZ).
	Reached []string `json:"reached,omitempty"`
	// ForkFailures is how many forks the process limit refused.
	ForkFailures int64 `json:"fork_failures,omitempty"`
	// OOMKills is how many processes the memory limit killed.
	OOMKills int64 `json:"oom_kills,omitempty"`
	// PeakPids and PeakMemory are the most processes and threads, and the most memory,
	// the command had at once, where the cgroup reports them.
	PeakPids   int64 `json:"peak_pids,omitempty"`
	PeakMemory int64 `json:"peak_memory_bytes,omitempty"`
}

// reached reports whether the command ran into limit.
func (a *AppliedLimits) reached(limit string) bool {
	return a != nil && slices.Contains(a.Reached, limit)
}

// cgroupHost is what this host's cgroups allow, found once per process.
type cgroupHost struct {
	version      int    // 1 or 2; 0: none can be created
	pids, memory bool   // the controllers a command's cgroup gets
	memsw        bool   // v1: the memory controller accounts swap
	why          string // what is missing, when a controller is
	v1           cgroup1.Hierarchy
	v2parent     string // v2: the node's own group, which command groups nest in
}

const cgroup2Mount = "/sys/fs/cgroup"

// probed is the cgroup probe, which runs once per process.
var probed struct {
	once sync.Once
	host *cgroupHost
}

// hostCgroups is what this host's cgroups allow (Config.cgroups, when set); the first
// call probes them, and logs what commands cannot get.
func (c Config) hostCgroups() *cgroupHost {
	if c.cgroups != nil {
		return c.cgroups
	}
	log := c.log()
	probed.once.Do(func() {
		h := probeCgroups()
		switch {
		case h.version == 0:
			log.Warn("run_command: command limits fall back to rlimits: no cgroup can be created for a command, so its processes and memory are not counted as a whole"+nprocNote(), "why", h.why)
		case !h.pids || !h.memory:
			log.Warn("run_command: some command limits fall back to rlimits", "cgroup", h.name(), "why", h.why)
		}
		probed.host = h
	})
	return probed.host
}

func nprocNote() string {
	if os.Geteuid() == 0 {
		return " and, the node running as root, not bounded at all (RLIMIT_NPROC does not bind root)"
	}
	return ""
}

func (h *cgroupHost) name() string {
	if h == nil || h.version == 0 {
		return ""
	}
	return fmt.Sprintf("cgroup v%d", h.version)
}

// probeCgroups finds the cgroup version and creates (and deletes) a group with the pids
// and memory controllers under the node's own, as every command will.
func probeCgroups() *cgroupHost {
	switch cgroups.Mode() {
	case cgroups.Unavailable:
		return &cgroupHost{why: "no cgroup file system is mounted at /sys/fs/cgroup"}
	case cgroups.Unified:
		return probeV2()
	}
	return probeV1()
}

func probeV1() *cgroupHost {
	all, err := cgroup1.Default()
	if err != nil {
		return &cgroupHost{why: fmt.Sprintf("cgroup v1: %v", err)}
	}
	h := &cgroupHost{version: 1}
	var subs []cgroup1.Subsystem
	for _, s := range all {
		switch s.Name() {
		case cgroup1.Pids:
			h.pids = true
		case cgroup1.Memory:
			h.memory = true
		default:
			continue
		}
		subs = append(subs, s)
	}
	h.v1 = func() ([]cgroup1.Subsystem, error) { return subs, nil }
	var missing []string
	if !h.pids {
		missing = append(missing, "pids")
	}
	if !h.memory {
		missing = append(missing, "memory")
	}
	if len(subs) == 0 {
		return &cgroupHost{why: "cgroup v1: neither the pids nor the memory controller is mounted"}
	}
	cleanStale(v1Dirs(h, ""))
	g, err := h.create(probeName(), Limits{Pids: MinPids, Memory: MinMemory})
	if err != nil {
		return &cgroupHost{why: fmt.Sprintf("cgroup v1: cannot create a cgroup under the node's own: %v", err)}
	}
	if dir, ok := g.dirs[cgroup1.Memory]; ok {
		_, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
		h.memsw = err == nil
	}
	if err := g.destroy(time.Second); err != nil {
		return &cgroupHost{why: fmt.Sprintf("cgroup v1: cannot delete a cgroup it created: %v", err)}
	}
	if len(missing) > 0 {
		h.why = fmt.Sprintf("cgroup v1: the %s controller is not mounted", strings.Join(missing, " and "))
	}
	return h
}

func probeV2() *cgroupHost {
	own, err := cgroup2.NestedGroupPath("")
	if err != nil {
		return &cgroupHost{why: fmt.Sprintf("cgroup v2: the node's own cgroup: %v", err)}
	}
	h := &cgroupHost{version: 2, pids: true, memory: true, v2parent: own}
	cleanStale(map[cgroup1.Name]string{"": filepath.Join(cgroup2Mount, own)})
	g, err := h.create(probeName(), Limits{Pids: MinPids, Memory: MinMemory})
	if err != nil {
		return &cgroupHost{why: fmt.Sprintf("cgroup v2: cannot create a cgroup with the pids and memory controllers under the node's own (%s): %v; "+
			"the kernel hands controllers to a cgroup's children only while it holds no process itself: run the node in a cgroup delegated to it, "+
			"in a child of it", own, err)}
	}
	if err := g.destroy(time.Second); err != nil {
		return &cgroupHost{why: fmt.Sprintf("cgroup v2: cannot delete a cgroup it created: %v", err)}
	}
	return h
}

// cgroupSeq numbers the cgroups of this process.
var cgroupSeq atomic.Int64

func probeName() string {
	return fmt.Sprintf("toolbus-%d-%d-probe", os.Getpid(), cgroupSeq.Add(1))
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// cgroupName names the cgroup of a command for its call: toolbus-<node pid>-<n>-<call>.
func cgroupName(callID string) string {
	id := unsafeName.ReplaceAllString(callID, "_")
	if len(id) > 40 {
		id = id[:40]
	}
	if id == "" {
		id = "call"
	}
	return fmt.Sprintf("toolbus-%d-%d-%s", os.Getpid(), cgroupSeq.Add(1), id)
}

var staleName = regexp.MustCompile(`^toolbus-(\d+)-\d+-`)

// cleanStale removes the empty cgroups that nodes now gone left in dirs (a node killed
// mid-command leaves its command's group behind, empty).
func cleanStale(dirs map[cgroup1.Name]string) {
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			m := staleName.FindStringSubmatch(e.Name())
			if !e.IsDir() || m == nil {
				continue
			}
			if pid, _ := strconv.Atoi(m[1]); pid == os.Getpid() || pidExists(pid) {
				continue
			}
			_ = os.Remove(filepath.Join(dir, e.Name())) // fails unless empty
		}
	}
}

func pidExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// v1Dirs are the directories of the v1 group name (the node's own group for "") in each
// controller h uses.
func v1Dirs(h *cgroupHost, name string) map[cgroup1.Name]string {
	subs, _ := h.v1()
	path := cgroup1.NestedPath(name)
	dirs := map[cgroup1.Name]string{}
	for _, s := range subs {
		p, err := path(s.Name())
		if err != nil {
			continue
		}
		if ps, ok := s.(interface{ Path(string) string }); ok {
			dirs[s.Name()] = ps.Path(p)
		}
	}
	return dirs
}

// commandCgroup is the cgroup of one command.
type commandCgroup struct {
	host *cgroupHost
	v1   cgroup1.Cgroup
	v2   *cgroup2.Manager
	// dirs are its directories by controller (v2: one, under "").
	dirs map[cgroup1.Name]string
}

// create makes the cgroup name with the pids and memory limits of lim that h supports.
func (h *cgroupHost) create(name string, lim Limits) (*commandCgroup, error) {
	g := &commandCgroup{host: h}
	switch h.version {
	case 1:
		res := &ocispec.LinuxResources{}
		if h.pids && lim.Pids > 0 {
			res.Pids = &ocispec.LinuxPids{Limit: &lim.Pids}
		}
		if h.memory && lim.Memory > 0 {
			res.Memory = &ocispec.LinuxMemory{Limit: &lim.Memory}
			if h.memsw {
				res.Memory.Swap = &lim.Memory // memory and swap together: no swapping past the limit
			}
		}
		g.dirs = v1Dirs(h, name)
		cg, err := cgroup1.New(cgroup1.NestedPath(name), res, cgroup1.WithHierarchy(h.v1))
		if err != nil {
			g.remove()
			return nil, err
		}
		g.v1 = cg
	case 2:
		res := &cgroup2.Resources{}
		if lim.Pids > 0 {
			res.Pids = &cgroup2.Pids{Max: lim.Pids}
		}
		if lim.Memory > 0 {
			res.Memory = &cgroup2.Memory{Max: &lim.Memory}
		}
		group := filepath.Join(h.v2parent, name)
		g.dirs = map[cgroup1.Name]string{"": filepath.Join(cgroup2Mount, group)}
		m, err := cgroup2.NewManager(cgroup2Mount, group, res)
		if err != nil {
			g.remove()
			return nil, err
		}
		g.v2 = m
		if lim.Memory > 0 {
			// No swapping past the limit, where swap is accounted.
			if err := os.WriteFile(filepath.Join(g.dirs[""], "memory.swap.max"), []byte("0"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				g.remove()
				return nil, err
			}
		}
	default:
		return nil, errors.New("no cgroup support")
	}
	return g, nil
}

// add moves the process pid, with its threads, into the group.
func (g *commandCgroup) add(pid int) error {
	if g.v1 != nil {
		return g.v1.AddProc(uint64(pid))
	}
	return g.v2.AddProc(uint64(pid))
}

// procs are the processes in the group.
func (g *commandCgroup) procs() []int {
	seen := map[int]bool{}
	for _, dir := range g.dirs {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for f := range strings.FieldsSeq(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				seen[pid] = true
			}
		}
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	return out
}

// counters reads what the group counted: refused forks, OOM kills, and the peaks.
func (g *commandCgroup) counters() (forkFails, oomKills, peakPids, peakMem int64) {
	pidsDir, memDir := g.dirs[cgroup1.Pids], g.dirs[cgroup1.Memory]
	oomFile, oomKey, peakMemFile := "memory.oom_control", "oom_kill", "memory.max_usage_in_bytes"
	if g.v2 != nil {
		pidsDir, memDir = g.dirs[""], g.dirs[""]
		oomFile, peakMemFile = "memory.events", "memory.peak"
	}
	if pidsDir != "" {
		forkFails = readKey(filepath.Join(pidsDir, "pids.events"), "max")
		peakPids = readInt(filepath.Join(pidsDir, "pids.peak"))
	}
	if memDir != "" {
		oomKills = readKey(filepath.Join(memDir, oomFile), oomKey)
		peakMem = readInt(filepath.Join(memDir, peakMemFile))
	}
	return
}

// destroy kills whatever is left in the group and deletes it, trying for up to grace.
func (g *commandCgroup) destroy(grace time.Duration) error {
	deadline := time.Now().Add(grace)
	for {
		left := g.procs()
		if len(left) == 0 {
			break
		}
		if g.v2 != nil {
			_ = g.v2.Kill()
		} else {
			for _, pid := range left {
				killIn(pid, g.dirs)
			}
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%d processes are left in the command's cgroup", len(left))
		}
		time.Sleep(5 * time.Millisecond)
	}
	var err error
	for {
		if g.v1 != nil {
			err = g.v1.Delete()
		} else {
			err = g.v2.Delete()
		}
		// An exited process may linger in the group until it is reaped.
		if err == nil || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		g.remove()
	}
	return err
}

// remove removes the group's directories, where they are empty.
func (g *commandCgroup) remove() {
	for _, dir := range g.dirs {
		_ = os.Remove(dir)
	}
}

// killIn sends SIGKILL to pid if it is still in one of the group's directories (its pid
// pinned by a pidfd, so that a reused pid is spared).
func killIn(pid int, dirs map[cgroup1.Name]string) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return
	}
	for _, dir := range dirs {
		if strings.Contains(string(b), "/"+filepath.Base(dir)+"\n") {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			return
		}
	}
}

// readInt reads a file that holds one number; 0 when it cannot.
func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// readKey reads the number of key in a file of "key value" lines; 0 when it cannot.
func readKey(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// commandLimits are the limits of one command while it runs.
type commandLimits struct {
	lim     Limits // in force: zero is off
	cg      *commandCgroup
	applied *AppliedLimits
	log     *slog.Logger
}

// prepareLimits resolves the limits of a call (the agent's over the node's) and creates
// the command's cgroup; sb is nil for a bare command.
func (c Config) prepareLimits(callID string, opt CallSandbox, sb *sandbox) (*commandLimits, error) {
	merged := opt.Limits.Over(c.Limits)
	if err := merged.Validate(); err != nil {
		return nil, fmt.Errorf("the agent's %w", err)
	}
	lim := merged.Effective()
	l := &commandLimits{lim: lim, applied: &AppliedLimits{Limits: lim, Via: map[string]string{}, Unenforced: map[string]string{}}, log: c.log()}
	a := l.applied
	switch {
	case lim.TmpSize == 0:
	case sb == nil:
		a.Unenforced[limitTmp] = "the command runs without the sandbox, in the host's /tmp"
	case !sb.tmpSize:
		a.Unenforced[limitTmp] = "this bubblewrap cannot size a tmpfs (bubblewrap 0.8 or later can)" + sb.tmpSizeWhy
	default:
		a.Via[limitTmp] = "tmpfs"
	}
	if lim.Pids == 0 && lim.Memory == 0 {
		return l, nil
	}
	h := c.hostCgroups()
	if h.version > 0 && (h.pids && lim.Pids > 0 || h.memory && lim.Memory > 0) {
		g, err := h.create(cgroupName(callID), lim)
		if err != nil {
			l.log.Warn("run_command: cannot create the command's cgroup; its limits fall back to rlimits", "call", callID, "err", err)
			l.fallback(fmt.Sprintf("%s: cannot create the command's cgroup: %v", h.name(), err))
			return l, nil
		}
		l.cg = g
		if lim.Pids > 0 && h.pids {
			a.Via[limitPids] = h.name()
		}
		if lim.Memory > 0 && h.memory {
			a.Via[limitMemory] = h.name()
		}
	}
	l.fallback(h.why)
	return l, nil
}

// fallback marks the process and memory limits that no cgroup enforces for rlimits, or
// as unenforced, because of why.
func (l *commandLimits) fallback(why string) {
	a := l.applied
	if l.cg == nil {
		a.NoCgroup = why
	}
	if l.lim.Pids > 0 && a.Via[limitPids] == "" {
		if os.Geteuid() == 0 {
			a.Unenforced[limitPids] = why + "; and RLIMIT_NPROC does not bind the node's user, root"
		} else {
			a.Via[limitPids] = "rlimit"
		}
	}
	if l.lim.Memory > 0 && a.Via[limitMemory] == "" {
		a.Via[limitMemory] = "rlimit" // RLIMIT_DATA, per process
	}
}

// enter puts the started process pid (blocked before it runs the command) into the
// command's cgroup and sets its rlimits, which every process it starts inherits.
func (l *commandLimits) enter(pid int) {
	a := l.applied
	if l.cg != nil {
		if err := l.cg.add(pid); err != nil {
			l.log.Warn("run_command: cannot move the command into its cgroup; its limits fall back to rlimits", "err", err)
			_ = l.cg.destroy(0)
			l.cg = nil
			delete(a.Via, limitPids)
			delete(a.Via, limitMemory)
			l.fallback(fmt.Sprintf("cannot move the command into its cgroup: %v", err))
		}
	}
	set := func(name string, resource int, cur, hard uint64) {
		var old unix.Rlimit
		if err := unix.Prlimit(pid, resource, nil, &old); err == nil {
			// An rlimit can be lowered only: the node's own may be lower still.
			cur, hard = min(cur, old.Max), min(hard, old.Max)
			if err = unix.Prlimit(pid, resource, &unix.Rlimit{Cur: cur, Max: hard}, nil); err == nil {
				return
			}
			a.Unenforced[name] = fmt.Sprintf("prlimit: %v", err)
		} else {
			a.Unenforced[name] = fmt.Sprintf("prlimit: %v", err)
		}
		delete(a.Via, name)
	}
	if n := l.lim.CPUSeconds; n > 0 {
		a.Via[limitCPU] = "rlimit"
		set(limitCPU, unix.RLIMIT_CPU, uint64(n), uint64(n)+2)
	}
	if n := l.lim.FileSize; n > 0 {
		a.Via[limitFileSize] = "rlimit"
		set(limitFileSize, unix.RLIMIT_FSIZE, uint64(n), uint64(n))
	}
	if a.Via[limitMemory] == "rlimit" {
		set(limitMemory, unix.RLIMIT_DATA, uint64(l.lim.Memory), uint64(l.lim.Memory))
	}
	if a.Via[limitPids] == "rlimit" {
		set(limitPids, unix.RLIMIT_NPROC, uint64(l.lim.Pids), uint64(l.lim.Pids))
	}
}

// abandon deletes the cgroup of a command that did not start.
func (l *commandLimits) abandon() {
	if l != nil && l.cg != nil {
		_ = l.cg.destroy(time.Second)
		l.cg = nil
	}
}

// finish kills what is left in the command's cgroup, reads what it counted and deletes
// it; the command's shell has exited.
func (l *commandLimits) finish(grace time.Duration) {
	if l.cg == nil {
		return
	}
	a := l.applied
	a.ForkFailures, a.OOMKills, a.PeakPids, a.PeakMemory = l.cg.counters()
	if err := l.cg.destroy(max(grace, time.Second)); err != nil {
		l.log.Warn("run_command: cannot delete the command's cgroup", "dirs", l.cg.dirs, "err", err)
	}
	if a.ForkFailures > 0 && a.Via[limitPids] != "" {
		a.Reached = append(a.Reached, limitPids)
	}
	if a.OOMKills > 0 && a.Via[limitMemory] != "" {
		a.Reached = append(a.Reached, limitMemory)
	}
	l.cg = nil
}

// signalled records the limits that the command's status says it reached: SIGXCPU or
// SIGXFSZ, seen bare or as the shell's 128+n.
func (l *commandLimits) signalled(d *CommandDetails) {
	a := l.applied
	is := func(sig syscall.Signal) bool {
		return d.Signal == signalName(sig) || d.ExitCode == 128+int(sig)
	}
	if a.Via[limitCPU] != "" && is(syscall.SIGXCPU) {
		a.Reached = append(a.Reached, limitCPU)
	}
	if a.Via[limitFileSize] != "" && is(syscall.SIGXFSZ) {
		a.Reached = append(a.Reached, limitFileSize)
	}
}

// details are the applied limits as the result's details carry them.
func (l *commandLimits) details() *AppliedLimits {
	a := *l.applied
	if len(a.Via) == 0 {
		a.Via = nil
	}
	if len(a.Unenforced) == 0 {
		a.Unenforced = nil
	}
	return &a
}

// limitNotes are the sentences that tell the model which limit stopped its command.
func limitNotes(a *AppliedLimits, output string) []string {
	if a == nil {
		return nil
	}
	var notes []string
	if a.reached(limitPids) {
		notes = append(notes, fmt.Sprintf("The command reached the limit of %d processes and threads at once: %s refused (\"Resource temporarily unavailable\"). Start fewer processes at once, or wait for them.",
			a.Pids, plural(int(a.ForkFailures), "fork was", "forks were")))
	}
	if a.reached(limitMemory) {
		notes = append(notes, fmt.Sprintf("The command ran out of memory: it reached the limit of %s (its files in /tmp count too), and the kernel killed %s (SIGKILL). Use less memory: smaller inputs, fewer jobs at once.",
			formatSize(a.Memory), plural(int(a.OOMKills), "process", "processes")))
	}
	if a.reached(limitCPU) {
		notes = append(notes, fmt.Sprintf("A process was stopped by SIGXCPU: it reached the limit of %s of CPU time per process.", cpuTime(a.CPUSeconds)))
	}
	if a.reached(limitFileSize) {
		notes = append(notes, fmt.Sprintf("A process was stopped by SIGXFSZ: it wrote a file past the limit of %s per file.", formatSize(a.FileSize)))
	}
	if a.Via[limitMemory] == "rlimit" && (strings.Contains(output, "Cannot allocate memory") || strings.Contains(output, "memory exhausted") ||
		strings.Contains(output, "MemoryError") || strings.Contains(output, "out of memory")) {
		notes = append(notes, fmt.Sprintf("If an allocation failed: each process of the command may use at most %s of memory.", formatSize(a.Memory)))
	}
	if a.TmpSize > 0 && a.Via[limitTmp] != "" && strings.Contains(output, "No space left on device") {
		notes = append(notes, fmt.Sprintf("/tmp holds at most %s: if it is full, write large files in the home instead.", formatSize(a.TmpSize)))
	}
	return notes
}

// cpuTime renders a CPU-time limit: 10 min, 90 s.
func cpuTime(seconds int64) string {
	if seconds%60 == 0 {
		return fmt.Sprintf("%d min", seconds/60)
	}
	return fmt.Sprintf("%d s", seconds)
}
