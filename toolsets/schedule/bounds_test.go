package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/durable"
)

// TestScheduleBoundsRefused: an every and an at beyond what the server can time (an
// every of about the longest time.Duration, an at past the int64 nanoseconds the server
// keeps a firing in) are refused, on a node with the default minimum interval, with
// the limit in the message; nothing is stored (no record, nothing in the intake); and
// the store goes on: a schedule within the bounds is created, fires when it was told
// to, and its firing starts a turn.
func TestScheduleBoundsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := bustest.Server(t, nil)
	nc := bustest.Conn(t, srv, "bounds")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js, 1, Config{}) // the default minimum interval, a minute
	if err != nil {
		t.Fatal(err)
	}
	if s.MinInterval() != time.Minute {
		t.Fatalf("minimum interval %s", s.MinInterval())
	}
	const creator = "main1"
	if err := s.turns.CreateQueued(ctx, bus.TurnSpec{ID: creator, Kind: bus.TurnMain, Agent: "sam", Input: "Plan."}, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	tl := tools{s: s, policy: func(context.Context, string) (Policy, error) { return Policy{Enabled: true}, nil }}
	call := toolbus.Call{Agent: "sam", Turn: creator, Tool: "schedule_create"}

	for _, tc := range []struct {
		args CreateArgs
		want string
	}{
		{CreateArgs{Prompt: "Tick.", Every: "2562047h"}, "every 2562047h is longer than the longest interval, 87600h (10 years): give at most 87600h"},
		{CreateArgs{Prompt: "Tick.", At: "9999-12-31T23:59:59Z"}, "at 9999-12-31T23:59:59Z is more than 10 years from now: a schedule reaches 87600h (10 years) ahead at most, so give a time no later than "},
	} {
		res, err := tl.create(ctx, call, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v %+v, want %q", tc.args, err, res, tc.want)
		}
	}

	// Nothing stored: no record, nothing in the intake.
	if all, err := s.List(ctx, ""); err != nil || len(all) != 0 {
		t.Fatalf("stored after the refusals: %+v %v", all, err)
	}
	if n, err := s.turns.IntakeMessages(ctx); err != nil || n != 0 {
		t.Fatalf("the intake after the refusals holds %d messages (%v)", n, err)
	}

	// The store goes on: an every within the bounds waits in the intake, an at one or two
	// seconds out fires then, and its firing starts a turn.
	every, err := tl.create(ctx, call, CreateArgs{Prompt: "Tick.", Every: "87600h"})
	if err != nil {
		t.Fatal(err)
	}
	var sch, at Schedule
	if err := json.Unmarshal(every.Details, &sch); err != nil {
		t.Fatal(err)
	}
	if n, fired, err := s.turns.ScheduleMessages(ctx, sch.ID); err != nil || n != 1 || fired != 0 {
		t.Errorf("every 87600h: %d schedule messages, %d firings (%v)", n, fired, err)
	}
	due := time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second) // 1-2 s out
	once, err := tl.create(ctx, call, CreateArgs{Prompt: "Once.", At: due.Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(once.Details, &at); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.turns.ScheduleMessages(ctx, at.ID); err != nil || n != 1 {
		t.Errorf("the at: %d schedule messages (%v)", n, err)
	}
	consumers, err := s.turns.RunnerConsumers(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := consumers[0].Fetch(1, jetstream.FetchMaxWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if msg == nil {
		t.Fatalf("the at %s did not fire", due.Format(time.RFC3339))
	}
	md, err := msg.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := bus.ParseIntakeFired(msg.Subject()); id != at.ID {
		t.Fatalf("fired %s, want the at %s (the every fires in ten years)", msg.Subject(), at.ID)
	}
	if early := due.Sub(md.Timestamp); early > 0 {
		t.Errorf("the at fired at %s, %s before its time", md.Timestamp, early)
	}
	f, err := s.Fire(ctx, at.ID, md.Sequence.Stream, msg.Data(), func(string) (Policy, error) { return Policy{Enabled: true}, nil })
	if err != nil || f.Verdict != Run || f.Spec.Input != "Once." {
		t.Errorf("the at's firing: %+v %v", f, err)
	}
	// Confirmed before the intake is counted: a plain Ack may still be in flight.
	if err := msg.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if n, fired, err := s.turns.ScheduleMessages(ctx, sch.ID); err != nil || n != 1 || fired != 0 {
		t.Errorf("every 87600h, after: %d schedule messages, %d firings (%v)", n, fired, err)
	}
}

// TestPlanBounds table-tests the bounds of every, at and a cron's first firing, with the
// default minimum interval unless the case says otherwise.
func TestPlanBounds(t *testing.T) {
	t.Parallel()
	if ServerEnd.Format(time.RFC3339Nano) != "2262-04-11T23:47:16.854775807Z" {
		t.Errorf("ServerEnd %s", ServerEnd.Format(time.RFC3339Nano))
	}
	if MaxAhead.String() != "87600h0m0s" || !strings.HasPrefix(maxAheadText, "87600h ") {
		t.Errorf("MaxAhead %s, said %q", MaxAhead, maxAheadText)
	}
	now := mustTime(t, "2026-05-04T10:00:00Z")
	// now + 87600h: 3650 days, three of them leap days (2028, 2032, 2036).
	if last := now.Add(MaxAhead).Format(time.RFC3339); last != "2036-05-01T10:00:00Z" {
		t.Fatalf("the latest at is %s", last)
	}

	t.Run("every", func(t *testing.T) {
		for _, tc := range []struct {
			every string
			min   time.Duration // 0: a minute
			want  string        // the interval stored, or the error
		}{
			{"1m", 0, "1m0s"},
			{" 2h ", 0, "2h0m0s"},
			{"1.5h", 0, "1h30m0s"},
			{"90m", 0, "1h30m0s"},
			{"+1h", 0, "1h0m0s"},
			{"59s", 0, "every 59s is shorter than the minimum interval between firings, 1m0s"},
			{"59999ms", 0, "every 59999ms is shorter than the minimum interval between firings, 1m0s"},
			{"1s", time.Second, "1s"},
			{"999ms", time.Second, "every 999ms is shorter than the minimum interval between firings, 1s"},
			{"1500ms", time.Second, "every 1500ms is not a whole number of seconds, and the server fires schedules at whole seconds: give 1s or 2s"},
			{"1500ms", 2 * time.Second, "every 1500ms is shorter than the minimum interval between firings, 2s"},
			{"1m0.5s", 0, "every 1m0.5s is not a whole number of seconds, and the server fires schedules at whole seconds: give 1m0s or 1m1s"},
			{"90.5s", 0, "give 1m30s or 1m31s"},
			{"87599h59m59.5s", 0, "give 87599h59m59s or 87600h0m0s"},
			{"87600h", 0, "87600h0m0s"},
			{"3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h3650h", 0, "87600h0m0s"},
			{"87600h1s", 0, "every 87600h1s is longer than the longest interval, 87600h (10 years): give at most 87600h"},
			{"87600h0.001s", 0, "is longer than the longest interval"},
			{"87601h", 0, "is longer than the longest interval"},
			{"2562047h", 0, "every 2562047h is longer than the longest interval, 87600h (10 years)"},
			{"9223372036854775807ns", 0, "is longer than the longest interval"},
			{"2562048h", 0, "every 2562048h is longer than the longest interval"},      // past time.Duration
			{"99999999999999999999h", 0, "every 99999999999999999999h is longer than"}, // past any int64
			{"0", 0, "every 0 is not a positive interval: give one of at least 1m0s, the minimum interval between firings"},
			{"0s", 0, "every 0s is not a positive interval"},
			{"-1h", 0, "every -1h is not a positive interval"},
			{"-2562048h", 0, "every -2562048h is not a positive interval"},
			{"1d", 0, `every "1d" is not a duration: write it like 30m, 2h or 24h (units h, m and s; a day is 24h)`},
			{"daily", 0, `every "daily" is not a duration: write it like 30m, 2h or 24h`},
			{"1h-1m", 0, `every "1h-1m" is not a duration`},
		} {
			min := tc.min
			if min == 0 {
				min = DefaultMinInterval
			}
			s, err := Plan(CreateArgs{Prompt: "p", Every: tc.every}, now, min)
			if refused := strings.Contains(tc.want, " "); err != nil || refused {
				if err == nil || !refused || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("every %q (min %s): %v, want %q", tc.every, min, err, tc.want)
				}
				continue
			}
			if s.Every != tc.want {
				t.Errorf("every %q (min %s): %q, want %q", tc.every, min, s.Every, tc.want)
				continue
			}
			// What the server reads back is the interval told, in whole seconds, within
			// the bounds, and the firings it computes are that far apart.
			d, err := time.ParseDuration(strings.TrimPrefix(s.Pattern, "@every "))
			if err != nil || d.String() != s.Every || d%time.Second != 0 || d < min || d > MaxAhead || !strings.HasPrefix(s.Pattern, "@every ") {
				t.Errorf("every %q: pattern %q reads back as %s (%v)", tc.every, s.Pattern, d, err)
			}
			if s.First.Sub(now) != d || s.First.After(ServerEnd) {
				t.Errorf("every %q: first firing %s", tc.every, s.First)
			}
			if next, ok := s.Next(s.First); !ok || next.Sub(s.First) != d {
				t.Errorf("every %q: the firing after the first %s", tc.every, next)
			}
			serverNext := time.Unix(0, s.First.UnixNano()).UTC().Round(time.Second).Add(d)
			if serverNext.Sub(s.First) != d || serverNext.UnixNano() < 0 {
				t.Errorf("every %q: the server's second firing %s", tc.every, serverNext)
			}
		}
	})

	t.Run("at", func(t *testing.T) {
		for _, tc := range []struct {
			at   string
			want string // the pattern stored, or the error
		}{
			{"2026-05-04T10:00:01Z", "@at 2026-05-04T10:00:01Z"},
			{"2026-05-04T10:00:00Z", "at 2026-05-04T10:00:00Z is in the past (it is now 2026-05-04T10:00:00Z): give a time to come"},
			{"2026-05-04T10:00:00.999Z", "at 2026-05-04T10:00:00Z is in the past"}, // the server fires at whole seconds
			{"2026-05-04T10:00:01.999Z", "@at 2026-05-04T10:00:01Z"},
			{"2026-05-04T09:59:59Z", "is in the past"},
			{"2026-05-04T11:59:59+02:00", "at 2026-05-04T11:59:59+02:00 is in the past (it is now 2026-05-04T12:00:00+02:00)"},
			{"1969-12-31T23:59:59Z", "is in the past"},
			{"0001-01-01T00:00:00Z", "is in the past"},
			{"0000-01-01T00:00:00Z", "is in the past"},
			// The far end: now + 87600h, in any offset.
			{"2036-05-01T10:00:00Z", "@at 2036-05-01T10:00:00Z"},
			{"2036-05-01T10:00:00.999Z", "@at 2036-05-01T10:00:00Z"},
			{"2036-05-01T10:00:01Z", "at 2036-05-01T10:00:01Z is more than 10 years from now: a schedule reaches 87600h (10 years) ahead at most, so give a time no later than 2036-05-01T10:00:00Z"},
			{"2036-05-02T00:00:00+14:00", "@at 2036-05-01T10:00:00Z"},
			{"2036-05-02T00:00:01+14:00", "so give a time no later than 2036-05-02T00:00:00+14:00"},
			{"2036-04-30T22:00:00-12:00", "@at 2036-05-01T10:00:00Z"},
			{"2036-04-30T22:00:01-12:00", "so give a time no later than 2036-04-30T22:00:00-12:00"},
			{"2036-12-31T23:59:59Z", "is more than 10 years from now"},
			{"2262-04-11T23:47:16Z", "is more than 10 years from now"},
			{"2262-04-11T23:47:17Z", "is more than 10 years from now"},
			{"9999-12-31T23:59:59Z", "at 9999-12-31T23:59:59Z is more than 10 years from now"},
			{"9999-12-31T23:59:59-23:59", "is more than 10 years from now"},
			{"10000-01-01T00:00:00Z", `at "10000-01-01T00:00:00Z" is not an RFC 3339 time with an offset`},
			// Odd offsets: the pattern is in UTC, whatever the offset.
			{"2026-06-01T09:00:00+05:45", "@at 2026-06-01T03:15:00Z"},
			{"2026-06-01T09:00:00+14:00", "@at 2026-05-31T19:00:00Z"},
			{"2026-06-01T09:00:00-12:00", "@at 2026-06-01T21:00:00Z"},
			{"2026-06-01T09:00:00-00:00", "@at 2026-06-01T09:00:00Z"},
			{"2026-06-01T09:00:00+23:59", "@at 2026-05-31T09:01:00Z"},
			{"2026-06-01T09:00:00-23:59", "@at 2026-06-02T08:59:00Z"},
			{"2026-05-05T09:30:00+00:60", "@at 2026-05-05T08:30:00Z"}, // Go reads :60 as an hour
			{"2026-06-01t09:00:00z", "@at 2026-06-01T09:00:00Z"},      // RFC 3339 allows lowercase
			{"2026-06-01T09:00:00+24:00", `at "2026-06-01T09:00:00+24:00" has an offset of 24 hours or more`},
			{"2026-06-01T09:00:00-24:00", "has an offset of 24 hours or more"},
			{"2026-06-01T09:00:00+99:00", "is not an RFC 3339 time with an offset"},
			{"2026-06-01T09:00:00+0100", "is not an RFC 3339 time with an offset"},
			{"2026-06-01T09:00:00", "is not an RFC 3339 time with an offset"},
			{"2026-06-01 09:00:00Z", "is not an RFC 3339 time with an offset"},
			{"2027-02-29T09:00:00Z", "is not an RFC 3339 time with an offset"},
		} {
			s, err := Plan(CreateArgs{Prompt: "p", At: tc.at}, now, DefaultMinInterval)
			if refused := !strings.HasPrefix(tc.want, "@at "); err != nil || refused {
				if err == nil || !refused || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("at %q: %v, want %q", tc.at, err, tc.want)
				}
				continue
			}
			if s.Pattern != tc.want {
				t.Errorf("at %q: pattern %q, want %q", tc.at, s.Pattern, tc.want)
				continue
			}
			// The server reads back the instant told, within its nanoseconds, and the
			// record stores it.
			back, err := time.Parse(time.RFC3339, strings.TrimPrefix(s.Pattern, "@at "))
			if err != nil || !back.Equal(s.At) || !time.Unix(0, back.UnixNano()).Equal(back) || !s.First.Equal(s.At) {
				t.Errorf("at %q: pattern %q reads back as %s (%v)", tc.at, s.Pattern, back, err)
			}
			b, err := json.Marshal(s)
			var rec Schedule
			if err == nil {
				err = json.Unmarshal(b, &rec)
			}
			if err != nil || !rec.At.Equal(s.At) {
				t.Errorf("at %q: the record %s (%v)", tc.at, b, err)
			}
		}
	})

	t.Run("cron", func(t *testing.T) {
		for _, tc := range []struct {
			cron, zone string
			want       string // the first firing, or the error
		}{
			{"@yearly", "", "2027-01-01T00:00:00Z"},
			{"@yearly", "Pacific/Kiritimati", "2027-01-01T00:00:00+14:00"},
			{"0 0 0 29 2 *", "", "2028-02-29T00:00:00Z"},                       // leap days
			{"0 0 0 29 2 *", "Pacific/Pago_Pago", "2028-02-29T00:00:00-11:00"}, // -11:00
			{"0 0 0 30 2 *", "", `cron "0 0 0 30 2 *": it never fires within five years`},
			{"0 0 0 31 4 *", "", `it never fires within five years`},
			{"0 0 9 * * mon-fri", "Asia/Kathmandu", "2026-05-05T09:00:00+05:45"},
		} {
			s, err := Plan(CreateArgs{Prompt: "p", Cron: tc.cron, TimeZone: tc.zone}, now, DefaultMinInterval)
			if refused := strings.Contains(tc.want, " "); err != nil || refused {
				if err == nil || !refused || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("cron %q in %q: %v, want %q", tc.cron, tc.zone, err, tc.want)
				}
				continue
			}
			if got := formatIn(s.First, s.TimeZone); got != tc.want || s.First.Sub(now) > MaxAhead {
				t.Errorf("cron %q in %q: first %s, want %s", tc.cron, tc.zone, got, tc.want)
			}
		}
		// A cron's first firing is bounded as an at is: checkAhead, which the server's
		// five-year search keeps it inside of.
		for _, tc := range []struct {
			first time.Time
			ok    bool
		}{
			{now.Add(time.Second), true},
			{now.Add(MaxAhead), true},
			{now.Add(MaxAhead + time.Millisecond), false},
			{now.AddDate(6, 0, 0), true},
			{ServerEnd, false},
			{mustTime(t, "9999-12-31T23:59:59Z"), false},
			{time.Unix(1<<62, 0), false}, // Sub saturates
		} {
			if err := checkAhead(tc.first, now); (err == nil) != tc.ok {
				t.Errorf("checkAhead %s: %v, want ok %v", tc.first, err, tc.ok)
			}
		}
	})

	t.Run("config", func(t *testing.T) {
		for _, tc := range []struct {
			min  time.Duration
			want string
		}{
			{time.Second, ""},
			{MaxAhead, ""},
			{999 * time.Millisecond, "below JetStream's own minimum of 1s"},
			{-time.Minute, "below JetStream's own minimum"},
			{MaxAhead + time.Second, "above the longest interval a schedule may have, 87600h (10 years)"},
		} {
			err := Config{MinInterval: tc.min}.validate()
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("minimum interval %s: %v, want %q", tc.min, err, tc.want)
			}
		}
	})
}

// TestFireStopsUntimeable: a schedule an earlier build stored past what the server can
// time (an every of 2562047h: the server's next firing wraps into the past, and it
// fires four times a second) starts no turn when it fires: its message leaves the
// intake, so it fires no more, and its record says why.
func TestFireStopsUntimeable(t *testing.T) {
	t.Parallel()
	h := newFireStore(t)
	const id = "huge"
	created := time.Now().UTC().Truncate(time.Second)
	rec, _ := json.Marshal(Schedule{ID: id, Agent: "sam", Kind: KindEvery, Every: "2562047h0m0s", Pattern: "@every 2562047h0m0s",
		Prompt: "Tick.", Created: created, First: created.Add(2562047 * time.Hour)})
	if err := bus.CreateOnce(h.ctx, h.s.kv, key("sam", id), rec); err != nil {
		t.Fatal(err)
	}
	// Its message in the intake (here without the schedule header, which would fire it).
	if _, err := h.js.Publish(h.ctx, bus.IntakeSchedule(id), h.body); err != nil {
		t.Fatal(err)
	}
	if n, _, err := h.s.turns.ScheduleMessages(h.ctx, id); err != nil || n != 1 {
		t.Fatalf("%d schedule messages (%v)", n, err)
	}
	for _, seq := range []uint64{7, 8} {
		f := h.fire(id, seq)
		if f.Verdict != Skip || !strings.Contains(f.Why, "every 2562047h0m0s reaches past 2262-04-11T23:47:16Z, the last time the server can fire at") ||
			!strings.Contains(f.Why, "create it again within 87600h (10 years)") {
			t.Errorf("firing %d: %+v", seq, f)
		}
		if _, err := h.record(TurnID(id, seq)); !errors.Is(err, durable.ErrNoRecord) {
			t.Errorf("firing %d has a turn record: %v", seq, err)
		}
	}
	if n, _, err := h.s.turns.ScheduleMessages(h.ctx, id); err != nil || n != 0 {
		t.Errorf("%d schedule messages after the firing (%v)", n, err)
	}
	sch, _, err := h.s.Get(h.ctx, "sam", id)
	if err != nil || !sch.Done || sch.Fired != 0 || sch.Skipped != 2 || !strings.Contains(sch.LastSkip, "fires no more") {
		t.Errorf("the record: %+v %v", sch, err)
	}
	if next, ok := sch.Next(time.Now()); ok {
		t.Errorf("next firing %s", next)
	}
	// One within the bounds fires as before.
	within := h.schedule("fine", 3, time.Now().UTC().Add(-2*recordGrace))
	if _, _, err := h.s.turns.EndQueued(h.ctx, within, bus.TurnCompleted, ""); err != nil {
		t.Fatal(err)
	}
	if f := h.fire("fine", 9); f.Verdict != Run {
		t.Errorf("a schedule within the bounds: %+v", f)
	}
}
