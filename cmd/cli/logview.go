package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// logView is where the log of a command's embedded bus and node goes. Every
// record goes to the -log file when there is one. Warnings and errors (and
// info with -v) are shown as one readable line each, once per distinct message
// and error (every time with -v): to stderr, or, while a live view is on a
// terminal, through the renderer above its live area, never inside it.
type logView struct {
	mu       sync.Mutex
	out      io.Writer    // where lines go while no renderer takes them
	file     slog.Handler // the -log file's handler; nil without -log
	closer   io.Closer
	show     slog.Level // the least level shown as a line
	verbose  bool
	seen     map[string]bool
	attached bool
	pending  []string
	ready    chan struct{} // signalled when pending grows while attached
}

// newLogView shows lines on out; logFile, when set, receives the whole log.
func newLogView(out io.Writer, logFile string, verbose bool) (*logView, error) {
	v := &logView{out: out, show: slog.LevelWarn, verbose: verbose, seen: make(map[string]bool), ready: make(chan struct{}, 1)}
	if verbose {
		v.show = slog.LevelInfo
	}
	if logFile != "" {
		if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
			return nil, fmt.Errorf("-log: %w", err)
		}
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("-log: %w", err)
		}
		level := slog.LevelInfo
		if verbose {
			level = slog.LevelDebug
		}
		v.file, v.closer = slog.NewTextHandler(f, &slog.HandlerOptions{Level: level}), f
	}
	return v, nil
}

// logger is the slog logger writing to the view.
func (v *logView) logger() *slog.Logger {
	return slog.New(&logHandler{v: v, file: v.file})
}

// attach makes the view hold its lines for take until detach.
func (v *logView) attach() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.attached = true
}

// take returns the lines held since the last take.
func (v *logView) take() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	lines := v.pending
	v.pending = nil
	return lines
}

// detach writes the lines still held to out, which gets the next ones.
func (v *logView) detach() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.attached = false
	for _, l := range v.pending {
		fmt.Fprintln(v.out, l)
	}
	v.pending = nil
}

// Close closes the -log file.
func (v *logView) Close() {
	if v.closer != nil {
		_ = v.closer.Close()
	}
}

// reportedElsewhere are log messages a command reports itself: a failed turn's
// error is the command's own last line.
var reportedElsewhere = map[string]bool{"turn failed": true}

func (v *logView) line(r slog.Record, attrs []slog.Attr) {
	if reportedElsewhere[r.Message] && !v.verbose {
		return
	}
	var errText string
	var rest []string
	add := func(a slog.Attr) {
		switch a.Key {
		case "err", "error":
			errText = a.Value.String()
		case "retry", "stack":
			// The retry count makes every attempt a new line; stacks are for the file.
		default:
			rest = append(rest, a.Key+"="+a.Value.String())
		}
	}
	for _, a := range attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	word := "warning"
	switch {
	case r.Level >= slog.LevelError:
		word = "error"
	case r.Level < slog.LevelWarn:
		word = "log"
	}
	s := word + ": " + r.Message
	if errText != "" {
		s += ": " + errText
	}
	key := s
	if len(rest) > 0 {
		s += " (" + strings.Join(rest, ", ") + ")"
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.verbose {
		if v.seen[key] {
			return
		}
		v.seen[key] = true
	}
	if !v.attached {
		fmt.Fprintln(v.out, s)
		return
	}
	v.pending = append(v.pending, s)
	select {
	case v.ready <- struct{}{}:
	default:
	}
}

// logHandler is the slog.Handler of a logView.
type logHandler struct {
	v     *logView
	file  slog.Handler
	attrs []slog.Attr
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.v.show || (h.file != nil && h.file.Enabled(ctx, l))
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.file != nil && h.file.Enabled(ctx, r.Level) {
		_ = h.file.Handle(ctx, r)
	}
	if r.Level >= h.v.show {
		h.v.line(r, h.attrs)
	}
	return nil
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := &logHandler{v: h.v, file: h.file, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], attrs...)}
	if h.file != nil {
		n.file = h.file.WithAttrs(attrs)
	}
	return n
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	n := &logHandler{v: h.v, file: h.file, attrs: h.attrs}
	if h.file != nil {
		n.file = h.file.WithGroup(name)
	}
	return n
}
