package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/toolbus/toolbus/console"
	"github.com/toolbus/toolbus/node"
)

func cmdConsole(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("console", "[flags]",
		"Serves the web console: the bus's turns live, one turn's timeline (abort it, approve\n"+
			"or refuse its held calls), workflows, jobs and schedules, nodes and categories. It\n"+
			"acts as the NATS user it connects with, whose role limits what its buttons may do.\n"+
			"Without -server it starts an embedded bus and node (with -store-dir, on a store\n"+
			"kept before). It listens on loopback unless given a password. Ctrl-C stops it.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var cf node.ConsoleFlags
	cf.Register(fs, "addr", console.DefaultAddr, "password-file")
	var gf node.GatewayFlags
	gf.Register(fs, "embedded node: ", false)
	var (
		home     = fs.String("home", ".", "embedded node: every agent's home directory")
		storeDir = fs.String("store-dir", "", "embedded node: JetStream store directory (default: a temporary one)")
		sandbox  = sandboxFlag(fs)
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments %q", pos)
	}
	if cf.Addr == "" {
		return usagef("-addr: want host:port")
	}
	if err := cf.Check(); err != nil {
		if ue := (*node.UsageError)(nil); errors.As(err, &ue) {
			return usagef("%s", ue.Msg)
		}
		return err
	}
	bc, logs, err := turnBus(ctx, e, bf, &gf, embedOptions{home: *home, storeDir: *storeDir, sandbox: *sandbox}, nil, "", false, stderr)
	if err != nil {
		return err
	}
	defer logs.Close()
	defer bc.Close()
	con, err := cf.Start(bc.cl, e.getenv("USER")+" (console)", logs.logger())
	if err != nil {
		return err
	}
	defer con.Close()
	switch {
	case bc.node != nil:
		fmt.Fprintf(stderr, "toolbus console on %s, on the embedded bus of node %s (Ctrl-C stops it)\n", con.URL(), embeddedNode)
	case bf.user != "":
		fmt.Fprintf(stderr, "toolbus console on %s, acting as %s on %s (Ctrl-C stops it)\n", con.URL(), bf.user, bc.where)
	default:
		fmt.Fprintf(stderr, "toolbus console on %s, acting as the connection's user on %s (Ctrl-C stops it)\n", con.URL(), bc.where)
	}
	<-ctx.Done()
	return nil
}
