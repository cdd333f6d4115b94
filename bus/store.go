package bus

import (
	"context"
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
// with as many as there are JetStream servers (1 on a single server); while
// the cluster is still forming, the refusal is an error [Retry] retries (see
// capReplicasOn).
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open key-value bucket %q: %w", cfg.Bucket, err)
	}
	err = capReplicasOn(js, cfg.Replicas, func(r int) error {
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
	err = capReplicasOn(js, replicas, func(r int) error {
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
	err := capReplicasOn(js, cfg.Replicas, func(r int) error {
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
	// The placement error carries no reason when the meta leader counts fewer
	// JetStream servers than replicas; offline peers, storage or tags add one,
	// and those are not capped away.
	noSuitablePeers = "no suitable peers for placement"
)

// errClusterForming marks a placement refused with a bare noSuitablePeers while
// the cluster has fewer servers than it will have: [Retry] retries it.
var errClusterForming = errors.New("the JetStream cluster is still forming")

// capReplicasOn calls create with replicas, and again with fewer while the
// server answers that it cannot place that many: 1 on a server that is not
// clustered, one less each time in a cluster that is too small.
//
// A bare "no suitable peers for placement" says that the meta leader has fewer
// servers in its meta group than replicas, which is also so while the cluster
// forms: once elected (by every server on a fresh cluster, by a quorum on a
// restarted one), the leader adds the servers new to the group one by one as they
// answer it. Taken as "too small", a stream asked for R3 the moment a fresh
// three-node cluster was up was created R2 (2 starts in 30 as
// TestReplicasAtClusterStart makes them), and stays so. So the refusal lowers the count only
// while it is more than the servers the cluster will have (clusterServers of js's
// server); up to that, it is returned marked errClusterForming, which [Retry]
// retries until the leader has them all. When that number is unknown (js connected
// over the network), every bare refusal lowers the count, as before.
func capReplicasOn(js jetstream.JetStream, replicas int, create func(replicas int) error) error {
	return capReplicasWith(func() int { return clusterServers(js) }, replicas, create)
}

// capReplicasWith is capReplicasOn with servers saying how many JetStream servers
// the cluster will have (0: unknown); it is called only on a bare refusal.
func capReplicasWith(servers func() int, replicas int, create func(replicas int) error) error {
	r, n := max(replicas, 1), -1
	for {
		err := create(r)
		if n < 0 && tooFewPeers(err) {
			n = servers()
		}
		next, err := fewerReplicas(err, r, max(n, 0))
		if next == 0 {
			return err
		}
		r = next
	}
}

// fewerReplicas decides what capReplicas does once a create with r replicas
// returned err, in a cluster that will have servers JetStream servers (0:
// unknown): create again with next replicas, or, when next is 0, return err
// (marked errClusterForming for a refusal to wait out).
func fewerReplicas(err error, r, servers int) (next int, _ error) {
	if err == nil || r <= 1 {
		return 0, err
	}
	var apiErr *jetstream.APIError
	switch {
	case !errors.As(err, &apiErr):
		return 0, err
	case apiErr.ErrorCode == errCodeReplicasNotSupported:
		return 1, nil
	case !tooFewPeers(err):
		return 0, err
	case r <= servers:
		return 0, fmt.Errorf("%w (%d replicas, %d servers named by the routes): %w", errClusterForming, r, servers, err)
	}
	return r - 1, nil
}

// tooFewPeers reports a bare placement refusal: the meta leader counts fewer
// JetStream servers than the replicas asked.
func tooFewPeers(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoPeers && apiErr.Description == noSuitablePeers
}

// ClusterSizer is what an in-process connection's server (nats.Options.InProcessServer)
// may tell: how many JetStream servers its cluster will have, itself included; 0 when
// it cannot tell. The embedded server of package bus/server does.
type ClusterSizer interface {
	ClusterServers() int
}

// clusterServers is how many JetStream servers the cluster of js's server will
// have, 0 when it cannot tell. The JetStream API does not tell an ordinary
// account, and the meta group's own size follows the peers it has counted so far;
// what names every node is the route list of an embedded server (Config.Cluster.Routes
// of package bus/server, the same list on every node, itself included:
// docs/operations.md), which its in-process connections tell as a [ClusterSizer];
// nats-server sizes a fresh meta group by it too. A list without the node itself counts one less, and a node
// routed only to seeds fewer: capReplicas then caps as it did before it knew. A
// list naming more than will run (a server gone for good, left in the routes) has
// creations wait for it, as a peer offline does. A connection over the network
// (Dial, a node run with -server) cannot ask: 0.
func clusterServers(js jetstream.JetStream) int {
	if js == nil || js.Conn() == nil {
		return 0
	}
	srv, ok := js.Conn().Opts.InProcessServer.(ClusterSizer)
	if !ok {
		return 0
	}
	return srv.ClusterServers()
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
	m, err := LeaderLastMsg(ctx, nc, stream, subject)
	if err != nil || m == nil {
		return 0, err
	}
	return m.Sequence, nil
}

// NoJetStream says what a user without JetStream meets when err is that (a user whose
// role has no JetStream, a server without it), naming what lives there; any other err
// (nil included) it returns as it is.
func NoJetStream(what string, err error) error {
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%s live in JetStream, which the bus does not offer to this user: %w", what, err)
	}
	return err
}
