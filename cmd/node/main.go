// Command node runs a toolbus node; it is the same program as `toolbus node`
// (cmd/cli), which is the name to install: a binary called node shadows
// Node.js on the PATH. See package node for its flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/toolbus/toolbus/node"
)

func main() {
	err := node.Run(context.Background(), "node", os.Args[1:], os.Stderr)
	var ue *node.UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, node.ErrFlags):
		os.Exit(2)
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "node: %s\nRun 'node -h' for its flags.\n", ue.Msg)
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "node:", err)
	os.Exit(1)
}
