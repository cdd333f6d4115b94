package actors

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
)

// errNoTranscript reports a turn the stream holds nothing of.
var errNoTranscript = errors.New("no such turn")

// ReadTranscript reads a turn's transcript back from the transcript stream,
// in the turn's order. A stream that is electing a leader does not answer:
// attempts, each bounded, go on while JetStream gives the errors of a
// missing leader (bus.Retry), until ctx ends.
func ReadTranscript(ctx context.Context, js jetstream.JetStream, turn string) ([]gateway.Item, error) {
	items, _, err := readTranscriptSeq(ctx, js, turn)
	return items, err
}

// readTranscriptSeq is ReadTranscript that also returns the highest message position
// stored, from which a turn resumed elsewhere numbers its next messages.
func readTranscriptSeq(ctx context.Context, js jetstream.JetStream, turn string) ([]gateway.Item, int, error) {
	if !bus.ValidToken(turn) {
		return nil, 0, fmt.Errorf("read transcript: invalid turn id %q", turn)
	}
	var (
		items []gateway.Item
		last  int
	)
	err := bus.Retry(ctx, "read transcript "+turn, nil, func(ctx context.Context) error {
		var err error
		items, last, err = readTranscript(ctx, js, turn)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return items, last, nil
}

type transcriptPart struct {
	seq   int
	items []gateway.Item
}

func readTranscript(ctx context.Context, js jetstream.JetStream, turn string) ([]gateway.Item, int, error) {
	stream, err := js.Stream(ctx, bus.StreamTranscripts)
	if err != nil {
		return nil, 0, err
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.TranscriptSubject(turn)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, 0, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	pending := info.NumPending
	if pending == 0 {
		return nil, 0, fmt.Errorf("%w in %s", errNoTranscript, bus.StreamTranscripts)
	}
	var parts []transcriptPart
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchContext(ctx))
		if err != nil {
			return nil, 0, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var p transcriptPart
			if err := json.Unmarshal(m.Data(), &p.items); err != nil {
				return nil, 0, fmt.Errorf("message %d: %w", n, err)
			}
			// Messages written before sequence numbers had none; they keep
			// their stream order.
			p.seq, _ = strconv.Atoi(m.Headers().Get(bus.HeaderSeq))
			parts = append(parts, p)
		}
		if err := batch.Error(); err != nil {
			return nil, 0, err
		}
		if n == 0 {
			return nil, 0, fmt.Errorf("fetch: %d messages pending but none delivered", pending)
		}
		pending -= uint64(n)
	}
	// A retried append can land after a later one, and twice if its first
	// acknowledgement was lost.
	slices.SortStableFunc(parts, func(a, b transcriptPart) int { return cmp.Compare(a.seq, b.seq) })
	var items []gateway.Item
	last := 0
	for i, p := range parts {
		if i > 0 && p.seq != 0 && p.seq == parts[i-1].seq {
			continue
		}
		items = append(items, p.items...)
		last = max(last, p.seq)
	}
	return inModelOrder(items), last, nil
}

// inModelOrder puts each run of call outputs in the order of their calls (a durable turn
// stores each output as its call finishes) and keeps one output per call.
func inModelOrder(items []gateway.Item) []gateway.Item {
	order := make(map[string]int)
	seen := make(map[string]bool)
	out := items[:0]
	for i := 0; i < len(items); {
		it := items[i]
		if it.Kind == gateway.KindFunctionCall {
			order[it.CallID] = len(order)
		}
		if it.Kind != gateway.KindCallOutput {
			out = append(out, it)
			i++
			continue
		}
		j := i
		for j < len(items) && items[j].Kind == gateway.KindCallOutput {
			j++
		}
		run := slices.Clone(items[i:j])
		slices.SortStableFunc(run, func(a, b gateway.Item) int { return cmp.Compare(order[a.CallID], order[b.CallID]) })
		for _, o := range run {
			if !seen[o.CallID] {
				seen[o.CallID] = true
				out = append(out, o)
			}
		}
		i = j
	}
	return out
}
