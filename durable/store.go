// Package durable owns the durable state of turns: the turn records (bucket
// toolbus_turns), the intake (stream TOOLBUS_INTAKE) and the transcripts (stream
// TOOLBUS_TRANSCRIPTS). Submitting, claiming, appending to a transcript, ending,
// handing back, releasing, listing and reading all go through it; nothing else in
// toolbus opens those names.
//
// A node that claims a turn holds a [Lease]. Every write of a lease holder is fenced by
// the server, not by readers afterwards:
//   - the record is written at the revision the claim wrote (a compare-and-set);
//   - every transcript message is published with the turn subject's expected last
//     sequence, and a claim's first act is to append to the transcript (the turn's
//     input, or a resume note), so a node that lost the turn can append nothing after
//     the new owner's first message, and no two messages ever carry one position;
//   - the intake message is acknowledged only after the end was written.
//
// The log is the truth: a resumed turn is planned from its transcript ([PlanBatch]),
// and the record says who holds the turn and how it ended.
package durable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// Config configures a [Store].
type Config struct {
	// Node is the name of the node that claims turns through the store; a store that
	// only reads and submits (a client) may leave it empty.
	Node string
	// Replicas of the bucket and streams the store creates (capped by the cluster).
	Replicas int
	// Create makes the bucket and the streams when they do not exist (a node); a
	// client opens what is there and reads nothing where nothing is.
	Create bool
	Logger *slog.Logger
	// StoreFull names a write refused because the store is full (for a node on an
	// embedded server, server.Server.StoreFullError, which knows the limits); nil:
	// bus.StoreFullError with Node.
	StoreFull func(error) error
}

func (c Config) withDefaults() Config {
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.StoreFull == nil {
		node := c.Node
		c.StoreFull = func(err error) error { return bus.StoreFullError(node, err) }
	}
	return c
}

func (c Config) validate() error {
	if c.Node != "" && !bus.ValidToken(c.Node) {
		return fmt.Errorf("durable: invalid node name %q", c.Node)
	}
	return nil
}

// Store is the one owner of the durable state of turns.
type Store struct {
	cfg         Config
	js          jetstream.JetStream
	kv          jetstream.KeyValue // nil on a client store of a bus without turns yet
	transcripts jetstream.Stream   // nil likewise
	log         *slog.Logger

	// payloads holds the bodies of transcript messages too large for a message
	// (bus.ObjectTranscripts), opened on first use (payloadStore).
	payloadsOnce sync.Once
	payloads     *bus.Payloads

	// publish, when a test sets it, stands in for js.PublishMsg in the appends of
	// leases, to put a fault between a message and its acknowledgement.
	publish func(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// publishMsg publishes m to JetStream and waits for its acknowledgement.
func (s *Store) publishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if s.publish != nil {
		return s.publish(ctx, m, opts...)
	}
	return s.js.PublishMsg(ctx, m, opts...)
}

// ErrNoTurns reports a bus on which no node that runs turns has started yet.
var ErrNoTurns = errors.New("this bus has no durable turns yet (no node that runs turns has started on it)")

// Open opens the durable state on js. With cfg.Create the bucket and streams are made
// when missing (waiting out a JetStream that elects its leaders); otherwise a missing
// bucket leaves a store whose reads report [ErrNoTurns].
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, js: js, log: cfg.Logger}
	if !cfg.Create {
		kv, err := bus.OpenKeyValue(ctx, js, bus.BucketTurns)
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			return s, nil
		case err != nil:
			return nil, fmt.Errorf("open turn records: %w", err)
		}
		s.kv = kv
		if st, err := js.Stream(ctx, bus.StreamTranscripts); err == nil {
			s.transcripts = st
		}
		return s, nil
	}
	err := bus.Retry(ctx, "open the durable turn state", s.log, func(ctx context.Context) error {
		var err error
		if s.kv, err = bus.KeyValue(ctx, js, bus.BucketTurns, cfg.Replicas); err != nil {
			return err
		}
		if s.kv, err = leaderReads(ctx, js, s.kv); err != nil {
			return err
		}
		if _, err = ensureIntake(ctx, js, cfg.Replicas); err != nil {
			return err
		}
		s.transcripts, err = ensureTranscripts(ctx, js, cfg.Replicas)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ensureTranscripts opens the transcript stream, creating it if it does not exist; an
// existing stream keeps the limits an operator gave it.
func ensureTranscripts(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, bus.StreamTranscripts)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return bus.Stream(ctx, js, transcriptStreamConfig(replicas))
	}
	return st, err
}

// EnsureTranscripts makes sure the transcript stream exists, for a node that runs
// turns outside the intake (they keep a transcript too).
func EnsureTranscripts(ctx context.Context, js jetstream.JetStream, replicas int) error {
	_, err := ensureTranscripts(ctx, js, replicas)
	return err
}

// HasTurns reports a store on a bus with turn records (a client store opened before any
// node that runs turns started has none).
func (s *Store) HasTurns() bool { return s.kv != nil }

// Node is the name of the node the store claims turns for.
func (s *Store) Node() string { return s.cfg.Node }

// RunnerConsumers creates (or updates) the intake's consumers this node pulls from:
// turns any node may run and the firings of schedules, then the turns asked of this
// node. A spec whose node stops signalling progress for lease goes to another node.
func (s *Store) RunnerConsumers(ctx context.Context, lease time.Duration) ([]jetstream.Consumer, error) {
	var out []jetstream.Consumer
	for _, node := range []string{"", s.cfg.Node} {
		var cons jetstream.Consumer
		err := bus.Retry(ctx, "intake consumer", s.log, func(ctx context.Context) error {
			stream, err := s.js.Stream(ctx, bus.StreamIntake)
			if err != nil {
				return err
			}
			cons, err = stream.CreateOrUpdateConsumer(ctx, runnerConsumerConfig(node, lease))
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, cons)
	}
	return out, nil
}

func (s *Store) records() (jetstream.KeyValue, error) {
	if s.kv == nil {
		return nil, ErrNoTurns
	}
	return s.kv, nil
}

// leaderReads turns direct gets off for the turn records, so that every read is the
// stream leader's. With direct gets any replica answers a read, and a replica that was
// paused answers from before its pause: measured on a 3-node cluster, a node woken from
// SIGSTOP read its own stale replica, found itself still the owner of turns that other
// nodes had resumed, and went on beating for them; the live owners, reading the same
// stale replica, took themselves for fenced. A lease holder must never act on a stale
// copy of its record.
func leaderReads(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) (jetstream.KeyValue, error) {
	var stream jetstream.Stream
	for {
		// A bucket just created in a forming cluster can be "not found" for a moment
		// (measured: a node started beside two others failed so); ctx bounds the wait.
		var err error
		stream, err = js.Stream(ctx, "KV_"+bus.BucketTurns)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	cfg := stream.CachedInfo().Config
	if !cfg.AllowDirect && !cfg.MirrorDirect {
		return kv, nil
	}
	cfg.AllowDirect, cfg.MirrorDirect = false, false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return nil, fmt.Errorf("turn records: read from the leader only: %w", err)
	}
	return js.KeyValue(ctx, bus.BucketTurns) // bound again: nats.go reads the setting when it binds
}
