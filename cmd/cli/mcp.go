package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/internal/secretflag"
	"github.com/toolbus/toolbus/mcp"
)

func cmdMCP(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("mcp", "[flags]",
		"Serves the tools of the bus to MCP clients (Claude Code, Codex, Cursor, any agent SDK):\n"+
			"the tools the agent's profile gives its main turns, with their JSON Schemas and\n"+
			"annotations. Each tools/call goes through the repair ladder and the schema, is held\n"+
			"for `toolbus approve` when the profile asks, and runs on the tool's host anywhere on\n"+
			"the bus; its events come back as progress, and a cancellation aborts it. Over stdio\n"+
			"(a client starts this command) by default; with -listen, over streamable HTTP at\n"+
			"http://ADDR/mcp. Each client session is a turn of kind mcp, listed by `toolbus turns`\n"+
			"and the console while it lives. On a secured bus, -user is a user of the turn role:\n"+
			"an operator may not hold calls for approval nor record turns. See docs/mcp.md.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var (
		agent        = fs.String("agent", defaultAgent, "serve the tools of this agent's profile, and call them as this agent")
		namespaces   = fs.String("namespace", "", "serve only the tools of these namespaces, comma-separated (default: all the profile gives)")
		listen       = fs.String("listen", "", "serve streamable HTTP on host:port (path /mcp) instead of stdio; loopback only unless a token guards it")
		tokenFile    = fs.String("token-file", "", "with -listen: a file holding the bearer token every request must carry (default env TOOLBUS_MCP_TOKEN; off loopback, else the password of -user)")
		approvalWait = fs.Duration("approval-wait", mcp.DefaultApprovalWait, "how long a call held for approval waits for `toolbus approve` before the client is told it did not run; 0 refuses such calls at once")
		sessionIdle  = fs.Duration("session-idle", mcp.DefaultSessionIdle, "with -listen: close a client's session after this long without a request (its turn ends aborted, saying so); 0 never")
		home         = fs.String("home", ".", "embedded node: the agent home, where the file and command tools work")
		sandbox      = sandboxFlag(fs)
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments %q", pos)
	}
	for _, f := range []string{"home", "sandbox"} {
		if bf.server != "" && flagsSet(fs)[f] {
			return usagef("-%s configures the embedded node; with -server the remote node uses its own", f)
		}
	}
	if err := checkAgent(*agent); err != nil {
		return err
	}
	if *approvalWait < 0 {
		return usagef("-approval-wait %s: want 0 or more", *approvalWait)
	}
	if *sessionIdle < 0 {
		return usagef("-session-idle %s: want 0 (never) or more", *sessionIdle)
	}
	if *listen == "" && flagsSet(fs)["session-idle"] {
		return usagef("-session-idle closes HTTP sessions: give -listen too (a stdio session ends with its client)")
	}
	token := ""
	if *listen != "" {
		token = e.getenv("TOOLBUS_MCP_TOKEN")
		if *tokenFile != "" {
			if token, err = secretflag.Read(*tokenFile, ""); err != nil {
				return fmt.Errorf("-token-file: %w", err)
			}
		}
		if token == "" && mcp.CheckListen(*listen, false) != nil && bf.server != "" && bf.user != "" {
			// Off loopback with no token of its own: the bus user's password guards it.
			if token, err = secretflag.Read(bf.passFile, "NATS_PASSWORD"); err != nil {
				return fmt.Errorf("-pass-file: %w", err)
			}
		}
		redact.AddSecrets(token)
		if err := mcp.CheckListen(*listen, token != ""); errors.Is(err, mcp.ErrNeedsToken) {
			return usagef("-listen %s is reachable from other hosts: give a bearer token with -token-file FILE (or TOOLBUS_MCP_TOKEN), or listen on 127.0.0.1", *listen)
		} else if err != nil {
			return usagef("%v", err)
		}
	}

	log := newLogger(stderr)
	bc, err := connect(ctx, bf, embedOptions{home: *home, sandbox: *sandbox}, log)
	if err != nil {
		return err
	}
	defer bc.Close()
	wait := *approvalWait
	if wait == 0 {
		wait = -1 // ServeConfig: do not wait
	}
	idle := *sessionIdle
	if idle == 0 || *listen == "" {
		idle = -1 // ServeConfig: never (a stdio session ends with its client)
	}
	srv, err := mcp.NewServer(ctx, mcp.ServeConfig{
		Client: bc.cl, Agent: *agent, Namespaces: mcp.SplitNamespaces(*namespaces), ApprovalWait: wait,
		SessionIdle: idle, Logger: log,
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	if *listen == "" {
		// stdout carries the protocol: everything else goes to stderr.
		t := &sdk.IOTransport{Reader: io.NopCloser(e.stdin), Writer: nopWriteCloser{stdout}}
		err := srv.Run(ctx, t)
		if ctx.Err() != nil || errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.Handler(token))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "toolbus mcp: serving agent %s's tools of %s at http://%s/mcp\n", *agent, bc.where, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	// Sessions first: an open event stream would hold Shutdown for its whole grace.
	srv.Close()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return nil
}

// nopWriteCloser lets the transport close stdout without closing it.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
