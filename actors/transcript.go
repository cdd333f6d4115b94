package actors

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
)

// ReadTranscript reads a turn's transcript back from the transcript stream.
func ReadTranscript(ctx context.Context, js jetstream.JetStream, turn string) ([]gateway.Item, error) {
	if !bus.ValidToken(turn) {
		return nil, fmt.Errorf("read transcript: invalid turn id %q", turn)
	}
	stream, err := js.Stream(ctx, bus.StreamTranscripts)
	if err != nil {
		return nil, fmt.Errorf("read transcript %s: %w", turn, err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.TranscriptSubject(turn)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("read transcript %s: %w", turn, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read transcript %s: %w", turn, err)
	}
	pending := info.NumPending
	if pending == 0 {
		return nil, fmt.Errorf("read transcript %s: no such turn in %s", turn, bus.StreamTranscripts)
	}
	var items []gateway.Item
	for pending > 0 {
		batch, err := cons.FetchNoWait(int(min(pending, 256)))
		if err != nil {
			return nil, fmt.Errorf("read transcript %s: %w", turn, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var part []gateway.Item
			if err := json.Unmarshal(m.Data(), &part); err != nil {
				return nil, fmt.Errorf("read transcript %s: message %d: %w", turn, n, err)
			}
			items = append(items, part...)
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read transcript %s: %w", turn, err)
		}
		if n == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("read transcript %s: %w", turn, err)
			}
			continue
		}
		pending -= uint64(n)
	}
	return items, nil
}
