package durable

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

// TestTranscriptStream: the transcript stream, asked with three replicas of one server,
// has one and takes every turn's subject; a stream already there keeps the limits an
// operator gave it, and its messages.
func TestTranscriptStream(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := bustest.JetStream(t, srv, "transcripts")

	st, err := bus.Stream(ctx, js, transcriptStreamConfig(3))
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.Replicas != 1 || info.Config.Subjects[0] != bus.AllTranscripts || !info.Config.AllowDirect {
		t.Errorf("stream config: replicas %d, subjects %v, direct %v", info.Config.Replicas, info.Config.Subjects, info.Config.AllowDirect)
	}
	for _, entry := range []string{"model: hi", "call: read", "result: ok"} {
		if _, err := js.Publish(ctx, bus.TranscriptSubject("t1"), []byte(entry)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, bus.TranscriptSubject("t2"), []byte("other turn")); err != nil {
		t.Fatal(err)
	}
	last, err := st.GetLastMsgForSubject(ctx, bus.TranscriptSubject("t1"))
	if err != nil || string(last.Data) != "result: ok" {
		t.Fatalf("last entry of t1: %v, %v", last, err)
	}

	// An operator's limit stays when a node opens the stream again.
	cfg := transcriptStreamConfig(1)
	cfg.MaxMsgsPerSubject = 100
	if _, err := bus.Stream(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	st, err = ensureTranscripts(ctx, js, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxMsgsPerSubject; got != 100 {
		t.Errorf("MaxMsgsPerSubject after ensureTranscripts = %d, want 100", got)
	}
	if n := st.CachedInfo().State.Msgs; n != 4 {
		t.Errorf("messages after ensureTranscripts = %d, want 4", n)
	}
}

// TestIntakeHoldsSchedules checks what the schedules are built on, against the real
// server: an intake made by an earlier build (without message schedules) gets them
// turned on in place; a schedule message fires into IntakeFired, where the runners'
// consumer takes each firing with the server's headers and ours, and never the schedule
// message itself; purging the schedule's subject stops it. ScheduleMessages and
// IntakeMessages count what the intake holds meanwhile.
func TestIntakeHoldsSchedules(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := bustest.JetStream(t, srv, "intake")

	old := intakeStreamConfig(1)
	old.AllowMsgSchedules, old.AllowRollup = false, false
	if _, err := bus.Stream(ctx, js, old); err != nil {
		t.Fatal(err)
	}
	st, err := ensureIntake(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; !cfg.AllowMsgSchedules || !cfg.AllowRollup || cfg.Retention != jetstream.WorkQueuePolicy {
		t.Fatalf("intake after ensureIntake: schedules %v, rollup %v, retention %v", cfg.AllowMsgSchedules, cfg.AllowRollup, cfg.Retention)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, runnerConsumerConfig("", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s := openStore(t, js, "n1", 1)

	m := nats.NewMsg(bus.IntakeSchedule("s1"))
	m.Data = []byte(`{"input":"hi"}`)
	m.Header.Set(bus.HeaderSchedule, "@every 1s")
	m.Header.Set(bus.HeaderScheduleTarget, bus.IntakeFired("s1"))
	m.Header.Set(bus.HeaderAgent, "ann")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.ScheduleMessages(ctx, "s1"); err != nil || n != 1 {
		t.Errorf("schedule messages of s1: %d, %v; want 1", n, err)
	}
	var fired []jetstream.Msg
	deadline := time.Now().Add(20 * time.Second)
	for len(fired) < 2 && time.Now().Before(deadline) {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			fired = append(fired, msg)
			_ = msg.Ack()
		}
	}
	if len(fired) < 2 {
		t.Fatalf("%d firings within 20 s of an @every 1s schedule", len(fired))
	}
	for _, f := range fired {
		id, ok := bus.ParseIntakeFired(f.Subject())
		h := f.Headers()
		if !ok || id != "s1" || h.Get(bus.HeaderScheduler) != bus.IntakeSchedule("s1") || h.Get(bus.HeaderAgent) != "ann" || string(f.Data()) != `{"input":"hi"}` {
			t.Errorf("firing %s: headers %v, body %s", f.Subject(), h, f.Data())
		}
		if _, err := time.Parse(time.RFC3339, h.Get(bus.HeaderScheduleNext)); err != nil {
			t.Errorf("firing's %s: %v", bus.HeaderScheduleNext, err)
		}
	}

	if err := s.RemoveSchedule(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	// Settle what fired before the purge, then nothing more comes.
	for {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(1500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			if err := msg.DoubleAck(ctx); err != nil { // confirmed before the stream is counted
				t.Fatal(err)
			}
		}
		if n == 0 {
			break
		}
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(bus.AllIntake))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 0 {
		t.Errorf("intake after the purge holds %v", info.State.Subjects)
	}
	if n, f, err := s.ScheduleMessages(ctx, "s1"); err != nil || n != 0 || f != 0 {
		t.Errorf("schedule messages of s1 after the purge: %d and %d firings, %v; want none", n, f, err)
	}
	if n, err := s.IntakeMessages(ctx); err != nil || n != 0 {
		t.Errorf("intake messages after the purge: %d, %v; want 0", n, err)
	}
}

// TestIntakeCounts: ScheduleMessages counts a schedule's message and its firings not yet
// taken, and nothing of a turn or schedule of another id; IntakeMessages counts all.
func TestIntakeCounts(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := bustest.JetStream(t, srv, "counts")
	s := openStore(t, js, "n1", 1)
	if n, err := s.IntakeMessages(ctx); err != nil || n != 0 {
		t.Fatalf("a new intake holds %d, %v", n, err)
	}
	for _, subj := range []string{bus.IntakeSchedule("s1"), bus.IntakeFired("s1"), bus.IntakeFired("s1"),
		bus.IntakeAny("s1"), bus.IntakeFired("s2"), bus.IntakeSchedule("s10")} {
		if _, err := js.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n, f, err := s.ScheduleMessages(ctx, "s1"); err != nil || n != 1 || f != 2 {
		t.Errorf("schedule s1: %d messages and %d firings, %v; want 1 and 2", n, f, err)
	}
	if n, err := s.IntakeMessages(ctx); err != nil || n != 6 {
		t.Errorf("intake messages: %d, %v; want 6", n, err)
	}
	if _, _, err := s.ScheduleMessages(ctx, "s.*"); err == nil {
		t.Error("a schedule id that is no token was counted")
	}
	client, err := Open(ctx, bustest.JetStream(t, bustest.Server(t, nil), "empty"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.IntakeMessages(ctx); !errors.Is(err, ErrNoTurns) {
		t.Errorf("intake messages of a bus without turns: %v, want ErrNoTurns", err)
	}
}

// TestStoredAndDeletedTranscript: StoredTranscript returns a turn's messages as stored
// (bodies undecoded, headers kept, a body no reader could decode included);
// DeleteTranscript refuses a turn that has not ended and removes the transcript of one
// that has, or of a turn without a record, and nothing of another turn.
func TestStoredAndDeletedTranscript(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := bustest.JetStream(t, srv, "stored")
	s := openStore(t, js, "n1", 1)

	msgs := queued(t, s, 1)
	spec := specOf(t, msgs[0])
	l, err := claim(t, ctx, s, msgs[0], spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, 1, words("secret-ish")); err != nil {
		t.Fatal(err)
	}
	stored, err := s.StoredTranscript(ctx, spec.ID)
	if err != nil || len(stored) != 2 {
		t.Fatalf("stored transcript: %d messages, %v; want 2", len(stored), err)
	}
	if !strings.Contains(string(stored[1].Data), "secret-ish") || stored[1].Header.Get(bus.HeaderSeq) != "2" || stored[1].Seq <= stored[0].Seq {
		t.Errorf("second stored message: seq %d after %d, headers %v, body %s", stored[1].Seq, stored[0].Seq, stored[1].Header, stored[1].Data)
	}
	if err := s.DeleteTranscript(ctx, spec.ID); err == nil || !strings.Contains(err.Error(), "running") {
		t.Errorf("delete the transcript of a running turn: %v, want refused", err)
	}
	if err := l.End(ctx, bus.TurnCompleted, "", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Ack(); err != nil {
		t.Fatal(err)
	}

	// A turn without a record, whose transcript no reader could decode.
	if _, err := js.Publish(ctx, bus.TranscriptSubject("filler"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if stored, err := s.StoredTranscript(ctx, "filler"); err != nil || len(stored) != 1 || string(stored[0].Data) != "not json" {
		t.Errorf("stored transcript of filler: %+v, %v", stored, err)
	}
	if err := s.DeleteTranscript(ctx, "filler"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StoredTranscript(ctx, "filler"); !errors.Is(err, ErrNoTranscript) {
		t.Errorf("stored transcript of filler after the delete: %v, want ErrNoTranscript", err)
	}
	if stored, err := s.StoredTranscript(ctx, spec.ID); err != nil || len(stored) != 2 {
		t.Errorf("another turn's delete took this one's messages: %d, %v", len(stored), err)
	}
	if err := s.DeleteTranscript(ctx, spec.ID); err != nil {
		t.Fatalf("delete the transcript of an ended turn: %v", err)
	}
	if _, err := s.ReadTranscript(ctx, spec.ID); !errors.Is(err, ErrNoTranscript) {
		t.Errorf("transcript after the delete: %v, want ErrNoTranscript", err)
	}
	if err := s.DeleteTranscript(ctx, spec.ID); err != nil {
		t.Errorf("delete a transcript already gone: %v", err)
	}
}

// TestRestoreRecord: a restored record reads back as written; restoring it again is a
// retry, not an error; a record that differs is refused (ErrTurnExists), and nothing is
// queued.
func TestRestoreRecord(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := bustest.JetStream(t, srv, "restore")
	s := openStore(t, js, "n1", 1)

	now := time.Now().UTC().Truncate(time.Second)
	rec := bus.TurnRecord{Spec: bus.TurnSpec{ID: "t-old", Agent: "ann", Input: "hi"}, State: bus.TurnRunning, Owner: "ghost", Epoch: 1,
		Created: now, Updated: now}
	rev, err := s.RestoreRecord(ctx, rec)
	if err != nil || rev == 0 {
		t.Fatalf("restore: rev %d, %v", rev, err)
	}
	got, grev, err := s.Record(ctx, "t-old")
	if err != nil || grev != rev || got.Owner != "ghost" || got.State != bus.TurnRunning || got.Epoch != 1 || !got.Created.Equal(now) {
		t.Fatalf("restored record: %+v rev %d (wrote %d), %v", got, grev, rev, err)
	}
	if again, err := s.RestoreRecord(ctx, rec); err != nil || again != rev {
		t.Errorf("restore the same record again: rev %d, %v; want %d", again, err, rev)
	}
	rec.Owner = "n1"
	if _, err := s.RestoreRecord(ctx, rec); !errors.Is(err, ErrTurnExists) {
		t.Errorf("restore over another record: %v, want ErrTurnExists", err)
	}
	if got, _, _ := s.Record(ctx, "t-old"); got.Owner != "ghost" {
		t.Errorf("the refused restore wrote the record: owner %q", got.Owner)
	}
	if n, err := s.IntakeMessages(ctx); err != nil || n != 0 {
		t.Errorf("a restore queued something: %d intake messages, %v", n, err)
	}
	rec.Spec.ID = "t old"
	if _, err := s.RestoreRecord(ctx, rec); err == nil {
		t.Error("restored a record under an invalid id")
	}
}

// TestFireScheduleNow: a schedule fired now is taken from the intake at once, as a
// firing of the server: on its target, with its body and headers; a repeating schedule
// stays and goes on firing, a one-shot one is purged by its firing, as the server's own.
func TestFireScheduleNow(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	ctx := bustest.Context(t)
	js := bustest.JetStream(t, srv, "intake")
	s := openStore(t, js, "n1", 1)
	st, err := ensureIntake(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, runnerConsumerConfig("", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	for id, pattern := range map[string]string{"every": "@every 1h", "once": "@at " + at} {
		m := nats.NewMsg(bus.IntakeSchedule(id))
		m.Data = []byte(`{"input":"` + id + `"}`)
		m.Header.Set(bus.HeaderSchedule, pattern)
		m.Header.Set(bus.HeaderScheduleTarget, bus.IntakeFired(id))
		m.Header.Set(bus.HeaderAgent, "ann")
		if err := s.PutSchedule(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.FireScheduleNow(ctx, "nothing"); err == nil || !strings.Contains(err.Error(), "no message in the intake") {
		t.Errorf("fire a schedule that does not exist: %v", err)
	}
	for _, id := range []string{"every", "once", "every"} {
		if err := s.FireScheduleNow(ctx, id); err != nil {
			t.Fatalf("fire %s: %v", id, err)
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got []jetstream.Msg
		for msg := range batch.Messages() {
			got = append(got, msg)
			// Acked and confirmed: the work queue has removed the firing when the
			// counts below are read (a plain Ack was still in flight once, under load).
			if err := msg.DoubleAck(ctx); err != nil {
				t.Fatalf("ack the firing of %s: %v", id, err)
			}
		}
		if len(got) != 1 {
			t.Fatalf("fire %s: %d firings taken, want 1", id, len(got))
		}
		f, h := got[0], got[0].Headers()
		if sched, ok := bus.ParseIntakeFired(f.Subject()); !ok || sched != id || h.Get(bus.HeaderAgent) != "ann" ||
			string(f.Data()) != `{"input":"`+id+`"}` || h.Get(bus.HeaderSchedule) != "" || h.Get(bus.HeaderScheduleTarget) != "" {
			t.Errorf("firing of %s: %s, headers %v, body %s", id, f.Subject(), h, f.Data())
		}
	}
	if n, f, err := s.ScheduleMessages(ctx, "every"); err != nil || n != 1 || f != 0 {
		t.Errorf("the repeating schedule after its firings: %d messages and %d firings, %v; want 1 and 0", n, f, err)
	}
	if n, f, err := s.ScheduleMessages(ctx, "once"); err != nil || n != 0 || f != 0 {
		t.Errorf("the one-shot schedule after its firing: %d messages and %d firings, %v; want none", n, f, err)
	}
	if err := s.FireScheduleNow(ctx, "once"); err == nil {
		t.Error("a one-shot schedule fired twice")
	}
}
