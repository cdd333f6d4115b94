package actors

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets/schedule"
)

// createSchedule runs a main turn of agent that creates a schedule with args; the turns it
// fires play child.
func (h *bgHarness) createSchedule(agent, args string, child ...gateway.ScriptStep) (bus.TurnStatus, schedule.Schedule) {
	h.t.Helper()
	st := h.runMain(agent, gateway.Script{
		Responses: []gateway.ScriptStep{step(call("schedule_create", args)), say("scheduled")},
		Child:     &gateway.Script{Responses: child},
	})
	if st.State != bus.TurnCompleted {
		h.t.Fatalf("main turn: %s %s", st.State, st.Error)
	}
	return st, detailsOf[schedule.Schedule](h.t, st, "schedule_create")
}

// fireNow fires a schedule now, as the server does when it is due.
func (h *bgHarness) fireNow(agent, id string) {
	h.t.Helper()
	store, err := schedule.Open(h.ctx(), h.js, 1, schedule.Config{})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := store.FireNow(h.ctx(), agent, id); err != nil {
		h.t.Fatal(err)
	}
}

// waitFired waits until a schedule has started at least n turns, and returns it.
func (h *bgHarness) waitFired(id string, n int, within time.Duration) schedule.Schedule {
	h.t.Helper()
	var s schedule.Schedule
	bustest.CheckFor(h.t, within, 50*time.Millisecond, func() error {
		var err error
		if s, err = h.schedule(id); err != nil {
			return err
		}
		if s.Fired < n {
			return fmt.Errorf("schedule %s fired %d times, want %d", id, s.Fired, n)
		}
		return nil
	})
	return s
}

// waitTurn waits until a turn's record says it ended, and returns it.
func (h *bgHarness) waitTurn(id string) bus.TurnRecord {
	h.t.Helper()
	var rec bus.TurnRecord
	bustest.CheckFor(h.t, 30*time.Second, 20*time.Millisecond, func() error {
		var err error
		if rec, err = h.turn(id); err != nil {
			return err
		}
		if !rec.State.Ended() {
			return fmt.Errorf("turn %s is %s", id, rec.State)
		}
		return nil
	})
	return rec
}

// scheduleMessages counts the messages of a schedule (0 or 1) and its pending firings in
// the intake.
func (h *bgHarness) scheduleMessages(id string) (schedules, firings uint64) {
	h.t.Helper()
	store, err := h.turns()
	if err != nil {
		h.t.Fatal(err)
	}
	schedules, firings, err = store.ScheduleMessages(h.ctx(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return schedules, firings
}

func TestScheduleOnceFires(t *testing.T) {
	t.Parallel()
	h := startBackground(t, bgConfig{minInterval: time.Second})
	h.profile(`{"version":3,"agent":"sam","schedules":{"enabled":true}}`)
	// At least 9 s ahead: its creation is a turn, which took over 2 s on a loaded machine,
	// and once over 4 s in CI (the time was then past: "at ... is in the past").
	at := time.Now().Add(10 * time.Second).UTC().Truncate(time.Second)
	main, sch := h.createSchedule("sam", `{"prompt":"Remind me to stretch.","at":"`+at.Format(time.RFC3339)+`"}`, say("Time to stretch."))
	if sch.Kind != schedule.KindAt || !sch.At.Equal(at) || sch.CreatedBy != main.Turn || sch.Pattern != "@at "+at.Format(time.RFC3339) {
		t.Errorf("schedule %+v", sch)
	}
	var text string
	for _, c := range main.Calls {
		text = c.Label
	}
	if text != "Scheduled: Remind me to stretch." {
		t.Errorf("completed label %q", text)
	}

	sch = h.waitFired(sch.ID, 1, 30*time.Second)
	if !sch.Done || !strings.HasPrefix(sch.LastTurn, sch.ID+"-") {
		t.Errorf("fired once-schedule %+v", sch)
	}
	rec := h.waitTurn(sch.LastTurn)
	if rec.State != bus.TurnCompleted || rec.Spec.Kind != bus.TurnMain || rec.Spec.Agent != "sam" || rec.Spec.Input != "Remind me to stretch." {
		t.Errorf("fired turn: %s %+v", rec.State, rec.Spec)
	}
	if rec.Created.Before(at) {
		t.Errorf("fired at %s, before its time %s", rec.Created, at)
	}
	// The server removed the schedule's message; nothing more fires.
	if n, _ := h.scheduleMessages(sch.ID); n != 0 {
		t.Errorf("a fired one-shot schedule still has %d messages in the intake", n)
	}
	r := h.call(schedule.Category, "schedule_list", "sam", main.Turn, `{}`)
	if text := replyText(r); !strings.Contains(text, sch.ID+": once at "+at.Format(time.RFC3339)) || !strings.Contains(text, "fires no more; fired 1× (last turn "+sch.LastTurn+")") {
		t.Errorf("schedule_list: %q", text)
	}
}

func TestScheduleEveryFires(t *testing.T) {
	t.Parallel()
	h := startBackground(t, bgConfig{minInterval: time.Second})
	h.profile(`{"version":3,"agent":"sam","schedules":{"enabled":true},` + gateNS + `}`)
	h.gate.release()
	// An hour apart: the test fires it (as the server does when it is due), so that it
	// counts firings without waiting for them. The server's own firings are
	// TestScheduleSurvivesRestart's.
	main, sch := h.createSchedule("sam", `{"prompt":"Check the queue.","every":"1h"}`, gateStep(), say("Checked."))
	if sch.Kind != schedule.KindEvery || sch.Every != "1h0m0s" || sch.Pattern != "@every 1h0m0s" {
		t.Errorf("schedule %+v", sch)
	}
	// Counted firings, each a turn of its own that completes.
	for n := 1; n <= 3; n++ {
		h.fireNow("sam", sch.ID)
		h.waitTurn(h.waitFired(sch.ID, n, 30*time.Second).LastTurn)
	}
	bustest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		store, err := h.turns()
		if err != nil {
			return err
		}
		recs, err := store.List(h.ctx())
		if err != nil {
			return err
		}
		completed := 0
		for _, rec := range recs {
			if strings.HasPrefix(rec.Spec.ID, sch.ID+"-") && rec.State == bus.TurnCompleted && rec.Spec.Input == "Check the queue." {
				completed++
			}
		}
		if completed < 3 {
			return fmt.Errorf("%d fired turns completed", completed)
		}
		return nil
	})

	// Overlap: while a fired turn waits at the gate, the next firings are skipped.
	h.gate.shut()
	before := h.waitFired(sch.ID, 3, time.Second)
	h.fireNow("sam", sch.ID)
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if h.gate.waiting() != 1 {
			return fmt.Errorf("%d fired turns wait at the gate", h.gate.waiting())
		}
		return nil
	})
	h.fireNow("sam", sch.ID)
	h.fireNow("sam", sch.ID)
	bustest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		s, err := h.schedule(sch.ID)
		if err != nil {
			return err
		}
		if s.Skipped < 2 {
			return fmt.Errorf("skipped %d firings", s.Skipped)
		}
		if !strings.Contains(s.LastSkip, "turn "+s.LastTurn+" of the schedule was still running") {
			return fmt.Errorf("last skip %q", s.LastSkip)
		}
		if s.Fired > before.Fired+1 {
			return fmt.Errorf("fired %d turns while the one before waited (from %d)", s.Fired, before.Fired)
		}
		return nil
	})
	h.gate.release()

	// Cancelled: its message leaves the intake, so it cannot fire again, and firings
	// already queued start nothing.
	r := h.call(schedule.Category, "schedule_cancel", "sam", main.Turn, `{"schedule_id":"`+sch.ID+`"}`)
	if r.Outcome != bus.OutcomeOK || !strings.Contains(replyText(r), "Cancelled schedule "+sch.ID+" (every 1h0m0s)") {
		t.Errorf("schedule_cancel: %s %q", r.Outcome, replyText(r))
	}
	if n, _ := h.scheduleMessages(sch.ID); n != 0 {
		t.Errorf("the cancelled schedule still has %d messages in the intake", n)
	}
	bustest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if _, n := h.scheduleMessages(sch.ID); n != 0 {
			return fmt.Errorf("%d firings still queued", n)
		}
		return nil
	})
	if _, err := h.schedule(sch.ID); !errors.Is(err, schedule.ErrNotFound) {
		t.Errorf("the cancelled schedule's record: %v", err)
	}
	r = h.call(schedule.Category, "schedule_cancel", "sam", main.Turn, `{"schedule_id":"`+sch.ID+`"}`)
	if r.Outcome != bus.OutcomeError || !strings.Contains(r.Error, "you have no schedule "+sch.ID) {
		t.Errorf("cancel again: %s %q", r.Outcome, replyText(r))
	}
}

func TestScheduleOverlapQueue(t *testing.T) {
	t.Parallel()
	h := startBackground(t, bgConfig{minInterval: time.Second})
	h.profile(`{"version":3,"agent":"sam","schedules":{"enabled":true,"overlap":"queue"},` + gateNS + `}`)
	// An hour apart: the test fires it (as the server does when it is due).
	_, sch := h.createSchedule("sam", `{"prompt":"Sync.","every":"1h"}`, gateStep(), say("Synced."))
	h.fireNow("sam", sch.ID)
	first := h.waitFired(sch.ID, 1, 30*time.Second)
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if h.gate.waiting() != 1 {
			return fmt.Errorf("%d fired turns wait at the gate", h.gate.waiting())
		}
		return nil
	})
	h.fireNow("sam", sch.ID)
	h.fireNow("sam", sch.ID)
	// While the first waits at the gate, firings wait in the intake: none skipped, none
	// started.
	bustest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if _, n := h.scheduleMessages(sch.ID); n < 2 {
			return fmt.Errorf("%d firings waiting", n)
		}
		return nil
	})
	if s, err := h.schedule(sch.ID); err != nil || s.Fired != 1 || s.Skipped != 0 {
		t.Fatalf("while its turn runs: %+v %v", s, err)
	}
	// When it ends, the queued firings run, one after another.
	h.gate.release()
	h.waitTurn(first.LastTurn)
	after := h.waitFired(sch.ID, 3, 30*time.Second)
	if after.Skipped != 0 {
		t.Errorf("queue policy skipped %d firings", after.Skipped)
	}
}

func TestScheduleSurvivesRestart(t *testing.T) {
	t.Parallel()
	h := startBackground(t, bgConfig{minInterval: time.Second})
	h.profile(`{"version":3,"agent":"sam","schedules":{"enabled":true}}`)
	_, every := h.createSchedule("sam", `{"prompt":"Tick.","every":"1s"}`, say("Tock."))
	// At least 9 s ahead: its creation is a turn, which took over 2 s on a loaded machine,
	// and once over 4 s in CI (the time was then past: "at ... is in the past").
	at := time.Now().Add(10 * time.Second).UTC().Truncate(time.Second)
	_, once := h.createSchedule("sam", `{"prompt":"Once, after the restart.","at":"`+at.Format(time.RFC3339)+`"}`, say("Done."))
	before := h.waitFired(every.ID, 1, 30*time.Second)

	// The node and the server stop; both come back on the same store.
	h.stop()
	if !time.Now().Before(at) {
		t.Log("the restart began after the one-shot schedule's time; it fires on the restarted server all the same")
	}
	h.gate = newGate()
	h.start()

	after := h.waitFired(every.ID, before.Fired+2, 60*time.Second)
	if rec := h.waitTurn(after.LastTurn); rec.State != bus.TurnCompleted || rec.Spec.Input != "Tick." {
		t.Errorf("a turn fired after the restart: %s %+v", rec.State, rec.Spec)
	}
	fired := h.waitFired(once.ID, 1, 30*time.Second)
	if rec := h.waitTurn(fired.LastTurn); rec.State != bus.TurnCompleted || rec.Spec.Input != "Once, after the restart." {
		t.Errorf("the one-shot turn: %s %+v", rec.State, rec.Spec)
	}
}

func TestScheduleRefusesBadInput(t *testing.T) {
	t.Parallel()
	h := startBackground(t, bgConfig{}) // the default minimum interval, a minute
	h.profile(`{"version":3,"agent":"sam","schedules":{"enabled":true}}`)
	h.profile(`{"version":3,"agent":"off"}`)
	main := h.runMain("sam", gateway.Script{Responses: []gateway.ScriptStep{say("ready")}})
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		args, want string
	}{
		{`{"prompt":"x","cron":"0 61 * * * *"}`, `cron "0 61 * * * *": minute field "61": 61 is above the minute's maximum 59`},
		{`{"prompt":"x","cron":"every morning"}`, `cron "every morning" has 2 fields; want 6 (second minute hour day-of-month month day-of-week`},
		{`{"prompt":"x","cron":"0 0 9 * * mon-fry"}`, `cron "0 0 9 * * mon-fry": day of week field "mon-fry": "fry" is not a number`},
		{`{"prompt":"x","cron":"0 0 0 30 2 *"}`, `cron "0 0 0 30 2 *": it never fires within five years`},
		{`{"prompt":"x","cron":"0 0 9 * * *","time_zone":"Mars/Olympus_Mons"}`, `unknown time zone "Mars/Olympus_Mons": use an IANA name such as Europe/Amsterdam or America/New_York`},
		{`{"prompt":"x","cron":"0 0 9 * * *","time_zone":"Local"}`, `time zone "Local" is whatever the server's clock says`},
		{`{"prompt":"x","at":"` + past + `"}`, "at " + past + " is in the past (it is now "},
		{`{"prompt":"x","at":"tomorrow at nine"}`, `at "tomorrow at nine" is not an RFC 3339 time with an offset`},
		{`{"prompt":"x","at":"2030-01-01T09:00:00"}`, `at "2030-01-01T09:00:00" is not an RFC 3339 time with an offset`},
		{`{"prompt":"x","every":"30s"}`, "every 30s is shorter than the minimum interval between firings, 1m0s"},
		{`{"prompt":"x","every":"daily"}`, `every "daily" is not a duration: write it like 30m, 2h or 24h`},
		{`{"prompt":"x","cron":"*/10 * * * * *"}`, `cron "*/10 * * * * *" fires 10s apart`},
		{`{"prompt":"x"}`, "say when: give exactly one of at"},
		{`{"prompt":"x","every":"1h","cron":"@daily"}`, "give only one of at, every and cron (got every and cron)"},
		{`{"prompt":"x","every":"1h","time_zone":"Europe/Amsterdam"}`, "time_zone applies to cron only: an interval does not depend on a zone"},
		{`{"prompt":"   ","every":"1h"}`, "the prompt is empty"},
	} {
		r := h.call(schedule.Category, "schedule_create", "sam", main.Turn, tc.args)
		if r.Outcome != bus.OutcomeError || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s:\n got %s %q\nwant %q", tc.args, r.Outcome, replyText(r), tc.want)
		}
	}
	// Not enabled in the profile, or no turn to take the model from.
	offMain := h.runMain("off", gateway.Script{Responses: []gateway.ScriptStep{say("ready")}})
	r := h.call(schedule.Category, "schedule_create", "off", offMain.Turn, `{"prompt":"x","every":"1h"}`)
	if !strings.Contains(r.Error, "agent off may not create schedules: its profile does not enable them (schedules.enabled)") {
		t.Errorf("an agent without schedules: %q", replyText(r))
	}
	r = h.call(schedule.Category, "schedule_create", "sam", "", `{"prompt":"x","every":"1h"}`)
	if !strings.Contains(r.Error, "this call comes from no turn") {
		t.Errorf("no turn: %q", replyText(r))
	}
	// Nothing was stored, and nothing waits in the intake.
	if all, err := schedule.List(h.ctx(), mustKV(t, h.js, bus.BucketSchedules), ""); err != nil || len(all) != 0 {
		t.Errorf("stored after refusals: %+v %v", all, err)
	}
	// A good one passes, read as the server reads it.
	r = h.call(schedule.Category, "schedule_create", "sam", main.Turn, `{"prompt":"x","cron":"30 9 * * mon-fri","time_zone":"Europe/Amsterdam"}`)
	var sch schedule.Schedule
	if err := json.Unmarshal(r.Details, &sch); r.Outcome != bus.OutcomeOK || err != nil || sch.Cron != "0 30 9 * * mon-fri" {
		t.Errorf("a five-field cron: %s %q %+v", r.Outcome, replyText(r), sch)
	}
	if !strings.Contains(replyText(r), `(Read as the six-field cron "0 30 9 * * mon-fri".)`) {
		t.Errorf("reply %q", replyText(r))
	}
}
