package durable

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// TranscriptStream is the name of the JetStream stream of the transcripts, for an
// operator's tools that act on the stream as a whole (nats stream info, nats stream
// cluster step-down: an integration test moves its leader so). Toolbus itself reaches
// the stream only through a [Store].
const TranscriptStream = bus.StreamTranscripts

// transcriptStreamConfig is the configuration of the transcript stream: every turn
// appends to bus.TranscriptSubject, and the messages are kept under the stream's limits
// (none set here; add MaxAge or MaxBytes as the deployment needs).
func transcriptStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        bus.StreamTranscripts,
		Description: "toolbus turn transcripts, one subject per turn",
		Subjects:    []string{bus.AllTranscripts},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		AllowDirect: true,
		// Each append carries a message id (Lease.Append): one retried after its answer
		// was lost is stored once. The window outlasts an append's retries (30 s).
		Duplicates: 2 * time.Minute,
	}
}

// intakeStreamConfig is the configuration of the turn intake: a work queue, so a spec
// is held by one node at a time and removed when its turn ends. It also holds the
// schedules (bus.IntakeSchedule), which JetStream fires into it (bus.IntakeFired): a
// schedule's target must be a subject of its own stream. Message schedules need
// roll-ups, which a schedule message uses to replace the one before it on its subject.
func intakeStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        bus.StreamIntake,
		Description: "toolbus turn intake: one turn spec per turn until the turn ends, and the schedules that queue turns",
		Subjects:    []string{bus.AllIntake},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		// A turn id is published once; a client's retry is stored once.
		Duplicates:        10 * time.Minute,
		AllowMsgSchedules: true,
		AllowRollup:       true,
	}
}

// ensureIntake opens the intake stream, creating it if it does not exist, and turns
// message schedules on in one made by an earlier build (JetStream allows turning them
// on in place, never off). Its other settings stay as an operator left them.
func ensureIntake(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.Stream, error) {
	stream, err := js.Stream(ctx, bus.StreamIntake)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return bus.Stream(ctx, js, intakeStreamConfig(replicas))
	}
	if err != nil {
		return nil, fmt.Errorf("open stream %q: %w", bus.StreamIntake, err)
	}
	cfg := stream.CachedInfo().Config
	if cfg.AllowMsgSchedules {
		return stream, nil
	}
	cfg.AllowMsgSchedules, cfg.AllowRollup, cfg.DenyPurge = true, true, false
	if stream, err = js.UpdateStream(ctx, cfg); err != nil {
		return nil, fmt.Errorf("turn on message schedules in stream %q: %w", bus.StreamIntake, err)
	}
	return stream, nil
}

// runnerConsumerConfig is the durable consumer of the intake for turns any node may
// run (name bus.ConsumerRunners), or, with node set, for the turns asked of that node.
// A node holds a spec while its turn runs and signals progress well within lease; a
// spec whose node stops signalling is redelivered to another node after lease.
func runnerConsumerConfig(node string, lease time.Duration) jetstream.ConsumerConfig {
	c := jetstream.ConsumerConfig{
		Durable:     bus.ConsumerRunners,
		Description: "turn-running nodes",
		// Turns any node may run, and the firings of schedules.
		FilterSubjects: []string{bus.IntakeAny(">"), bus.IntakeFired(">")},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        lease,
		MaxDeliver:     -1,
		MaxAckPending:  100_000,
	}
	if node != "" {
		c.Durable = bus.ConsumerRunners + "-" + node
		c.Description = "turns asked of node " + node
		c.FilterSubjects = nil
		c.FilterSubject = bus.IntakeNode(node, ">")
	}
	return c
}

// intake opens the intake stream; a bus without one has no durable turns yet.
func (s *Store) intake(ctx context.Context) (jetstream.Stream, error) {
	st, err := s.js.Stream(ctx, bus.StreamIntake)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoTurns
	}
	if err != nil {
		return nil, fmt.Errorf("open the intake: %w", err)
	}
	return st, nil
}

// IntakeMessages is how many messages the intake holds now: the spec of every turn that
// is queued or running (a spec leaves when its turn ends), every schedule's message and
// the firings of schedules that no node has taken yet. An operator reads the depth of the
// queue from it; a test that a turn ended without running, that its spec left too.
func (s *Store) IntakeMessages(ctx context.Context) (uint64, error) {
	st, err := s.intake(ctx)
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().State.Msgs, nil // just read: js.Stream asks the server
}

// ScheduleMessages counts what the intake holds of a schedule: its own message (1 while
// the server fires it, 0 once it fires no more: a one-shot that fired, or a schedule
// removed) and its firings that no node has taken yet. For an operator (or a test)
// checking that a schedule still fires, or has stopped, on the server and not only in
// its record.
func (s *Store) ScheduleMessages(ctx context.Context, id string) (schedule, firings uint64, err error) {
	if !bus.ValidToken(id) {
		return 0, 0, fmt.Errorf("schedule messages: invalid schedule id %q", id)
	}
	st, err := s.intake(ctx)
	if err != nil {
		return 0, 0, err
	}
	// One look at both subjects ("toolbus.intake.*.<id>"), so the two counts are of one
	// moment.
	filter := strings.TrimSuffix(bus.AllIntake, ">") + "*." + id
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, 0, fmt.Errorf("schedule messages of %s: %w", id, err)
	}
	return info.State.Subjects[bus.IntakeSchedule(id)], info.State.Subjects[bus.IntakeFired(id)], nil
}

// FiringHeld reports whether the intake still holds the firing of schedule id stored at
// seq: no node has acknowledged it (it is waiting, or held by a node). A schedule reads
// it before it ends a firing's turn that stayed queued with no node holding it: with its
// firing gone, no node could ever take that turn.
func (s *Store) FiringHeld(ctx context.Context, id string, seq uint64) (bool, error) {
	if !bus.ValidToken(id) {
		return false, fmt.Errorf("firing held: invalid schedule id %q", id)
	}
	var m *jetstream.RawStreamMsg
	err := bus.Retry(ctx, "read firing "+id, nil, func(ctx context.Context) error {
		st, err := s.intake(ctx)
		if err != nil {
			return err
		}
		m, err = st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			m, err = nil, nil
		}
		return err
	})
	if err != nil {
		return false, err
	}
	return m != nil && m.Subject == bus.IntakeFired(id), nil
}
