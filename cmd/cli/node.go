package main

import (
	"context"
	"errors"
	"io"

	"github.com/toolbus/toolbus/node"
)

// cmdNode runs a node in the foreground: the daemon that serves tool
// categories and runs turns for a bus that other commands reach with -server.
func cmdNode(ctx context.Context, e *env, args []string, _, stderr io.Writer) error {
	err := node.Run(ctx, "toolbus node", args, stderr)
	var ue *node.UsageError
	switch {
	case errors.Is(err, node.ErrFlags):
		return &exitError{code: exitUsage}
	case errors.As(err, &ue):
		return usagef("%s", ue.Msg)
	}
	return err
}
