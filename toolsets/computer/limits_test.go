package computer

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolbus/toolbus"
)

// limited is testConfig in mode with small limits; it skips t as inMode does.
func limited(t testing.TB, mode SandboxMode) Config {
	t.Helper()
	c := inMode(t, mode)
	c.Limits = Limits{Pids: 32, Memory: 64 << 20, CPUSeconds: 20, FileSize: 12 << 20, TmpSize: 8 << 20}
	return c
}

// needCgroups skips a test where this host cannot give commands cgroups: as root on a
// host with cgroups mounted, it can.
func needCgroups(t *testing.T) *cgroupHost {
	t.Helper()
	h := testConfig.hostCgroups()
	if h.version == 0 || !h.pids || !h.memory {
		t.Skipf("commands cannot get a cgroup with the pids and memory controllers here: %s", h.why)
	}
	return h
}

// ownCgroups are the cgroups this process left in the node's own groups.
func ownCgroups(h *cgroupHost) []string {
	dirs := map[string]string{}
	if h.version == 1 {
		for n, d := range v1Dirs(h, "") {
			dirs[string(n)] = d
		}
	} else {
		dirs[""] = filepath.Join(cgroup2Mount, h.v2parent)
	}
	prefix := fmt.Sprintf("toolbus-%d-", os.Getpid())
	var left []string
	for _, d := range dirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				left = append(left, filepath.Join(d, e.Name()))
			}
		}
	}
	return left
}

// callWith runs cmd with tool and returns its result, its output section and its limits.
func callWith(t *testing.T, tool *toolbus.Tool, home, cmd string) (toolbus.Result, string, *AppliedLimits) {
	t.Helper()
	res, err, _ := run(t, t.Context(), tool, home, map[string]any{"command": cmd, "timeout_seconds": 60})
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	d := details[CommandDetails](t, res)
	if d.Limits == nil {
		t.Fatalf("%s: no limits in the details %s", cmd, res.Details)
	}
	_, out, _ := strings.Cut(res.Text(), "Output (stdout and stderr):\n")
	return res, out, d.Limits
}

// TestCommandLimits runs both modes side by side: each command's cgroup is its own, and
// none is left behind (TestMain checks, after every test of the package).
func TestCommandLimits(t *testing.T) {
	t.Parallel()
	h := needCgroups(t)
	via := h.name()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			tool := toolNamed(t, limited(t, mode), "run_command")
			home := t.TempDir()
			// call runs cmd and returns its result, its output section and its limits.
			call := func(t *testing.T, cmd string) (toolbus.Result, string, *AppliedLimits) {
				t.Helper()
				return callWith(t, tool, home, cmd)
			}

			t.Run("details", func(t *testing.T) {
				res, out, l := call(t, "echo ok")
				if res.IsError || out != "ok" || len(l.Reached) > 0 {
					t.Fatalf("%q, limits %+v", res.Text(), l)
				}
				t.Logf("details: %s", res.Details)
				// The command's shell is in the command's cgroup from its start, in each
				// controller (seen through the sandbox's cgroup namespace, which is rooted
				// at the node's group).
				_, out, _ = call(t, "cat /proc/self/cgroup")
				for _, ctl := range []string{":pids:", ":memory:"} {
					if h.version == 1 && !strings.Contains(out, ctl) {
						t.Errorf("no %s line in %q", ctl, out)
					}
				}
				for line := range strings.SplitSeq(out, "\n") {
					if (strings.Contains(line, ":pids:") || strings.Contains(line, ":memory:") || strings.HasPrefix(line, "0::") && h.version == 2) &&
						!strings.Contains(line, "/toolbus-") {
						t.Errorf("the shell is not in the command's cgroup: %q", line)
					}
				}
				want := map[string]string{limitPids: via, limitMemory: via, limitCPU: "rlimit", limitFileSize: "rlimit", limitTmp: "tmpfs"}
				if mode == SandboxOff {
					delete(want, limitTmp)
					if l.Unenforced[limitTmp] == "" {
						t.Errorf("bare, the /tmp limit is not marked unenforced: %+v", l.Unenforced)
					}
				} else if len(l.Unenforced) > 0 || l.NoCgroup != "" {
					t.Errorf("unenforced %v, no cgroup %q", l.Unenforced, l.NoCgroup)
				}
				for k, v := range want {
					if l.Via[k] != v {
						t.Errorf("via[%s] = %q, want %q (all: %v)", k, l.Via[k], v, l.Via)
					}
				}
				if l.Pids != 32 || l.Memory != 64<<20 || l.CPUSeconds != 20 || l.FileSize != 12<<20 || l.TmpSize != 8<<20 {
					t.Errorf("limits %+v", l.Limits)
				}
				var raw struct {
					Limits map[string]any `json:"limits"`
				}
				if err := json.Unmarshal(res.Details, &raw); err != nil || raw.Limits["pids"] != float64(32) || raw.Limits["via"] == nil {
					t.Errorf("details %s (%v)", res.Details, err)
				}
			})

			t.Run("fork loop", func(t *testing.T) {
				m := newMarker()
				res, out, l := call(t, fmt.Sprintf(`i=0; while [ $i -lt 200 ]; do sleep %s & i=$((i+1)); done; echo all 200 started; wait`, m))
				t.Logf("fork loop: peak %d processes and threads, %d forks refused; %q", l.PeakPids, l.ForkFailures, res.Text())
				if !res.IsError || strings.Contains(out, "all 200 started") {
					t.Errorf("the loop was not stopped: %q", res.Text())
				}
				if !strings.Contains(out, "Cannot fork") && !strings.Contains(out, "Resource temporarily unavailable") {
					t.Errorf("output %q says nothing of a failed fork", out)
				}
				if !slices.Contains(l.Reached, limitPids) || l.ForkFailures < 1 {
					t.Errorf("limits %+v", l)
				}
				if l.PeakPids > 32 {
					t.Errorf("peak %d processes, limit 32", l.PeakPids)
				}
				if !strings.Contains(res.Text(), "reached the limit of 32 processes and threads at once") {
					t.Errorf("text %q does not name the limit", res.Text())
				}
				noneLeft(t, m)
				// The node is not bound by its commands' limit.
				if err := exec.Command("sh", "-c", "for i in $(seq 40); do true & done; wait").Run(); err != nil {
					t.Errorf("the node cannot fork 40 processes: %v", err)
				}
			})

			t.Run("memory", func(t *testing.T) {
				// tail keeps a line in memory until it ends: one of 20 MB fits, one of 200 MB
				// does not.
				if res, out, l := call(t, "head -c 20000000 /dev/zero | tail | wc -c"); res.IsError || out != "20000000" || len(l.Reached) > 0 {
					t.Errorf("20 MB: %q, limits %+v", res.Text(), l)
				}
				// The pipeline's status is wc's; the kill makes the result an error.
				res, out, l := call(t, "head -c 200000000 /dev/zero | tail | wc -c")
				if strings.Contains(out, "200000000") {
					t.Errorf("200 MB fit in 64 MiB: %q", out)
				}
				t.Logf("200 MB: %q, %d OOM kills, peak %d bytes", res.Text(), l.OOMKills, l.PeakMemory)
				if !res.IsError || !slices.Contains(l.Reached, limitMemory) || l.OOMKills < 1 {
					t.Errorf("200 MB: %q, limits %+v", res.Text(), l)
				}
				if l.PeakMemory > 64<<20 {
					t.Errorf("peak memory %d over the limit", l.PeakMemory)
				}
				if !strings.Contains(res.Text(), "ran out of memory: it reached the limit of 64.0 MiB") {
					t.Errorf("text %q does not name the limit", res.Text())
				}
				if got := tool.CompletedLabel(mustJSON(t, map[string]any{"command": "tail"}), res); got != "Ran `tail` (out of memory)" {
					t.Errorf("label %q", got)
				}
			})

			// Bare commands use the host's /tmp.
			t.Run("tmp", func(t *testing.T) {
				if mode == SandboxOff {
					return
				}
				if res, out, _ := call(t, "head -c 4000000 /dev/zero > /tmp/f && wc -c < /tmp/f"); res.IsError || out != "4000000" {
					t.Errorf("4 MB: %q", res.Text())
				}
				res, out, _ := call(t, "head -c 16000000 /dev/zero > /tmp/f; echo status $?; wc -c < /tmp/f")
				if !strings.Contains(out, "No space left on device") || !strings.Contains(out, "status 1") {
					t.Errorf("16 MB: %q", res.Text())
				}
				if n, _ := strconv.Atoi(out[strings.LastIndexByte(out, '\n')+1:]); n > 8<<20 {
					t.Errorf("/tmp took %d bytes", n)
				}
				if !strings.Contains(res.Text(), "/tmp holds at most 8.0 MiB") {
					t.Errorf("text %q does not name the limit", res.Text())
				}
			})

			t.Run("file size", func(t *testing.T) {
				res, _, l := call(t, "head -c 16000000 /dev/zero > big")
				if !res.IsError || !slices.Contains(l.Reached, limitFileSize) || !strings.Contains(res.Text(), "past the limit of 12.0 MiB per file") {
					t.Errorf("%q, limits %+v", res.Text(), l)
				}
				if fi, err := os.Stat(filepath.Join(home, "big")); err != nil || fi.Size() != 12<<20 {
					t.Errorf("big: %v, %v", fi, err)
				}
			})

			t.Run("cpu", func(t *testing.T) {
				cfg := limited(t, mode)
				cfg.Limits.CPUSeconds = 1
				res, _, l := callWith(t, toolNamed(t, cfg, "run_command"), home, "while :; do :; done")
				if !res.IsError || !slices.Contains(l.Reached, limitCPU) || !strings.Contains(res.Text(), "SIGXCPU") {
					t.Errorf("%q, limits %+v", res.Text(), l)
				}
			})
		})
	}
}

// TestCommandLimitsPerAgent: an agent's limits (the call's options) win over the node's,
// field by field; a negative one turns a limit off; an invalid one refuses the call.
func TestCommandLimitsPerAgent(t *testing.T) {
	t.Parallel()
	h := needCgroups(t)
	cfg := limited(t, SandboxBwrap)
	cfg.CallOptions = func(agent string) CallSandbox {
		return CallSandbox{Limits: Limits{Pids: 64, Memory: -1}}
	}
	out, d := command(t, toolNamed(t, cfg, "run_command"), t.TempDir(), "head -c 100000000 /dev/zero | tail | wc -c")
	if out != "100000000" || d.ExitCode != 0 {
		t.Errorf("without a memory limit: exit %d, %q", d.ExitCode, out)
	}
	l := d.Limits
	if l.Pids != 64 || l.Memory != 0 || l.TmpSize != 8<<20 || l.Via[limitMemory] != "" || l.Via[limitPids] != h.name() {
		t.Errorf("limits %+v", l)
	}

	cfg.CallOptions = func(string) CallSandbox { return CallSandbox{Limits: Limits{Pids: 2}} }
	_, err, _ := run(t, t.Context(), toolNamed(t, cfg, "run_command"), t.TempDir(), map[string]any{"command": "true"})
	if err == nil || !strings.Contains(err.Error(), "pids 2 is below the minimum of 8") {
		t.Errorf("err = %v", err)
	}
}

func TestLimitsConfig(t *testing.T) {
	t.Parallel()
	d := Config{}.withDefaults().Limits
	if d != (Limits{Pids: DefaultPids, Memory: DefaultMemory, CPUSeconds: DefaultCPUSeconds, FileSize: DefaultFileSize, TmpSize: DefaultTmpSize}) {
		t.Errorf("defaults %+v", d)
	}
	c := Config{Limits: Limits{Pids: 100, TmpSize: -1}}.withDefaults()
	if c.Limits.Pids != 100 || c.Limits.Memory != DefaultMemory || c.Limits.Effective().TmpSize != 0 {
		t.Errorf("limits %+v", c.Limits)
	}
	if got := (Limits{Pids: 10}).Over(c.Limits); got.Pids != 10 || got.TmpSize != -1 || got.FileSize != DefaultFileSize {
		t.Errorf("over: %+v", got)
	}
	for _, tc := range []struct {
		l    Limits
		want string
	}{
		{Limits{}, ""},
		{Limits{Pids: -1, Memory: -1, CPUSeconds: -1, FileSize: -1, TmpSize: -1}, ""},
		{Limits{Pids: MinPids, Memory: MinMemory, CPUSeconds: 1, FileSize: 1, TmpSize: 1}, ""},
		{Limits{Pids: 3}, "pids 3 is below the minimum of 8"},
		{Limits{Memory: 1 << 20}, "memory_bytes 1048576 is below the minimum of 16777216 (16.0 MiB)"},
	} {
		err := tc.l.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.l, err, tc.want)
		}
	}
	// A node with invalid limits refuses every command, and says so at its check.
	bad := Config{Limits: Limits{Memory: 1000}}
	if err := CheckSandbox(bad); err == nil || !strings.Contains(err.Error(), "memory_bytes 1000") {
		t.Errorf("CheckSandbox: %v", err)
	}
	if _, err, _ := run(t, t.Context(), toolNamed(t, bad, "run_command"), t.TempDir(), map[string]any{"command": "true"}); err == nil || !strings.Contains(err.Error(), "memory_bytes 1000") {
		t.Errorf("run_command: %v", err)
	}
	// The model is told the limits.
	desc := toolNamed(t, testConfig, "run_command").Description
	for _, want := range []string{"512 processes and threads at once", "2.0 GiB of memory", "10 min of CPU time per process", "1.0 GiB per file", "256.0 MiB in /tmp"} {
		if !strings.Contains(desc, want) {
			t.Errorf("description %q lacks %q", desc, want)
		}
	}
}

// TestCommandLimitsWithoutCgroups: where no cgroup can be created, memory falls back to
// a per-process rlimit, and the process limit, which RLIMIT_NPROC cannot give a node
// running as root, is said to be unenforced.
func TestCommandLimitsWithoutCgroups(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			cfg := limited(t, mode)
			cfg.cgroups = &cgroupHost{why: "cgroups switched off by the test"}
			res, out, l := callWith(t, toolNamed(t, cfg, "run_command"), t.TempDir(), "head -c 200000000 /dev/zero | tail | wc -c")
			if l.Via[limitMemory] != "rlimit" || l.Via[limitCPU] != "rlimit" || l.Via[limitFileSize] != "rlimit" || l.NoCgroup != "cgroups switched off by the test" {
				t.Errorf("via %v", l.Via)
			}
			if os.Geteuid() == 0 {
				if why := l.Unenforced[limitPids]; !strings.Contains(why, "cgroups switched off by the test") || !strings.Contains(why, "RLIMIT_NPROC does not bind") {
					t.Errorf("unenforced %v", l.Unenforced)
				}
			} else if l.Via[limitPids] != "rlimit" {
				t.Errorf("via %v", l.Via)
			}
			if !strings.Contains(out, "memory exhausted") || !strings.Contains(res.Text(), "each process of the command may use at most 64.0 MiB") {
				t.Errorf("%q", res.Text())
			}
		})
	}
}
