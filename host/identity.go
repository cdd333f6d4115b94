package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// turnAgents tells a host whose call it runs. A durable turn's agent is the one in its
// stored spec (its durable.Store record), written by the node that took the
// turn from the intake; a Toolbus-Agent header, which anyone who may send tool requests
// can set, cannot claim another agent's home or profile for such a turn. A call of a turn
// with no record (an ephemeral turn of a program, a direct request) goes by its header.
type turnAgents struct {
	js jetstream.JetStream

	mu      sync.Mutex
	store   *durable.Store
	missing time.Time // when the bucket was last found missing
	// failed is when opening the bucket last failed, with why: calls are refused at once
	// until unstoredPatience has passed, not each after its own wait.
	failed  time.Time
	failErr error
	known   map[string]turnAgent
	// looking holds the lookups in flight, one per turn: the calls of a batch arrive
	// together, and each would read the record (its spec, a script included) at once.
	// Measured: 2 000 parallel calls of one turn read 337 MB, and the server closed the
	// host's connection as a slow consumer.
	looking map[string]*lookup
}

// lookup is one read of a turn's record that the calls of the turn wait on.
type lookup struct {
	done chan struct{}
	k    turnAgent
	err  error
}

// turnAgent is what a host learned of one turn.
type turnAgent struct {
	agent  string
	stored bool      // from the turn's record; never changes
	at     time.Time // when a turn without a record was last looked up
}

const (
	// unstoredPatience is how long a turn found without a record goes by its header
	// before the host looks again: an ephemeral turn costs one lookup per interval, not
	// one per call.
	unstoredPatience = 5 * time.Second
	// maxKnownTurns bounds what a host remembers; past it, it starts over.
	maxKnownTurns = 4096
)

func newTurnAgents(nc *nats.Conn) *turnAgents {
	js, err := jetstream.New(nc)
	if err != nil {
		js = nil // no JetStream context: every call goes by its header
	}
	return &turnAgents{js: js, known: make(map[string]turnAgent), looking: make(map[string]*lookup)}
}

// ErrAgentMismatch refuses a call whose header names another agent than its turn's
// stored spec.
var ErrAgentMismatch = errors.New("the request's agent is not its turn's")

// resolve returns the agent a call runs for: the turn's stored agent where the turn has
// a record, otherwise the header's. A header that contradicts the record is refused.
func (a *turnAgents) resolve(ctx context.Context, turn, header string) (string, error) {
	if turn == "" || a.js == nil {
		return header, nil
	}
	k, err := a.known1(ctx, turn)
	if err != nil {
		return "", err
	}
	switch {
	case !k.stored:
		return header, nil
	case header != "" && header != k.agent:
		return "", fmt.Errorf("%w: turn %s is agent %q's (its stored spec), the request says %q", ErrAgentMismatch, turn, k.agent, header)
	}
	return k.agent, nil
}

// known1 is what the host knows of a turn: remembered, or read once for every call that
// asks meanwhile.
func (a *turnAgents) known1(ctx context.Context, turn string) (turnAgent, error) {
	now := time.Now()
	a.mu.Lock()
	k, ok := a.known[turn]
	if ok && (k.stored || now.Sub(k.at) <= unstoredPatience) {
		a.mu.Unlock()
		return k, nil
	}
	if l := a.looking[turn]; l != nil {
		a.mu.Unlock()
		select {
		case <-l.done:
			return l.k, l.err
		case <-ctx.Done():
			return turnAgent{}, fmt.Errorf("read the record of turn %s: %w", turn, context.Cause(ctx))
		}
	}
	l := &lookup{done: make(chan struct{})}
	a.looking[turn] = l
	a.mu.Unlock()

	l.k, l.err = a.read(ctx, turn)
	l.k.at = now
	a.mu.Lock()
	delete(a.looking, turn)
	if l.err == nil {
		if len(a.known) >= maxKnownTurns {
			clear(a.known)
		}
		a.known[turn] = l.k
	}
	a.mu.Unlock()
	close(l.done)
	return l.k, l.err
}

// read reads a turn's record. A missing bucket or record is no record; anything else
// is an error, and the call is not run on a guess.
func (a *turnAgents) read(ctx context.Context, turn string) (turnAgent, error) {
	if !recordKey(turn) {
		return turnAgent{}, nil // not a key a record can have
	}
	store, err := a.bucket(ctx)
	if store == nil {
		return turnAgent{}, err
	}
	rec, _, err := store.Record(ctx, turn)
	switch {
	case errors.Is(err, durable.ErrNoRecord), errors.Is(err, jetstream.ErrKeyDeleted):
		return turnAgent{}, nil
	case err != nil:
		return turnAgent{}, fmt.Errorf("read the record of turn %s: %w", turn, err)
	}
	return turnAgent{agent: rec.Spec.Agent, stored: true}, nil
}

// bucket returns the turn records, or nil while there are none (no node of the bus
// runs durable turns): looked for again after unstoredPatience.
func (a *turnAgents) bucket(ctx context.Context) (*durable.Store, error) {
	a.mu.Lock()
	store, missing := a.store, a.missing
	a.mu.Unlock()
	if store != nil {
		return store, nil
	}
	if !missing.IsZero() && time.Since(missing) < unstoredPatience {
		return nil, nil
	}
	a.mu.Lock()
	failed, failErr := a.failed, a.failErr
	a.mu.Unlock()
	if !failed.IsZero() && time.Since(failed) < unstoredPatience {
		return nil, failErr
	}
	// A connection without the permission to read records gets no answer at all, only an
	// asynchronous permissions violation: do not let each call wait out its deadline.
	// Not bounded by the call's own deadline: a failure is remembered for every call
	// (failed), and a short one (100 ms) ran out on a loaded machine before the bucket
	// answered, so that the host refused its calls for unstoredPatience as if it lacked
	// the permission (TestDeadlineCancelsCall, in CI). The call's deadline still ends it.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), openPatience)
	defer cancel()
	store, err := durable.Open(octx, a.js, durable.Config{})
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err == nil && !store.HasTurns():
		a.missing = time.Now()
		return nil, nil
	case errors.Is(err, context.DeadlineExceeded) && !deniedJetStream(a.js.Conn()):
		// No answer in time, and no refusal from the server: a slow server (CI, under
		// load: the next call was refused for unstoredPatience too), not a missing
		// permission. This call fails; the next one asks again.
		return nil, fmt.Errorf("cannot read turn records to confirm whose call it is: JetStream did not answer within %s: %w", openPatience, err)
	case err != nil:
		a.failed = time.Now()
		a.failErr = fmt.Errorf("cannot read turn records to confirm whose call it is (does this host's user have the tool role's read of the turn records? operations.md §4): %w", err)
		return nil, a.failErr
	}
	a.store = store
	return store, nil
}

// openPatience bounds opening the turn records.
const openPatience = 3 * time.Second

// deniedJetStream reports whether the server refused nc a JetStream API request: a
// permissions violation comes back as an asynchronous error (the connection's last),
// and the request itself only goes unanswered.
func deniedJetStream(nc *nats.Conn) bool {
	err := nc.LastError()
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), "$JS.API.")
}

// recordKey reports whether a turn id can be the key of a record: ids may hold letters
// that KV keys may not ("tür-1"), and a turn with such an id has no record.
func recordKey(turn string) bool {
	if !bus.ValidID(turn) || turn[0] == '.' || turn[len(turn)-1] == '.' {
		return false
	}
	for i := 0; i < len(turn); i++ {
		switch c := turn[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '=', c == '/', c == '.':
		default:
			return false
		}
	}
	return true
}
