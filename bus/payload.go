package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Large payloads. A NATS message carries at most the server's max payload (1 MiB by
// default). A tool call's arguments, a tool's reply and a transcript message that would
// not fit go through a JetStream object store instead: the sender stores the bytes as one
// object, then sends the message with a [HeaderPayload] reference to it and [PayloadNote]
// as its body; the receiver reads the object back, checks its size and SHA-256 against the
// reference, and goes on as if the bytes had been the body (docs/protocol.md §4, §6, §14).
// A body that fits is sent as it is: the check is one comparison of its length.

// HeaderPayload names the object that holds a message's body (see [PayloadRef.String]).
const HeaderPayload = "Toolbus-Payload"

// The object stores of large payloads.
const (
	// ObjectPayloads holds the arguments and replies of calls in flight; its objects
	// expire after PayloadTTL, and the turn deletes each once its call is settled.
	ObjectPayloads = "toolbus_payloads"
	// ObjectTranscripts holds the bodies of large transcript messages, as long as the
	// transcripts that name them (durable.Store.DeleteTranscript deletes them too).
	ObjectTranscripts = "toolbus_transcript_payloads"
)

// PayloadTTL is how long an object of ObjectPayloads is kept: as long as a host may take
// to answer a call (ReplyWindow).
const PayloadTTL = ReplyWindow

// MaxCallPayload is the most a tool call may carry either way: its arguments, as the
// turn sends them, and its reply, as the host encodes it. It leaves room for write_file's
// 10 MiB of content (computer.DefaultMaxFileSize) once JSON has escaped it. A turn refuses
// arguments over it before they go out, with an error result the model sees; a host
// replaces a larger reply by an error.
const MaxCallPayload = 16 << 20

// PayloadNote is the body of a message whose body is in the object store. It is not
// JSON, so a receiver that does not know HeaderPayload fails to decode it instead of
// taking an empty body for `{}`. Do not modify it.
var PayloadNote = []byte("(toolbus: the body of this message is in the JetStream object store, see its " + HeaderPayload + " header)")

// InlineLimit is the largest body a message may carry itself on a connection with the
// given max payload (nats.Conn.MaxPayload): the max payload less room for the headers.
func InlineLimit(maxPayload int64) int {
	return int(maxPayload - min(64<<10, maxPayload/4))
}

// Errors of reading a payload back.
var (
	// ErrPayloadMissing reports an object that is not there: expired, deleted, or never
	// stored.
	ErrPayloadMissing = errors.New("payload not in the object store")
	// ErrPayloadMismatch reports an object whose size or SHA-256 are not the ones its
	// reference names: it was replaced, or the reference is wrong.
	ErrPayloadMismatch = errors.New("payload does not match its reference")
)

// PayloadRef is a reference to a body in the object store, as HeaderPayload carries it.
// The zero value is no reference.
type PayloadRef struct {
	Bucket string
	Name   string
	Size   int64
	SHA256 string // lower-case hex of the bytes' SHA-256
}

// IsZero reports no reference.
func (r PayloadRef) IsZero() bool { return r == PayloadRef{} }

// String is the reference as HeaderPayload carries it:
// "<bucket>/<name>; size=<bytes>; sha256=<64 hex digits>".
func (r PayloadRef) String() string {
	return r.Bucket + "/" + r.Name + "; size=" + strconv.FormatInt(r.Size, 10) + "; sha256=" + r.SHA256
}

// Check refuses a reference to another bucket than the one the receiver reads, or to
// more than max bytes.
func (r PayloadRef) Check(bucket string, max int64) error {
	switch {
	case r.Bucket != bucket:
		return fmt.Errorf("%s names object store %q; want %q", HeaderPayload, r.Bucket, bucket)
	case r.Size > max:
		return fmt.Errorf("payload of %s, over the %s allowed", FormatBytes(r.Size), FormatBytes(max))
	}
	return nil
}

var errPayloadSyntax = errors.New(`want "<bucket>/<name>; size=<bytes>; sha256=<64 hex digits>"`)

// ParsePayloadRef reads a HeaderPayload value. It does not allocate unless it fails.
func ParsePayloadRef(v string) (PayloadRef, error) {
	var r PayloadRef
	loc, rest, ok1 := strings.Cut(v, "; size=")
	size, sum, ok2 := strings.Cut(rest, "; sha256=")
	bucket, name, ok3 := strings.Cut(loc, "/")
	if !ok1 || !ok2 || !ok3 || !validBucket(bucket) || !validObjectName(name) || !isHex64(sum) {
		return r, &HeaderError{Name: HeaderPayload, Value: v, Err: errPayloadSyntax}
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil || n < 0 || size[0] == '+' {
		return r, &HeaderError{Name: HeaderPayload, Value: v, Err: errPayloadSyntax}
	}
	return PayloadRef{Bucket: bucket, Name: name, Size: n, SHA256: sum}, nil
}

// PayloadOf reads h's HeaderPayload: ok is false when it has none (an empty value counts
// as none).
func PayloadOf(h nats.Header) (ref PayloadRef, ok bool, err error) {
	v := h.Get(HeaderPayload)
	if v == "" {
		return PayloadRef{}, false, nil
	}
	ref, err = ParsePayloadRef(v)
	return ref, true, err
}

func validBucket(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validObjectName accepts the names senders make: no spaces, control characters or ';'
// (ids may be Unicode).
func validObjectName(s string) bool {
	if s == "" || len(s) > 512 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f || c == ';' {
			return false
		}
	}
	return true
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// PayloadName is a new object name for a body that belongs to parts (a turn, a call, a
// kind of body): the parts joined with dots, and a unique id, so that no two senders
// ever write one name.
func PayloadName(parts ...string) string {
	return strings.Join(append(parts, NewID()), ".")
}

// FormatBytes renders a size as people read it: 512 B, 8 MiB, 29.6 MiB.
func FormatBytes(n int64) string { return friendlyBytes(n) }

// Payloads stores and reads large payloads. It opens each object store on first use,
// creating it when a Put finds it missing (file storage, the given replicas capped by the
// cluster; ObjectPayloads with PayloadTTL). Safe for concurrent use.
type Payloads struct {
	js       jetstream.JetStream
	replicas int

	mu     sync.Mutex
	stores map[string]jetstream.ObjectStore
}

// NewPayloads returns the payload store of js; replicas is for the object stores it
// creates.
func NewPayloads(js jetstream.JetStream, replicas int) *Payloads {
	return &Payloads{js: js, replicas: max(replicas, 1), stores: make(map[string]jetstream.ObjectStore)}
}

// JetStream is the handle the payloads are stored through.
func (p *Payloads) JetStream() jetstream.JetStream { return p.js }

// store opens a bucket; create makes it when it is missing.
func (p *Payloads) store(ctx context.Context, bucket string, create bool) (jetstream.ObjectStore, error) {
	p.mu.Lock()
	obs := p.stores[bucket]
	p.mu.Unlock()
	if obs != nil {
		return obs, nil
	}
	obs, err := p.js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && create {
		cfg := jetstream.ObjectStoreConfig{Bucket: bucket, Storage: jetstream.FileStorage}
		switch bucket {
		case ObjectPayloads:
			cfg.Description = "toolbus: arguments and replies of tool calls too large for a message"
			cfg.TTL = PayloadTTL
		case ObjectTranscripts:
			cfg.Description = "toolbus: bodies of transcript messages too large for a message"
		}
		err = capReplicasOn(p.js, p.replicas, func(r int) error {
			cfg.Replicas = r
			obs, err = p.js.CreateObjectStore(ctx, cfg)
			return err
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			obs, err = p.js.ObjectStore(ctx, bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open object store %q: %w", bucket, err)
	}
	p.mu.Lock()
	p.stores[bucket] = obs
	p.mu.Unlock()
	return obs, nil
}

// forget drops a bucket's handle after an error that says the bucket is gone, so that
// the next use opens (or creates) it again.
func (p *Payloads) forget(bucket string, err error) {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
		p.mu.Lock()
		delete(p.stores, bucket)
		p.mu.Unlock()
	}
}

// Put stores data as the object name of bucket and returns its reference.
func (p *Payloads) Put(ctx context.Context, bucket, name string, data []byte) (PayloadRef, error) {
	if !validBucket(bucket) || !validObjectName(name) {
		return PayloadRef{}, fmt.Errorf("store payload: invalid object %q/%q", bucket, name)
	}
	obs, err := p.store(ctx, bucket, true)
	if err != nil {
		return PayloadRef{}, fmt.Errorf("store payload: %w", err)
	}
	if _, err := obs.PutBytes(ctx, name, data); err != nil {
		p.forget(bucket, err)
		return PayloadRef{}, fmt.Errorf("store payload %s/%s (%s): %w", bucket, name, FormatBytes(int64(len(data))), err)
	}
	sum := sha256.Sum256(data)
	return PayloadRef{Bucket: bucket, Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}, nil
}

// Get reads the object ref names back. An object that is not there is ErrPayloadMissing;
// one whose size or digest differ from ref's, ErrPayloadMismatch.
func (p *Payloads) Get(ctx context.Context, ref PayloadRef) ([]byte, error) {
	obs, err := p.store(ctx, ref.Bucket, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("read payload %s/%s: %w (no object store %s)", ref.Bucket, ref.Name, ErrPayloadMissing, ref.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("read payload: %w", err)
	}
	data, err := obs.GetBytes(ctx, ref.Name)
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
		return nil, fmt.Errorf("read payload %s/%s: %w (expired or deleted)", ref.Bucket, ref.Name, ErrPayloadMissing)
	case errors.Is(err, jetstream.ErrDigestMismatch):
		return nil, fmt.Errorf("read payload %s/%s: %w: %w", ref.Bucket, ref.Name, ErrPayloadMismatch, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// nats.go's reader times out on a pipe's deadline (ctx's, or 5 s for each read
		// without one), and says "read pipe: i/o timeout" even when that came first
		// (nats.go's object.go, objResult.Read): it is the read's timeout all the same.
		return nil, fmt.Errorf("read payload %s/%s: %w (%w)", ref.Bucket, ref.Name, nats.ErrTimeout, err)
	case err != nil:
		p.forget(ref.Bucket, err)
		return nil, fmt.Errorf("read payload %s/%s: %w", ref.Bucket, ref.Name, err)
	}
	if int64(len(data)) != ref.Size {
		return nil, fmt.Errorf("read payload %s/%s: %w: %d bytes, the reference says %d", ref.Bucket, ref.Name, ErrPayloadMismatch, len(data), ref.Size)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, fmt.Errorf("read payload %s/%s: %w: its SHA-256 is not the reference's", ref.Bucket, ref.Name, ErrPayloadMismatch)
	}
	return data, nil
}

// Delete removes the object ref names; one that is not there is no error.
func (p *Payloads) Delete(ctx context.Context, ref PayloadRef) error {
	obs, err := p.store(ctx, ref.Bucket, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := obs.Delete(ctx, ref.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("delete payload %s/%s: %w", ref.Bucket, ref.Name, err)
	}
	return nil
}

// Offload moves m's body into bucket, as the object name, when it is longer than limit
// (see [InlineLimit]): m then carries the reference in HeaderPayload and PayloadNote as
// its body. A body that fits is left alone and the reference is zero. A message that
// carries a reference already (a retry) is not stored again.
//
// A caller that tries again after an error passes the same name: a store whose answer
// was lost may have landed all the same, and storing under the same name replaces that
// object, where a new name would leave it behind, named by no message.
func (p *Payloads) Offload(ctx context.Context, m *nats.Msg, bucket, name string, limit int) (PayloadRef, error) {
	if len(m.Data) <= limit {
		return PayloadRef{}, nil
	}
	if ref, ok, err := PayloadOf(m.Header); ok && err == nil && string(m.Data) == string(PayloadNote) {
		return ref, nil
	}
	ref, err := p.Put(ctx, bucket, name, m.Data)
	if err != nil {
		return PayloadRef{}, err
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header[HeaderPayload] = []string{ref.String()}
	m.Data = PayloadNote
	return ref, nil
}

// OffloadRetried is Offload tried again while JetStream is not ready, in attempts sized
// to the body (RetryPayload), all under name: an attempt whose answer was lost may have
// stored the object all the same, and the next one replaces it.
func (p *Payloads) OffloadRetried(ctx context.Context, m *nats.Msg, bucket, name string, log *slog.Logger) (PayloadRef, error) {
	var ref PayloadRef
	err := RetryPayload(ctx, "store "+bucket+" object", log, int64(len(m.Data)), func(ctx context.Context) error {
		var err error
		ref, err = p.Offload(ctx, m, bucket, name, -1)
		return err
	})
	return ref, err
}

// Resolve returns a message's body: data itself when h has no HeaderPayload, else the
// object the header names, which must be in bucket and at most max bytes. ref is the
// reference it read (zero without one).
func (p *Payloads) Resolve(ctx context.Context, h nats.Header, data []byte, bucket string, max int64) (body []byte, ref PayloadRef, err error) {
	ref, ok, err := PayloadOf(h)
	if !ok {
		return data, PayloadRef{}, nil
	}
	if err == nil {
		err = ref.Check(bucket, max)
	}
	if err != nil {
		return nil, ref, err
	}
	body, err = p.Get(ctx, ref)
	return body, ref, err
}

// payloadTimeout bounds one store or read of a payload when the caller's context has
// no deadline.
const payloadTimeout = 30 * time.Second

// WithPayloadTimeout returns ctx bounded by a default for one payload operation when it
// has no deadline of its own.
func WithPayloadTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, payloadTimeout)
}

// ReplyWindow is how long a subscriber may answer a request it received: the
// server grants one reply to the request's reply subject, whatever it is,
// until the reply is sent or this long has passed. It bounds the longest tool
// call a host on a listener may answer (a run_command of the computer
// category runs 10 minutes at most by default); a reply later than this is
// refused as a permissions violation.
const ReplyWindow = 24 * time.Hour

// ArgsTooLarge is the error a call gets whose arguments are over MaxCallPayload, from the
// turn that will not send them or the host that will not read them.
func ArgsTooLarge(tool string, size int64) string {
	return fmt.Sprintf("the arguments of %s are %s, over the %s a call may carry; the call did not run: do the work in smaller calls (write a large file in parts, with append)",
		tool, FormatBytes(size), FormatBytes(MaxCallPayload))
}
