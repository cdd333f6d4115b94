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
// run_command runs /bin/sh -c in its own process group with a minimal environment, a
// timeout and an output cap, and stops the whole group (SIGTERM, then SIGKILL after a
// grace period) when the call is cancelled, times out, or exits leaving background
// processes behind. It confines the command's working directory, not the command: what a
// command may touch outside the home is the host's business (user, container, sandbox).
package computer
