// Package jobs holds the tools of the "jobs" category: a main turn starts background
// turns of kind job (job_start), follows them (job_status), reads what they found
// (job_result) and stops them (job_cancel).
//
// A job is a durable turn like any other: started through the bus (a request on
// bus.AnyNodeStartTurn, which a node queues in the intake), run by whichever node takes
// it, resumed elsewhere if that node is lost. Its record in bus.BucketJobs says whose it
// is, how it stands and, once it ended, its final text and a summary of its calls; the
// node that ends the turn writes that (Finish), and the record then expires after the
// agent's keep time. Each agent's limits (jobs running at once, jobs started per hour)
// are kept in one ledger key per agent, changed only by compare-and-set, so nodes that
// start jobs at the same moment cannot pass a limit together.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/internal/label"
)

// Category is the tool category of the job tools.
const Category = "jobs"

// Defaults of an agent's job limits (the profile's jobs section leaves them out).
const (
	DefaultMaxRunning = 4
	DefaultMaxPerHour = 30
	DefaultKeep       = 24 * time.Hour
)

// startTimeout bounds the request that queues a job's turn.
const startTimeout = 15 * time.Second

// maxText bounds the final text a job's record keeps.
const maxText = 64 << 10

// casAttempts bounds the compare-and-set loops that are not [bus.Change]'s (a write with a
// TTL, the turn record); every round lets one writer through.
const casAttempts = 32

// Policy is an agent's job policy, from its profile.
type Policy struct {
	Spawn      bool
	MaxRunning int           // 0: DefaultMaxRunning
	MaxPerHour int           // 0: DefaultMaxPerHour
	Keep       time.Duration // 0: DefaultKeep
}

// WithDefaults fills the limits the profile left out.
func (p Policy) WithDefaults() Policy {
	if p.MaxRunning <= 0 {
		p.MaxRunning = DefaultMaxRunning
	}
	if p.MaxPerHour <= 0 {
		p.MaxPerHour = DefaultMaxPerHour
	}
	if p.Keep <= 0 {
		p.Keep = DefaultKeep
	}
	return p
}

// Job is a background job's record, in bus.BucketJobs under "job.<agent>.<job>".
type Job struct {
	// ID is the job's turn id.
	ID    string `json:"job_id"`
	Agent string `json:"agent"`
	// Parent is the main turn that started it.
	Parent       string `json:"parent_turn_id"`
	Prompt       string `json:"prompt"`
	Instructions string `json:"instructions,omitempty"`
	// State is queued, running, or how its turn ended (bus.TurnState).
	State   bus.TurnState `json:"state"`
	Node    string        `json:"node,omitempty"` // the node that took it (last)
	Created time.Time     `json:"created"`
	Started time.Time     `json:"started,omitzero"`
	Ended   time.Time     `json:"ended,omitzero"`
	// Steps, Text, Calls and Error are the turn's, once it ended: its model calls, its
	// final text, its calls counted by tool and outcome, and why it did not complete.
	Steps int         `json:"steps,omitempty"`
	Text  string      `json:"text,omitempty"`
	Calls []CallCount `json:"calls,omitempty"`
	Error string      `json:"error,omitempty"`
	// Expires is when the record of an ended job goes.
	Expires time.Time `json:"expires,omitzero"`
}

// CallCount counts a job's calls of one tool with one outcome.
type CallCount struct {
	Tool    string      `json:"tool"`
	Outcome bus.Outcome `json:"outcome"`
	N       int         `json:"n"`
}

// Summary says in one line what the job's calls were.
func (j *Job) Summary() string {
	if len(j.Calls) == 0 {
		return "no tool calls"
	}
	n := 0
	parts := make([]string, len(j.Calls))
	for i, c := range j.Calls {
		n += c.N
		parts[i] = fmt.Sprintf("%s %s", c.Tool, c.Outcome)
		if c.N > 1 {
			parts[i] += fmt.Sprintf(" ×%d", c.N)
		}
	}
	return fmt.Sprintf("%s: %s", label.Plural(n, "call"), strings.Join(parts, ", "))
}

// CountCalls summarises call records by tool and outcome, in the order tools were first
// called.
func CountCalls(records []bus.CallRecord) []CallCount {
	var out []CallCount
	for _, r := range records {
		name := r.Tool
		if r.Namespace != "" {
			name = r.Namespace + "." + r.Tool
		}
		i := slices.IndexFunc(out, func(c CallCount) bool { return c.Tool == name && c.Outcome == r.Outcome })
		if i < 0 {
			out = append(out, CallCount{Tool: name, Outcome: r.Outcome})
			i = len(out) - 1
		}
		out[i].N++
	}
	return out
}

// End is how a job's turn ended.
type End struct {
	State bus.TurnState
	Node  string
	Steps int
	Text  string
	Calls []bus.CallRecord
	Error string
}

// ledger is an agent's running jobs and its starts of the last hour, "ledger.<agent>".
type ledger struct {
	Running []held        `json:"running"`
	Starts  []minuteCount `json:"starts"`
}

// held is a running job's place in the ledger, taken at At.
type held struct {
	ID string    `json:"job_id"`
	At time.Time `json:"at"`
}

// recordGrace is how long a place in the ledger may go without its job's record: the
// record is written right after the place is taken.
const recordGrace = time.Minute

func (l *ledger) holds(id string) int {
	return slices.IndexFunc(l.Running, func(h held) bool { return h.ID == id })
}

// minuteCount counts the jobs started in one minute (Unix minutes).
type minuteCount struct {
	Minute int64 `json:"minute"`
	N      int   `json:"n"`
}

// lastHour drops the starts older than an hour before now and counts the rest; oldest is
// the minute of the oldest kept.
func (l *ledger) lastHour(now time.Time) (n int, oldest time.Time) {
	cut := now.Add(-time.Hour).Unix() / 60
	l.Starts = slices.DeleteFunc(l.Starts, func(m minuteCount) bool { return m.Minute <= cut })
	for _, m := range l.Starts {
		n += m.N
	}
	if len(l.Starts) > 0 {
		oldest = time.Unix(l.Starts[0].Minute*60, 0)
	}
	return n, oldest
}

func (l *ledger) addStart(now time.Time) {
	m := now.Unix() / 60
	if k := len(l.Starts); k > 0 && l.Starts[k-1].Minute == m {
		l.Starts[k-1].N++
		return
	}
	l.Starts = append(l.Starts, minuteCount{Minute: m, N: 1})
}

func jobKey(agent, id string) string { return "job." + agent + "." + id }
func ledgerKey(agent string) string  { return "ledger." + agent }

// ErrNotFound reports a job that does not exist (or not for this agent).
var ErrNotFound = errors.New("no such job")

// ErrLimit reports a job refused by its agent's limits.
var ErrLimit = errors.New("job limit reached")

// Store keeps the jobs of a bus.
type Store struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	turns *durable.Store
	// log hears the store's retries: a write or read that JetStream keeps refusing (no
	// leader, a cluster forming) is retried until the call's deadline, and without a
	// word a job_start that waits it out looks hung.
	log *slog.Logger
}

// Open opens (creating if needed) the jobs bucket and the turns bucket, with the given
// replicas (capped by the cluster size). log hears the store's retries (nil: none).
func Open(ctx context.Context, js jetstream.JetStream, replicas int, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{js: js, log: log}
	var err error
	if s.kv, err = bus.KeyValueTTL(ctx, js, bus.BucketJobs, replicas); err != nil {
		return nil, err
	}
	if s.turns, err = durable.Open(ctx, js, durable.Config{Replicas: replicas, Create: true}); err != nil {
		return nil, err
	}
	return s, nil
}

// Bucket is the jobs bucket.
func (s *Store) Bucket() jetstream.KeyValue { return s.kv }

// StartArgs are what job_start asks for.
type StartArgs struct {
	Prompt       string `json:"prompt" jsonschema:"minLength=1,maxLength=16000" jsonschema_description:"The task for the job, as you would ask it: it is the job's only input, so say everything it needs."`
	Instructions string `json:"instructions,omitempty" jsonschema:"maxLength=8000" jsonschema_description:"Extra instructions for the job's turn (optional)."`
}

// Start starts a background job for agent, from the main turn parent, within the
// agent's policy: it takes a place in the agent's ledger, writes the job's record, and
// asks a node to queue its turn (kind job, the parent's model). A job refused by a limit
// is an error that matches ErrLimit and says which and what to do.
func (s *Store) Start(ctx context.Context, agent, parent string, a StartArgs, p Policy) (Job, error) {
	if err := bus.CheckAgent(agent); err != nil {
		return Job{}, fmt.Errorf("jobs belong to an agent: %w", err)
	}
	if !p.Spawn {
		return Job{}, fmt.Errorf("agent %s may not start background jobs: its profile does not allow it (jobs.spawn)", agent)
	}
	p = p.WithDefaults()
	a.Prompt = strings.TrimSpace(a.Prompt)
	if a.Prompt == "" {
		return Job{}, errors.New("the prompt is empty: say what the job should do")
	}
	ps, err := s.turns.MainTurnSpec(ctx, parent)
	if err != nil {
		return Job{}, err
	}
	now := time.Now().UTC()
	spec := bus.TurnSpec{ID: bus.NewID(), Kind: bus.TurnJob, Parent: parent, Agent: agent,
		Instructions: a.Instructions, Input: a.Prompt, Limits: ps.Limits}
	spec.Model, spec.Script = ps.ChildModel()
	if err := spec.Check(); err != nil {
		return Job{}, err
	}
	if err := s.reserve(ctx, agent, spec.ID, p, now); err != nil {
		return Job{}, err
	}
	j := Job{ID: spec.ID, Agent: agent, Parent: parent, Prompt: a.Prompt, Instructions: a.Instructions, State: bus.TurnQueued, Created: now}
	if err := s.create(ctx, j); err != nil {
		s.release(context.WithoutCancel(ctx), agent, spec.ID)
		return Job{}, err
	}
	if err := s.queue(ctx, spec); err != nil {
		// Nothing will run it: say so in its record, and free its place.
		_, _ = s.Finish(context.WithoutCancel(ctx), spec, End{State: bus.TurnFailed, Error: err.Error()}, p.Keep)
		return Job{}, err
	}
	return j, nil
}

// queue asks a node that runs turns to queue the job's turn, as any client starts one.
func (s *Store) queue(ctx context.Context, spec bus.TurnSpec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var reply bus.StartTurnReply
	err = bus.Retry(ctx, "start job "+spec.ID, s.log, func(ctx context.Context) error {
		m, err := s.js.Conn().RequestWithContext(ctx, bus.AnyNodeStartTurn, b)
		if err != nil {
			return err
		}
		return json.Unmarshal(m.Data, &reply)
	})
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("start job %s: no node that runs turns answered (%v)", spec.ID, err)
	}
	if err != nil {
		return err
	}
	if reply.Error != "" && reply.Code != bus.StartTurnExists {
		return fmt.Errorf("start job: %s", reply.Error)
	}
	// A job's id is new (bus.NewID), so a node that says its turn exists has it from an
	// earlier attempt here, whose answer was lost: it is queued, as the first answer
	// would have said.
	return nil
}

// reserve takes a place for job id in the agent's ledger, or says which limit is
// reached. Running jobs whose records say they ended (or that have had no record for a
// while) are dropped from the ledger on the way: a node that died before it could release
// one does not hold it for ever. A place taken a moment ago whose record is not written
// yet stays: that job is starting.
func (s *Store) reserve(ctx context.Context, agent, id string, p Policy, now time.Time) error {
	return s.changeLedger(ctx, agent, func(l *ledger) error {
		running := l.Running[:0]
		for _, r := range l.Running {
			j, _, err := s.Get(ctx, agent, r.ID)
			switch {
			case errors.Is(err, ErrNotFound):
				if now.Sub(r.At) < recordGrace {
					running = append(running, r)
				}
			case err != nil:
				return err
			case !j.State.Ended():
				running = append(running, r)
			}
		}
		l.Running = running
		if len(l.Running) >= p.MaxRunning {
			return fmt.Errorf("%w: agent %s has %d jobs running, its limit (jobs.max_running %d): wait for one to end (job_status), or cancel one (job_cancel)",
				ErrLimit, agent, len(l.Running), p.MaxRunning)
		}
		if n, oldest := l.lastHour(now); n >= p.MaxPerHour {
			return fmt.Errorf("%w: agent %s started %d jobs in the last hour, its limit (jobs.max_per_hour %d); the next may start after %s",
				ErrLimit, agent, n, p.MaxPerHour, oldest.Add(time.Hour+time.Minute).UTC().Format(time.RFC3339))
		}
		l.Running = append(l.Running, held{ID: id, At: now})
		l.addStart(now)
		return nil
	})
}

// release removes a job from its agent's running jobs.
func (s *Store) release(ctx context.Context, agent, id string) error {
	return s.changeLedger(ctx, agent, func(l *ledger) error {
		i := l.holds(id)
		if i < 0 {
			return bus.ErrUnchanged
		}
		l.Running = slices.Delete(l.Running, i, i+1)
		l.lastHour(time.Now())
		return nil
	})
}

// changeLedger changes the agent's ledger as stored ([bus.Change]); a missing ledger is
// an empty one.
func (s *Store) changeLedger(ctx context.Context, agent string, change func(l *ledger) error) error {
	_, _, err := bus.Change(ctx, s.kv, ledgerKey(agent), decodeLedger, encodeLedger, func(l *ledger, _ bool) error {
		return change(l)
	})
	if err != nil && bus.IsConflict(err) {
		return fmt.Errorf("job ledger of %s: %w; try again", agent, err)
	}
	return err
}

// ledger reads the agent's ledger and its revision (0: none yet).
func (s *Store) ledger(ctx context.Context, agent string) (ledger, uint64, error) {
	var e jetstream.KeyValueEntry
	err := bus.Retry(ctx, "read the job ledger of "+agent, s.log, func(ctx context.Context) (err error) {
		e, err = s.kv.Get(ctx, ledgerKey(agent))
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ledger{}, 0, nil
	}
	if err != nil {
		return ledger{}, 0, err
	}
	l, _ := decodeLedger(e.Value())
	return l, e.Revision(), nil
}

func decodeLedger(b []byte) (ledger, error) {
	var l ledger
	if err := json.Unmarshal(b, &l); err != nil {
		// Unreadable: start a new one rather than refuse every job for ever.
		return ledger{}, nil
	}
	return l, nil
}

func encodeLedger(l ledger) ([]byte, error) { return json.Marshal(l) }

// create writes a new job's record; a retried create that finds its own value took
// effect.
func (s *Store) create(ctx context.Context, j Job) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return bus.CreateOnce(ctx, s.kv, jobKey(j.Agent, j.ID), b)
}

// Get reads an agent's job and its revision.
func (s *Store) Get(ctx context.Context, agent, id string) (Job, uint64, error) {
	return get(ctx, s.kv, agent, id)
}

func get(ctx context.Context, kv jetstream.KeyValue, agent, id string) (Job, uint64, error) {
	if bus.CheckAgent(agent) != nil || !bus.ValidID(id) {
		return Job{}, 0, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	j, rev, err := bus.GetRecord[Job](ctx, kv, jobKey(agent, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Job{}, 0, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Job{}, 0, fmt.Errorf("job %s: %w", id, err)
	}
	return j, rev, nil
}

// putEnded writes an ended job's record at revision rev, to expire keep later. (A write
// with a TTL is not a KV update, so it is not [bus.Change]'s; its lost compare-and-set
// is told by [bus.IsConflict] all the same.)
func (s *Store) putEnded(ctx context.Context, j Job, rev uint64, keep time.Duration) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return bus.Retry(ctx, "store job "+j.ID, s.log, func(ctx context.Context) error {
		return bus.UpdateWithTTL(ctx, s.js, s.kv.Bucket(), jobKey(j.Agent, j.ID), b, rev, keep)
	})
}

func decodeJob(b []byte) (Job, error) {
	var j Job
	err := json.Unmarshal(b, &j)
	return j, err
}

func encodeJob(j Job) ([]byte, error) { return json.Marshal(j) }

// Began records that a node took a job's turn: running, on node. A job already further
// on (a turn resumed by another node) keeps its start.
func (s *Store) Began(ctx context.Context, spec bus.TurnSpec, node string) error {
	if bus.CheckAgent(spec.Agent) != nil || !bus.ValidID(spec.ID) {
		return nil // not a job's turn: no record can be its
	}
	_, _, err := bus.Change(ctx, s.kv, jobKey(spec.Agent, spec.ID), decodeJob, encodeJob, func(j *Job, found bool) error {
		if !found || j.State.Ended() {
			return bus.ErrUnchanged // a job turn started by hand, without job_start; or over
		}
		if j.State == bus.TurnQueued {
			j.Started = time.Now().UTC()
		}
		j.State, j.Node = bus.TurnRunning, node
		return nil
	})
	if err != nil {
		return fmt.Errorf("job %s: %w", spec.ID, err)
	}
	return nil
}

// Finish records how a job's turn ended, frees its place among the agent's running
// jobs, and has the record expire keep later. It returns the record as written; a job
// that had ended already (cancelled while queued) is left as it is.
func (s *Store) Finish(ctx context.Context, spec bus.TurnSpec, end End, keep time.Duration) (Job, error) {
	if keep <= 0 {
		keep = DefaultKeep
	}
	var j Job
	for attempt := 0; ; attempt++ {
		var rev uint64
		var err error
		j, rev, err = s.Get(ctx, spec.Agent, spec.ID)
		if errors.Is(err, ErrNotFound) {
			return Job{}, s.release(ctx, spec.Agent, spec.ID)
		}
		if err != nil {
			return Job{}, err
		}
		if j.State.Ended() {
			break
		}
		now := time.Now().UTC()
		j.State, j.Ended, j.Steps, j.Error, j.Expires = end.State, now, end.Steps, end.Error, now.Add(keep)
		if end.Node != "" {
			j.Node = end.Node
		}
		j.Text = end.Text
		if len(j.Text) > maxText {
			j.Text = j.Text[:maxText] + "\n[cut: the job's final text was longer than this record keeps]"
		}
		j.Calls = CountCalls(end.Calls)
		err = s.putEnded(ctx, j, rev, keep)
		if err == nil {
			break
		}
		if !bus.IsConflict(err) || attempt == casAttempts {
			return Job{}, err
		}
	}
	return j, s.release(ctx, spec.Agent, spec.ID)
}

// Cancel stops an agent's job: a job still queued ends at once (its turn's record is
// ended, so no node starts it); a running one is asked to abort, and ends as aborted
// when its node has stopped it. It returns the job as it then stands.
func (s *Store) Cancel(ctx context.Context, agent, id, reason string, keep time.Duration) (Job, error) {
	j, _, err := s.Get(ctx, agent, id)
	if err != nil {
		return Job{}, err
	}
	if j.State.Ended() {
		return j, fmt.Errorf("job %s has already ended (%s)", id, j.State)
	}
	if reason == "" {
		reason = "cancelled"
	}
	spec := bus.TurnSpec{ID: id, Kind: bus.TurnJob, Agent: agent, Parent: j.Parent}
	// No node holds a queued turn: end its record, and the node that takes it from the
	// intake finds a turn that has ended.
	rec, ended, err := s.turns.EndQueued(ctx, id, bus.TurnAborted, "job cancelled before it started: "+reason)
	switch {
	case errors.Is(err, durable.ErrNoRecord):
		// Its turn was never queued (or is long gone): nothing runs it.
		return s.Finish(ctx, spec, End{State: bus.TurnAborted, Error: "job cancelled (" + reason + ") before its turn was queued"}, keep)
	case err != nil:
		return Job{}, err
	case ended, rec.State.Ended():
		return s.Finish(ctx, spec, End{State: rec.State, Steps: rec.Step, Error: rec.Error}, keep)
	default:
		return s.abort(ctx, j, reason)
	}
}

// abortWait bounds how long Cancel waits for a running job's turn to confirm its end.
const abortWait = 10 * time.Second

// abort asks a running job's turn to stop and waits, within abortWait, for its end. An
// abort is an ordinary message, lost if it comes while the turn is between nodes or not
// yet listening (just claimed): it is sent again every second until the turn ends.
func (s *Store) abort(ctx context.Context, j Job, reason string) (Job, error) {
	nc := s.js.Conn()
	done, err := nc.SubscribeSync(bus.TurnStatusSubject(j.ID, bus.StatusDone))
	if err != nil {
		return Job{}, fmt.Errorf("cancel job %s: %w", j.ID, err)
	}
	defer func() { _ = done.Unsubscribe() }()
	b, err := json.Marshal(bus.Abort{Turn: j.ID, Reason: reason})
	if err != nil {
		return Job{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, abortWait)
	defer cancel()
	for {
		if err := nc.Publish(bus.AbortSubject(j.ID), b); err != nil {
			return Job{}, fmt.Errorf("cancel job %s: %w", j.ID, err)
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		m, err := done.NextMsgWithContext(wctx)
		wcancel()
		if err == nil {
			var st bus.TurnStatus
			if json.Unmarshal(m.Data, &st) == nil && st.State.Ended() {
				// The node records the job's end right after; say how it ended.
				if now, _, err := s.Get(ctx, j.Agent, j.ID); err == nil && now.State.Ended() {
					return now, nil
				}
				j.State, j.Error = st.State, st.Error
				return j, nil
			}
		}
		if ctx.Err() != nil {
			return j, nil // still stopping: job_status shows when it has
		}
		// Ended before this listened?
		if rec, err := s.Turn(ctx, j.ID); err == nil && rec != nil && rec.State.Ended() {
			j.State, j.Error = rec.State, rec.Error
			return j, nil
		}
	}
}

// Turn reads the record of a job's turn, with a running turn's step; nil when it has
// none.
func (s *Store) Turn(ctx context.Context, id string) (*bus.TurnRecord, error) {
	rec, err := s.turns.Live(ctx, id)
	if errors.Is(err, durable.ErrNoRecord) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// List returns the jobs in the bucket, of one agent ("" for every agent), newest first.
func List(ctx context.Context, kv jetstream.KeyValue, agent string) ([]Job, error) {
	filter := "job.>"
	if agent != "" {
		if err := bus.CheckAgent(agent); err != nil {
			return nil, err
		}
		filter = "job." + agent + ".*"
	}
	keys, err := bus.ListKeys(ctx, kv, filter)
	if err != nil {
		return nil, err
	}
	var out []Job
	for _, k := range keys {
		parts := strings.SplitN(k, ".", 3)
		if len(parts) != 3 {
			continue
		}
		j, _, err := get(ctx, kv, parts[1], parts[2])
		if errors.Is(err, ErrNotFound) {
			continue // expired meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b Job) int { return b.Created.Compare(a.Created) })
	return out, nil
}

// Find reads a job by its id alone, whatever its agent.
func Find(ctx context.Context, kv jetstream.KeyValue, id string) (Job, error) {
	if !bus.ValidID(id) {
		return Job{}, fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	keys, err := bus.ListKeys(ctx, kv, "job.*."+id)
	if err != nil {
		return Job{}, err
	}
	for _, k := range keys {
		parts := strings.SplitN(k, ".", 3)
		if len(parts) != 3 {
			continue
		}
		j, _, err := get(ctx, kv, parts[1], id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		return j, err
	}
	return Job{}, fmt.Errorf("job %s: %w", id, ErrNotFound)
}
