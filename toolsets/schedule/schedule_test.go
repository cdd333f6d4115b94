package schedule

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/internal/testmain"
)

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{})
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestScheduleCronTimeZone computes next firings in time zones without waiting for them
// (across daylight-saving changes, with the day-of-month/day-of-week rule), then checks
// against the real server that it reads a zone as this package does: a cron due in a
// few seconds in Kathmandu (UTC+05:45) fires then, and the server's next firing is the
// one computed here.
func TestScheduleCronTimeZone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr, zone, from, want string
	}{
		// Weekdays at 9:30 in New York, from a Saturday before the spring change: the
		// Monday after, in daylight time.
		{"0 30 9 * * mon-fri", "America/New_York", "2026-03-07T12:00:00Z", "2026-03-09T09:30:00-04:00"},
		// The same in Amsterdam on the day the clocks go forward.
		{"0 30 9 * * *", "Europe/Amsterdam", "2026-03-28T10:00:00+01:00", "2026-03-29T09:30:00+02:00"},
		// An hour that does not exist that day (2:30 on the spring change) is skipped.
		{"0 30 2 * * *", "Europe/Amsterdam", "2026-03-28T03:00:00+01:00", "2026-03-30T02:30:00+02:00"},
		// A zone with a 45-minute offset.
		{"0 0 8 * * *", "Asia/Kathmandu", "2026-06-01T03:00:00Z", "2026-06-02T08:00:00+05:45"},
		// Without a zone: UTC.
		{"0 0 8 * * *", "", "2026-06-01T07:59:59Z", "2026-06-01T08:00:00Z"},
		// Day of month or day of week, when neither is a star: the 13th, or a Friday.
		{"0 0 0 13 * fri", "UTC", "2026-02-07T00:00:00Z", "2026-02-13T00:00:00Z"},
		{"0 0 0 13 * fri", "UTC", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"},
		// Steps, lists and names.
		{"*/15 0 12 1,15 jan,jul *", "UTC", "2026-01-15T12:00:40Z", "2026-01-15T12:00:45Z"},
		// Descriptors.
		{"@weekly", "Europe/Amsterdam", "2026-06-03T12:00:00+02:00", "2026-06-07T00:00:00+02:00"},
		{"@monthly", "UTC", "2026-06-03T12:00:00Z", "2026-07-01T00:00:00Z"},
	} {
		var loc *time.Location
		if tc.zone != "" {
			loc = mustZone(t, tc.zone)
		}
		got, err := NextCron(tc.expr, loc, mustTime(t, tc.from))
		if err != nil {
			t.Errorf("%s in %s: %v", tc.expr, tc.zone, err)
			continue
		}
		if want := mustTime(t, tc.want); !got.Equal(want) || got.Format(time.RFC3339) != tc.want {
			t.Errorf("%s in %s after %s: %s, want %s", tc.expr, tc.zone, tc.from, got.Format(time.RFC3339), tc.want)
		}
	}

	// Plan says the same first firing, in the zone.
	now := mustTime(t, "2026-03-07T12:00:00Z")
	s, err := Plan(CreateArgs{Prompt: "stand-up", Cron: "30 9 * * mon-fri", TimeZone: "America/New_York"}, now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if s.Cron != "0 30 9 * * mon-fri" || s.Pattern != s.Cron || formatIn(s.First, s.TimeZone) != "2026-03-09T09:30:00-04:00" {
		t.Errorf("plan: %+v", s)
	}
	if next, ok := s.Next(s.First); !ok || formatIn(next, s.TimeZone) != "2026-03-10T09:30:00-04:00" {
		t.Errorf("the firing after the first: %s", next)
	}

	// The server agrees.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := bustest.Server(t, nil)
	nc := bustest.Conn(t, srv, "cron")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The intake and the consumer of turns any node runs, which takes the firings.
	turns, err := durable.Open(ctx, js, durable.Config{Node: "cron", Replicas: 1, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	consumers, err := turns.RunnerConsumers(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cons := consumers[0]
	kathmandu := mustZone(t, "Asia/Kathmandu")
	due := time.Now().Add(2 * time.Second).In(kathmandu).Truncate(time.Second) // 1-2 s out
	expr := fmt.Sprintf("%d %d %d * * *", due.Second(), due.Minute(), due.Hour())
	if next, err := NextCron(expr, kathmandu, time.Now()); err != nil || !next.Equal(due) {
		t.Fatalf("computed %s, want %s (%v)", next, due, err)
	}
	m := nats.NewMsg(bus.IntakeSchedule("tz"))
	m.Data = []byte(`{}`)
	m.Header.Set(bus.HeaderSchedule, expr)
	m.Header.Set(bus.HeaderScheduleTimeZone, "Asia/Kathmandu")
	m.Header.Set(bus.HeaderScheduleTarget, bus.IntakeFired("tz"))
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// A server reading the fields in UTC would fire 5h45 off, not within this wait.
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var fired jetstream.Msg
	for msg := range batch.Messages() {
		fired = msg
	}
	if fired == nil {
		t.Fatalf("cron %q in Asia/Kathmandu did not fire within 20 s of %s", expr, due)
	}
	md, err := fired.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if early := due.Sub(md.Timestamp); early > 0 {
		t.Errorf("fired at %s, %s before its time", md.Timestamp, early)
	}
	serverNext, err := time.Parse(time.RFC3339, fired.Headers().Get(bus.HeaderScheduleNext))
	if err != nil {
		t.Fatal(err)
	}
	ourNext, err := NextCron(expr, kathmandu, due)
	if err != nil || !serverNext.Equal(ourNext) {
		t.Errorf("the server's next firing %s, ours %s (%v)", serverNext, ourNext, err)
	}
	_ = fired.Ack()
}

func TestPlan(t *testing.T) {
	t.Parallel()
	now := mustTime(t, "2026-05-04T10:00:00Z")
	for _, tc := range []struct {
		args    CreateArgs
		pattern string
		first   string
		err     string
	}{
		{CreateArgs{Prompt: "p", At: "2026-05-04T12:00:00+02:00"}, "@at 2026-05-04T10:00:00Z", "", "is in the past"},
		{CreateArgs{Prompt: "p", At: "2026-05-04T12:00:01+02:00"}, "@at 2026-05-04T10:00:01Z", "2026-05-04T12:00:01+02:00", ""},
		{CreateArgs{Prompt: "p", Every: "90m"}, "@every 1h30m0s", "2026-05-04T11:30:00Z", ""},
		{CreateArgs{Prompt: "p", Every: "59s"}, "", "", "shorter than the minimum interval between firings, 1m0s"},
		{CreateArgs{Prompt: "p", Cron: "@hourly"}, "@hourly", "2026-05-04T11:00:00Z", ""},
		{CreateArgs{Prompt: "p", Cron: "@often"}, "", "", `cron "@often": unknown descriptor`},
		{CreateArgs{Prompt: "p", Cron: "0 * * * * *"}, "0 * * * * *", "2026-05-04T10:01:00Z", ""},
		{CreateArgs{Prompt: "p", Cron: "0,30 * * * * *"}, "", "", `fires 30s apart`},
		{CreateArgs{Prompt: "p", Cron: "0 0 9 * * 7"}, "", "", "7 is above the day of week's maximum 6"},
		{CreateArgs{Prompt: "p", Cron: "0 0 9-5 * * *"}, "", "", "range 9-5 runs backwards"},
		{CreateArgs{Prompt: "p", Cron: "0 0 9 * * *", TimeZone: "Nowhere"}, "", "", `unknown time zone "Nowhere"`},
		{CreateArgs{Prompt: "p", At: "2026-05-05T09:00:00Z", TimeZone: "UTC"}, "", "", "time_zone applies to cron only: write at with its offset"},
	} {
		s, err := Plan(tc.args, now, time.Minute)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tc.args, err)
			continue
		}
		if s.Pattern != tc.pattern || s.First.Format(time.RFC3339) != tc.first {
			t.Errorf("%+v: pattern %q first %s, want %q %s", tc.args, s.Pattern, s.First.Format(time.RFC3339), tc.pattern, tc.first)
		}
	}
}
