package main

import (
	"context"
	"errors"
	"io"

	"github.com/toolbus/toolbus/internal/nodecmd"
)

// cmdNode runs a node in the foreground: the daemon that serves tool
// categories and runs turns for a bus that other commands reach with -server.
func cmdNode(ctx context.Context, args []string, _, stderr io.Writer) error {
	err := nodecmd.Run(ctx, "toolbus node", args, stderr)
	var ue *nodecmd.UsageError
	switch {
	case errors.Is(err, nodecmd.ErrFlags):
		return &exitError{code: exitUsage}
	case errors.As(err, &ue):
		return usagef("%s", ue.Msg)
	}
	return err
}
