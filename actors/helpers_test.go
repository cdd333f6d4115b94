package actors

import (
	"log/slog"

	"github.com/toolbus/toolbus/bus/bustest"
)

// logBuffer is a slog destination tests can read while actors write to it.
type logBuffer struct{ bustest.Buffer }

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
