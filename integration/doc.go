// Package integration holds tests that run toolbus the way it is deployed:
// node daemons and the command line as separate processes on loopback, a
// cluster joined through routes, and the real `nats` CLI (natscli v0.5.0)
// observing and driving the bus.
//
// The package has no code of its own; everything is in its tests, which need
// Linux (process groups, /bin/sh). TestMain builds cmd/cli (nodes run as toolbus node) once
// per run, into $TOOLBUS_TEST_BIN if set, otherwise into integration/.bin, and installs
// the nats CLI once into the same folder, reusing a binary that reports v0.5.0. The
// CLI is installed with `go install` from outside this module (it pins its
// own nats-server and must never enter our go.mod); the first install needs
// the module proxy and takes a few minutes on two cores.
//
// The WorkerNode tests also run the Node.js category host of
// examples/worker-node: they need node (20 or later) and npm in PATH, and
// install its packages with `npm ci` into the tools dir ($TOOLBUS_TEST_BIN if set,
// otherwise the user's cache, $XDG_CACHE_HOME or ~/.cache, toolbus-integration, shared
// by every clone), once per package-lock.json.
//
// TestMCPSkillThroughMcporter installs mcporter 0.9.0 (the newest that accepts Node 20)
// and @modelcontextprotocol/server-everything with `npm install -g --prefix` into the same
// tools dir, once per pair of versions, and starts a node with -sandbox-ro on that folder;
// mcporter runs inside the sandbox, so node must live under /usr or /bin.
//
// A test fails, never skips, when a binary cannot be built or installed.
package integration
