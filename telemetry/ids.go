package telemetry

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// A turn's trace is named by its id: the trace id and the span id of its first
// invoke_agent span are derived from the turn id (TurnTraceID, turnSpanID). So whoever
// knows a turn's id finds its trace, the turn a job, task or schedule started links to
// its parent's span without any header carrying it, and a turn resumed on another node
// goes on in the same trace.

// TurnTraceID is the trace id of turn's trace.
func TurnTraceID(turn string) trace.TraceID {
	sum := sha256.Sum256([]byte("toolbus.turn\x00" + turn))
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

// turnSpanID is the span id of the first invoke_agent span of turn.
func turnSpanID(turn string) trace.SpanID {
	sum := sha256.Sum256([]byte("toolbus.turn\x00" + turn))
	var id trace.SpanID
	copy(id[:], sum[16:24])
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// TurnSpanContext is the span context of turn's first invoke_agent span, for links.
func TurnSpanContext(turn string, sampled bool) trace.SpanContext {
	cfg := trace.SpanContextConfig{TraceID: TurnTraceID(turn), SpanID: turnSpanID(turn), Remote: true}
	if sampled {
		cfg.TraceFlags = trace.FlagsSampled
	}
	return trace.NewSpanContext(cfg)
}

// rootIDs is what the context asks of the next root span's ids (withRoot).
type rootIDs struct {
	trace trace.TraceID
	span  trace.SpanID // zero: a random one
}

type rootKey struct{}

func withRoot(ctx context.Context, r rootIDs) context.Context {
	return context.WithValue(ctx, rootKey{}, r)
}

// turnIDs is the provider's ID generator: a root span started withRoot gets the ids it
// names; every other id is random.
type turnIDs struct{}

var (
	randMu  sync.Mutex
	randSrc = func() *rand.ChaCha8 {
		var seed [32]byte
		_, _ = crand.Read(seed[:])
		return rand.NewChaCha8(seed)
	}()
)

func randomSpanID() trace.SpanID {
	var id trace.SpanID
	randMu.Lock()
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:], randSrc.Uint64())
	}
	randMu.Unlock()
	return id
}

func randomTraceID() trace.TraceID {
	var id trace.TraceID
	randMu.Lock()
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:8], randSrc.Uint64())
		binary.NativeEndian.PutUint64(id[8:], randSrc.Uint64())
	}
	randMu.Unlock()
	return id
}

func (turnIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if r, ok := ctx.Value(rootKey{}).(rootIDs); ok {
		if r.span.IsValid() {
			return r.trace, r.span
		}
		return r.trace, randomSpanID()
	}
	return randomTraceID(), randomSpanID()
}

func (turnIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }
