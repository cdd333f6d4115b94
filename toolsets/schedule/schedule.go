package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // time zones are checked here as the server checks them, with or without a zoneinfo on the host

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
)

// Category is the tool category of the schedule tools.
const Category = "schedule"

// Defaults and bounds of schedules.
const (
	// DefaultMinInterval is the shortest time between two firings a schedule may ask
	// for, unless the node is configured otherwise.
	DefaultMinInterval = time.Minute
	// ServerMinInterval is the shortest @every JetStream accepts, and so the floor of
	// the minimum interval.
	ServerMinInterval = time.Second
	// MaxAhead is how far ahead a schedule may reach: the longest every, and the
	// furthest from now an at, or a cron's first firing, may be. JetStream keeps a
	// schedule's next firing in nanoseconds since 1970, an int64 that ends at
	// ServerEnd: a firing beyond it wraps into the past, so an @at fires at once and
	// an @every over and over, four times a second. Ten years (of 365 days) keeps every
	// firing far inside that range, and is further ahead than anyone plans a turn.
	MaxAhead = 10 * 365 * 24 * time.Hour
	// maxAheadText is MaxAhead for people and models.
	maxAheadText = "87600h (10 years)"
	// QueueRetry is how long a firing held back by the queue policy waits in the
	// intake before it looks again whether the turn before it has ended.
	QueueRetry = 2 * time.Second
	// doneKeep is how long a one-shot schedule's record stays after it fired.
	doneKeep = 24 * time.Hour
	// maxGapChecks bounds the firings of a cron expression checked against the
	// minimum interval.
	maxGapChecks = 1000
)

// Overlap policies: what a firing does while the turn the schedule started last still
// runs (the values of the profile's schedules.overlap).
const (
	OverlapSkip  = "skip"
	OverlapQueue = "queue"
)

// Schedule kinds.
const (
	KindAt    = "at"
	KindEvery = "every"
	KindCron  = "cron"
)

// Policy is what an agent's profile says about its schedules.
type Policy struct {
	Enabled bool
	Overlap string // OverlapSkip (also when empty) or OverlapQueue
}

// Config configures the schedules of a node.
type Config struct {
	// MinInterval is the shortest time between two firings a new schedule may ask for
	// (DefaultMinInterval when zero; never below ServerMinInterval).
	MinInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.MinInterval == 0 {
		c.MinInterval = DefaultMinInterval
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.MinInterval < ServerMinInterval:
		return fmt.Errorf("schedules: minimum interval %s is below JetStream's own minimum of %s", c.MinInterval, ServerMinInterval)
	case c.MinInterval > MaxAhead:
		return fmt.Errorf("schedules: minimum interval %s is above the longest interval a schedule may have, %s", c.MinInterval, maxAheadText)
	}
	return nil
}

// ServerEnd is the last instant JetStream can time a firing at: it keeps a schedule's
// next firing in nanoseconds since 1970, an int64 (2262-04-11T23:47:16.854775807Z).
var ServerEnd = time.Unix(0, math.MaxInt64).UTC()

// durationSyntax is what time.ParseDuration reads, whatever the size: a duration it
// refuses that matches is too long (or too negative) for it, not misspelt.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// planEvery reads an every as given and checks it against the bounds: a whole number
// of seconds (the server fires at whole seconds, and would fire an interval with a
// fraction every rounded interval instead), at least minInterval and at most MaxAhead.
// The interval returned round-trips through its String, which the server parses.
func planEvery(given string, minInterval time.Duration) (time.Duration, error) {
	given = strings.TrimSpace(given)
	d, err := time.ParseDuration(given)
	switch {
	case err != nil && durationSyntax.MatchString(given) && !strings.HasPrefix(given, "-"):
		return 0, fmt.Errorf("every %s is longer than the longest interval, %s: give at most 87600h", given, maxAheadText)
	case err != nil && durationSyntax.MatchString(given):
		return 0, fmt.Errorf("every %s is not a positive interval: give one of at least %s, the minimum interval between firings", given, minInterval)
	case err != nil:
		return 0, fmt.Errorf("every %q is not a duration: write it like 30m, 2h or 24h (units h, m and s; a day is 24h)", given)
	case d <= 0:
		return 0, fmt.Errorf("every %s is not a positive interval: give one of at least %s, the minimum interval between firings", given, minInterval)
	case d < minInterval:
		return 0, fmt.Errorf("every %s is shorter than the minimum interval between firings, %s", given, minInterval)
	case d > MaxAhead:
		return 0, fmt.Errorf("every %s is longer than the longest interval, %s: give at most 87600h", given, maxAheadText)
	case d%time.Second != 0:
		var near []string
		for _, n := range []time.Duration{d.Truncate(time.Second), d.Truncate(time.Second) + time.Second} {
			if n >= minInterval && n <= MaxAhead {
				near = append(near, n.String())
			}
		}
		return 0, fmt.Errorf("every %s is not a whole number of seconds, and the server fires schedules at whole seconds: give %s", given, strings.Join(near, " or "))
	}
	return d, nil
}

// planAt reads an at as given (RFC 3339 with an offset; a lowercase t or z as well)
// and checks it against the bounds: after now, and at most MaxAhead after it. It is
// truncated to the second: the server fires at whole seconds.
func planAt(given string, now time.Time) (time.Time, error) {
	at, err := time.Parse(time.RFC3339, strings.ToUpper(strings.TrimSpace(given)))
	if err != nil {
		return time.Time{}, fmt.Errorf("at %q is not an RFC 3339 time with an offset, such as 2026-12-01T09:00:00+01:00 or 2026-12-01T08:00:00Z", given)
	}
	if _, off := at.Zone(); off <= -24*60*60 || off >= 24*60*60 {
		return time.Time{}, fmt.Errorf("at %q has an offset of 24 hours or more: give the offset of the zone meant, between -12:00 and +14:00, or the time in UTC (Z)", given)
	}
	// The server fires at whole seconds; a time within the second now is past by the
	// time it is stored.
	at = at.Truncate(time.Second)
	if !at.After(now) {
		return time.Time{}, fmt.Errorf("at %s is in the past (it is now %s): give a time to come", at.Format(time.RFC3339), now.In(at.Location()).Format(time.RFC3339))
	}
	if err := checkAhead(at, now); err != nil {
		return time.Time{}, fmt.Errorf("at %s %w", at.Format(time.RFC3339), err)
	}
	return at, nil
}

// checkAhead checks that t, a schedule's first firing, is at most MaxAhead after now.
func checkAhead(t, now time.Time) error {
	if t.Sub(now) > MaxAhead { // Sub saturates: a time past any duration is too
		return fmt.Errorf("is more than 10 years from now: a schedule reaches %s ahead at most, so give a time no later than %s",
			maxAheadText, now.Add(MaxAhead).In(t.Location()).Truncate(time.Second).Format(time.RFC3339))
	}
	return nil
}

// Schedule is a schedule's record, in bus.BucketSchedules under "<agent>.<schedule>".
// When it fires is JetStream's business: the schedule's message in the intake stream
// (bus.IntakeSchedule) carries Pattern; the record says what it is and how it went.
type Schedule struct {
	ID    string `json:"schedule_id"`
	Agent string `json:"agent"`
	Kind  string `json:"kind"` // KindAt, KindEvery or KindCron
	// Pattern is the schedule's Nats-Schedule header: "@at <RFC 3339>", "@every <d>" or
	// a six-field cron expression.
	Pattern  string    `json:"pattern"`
	At       time.Time `json:"at,omitzero"`
	Every    string    `json:"every,omitempty"`
	Cron     string    `json:"cron,omitempty"`
	TimeZone string    `json:"time_zone,omitempty"`
	// Prompt and Instructions are what each turn it starts is asked and told.
	Prompt       string `json:"prompt"`
	Instructions string `json:"instructions,omitempty"`
	// CreatedBy is the turn that created it.
	CreatedBy string    `json:"created_by_turn,omitempty"`
	Created   time.Time `json:"created"`
	// First is its first firing, as computed when it was created.
	First time.Time `json:"first_firing"`
	// Fired counts the turns it started; LastTurn is the latest, started at LastFired.
	Fired     int       `json:"fired"`
	LastTurn  string    `json:"last_turn_id,omitempty"`
	LastFired time.Time `json:"last_fired,omitzero"`
	// Skipped counts the firings that started no turn, LastSkip says why the latest
	// did not.
	Skipped  int    `json:"skipped"`
	LastSkip string `json:"last_skip,omitempty"`
	// SkipSeq is the intake sequence of the latest firing skipped. A firing at or before
	// it that did not start LastTurn starts nothing: it was skipped already (a delivery
	// of it decided so, whose acknowledgement takes the firing out of the intake), or it
	// is older than one that was.
	SkipSeq uint64 `json:"skip_seq,omitempty"`
	// Skips are the intake sequences of the latest firings skipped (skipWindow at
	// most), so that a firing decided after a later one (a node decides several at
	// once) is told from a delivery again of one decided already, and counted.
	Skips []uint64 `json:"skip_seqs,omitempty"`
	// Done marks a schedule that fires no more: a one-shot that has fired, or one the
	// server cannot time (untimeable); its record expires a day later.
	Done bool `json:"done,omitempty"`
}

// When says when a schedule fires, for people and models.
func (s *Schedule) When() string {
	switch s.Kind {
	case KindAt:
		return "once at " + s.At.Format(time.RFC3339)
	case KindEvery:
		return "every " + s.Every
	}
	tz := s.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	return fmt.Sprintf("cron %q (%s)", s.Cron, tz)
}

// Next is the schedule's next firing after t, as the server computes it; false when it
// fires no more (a one-shot schedule that fired, or one the server cannot time).
func (s *Schedule) Next(t time.Time) (time.Time, bool) {
	if s.Done {
		return time.Time{}, false
	}
	switch s.Kind {
	case KindAt:
		return s.At, true
	case KindEvery:
		d, err := time.ParseDuration(s.Every)
		if err != nil || d <= 0 {
			return time.Time{}, false
		}
		// The server fires at whole seconds, an interval after the firing before
		// (the first an interval after the schedule was stored).
		next := s.First
		if t.Before(next) {
			return next, true
		}
		return next.Add((t.Sub(next)/d + 1) * d), true
	}
	loc, err := loadZone(s.TimeZone)
	if err != nil {
		return time.Time{}, false
	}
	next, err := NextCron(s.Cron, loc, t)
	return next, err == nil
}

// untimeable says why the server cannot time the schedule's firings, or "" when it can:
// its first firing is after ServerEnd, so the server's next firing wrapped into the
// past, and it fires at once (an @every over and over, four times a second). Plan
// refuses such a schedule; an earlier build stored some.
func (s *Schedule) untimeable() string {
	if !s.First.After(ServerEnd) {
		return ""
	}
	return fmt.Sprintf("%s reaches past %s, the last time the server can fire at, so it fired early; it was taken out of the intake and fires no more: create it again within %s",
		s.When(), ServerEnd.Truncate(time.Second).Format(time.RFC3339), maxAheadText)
}

// key is a schedule's key in the bucket.
func key(agent, id string) string { return agent + "." + id }

// TurnID is the id of the turn a schedule's firing starts: the schedule and the
// firing's sequence in the intake stream, so that a firing redelivered to another node
// is the same turn, and every firing a new one.
func TurnID(schedule string, seq uint64) string {
	return schedule + "-" + strconv.FormatUint(seq, 10)
}

// CreateArgs are what a new schedule asks for: a prompt, and exactly one of At, Every
// and Cron.
type CreateArgs struct {
	Prompt       string `json:"prompt" jsonschema:"minLength=1,maxLength=8000" jsonschema_description:"What each turn the schedule starts is asked, as the user would ask you."`
	Instructions string `json:"instructions,omitempty" jsonschema:"maxLength=8000" jsonschema_description:"Extra instructions for those turns (optional)."`
	At           string `json:"at,omitempty" jsonschema:"maxLength=64" jsonschema_description:"Fire once, at this time: RFC 3339 with its offset, e.g. 2026-12-01T09:00:00+01:00; at most 10 years from now."`
	Every        string `json:"every,omitempty" jsonschema:"maxLength=32" jsonschema_description:"Fire repeatedly at this interval: a duration in whole seconds such as 30m, 2h or 24h, at most 87600h (10 years)."`
	Cron         string `json:"cron,omitempty" jsonschema:"maxLength=128" jsonschema_description:"Fire on a cron schedule: six fields, seconds first (second minute hour day-of-month month day-of-week), e.g. \"0 30 9 * * mon-fri\"; five fields are read with second 0; or @hourly, @daily, @weekly, @monthly, @yearly."`
	TimeZone     string `json:"time_zone,omitempty" jsonschema:"maxLength=64" jsonschema_description:"The IANA time zone the cron fields are read in, e.g. Europe/Amsterdam (default UTC). Cron only."`
}

// loadZone loads an IANA zone; "" is UTC.
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return nil, nil
	}
	if name == "Local" {
		return nil, errors.New(`time zone "Local" is whatever the server's clock says: name the zone, such as Europe/Amsterdam`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q: use an IANA name such as Europe/Amsterdam or America/New_York", name)
	}
	return loc, nil
}

// Plan checks what a new schedule asks for and returns it as a record (without id,
// agent or creator): its kind, its server pattern and its first firing after now.
// Every refusal says what to change.
func Plan(a CreateArgs, now time.Time, minInterval time.Duration) (Schedule, error) {
	a.Prompt = strings.TrimSpace(a.Prompt)
	if a.Prompt == "" {
		return Schedule{}, errors.New("the prompt is empty: say what each turn the schedule starts should do")
	}
	var given []string
	for _, f := range []struct{ name, v string }{{"at", a.At}, {"every", a.Every}, {"cron", a.Cron}} {
		if strings.TrimSpace(f.v) != "" {
			given = append(given, f.name)
		}
	}
	switch len(given) {
	case 0:
		return Schedule{}, errors.New(`say when: give exactly one of at (once, e.g. 2026-12-01T09:00:00+01:00), every (an interval such as 1h) or cron (e.g. "0 0 9 * * mon-fri")`)
	case 1:
	default:
		return Schedule{}, fmt.Errorf("give only one of at, every and cron (got %s)", strings.Join(given, " and "))
	}
	s := Schedule{Prompt: a.Prompt, Instructions: a.Instructions, TimeZone: strings.TrimSpace(a.TimeZone)}
	if s.TimeZone != "" && given[0] != KindCron {
		return Schedule{}, fmt.Errorf("time_zone applies to cron only: %s", map[string]string{
			KindAt:    "write at with its offset instead, e.g. 2026-12-01T09:00:00+01:00",
			KindEvery: "an interval does not depend on a zone",
		}[given[0]])
	}
	// Every time is bounded here, before anything is stored (planAt, planEvery,
	// checkAhead): the server times a firing in int64 nanoseconds (ServerEnd).
	switch given[0] {
	case KindAt:
		at, err := planAt(a.At, now)
		if err != nil {
			return Schedule{}, err
		}
		s.Kind, s.At, s.First = KindAt, at, at
		s.Pattern = "@at " + at.UTC().Format(time.RFC3339)
	case KindEvery:
		d, err := planEvery(a.Every, minInterval)
		if err != nil {
			return Schedule{}, err
		}
		s.Kind, s.Every = KindEvery, d.String()
		s.Pattern = "@every " + s.Every
		s.First = now.UTC().Round(time.Second).Add(d)
	case KindCron:
		loc, err := loadZone(s.TimeZone)
		if err != nil {
			return Schedule{}, err
		}
		expr, err := NormalizeCron(a.Cron)
		if err != nil {
			return Schedule{}, err
		}
		spec, err := parseCron(expr)
		if err != nil {
			return Schedule{}, fmt.Errorf("cron %q: %w", a.Cron, err)
		}
		first, err := spec.next(now, loc)
		if err != nil {
			return Schedule{}, fmt.Errorf("cron %q: %w", a.Cron, err)
		}
		// The server looks five years ahead at most (errNeverFires), so this holds;
		// checked all the same, as every kind is.
		if err := checkAhead(first, now); err != nil {
			return Schedule{}, fmt.Errorf("cron %q first fires at %s, which %w", a.Cron, first.Format(time.RFC3339), err)
		}
		if gap, at, ok := spec.shortestGap(now, loc, maxGapChecks); ok && gap < minInterval {
			return Schedule{}, fmt.Errorf("cron %q fires %s apart (at %s); the minimum interval between firings is %s", a.Cron, gap, at.Format(time.RFC3339), minInterval)
		}
		s.Kind, s.Cron, s.Pattern, s.First = KindCron, expr, expr, first
	}
	return s, nil
}

// Store keeps the schedules of a bus: their records, and their messages in the intake.
type Store struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	turns *durable.Store // the turns' records and the intake
	cfg   Config
}

// Open opens (creating if needed) the schedule bucket, the turns bucket and the intake
// stream, with the given replicas (capped by the cluster size).
func Open(ctx context.Context, js jetstream.JetStream, replicas int, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{js: js, cfg: cfg}
	var err error
	if s.kv, err = bus.KeyValueTTL(ctx, js, bus.BucketSchedules, replicas); err != nil {
		return nil, err
	}
	if s.turns, err = durable.Open(ctx, js, durable.Config{Replicas: replicas, Create: true}); err != nil {
		return nil, err
	}
	return s, nil
}

// MinInterval is the shortest time between firings a new schedule may ask for.
func (s *Store) MinInterval() time.Duration { return s.cfg.MinInterval }

// Bucket is the schedule bucket.
func (s *Store) Bucket() jetstream.KeyValue { return s.kv }

// ErrNotFound reports a schedule that does not exist (or not for this agent).
var ErrNotFound = errors.New("no such schedule")

// Create makes a schedule for agent, created by the turn creator: its record, then its
// message in the intake. The turns it fires use the creating turn's model (its child
// script, for a scripted turn).
func (s *Store) Create(ctx context.Context, agent, creator string, a CreateArgs) (Schedule, error) {
	if err := bus.CheckAgent(agent); err != nil {
		return Schedule{}, fmt.Errorf("schedules belong to an agent: %w", err)
	}
	now := time.Now()
	sch, err := Plan(a, now, s.cfg.MinInterval)
	if err != nil {
		return Schedule{}, err
	}
	parent, err := s.turns.MainTurnSpec(ctx, creator)
	if err != nil {
		return Schedule{}, err
	}
	sch.ID, sch.Agent, sch.CreatedBy, sch.Created = bus.NewID(), agent, creator, now.UTC()
	spec := bus.TurnSpec{Kind: bus.TurnMain, Agent: agent, Instructions: sch.Instructions, Input: sch.Prompt, Limits: parent.Limits}
	spec.Model, spec.Script = parent.ChildModel()
	if err := spec.Check(); err != nil {
		return Schedule{}, err
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return Schedule{}, err
	}
	if limit := s.js.Conn().MaxPayload(); int64(len(body))+512 > limit {
		return Schedule{}, fmt.Errorf("the turn this schedule starts is %d bytes, more than the bus carries (%d): shorten the prompt or instructions", len(body), limit)
	}
	rec, err := json.Marshal(sch)
	if err != nil {
		return Schedule{}, err
	}
	if err := bus.CreateOnce(ctx, s.kv, key(agent, sch.ID), rec); err != nil {
		return Schedule{}, fmt.Errorf("store schedule: %w", err)
	}
	m := nats.NewMsg(bus.IntakeSchedule(sch.ID))
	m.Data = body
	m.Header.Set(bus.HeaderSchedule, sch.Pattern)
	m.Header.Set(bus.HeaderScheduleTarget, bus.IntakeFired(sch.ID))
	if sch.TimeZone != "" {
		m.Header.Set(bus.HeaderScheduleTimeZone, sch.TimeZone)
	}
	m.Header.Set(bus.HeaderAgent, agent) // on every firing too, for whoever watches
	if err := s.turns.PutSchedule(ctx, m); err != nil {
		if derr := s.kv.Delete(context.WithoutCancel(ctx), key(agent, sch.ID)); derr != nil {
			err = errors.Join(err, fmt.Errorf("and its record stays: %w", derr))
		}
		return Schedule{}, fmt.Errorf("schedule %s: the intake refused it: %w", sch.ID, err)
	}
	return sch, nil
}

// Get reads an agent's schedule and its revision.
func (s *Store) Get(ctx context.Context, agent, id string) (Schedule, uint64, error) {
	return get(ctx, s.kv, agent, id)
}

func get(ctx context.Context, kv jetstream.KeyValue, agent, id string) (Schedule, uint64, error) {
	if bus.CheckAgent(agent) != nil || !bus.ValidToken(id) {
		return Schedule{}, 0, fmt.Errorf("schedule %s: %w", id, ErrNotFound)
	}
	sch, rev, err := bus.GetRecord[Schedule](ctx, kv, key(agent, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Schedule{}, 0, fmt.Errorf("schedule %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Schedule{}, 0, fmt.Errorf("schedule %s: %w", id, err)
	}
	return sch, rev, nil
}

// List returns the schedules in the bucket, of one agent ("" for every agent), oldest
// first.
func List(ctx context.Context, kv jetstream.KeyValue, agent string) ([]Schedule, error) {
	filter := ">"
	if agent != "" {
		if err := bus.CheckAgent(agent); err != nil {
			return nil, err
		}
		filter = agent + ".*"
	}
	keys, err := bus.ListKeys(ctx, kv, filter)
	if err != nil {
		return nil, err
	}
	var out []Schedule
	for _, k := range keys {
		a, id, _ := strings.Cut(k, ".")
		sch, _, err := get(ctx, kv, a, id)
		if errors.Is(err, ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, sch)
	}
	slices.SortFunc(out, func(a, b Schedule) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Find reads a schedule by its id alone, whatever its agent.
func Find(ctx context.Context, kv jetstream.KeyValue, id string) (Schedule, error) {
	if !bus.ValidToken(id) {
		return Schedule{}, fmt.Errorf("schedule %q: %w", id, ErrNotFound)
	}
	keys, err := bus.ListKeys(ctx, kv, "*."+id)
	if err != nil {
		return Schedule{}, err
	}
	for _, k := range keys {
		a, _, _ := strings.Cut(k, ".")
		sch, _, err := get(ctx, kv, a, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		return sch, err
	}
	return Schedule{}, fmt.Errorf("schedule %s: %w", id, ErrNotFound)
}

// List returns an agent's schedules ("" for every agent's), oldest first.
func (s *Store) List(ctx context.Context, agent string) ([]Schedule, error) {
	return List(ctx, s.kv, agent)
}

// Cancel removes an agent's schedule: its message from the intake, so it fires no more,
// then its record. Firings already queued find no record and start nothing.
func (s *Store) Cancel(ctx context.Context, agent, id string) (Schedule, error) {
	sch, _, err := s.Get(ctx, agent, id)
	if err != nil {
		return Schedule{}, err
	}
	if err := s.turns.RemoveSchedule(ctx, id); err != nil {
		return Schedule{}, err
	}
	err = bus.Retry(ctx, "remove schedule record "+id, nil, func(ctx context.Context) error {
		return s.kv.Delete(ctx, key(agent, id))
	})
	if err != nil {
		return Schedule{}, err
	}
	return sch, nil
}

// FireNow fires an agent's schedule now, as the server does when it is due (see
// durable.Store.FireScheduleNow): a node takes the firing and decides it with Fire, as
// any other. A one-shot schedule fires no more after it. For tests, which need not wait
// for a schedule's time, and for an operator's "fire now".
func (s *Store) FireNow(ctx context.Context, agent, id string) error {
	if _, _, err := s.Get(ctx, agent, id); err != nil {
		return err
	}
	return s.turns.FireScheduleNow(ctx, id)
}

// Verdict is what a node does with a firing it took from the intake.
type Verdict uint8

const (
	// Run: start the firing's turn (Firing.Spec); its record exists, queued.
	Run Verdict = iota + 1
	// Skip: acknowledge the firing; it starts nothing (Firing.Why).
	Skip
	// Wait: leave the firing in the intake for QueueRetry, and look again.
	Wait
	// Drop: acknowledge the firing; its schedule is gone (Firing.Why).
	Drop
)

// Firing is the decision on one firing.
type Firing struct {
	Verdict Verdict
	Spec    bus.TurnSpec
	Why     string
}

// Fire decides what a firing of schedule id, at sequence seq of the intake and with
// body, does, under the agent's policy: it starts a turn (whose record it creates,
// queued, with an id of the firing's own) unless the schedule is gone, schedules are
// disabled in the profile, or the schedule's last turn still runs (skip, or wait under
// the queue policy). A firing that was already decided to run (redelivered after its
// node was lost) runs again: it resumes that turn; one that was decided to skip (or is
// older than a skipped one) skips again, without a word. Decisions are compare-and-set
// on the schedule's record, written before the turn's own record, so two nodes never
// start two turns for one firing, a firing that loses that race leaves no record
// behind, and a firing is decided once: to run or to skip, whichever delivery of it
// decides first, however many nodes it is delivered to meanwhile (see decided).
func (s *Store) Fire(ctx context.Context, id string, seq uint64, body []byte, policy func(agent string) (Policy, error)) (Firing, error) {
	var spec bus.TurnSpec
	if err := json.Unmarshal(body, &spec); err != nil || bus.CheckAgent(spec.Agent) != nil {
		return Firing{Verdict: Drop, Why: "the firing does not hold a turn spec with an agent"}, nil
	}
	spec.ID, spec.Kind = TurnID(id, seq), bus.TurnMain
	if err := spec.Check(); err != nil {
		return Firing{Verdict: Drop, Why: err.Error()}, nil
	}
	p, err := policy(spec.Agent)
	if err != nil {
		return Firing{}, err
	}
	for range 32 {
		sch, rev, err := s.Get(ctx, spec.Agent, id)
		if errors.Is(err, ErrNotFound) {
			return Firing{Verdict: Drop, Why: "the schedule was removed"}, nil
		}
		if err != nil {
			return Firing{}, err
		}
		if spec.Parent == "" && bus.ValidID(sch.CreatedBy) {
			// The turn that made the schedule started its firings' turns: their traces
			// link to it, as a job's does to its main turn.
			spec.Parent = sch.CreatedBy
		}
		v, why := decided(&sch, spec.ID, seq)
		switch v {
		case Run:
			// Decided before (its node was lost, or the record write below failed).
			if err := s.queueTurn(ctx, spec, time.Now().UTC()); err != nil {
				return Firing{}, err
			}
			return Firing{Verdict: Run, Spec: spec}, nil
		case Skip:
			return Firing{Verdict: Skip, Why: why}, nil
		}
		switch {
		case why != "":
			// A firing decided only now, after a later one: skipped, and counted.
		case sch.untimeable() != "":
			// Every firing of it is a wrong one: stop them, and start no turn.
			why = sch.untimeable()
			if err := s.turns.RemoveSchedule(ctx, id); err != nil {
				return Firing{}, err
			}
			sch.Done = true
		case !p.Enabled:
			why = "schedules are not enabled in the agent's profile"
		case sch.LastTurn != "":
			state, err := s.lastTurnState(ctx, &sch)
			if err != nil {
				return Firing{}, err
			}
			if state != "" && !state.Ended() {
				if p.Overlap == OverlapQueue {
					return Firing{Verdict: Wait, Why: fmt.Sprintf("turn %s of the schedule is still %s", sch.LastTurn, state)}, nil
				}
				why = fmt.Sprintf("turn %s of the schedule was still %s", sch.LastTurn, state)
			}
		}
		now := time.Now().UTC()
		if why != "" {
			sch.Skipped++
			sch.LastSkip = now.Format(time.RFC3339) + ": " + why
			sch.SkipSeq = max(sch.SkipSeq, seq)
			sch.Skips = append(sch.Skips, seq)
			if len(sch.Skips) > skipWindow {
				sch.Skips = slices.Delete(sch.Skips, 0, len(sch.Skips)-skipWindow)
			}
		} else {
			sch.Fired++
			sch.LastTurn, sch.LastFired = spec.ID, now
			sch.Done = sch.Kind == KindAt
		}
		var ttl time.Duration
		if sch.Done {
			ttl = doneKeep
		}
		err = update(ctx, s.js, s.kv, key(spec.Agent, id), sch, rev, ttl)
		if bus.IsConflict(err) {
			continue // another node decided meanwhile: decide again on what it wrote
		}
		if err != nil {
			return Firing{}, err
		}
		if why != "" {
			return Firing{Verdict: Skip, Why: why}, nil
		}
		// The turn's record only now: a firing that lost the race above made none.
		if err := s.queueTurn(ctx, spec, now); err != nil {
			return Firing{}, err
		}
		return Firing{Verdict: Run, Spec: spec}, nil
	}
	return Firing{}, fmt.Errorf("schedule %s: its record keeps changing under this firing", id)
}

// skipWindow is how many skipped firings a schedule's record remembers (Skips): more
// than a node decides at once (its turn slots).
const skipWindow = 32

// decided says what an earlier delivery of the firing at intake sequence seq, whose turn
// is turn, decided, as the schedule's record stored it: Run (the firing started
// LastTurn), Skip with why (it was skipped, or is older than a firing that was and
// cannot be told from one), or 0 for a firing to decide now; 0 with a why for one never
// decided that is older than a skipped one: it is skipped for why, and counted.
//
// The intake redelivers a firing whose node has not settled it within the lease, and the
// node deciding it sends no progress, so two nodes may decide one firing at once. Were a
// second delivery to decide afresh, the first could skip it and the second run it: the
// first's acknowledgement (JetStream takes an acknowledgement of any delivery of a
// message) takes the firing out of the intake, and the second's turn, its record
// queued, is left with no message; should its node fail to claim it (killed, or its
// claim failed), no node ever would, and every later firing of the schedule would be
// skipped behind a turn that stays queued. So a firing older than a skipped one never
// runs; it is counted as skipped when the record shows it was not (Skips holds the
// latest skips, and it is newer than the oldest of them and than LastTurn's firing).
func decided(sch *Schedule, turn string, seq uint64) (Verdict, string) {
	switch {
	case sch.LastTurn == turn:
		return Run, ""
	case seq == sch.SkipSeq || slices.Contains(sch.Skips, seq):
		return Skip, "the firing was skipped already, on an earlier delivery of it"
	case seq < sch.SkipSeq:
		why := fmt.Sprintf("a later firing of the schedule (intake sequence %d) was decided already", sch.SkipSeq)
		if len(sch.Skips) == 0 || (len(sch.Skips) >= skipWindow && seq < slices.Min(sch.Skips)) || seq <= firingSeq(sch.LastTurn) {
			return Skip, why // maybe decided before: Skips does not reach back to it
		}
		return 0, why
	}
	return 0, ""
}

// firingSeq is the intake sequence of the firing that started turn (see TurnID), 0 for
// none.
func firingSeq(turn string) uint64 {
	i := strings.LastIndexByte(turn, '-')
	if i < 0 {
		return 0
	}
	seq, _ := strconv.ParseUint(turn[i+1:], 10, 64)
	return seq
}

// recordGrace is how long a firing's turn may have no record after the schedule's record
// named it: the turn's record is written right after. It is also how long a firing's
// turn may stay queued, no node holding it, with its firing gone from the intake, before
// the next firing ends it (lastTurnState).
const recordGrace = time.Minute

// queueTurn creates the record of a firing's turn, queued, so that the overlap check of
// the next firing sees it from now on; a record already there is this firing's.
func (s *Store) queueTurn(ctx context.Context, spec bus.TurnSpec, now time.Time) error {
	return s.turns.CreateQueued(ctx, spec, now)
}

// lastTurnState is the state of the schedule's last turn, as the overlap check sees it: a
// turn without a record is queued within recordGrace of its firing (its record comes
// next) and gone after it. A turn queued with no node holding it, for longer than
// recordGrace, whose firing is no longer in the intake, would never run: no node can
// take it, and every firing after it would be skipped behind it. It is ended here
// (failed, with the reason), and then does not hold the schedule back.
func (s *Store) lastTurnState(ctx context.Context, sch *Schedule) (bus.TurnState, error) {
	rec, _, err := s.turns.Record(ctx, sch.LastTurn)
	switch {
	case errors.Is(err, durable.ErrNoRecord):
		if time.Since(sch.LastFired) < recordGrace {
			return bus.TurnQueued, nil // decided a moment ago; its record comes next
		}
		return "", nil
	case err != nil:
		return "", err
	}
	if rec.State != bus.TurnQueued || rec.Owner != "" || time.Since(rec.Updated) < recordGrace {
		return rec.State, nil
	}
	gone, err := s.firingGone(ctx, sch.ID, sch.LastTurn)
	if err != nil || !gone {
		return rec.State, err
	}
	// A node that takes the turn meanwhile keeps it (EndQueued leaves a held turn).
	rec, _, err = s.turns.EndQueued(ctx, sch.LastTurn, bus.TurnFailed,
		"its schedule's firing left the intake before a node took the turn; no node could run it")
	if err != nil {
		return "", err
	}
	return rec.State, nil
}

// firingGone reports whether the intake no longer holds the firing of schedule id whose
// turn is turn (TurnID): it was acknowledged, or removed. A turn id that is not a
// firing's is never gone.
func (s *Store) firingGone(ctx context.Context, id, turn string) (bool, error) {
	n, ok := strings.CutPrefix(turn, id+"-")
	if !ok {
		return false, nil
	}
	seq, err := strconv.ParseUint(n, 10, 64)
	if err != nil || seq == 0 {
		return false, nil
	}
	held, err := s.turns.FiringHeld(ctx, id, seq)
	return !held && err == nil, err
}

// update writes a record at revision rev ([bus.UpdateAt]); with ttl > 0 the record
// expires that long after (JetStream's per-message TTL, which a plain key-value update
// cannot set: [bus.UpdateWithTTL]). Either way a lost compare-and-set is an error that
// [bus.IsConflict] reports.
func update(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, k string, v any, rev uint64, ttl time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if ttl <= 0 {
		_, err := bus.UpdateAt(ctx, kv, k, b, rev)
		return err
	}
	return bus.Retry(ctx, "store "+k, nil, func(ctx context.Context) error {
		return bus.UpdateWithTTL(ctx, js, kv.Bucket(), k, b, rev, ttl)
	})
}
