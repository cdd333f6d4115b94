// Package testlog keeps what tests log, to look for a message afterwards.
package testlog

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Recorder is a slog.Handler that keeps every record.
type Recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *Recorder) WithGroup(string) slog.Handler            { return r }
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}

// Find returns the messages at level or above that contain substr.
func (r *Recorder) Find(level slog.Level, substr string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		if rec.Level >= level && strings.Contains(rec.Message, substr) {
			out = append(out, rec.Message)
		}
	}
	return out
}

// Messages returns every message, in the order logged.
func (r *Recorder) Messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.records))
	for i, rec := range r.records {
		out[i] = rec.Message
	}
	return out
}
