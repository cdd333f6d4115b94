package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream buckets and streams of toolbus. The durable state of turns (BucketTurns,
// StreamIntake, StreamTranscripts) is named here, where the permissions grant it, and
// configured and opened only by package durable.
const (
	BucketTodos  = "toolbus_todos"
	BucketAgents = "toolbus_agents" // agent profiles, one JSON document per agent
	BucketTurns  = "toolbus_turns"  // turn records: spec, owner, step, state (TurnRecord)
	StreamIntake = "TOOLBUS_INTAKE" // turn specs waiting for, or held by, a node (work queue)
	// ConsumerRunners is the intake consumer every turn-running node pulls from.
	ConsumerRunners   = "runners"
	StreamTranscripts = "TOOLBUS_TRANSCRIPTS"
	// BucketJobs holds background jobs ("job.<agent>.<job>") and each agent's job
	// ledger ("ledger.<agent>"); a finished job's record expires after its keep time.
	BucketJobs = "toolbus_jobs"
	// BucketSchedules holds schedules, "<agent>.<schedule>"; their firing times live in
	// the intake stream (IntakeSchedule).
	BucketSchedules = "toolbus_schedules"
	// BucketBrain holds the agents' knowledge pages, one key per page ("<agent>.<page
	// id>"); ObjectBrain holds the text of the pages too large for a KV value.
	BucketBrain = "toolbus_brain"
	ObjectBrain = "toolbus_brain_pages"
)

// KeyValue opens the key-value bucket, creating it with file storage and
// the given number of replicas if it does not exist. An existing bucket is
// opened as it is: its configuration is not changed. Replicas are capped by
// the number of JetStream servers (see EnsureKeyValue).
func KeyValue(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.KeyValue, error) {
	return EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:   bucket,
		Storage:  jetstream.FileStorage,
		Replicas: replicas,
	})
}

// OpenKeyValue opens an existing bucket, retrying while JetStream has no leader (a
// node lost makes its streams elect one for several seconds; a read then waited out the
// request timeout and failed). A bucket that does not exist is
// jetstream.ErrBucketNotFound.
func OpenKeyValue(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := Retry(ctx, "open key-value bucket "+bucket, nil, func(ctx context.Context) error {
		var err error
		kv, err = js.KeyValue(ctx, bucket)
		return err
	})
	return kv, err
}

// EnsureKeyValue opens the bucket cfg.Bucket, creating it from cfg if it
// does not exist; concurrent callers on several nodes all get the bucket.
// If cfg.Replicas is more than the cluster can place, the bucket is created
// with as many as there are JetStream servers (1 on a single server).
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open key-value bucket %q: %w", cfg.Bucket, err)
	}
	err = capReplicas(cfg.Replicas, func(r int) error {
		cfg.Replicas = r
		kv, err = js.CreateKeyValue(ctx, cfg)
		return err
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Created meanwhile by someone else, with another configuration.
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("create key-value bucket %q: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// ObjectStore opens the object store bucket, creating it with file storage
// and the given number of replicas (capped as for KeyValue) if it does not
// exist.
func ObjectStore(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, bucket)
	if err == nil {
		return obs, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open object store %q: %w", bucket, err)
	}
	cfg := jetstream.ObjectStoreConfig{Bucket: bucket, Storage: jetstream.FileStorage}
	err = capReplicas(replicas, func(r int) error {
		cfg.Replicas = r
		obs, err = js.CreateObjectStore(ctx, cfg)
		return err
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		obs, err = js.ObjectStore(ctx, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("create object store %q: %w", bucket, err)
	}
	return obs, nil
}

// Stream creates the stream or updates it to cfg, with cfg.Replicas capped
// as for EnsureKeyValue.
func Stream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	var stream jetstream.Stream
	err := capReplicas(cfg.Replicas, func(r int) error {
		cfg.Replicas = r
		var err error
		stream, err = js.CreateOrUpdateStream(ctx, cfg)
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		// Created between CreateOrUpdateStream's update and its create, by another
		// node starting too or by an attempt of this one that timed out but landed
		// (seen: three nodes started together, "stream name already in use"): the
		// stream is there to update.
		stream, err = js.UpdateStream(ctx, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("create or update stream %q: %w", cfg.Name, err)
	}
	return stream, nil
}

// JetStream API error codes and the placement error that capReplicas reads
// (nats-server's JSStreamReplicasNotSupportedErr and JSClusterNoPeersErrF).
const (
	errCodeReplicasNotSupported jetstream.ErrorCode = 10074 // replicas > 1 on a server that is not clustered
	errCodeNoPeers              jetstream.ErrorCode = 10005
	// The placement error carries no reason when the cluster simply has
	// fewer JetStream servers than replicas; offline peers, storage or tags
	// add one, and those are not capped away.
	noSuitablePeers = "no suitable peers for placement"
)

// capReplicas calls create with replicas, and again with fewer while the
// server answers that it cannot place that many: 1 on a server that is not
// clustered, one less each time in a cluster that is too small. The
// JetStream API does not tell an ordinary account how many servers the
// cluster has, but these refusals say exactly that there are too few.
func capReplicas(replicas int, create func(replicas int) error) error {
	r := max(replicas, 1)
	for {
		err := create(r)
		if err == nil || r == 1 {
			return err
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) {
			return err
		}
		switch {
		case apiErr.ErrorCode == errCodeReplicasNotSupported:
			r = 1
		case apiErr.ErrorCode == errCodeNoPeers && apiErr.Description == noSuitablePeers:
			r--
		default:
			return err
		}
	}
}

// KeyValueTTL opens the key-value bucket as KeyValue does, creating it able to expire
// single keys (JetStream's per-message TTL, server 2.11+): UpdateWithTTL writes such a
// key, and the bucket keeps the marker of an expired key for a minute.
func KeyValueTTL(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.KeyValue, error) {
	return EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:         bucket,
		Storage:        jetstream.FileStorage,
		Replicas:       replicas,
		LimitMarkerTTL: time.Minute,
	})
}

// UpdateWithTTL writes key of a KeyValueTTL bucket at revision rev, as
// jetstream.KeyValue.Update does, and has the value expire ttl later. (Update takes no
// TTL; this is the same message with a Nats-TTL header.) A stale revision is an error
// that IsConflict reports.
func UpdateWithTTL(ctx context.Context, js jetstream.JetStream, bucket, key string, value []byte, rev uint64, ttl time.Duration) error {
	m := nats.NewMsg("$KV." + bucket + "." + key)
	m.Data = value
	_, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if IsConflict(err) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

// ErrReadAgain marks a read of a stream to be made again from its start: the replica
// that served it had not yet stored what the stream's leader had when the read began, or
// the ephemeral consumer it read through is gone (placed on a server that was lost or
// paused since). [Retry] retries it: the next consumer may be placed elsewhere, and a
// replica catches up.
var ErrReadAgain = errors.New("read again")

// LeaderLastSeq is the stream sequence of subject's last message in stream as the
// stream's leader has it, 0 when there is none. A direct get, and a consumer, may be
// answered by a replica that lags the leader (one catching up after a restart or a
// pause: measured in TestSoakDurableTurns, a completed turn's transcript read back with
// 3 of its 7 messages): a reader that must not act on a stale copy asks this first, and
// reads until it has this message (ErrReadAgain).
func LeaderLastSeq(ctx context.Context, nc *nats.Conn, stream, subject string) (uint64, error) {
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return 0, err
	}
	// The stored-message get, not the direct one: only the leader answers it.
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return 0, fmt.Errorf("last message of %s: %w", subject, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return 0, fmt.Errorf("last message of %s: malformed answer: %w", subject, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return 0, nil
	case resp.Error != nil:
		return 0, fmt.Errorf("last message of %s: %w", subject, resp.Error)
	case resp.Message == nil:
		return 0, fmt.Errorf("last message of %s: an answer without a message", subject)
	}
	return resp.Message.Seq, nil
}
