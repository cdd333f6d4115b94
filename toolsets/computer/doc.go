// Package computer holds the tools of the "computer" category: list_files, read_file,
// write_file and run_command, all working inside the agent's home directory.
//
// The home comes from the call ([toolbus.Call.Home]), which the category host fills in from
// its own configuration, or from [Config.HomeRoot] and the agent id; a path from the model
// only ever names something inside it. Every path argument is cleaned, joined with the
// home and refused when it leaves the home lexically (".." or an absolute path elsewhere)
// or through a symbolic link; the file operations then go through an [os.Root] opened on
// the home, so a link swapped in between the check and the operation cannot escape either.
//
// run_command runs /bin/sh -c with a timeout and an output cap, by default in a bubblewrap
// sandbox ([SandboxConfig]): the agent home read-write, the system read-only, nothing
// else of the host's files, its own PID namespace and /proc (no view of the node's
// processes, environment or command line), a cleared environment with an allowlist, no
// network unless the call's options ([Config.CallOptions]) allow it. When the call is
// cancelled or times out, every process in the sandbox gets SIGTERM, and the sandbox is
// killed as a whole a grace period later; when the command's shell exits, whatever it left
// running is killed with the sandbox, however it detached; and bubblewrap dies with the
// node. The host checks once that bubblewrap works; if it does not, run_command refuses
// every call with the reason and the fix ([ErrSandboxUnavailable]).
//
// Each command runs within limits ([Limits], [Config.Limits], per agent
// [CallSandbox.Limits]): processes and threads and memory for the command as a whole, in a
// control group of its own nested in the node's (cgroup v1 or v2, with
// github.com/containerd/cgroups), CPU time and file size per process (rlimits), and the
// size of its /tmp. The process that will run the command waits until the node has moved
// it into its cgroup and set its rlimits, so that even its first forks count; when the
// command ends, whatever is left in its cgroup is killed and the group deleted. Where no
// cgroup can be created, memory falls back to RLIMIT_DATA and processes to RLIMIT_NPROC,
// which does not bind root; the host logs that once, and each result's details
// ([AppliedLimits]) say which limits applied, how, and which the command reached.
//
// With the sandbox off ([SandboxOff]) the command runs bare, in its own process group, with
// the same environment allowlist and limits (but the host's /tmp); its group is stopped the
// same way, and what left the group (setsid) dies with the command's cgroup, where it has
// one; the command can reach whatever the node's user can.
package computer
