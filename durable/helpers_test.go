package durable

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// kvReplicas is how many replicas the turn records have (0 when unknown).
func (s *Store) kvReplicas(ctx context.Context) int {
	if s.kv == nil {
		return 0
	}
	st, err := s.kv.Status(ctx)
	if err != nil {
		return 0
	}
	if ks, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		return ks.StreamInfo().Config.Replicas
	}
	return 0
}
