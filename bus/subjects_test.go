package bus

import (
	"testing"
	"time"
)

func TestSubjectBuilders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		got, want string
	}{
		{ToolSubject("fs", "read"), "toolbus.tool.fs.read"},
		{CategorySubjects("fs"), "toolbus.tool.fs.>"},
		{TurnSubjects("t1"), "toolbus.turn.t1.>"},
		{ResultSubject("t1", "c1"), "toolbus.turn.t1.res.c1"},
		{EventSubject("t1", "c1", EventProgress), "toolbus.turn.t1.evt.c1.progress"},
		{AbortSubject("t1"), "toolbus.turn.t1.abort"},
		{TurnStatusSubject("t1", StatusStep), "toolbus.turn.t1.status.step"},
		{NodeStartTurnSubject("n1"), "toolbus.node.n1.turn.start"},
		{TranscriptSubject("t1"), "toolbus.transcript.t1"},
		{CategoryQueue("fs"), "toolbus.fs"},
		{CategoryService("fs"), "toolbus-fs"},
		{AllTurns, "toolbus.turn.>"},
		{AllAborts, "toolbus.turn.*.abort"},
		{AnyNodeStartTurn, "toolbus.nodes.turn.start"},
		{IntakeSchedule("s1"), "toolbus.intake.schedule.s1"},
		{IntakeFired("s1"), "toolbus.intake.fired.s1"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestParseIntakeFired(t *testing.T) {
	t.Parallel()
	for subject, want := range map[string]string{
		IntakeFired("s1"):                 "s1",
		"toolbus.intake.fired.":           "",
		"toolbus.intake.fired.s1.x":       "",
		IntakeSchedule("s1"):              "",
		IntakeAny("t1"):                   "",
		"toolbus.intake.firedx.s1":        "",
		"other.toolbus.intake.fired.s1.x": "",
	} {
		got, ok := ParseIntakeFired(subject)
		if got != want || ok != (want != "") {
			t.Errorf("ParseIntakeFired(%q) = %q, %v; want %q", subject, got, ok, want)
		}
	}
}

func TestParseTurnSubject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subject string
		want    TurnSubject
		ok      bool
	}{
		{"toolbus.turn.t1.res.c1", TurnSubject{Turn: "t1", Kind: KindResult, Call: "c1"}, true},
		{"toolbus.turn.t1.evt.c1.started", TurnSubject{Turn: "t1", Kind: KindEvent, Call: "c1", Event: EventStarted}, true},
		{"toolbus.turn.t1.abort", TurnSubject{Turn: "t1", Kind: KindAbort}, true},
		{"toolbus.turn.t1.status.done", TurnSubject{Turn: "t1", Kind: KindStatus, Status: StatusDone}, true},
		{ResultSubject("T9", "C9"), TurnSubject{Turn: "T9", Kind: KindResult, Call: "C9"}, true},
		{EventSubject("T9", "C9", EventPresentation), TurnSubject{Turn: "T9", Kind: KindEvent, Call: "C9", Event: EventPresentation}, true},
		{"toolbus.turn.t1", TurnSubject{}, false},
		{"toolbus.turn.t1.", TurnSubject{}, false},
		{"toolbus.turn..abort", TurnSubject{}, false},
		{"toolbus.turn.t1.abort.now", TurnSubject{}, false},
		{"toolbus.turn.t1.res", TurnSubject{}, false},
		{"toolbus.turn.t1.res.", TurnSubject{}, false},
		{"toolbus.turn.t1.res.c1.extra", TurnSubject{}, false},
		{"toolbus.turn.t1.evt.c1", TurnSubject{}, false},
		{"toolbus.turn.t1.evt..started", TurnSubject{}, false},
		{"toolbus.turn.t1.evt.c1.", TurnSubject{}, false},
		{"toolbus.turn.t1.evt.c1.started.x", TurnSubject{}, false},
		{"toolbus.turn.t1.status", TurnSubject{}, false},
		{"toolbus.turn.t1.status.a.b", TurnSubject{}, false},
		{"toolbus.turn.t1.other.c1", TurnSubject{}, false},
		{"toolbus.tool.fs.read", TurnSubject{}, false},
		{"other.turn.t1.abort", TurnSubject{}, false},
		{"", TurnSubject{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseTurnSubject(tt.subject)
		if ok != tt.ok || got != tt.want {
			t.Errorf("ParseTurnSubject(%q) = %+v, %v; want %+v, %v", tt.subject, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseTurnSubjectDoesNotAllocate(t *testing.T) {
	subjects := []string{"toolbus.turn.t1.res.c1", "toolbus.turn.t1.evt.c1.progress", "toolbus.turn.t1.abort", "toolbus.tool.x"}
	allocs := testing.AllocsPerRun(100, func() {
		for _, s := range subjects {
			ParseTurnSubject(s)
		}
	})
	if allocs != 0 {
		t.Errorf("ParseTurnSubject allocates %v times per run", allocs)
	}
}

func TestValidToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s  string
		ok bool
	}{
		{"t1", true},
		{"web_search", true},
		{"call-9", true},
		{"ümlaut", true},
		{NewID(), true},
		{"", false},
		{"a.b", false},
		{"*", false},
		{"a>", false},
		{"a b", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\u00a0b", false}, // no-break space
		{"a\x00b", false},
		{"a\x7fb", false},
		{"\xff", false},
	}
	for _, tt := range tests {
		if got := ValidToken(tt.s); got != tt.ok {
			t.Errorf("ValidToken(%q) = %v, want %v", tt.s, got, tt.ok)
		}
	}
}

func TestNewIDIsUnique(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for range 1000 {
		id := NewID()
		if seen[id] {
			t.Fatalf("NewID repeated %q", id)
		}
		seen[id] = true
	}
}

func TestDeadlineRoundTrip(t *testing.T) {
	t.Parallel()
	local := time.Date(2026, 5, 4, 3, 2, 1, 123456789, time.FixedZone("X", 2*3600))
	s := FormatDeadline(local)
	if s != "2026-05-04T01:02:01.123456789Z" {
		t.Errorf("FormatDeadline = %q, want UTC RFC 3339 with nanoseconds", s)
	}
	got, err := ParseDeadline(s)
	if err != nil || !got.Equal(local) {
		t.Errorf("ParseDeadline(%q) = %v, %v; want %v", s, got, err, local)
	}
	if _, err := ParseDeadline("tomorrow"); err == nil {
		t.Error("ParseDeadline accepted a bad value")
	}
}

func BenchmarkParseTurnSubject(b *testing.B) {
	subject := EventSubject(NewID(), NewID(), EventProgress)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseTurnSubject(subject); !ok {
			b.Fatal("not parsed")
		}
	}
}
