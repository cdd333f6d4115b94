package server

import (
	"context"
	"fmt"
	"log/slog"
)

// LevelTrace is the slog level of the server's protocol trace messages,
// below [slog.LevelDebug].
const LevelTrace = slog.LevelDebug - 4

// serverLogger adapts slog to nats-server's Logger interface. It exists
// because the server's own logger exits the process on Fatalf; here a fatal
// message is logged at error level and handed to Start, which fails with it.
type serverLogger struct {
	logger *slog.Logger
	min    slog.Level  // messages below are dropped before formatting
	fatal  chan string // the first fatal message; buffered, never blocks the server
}

func newServerLogger(logger *slog.Logger, min slog.Level) *serverLogger {
	return &serverLogger{logger: logger, min: min, fatal: make(chan string, 1)}
}

func (l *serverLogger) Noticef(format string, v ...any) { l.log(slog.LevelInfo, format, v) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.log(slog.LevelWarn, format, v) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.log(slog.LevelError, format, v) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.log(slog.LevelDebug, format, v) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.log(LevelTrace, format, v) }

func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	select {
	case l.fatal <- msg:
	default: // Start already has a fatal message to report
	}
	l.logger.LogAttrs(context.Background(), slog.LevelError, msg, slog.Bool("fatal", true))
}

func (l *serverLogger) log(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if level < l.min || !l.logger.Enabled(ctx, level) {
		return
	}
	l.logger.LogAttrs(ctx, level, fmt.Sprintf(format, v...))
}
