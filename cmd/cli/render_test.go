package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"
)

// screen plays output on a minimal terminal that knows the sequences the
// renderer writes (newline, carriage return, cursor up, erase below, colours)
// and returns the lines left on it.
func screen(t *testing.T, out string) []string {
	t.Helper()
	var (
		lines    = [][]rune{nil}
		row, col int
		csi      = regexp.MustCompile(`^\x1b\[([0-9]*)([A-Za-z])`)
	)
	for len(out) > 0 {
		if m := csi.FindStringSubmatch(out); m != nil {
			out = out[len(m[0]):]
			switch m[2] {
			case "A":
				n, _ := strconv.Atoi(m[1])
				if n > row {
					t.Fatalf("cursor moved %d lines up from line %d: above the output", n, row)
				}
				row -= n
			case "J":
				lines = lines[:row+1]
				lines[row] = lines[row][:min(col, len(lines[row]))]
			case "m":
			default:
				t.Fatalf("unexpected sequence %q", m[0])
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(out)
		out = out[size:]
		switch r {
		case '\n':
			row, col = row+1, 0
			if row == len(lines) {
				lines = append(lines, nil)
			}
		case '\r':
			col = 0
		case '\x1b':
			t.Fatalf("unknown escape sequence before %q", out)
		default:
			for len(lines[row]) <= col {
				lines[row] = append(lines[row], ' ')
			}
			lines[row][col] = r
			col++
		}
	}
	text := make([]string, len(lines))
	for i, l := range lines {
		text[i] = string(l)
	}
	return text
}

// fakeClock moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// playTurn feeds a renderer a turn with two parallel calls, one of which
// fails, and a call refused before dispatch; it checks the live region on a
// terminal halfway through.
func playTurn(t *testing.T, r *renderer, out *bytes.Buffer, clock *fakeClock) {
	r.started("T1", "n1")
	r.step(bus.TurnStatus{Text: "Looking."})
	r.event(bus.Event{Call: "c1", Tool: "read_file", Kind: bus.EventStarted, Label: "Reading a.txt"})
	r.event(bus.Event{Call: "c2", Tool: "run_command", Kind: bus.EventStarted, Label: "Running `make`"})
	clock.advance(1500 * time.Millisecond)
	r.event(bus.Event{Call: "c2", Tool: "run_command", Kind: bus.EventProgress, Label: "Running `make`: 1 s"})
	r.tick()
	if r.tty {
		got := screen(t, out.String())
		want := []string{"turn T1 on node n1", "Looking.", "⠙ Reading a.txt 1.5s", "⠙ Running `make`: 1 s 1.5s", ""}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("live screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	r.event(bus.Event{Call: "c1", Tool: "read_file", Kind: bus.EventCompleted, Label: "Read 3 lines of a.txt"})
	r.result("c1", bus.ToolReply{Call: "c1", Tool: "read_file", Outcome: bus.OutcomeOK, Duration: 2 * time.Millisecond})
	r.tick()
	r.result("c2", bus.ToolReply{Call: "c2", Tool: "run_command", Outcome: bus.OutcomeError, Error: "exit 2\nmake: no rule", Duration: 1600 * time.Millisecond})
	r.step(bus.TurnStatus{Calls: []bus.CallRecord{
		{Call: "c1", Tool: "read_file", Outcome: bus.OutcomeOK, Rungs: []string{"repair"}},
		{Call: "c2", Tool: "run_command", Outcome: bus.OutcomeError, Rungs: []string{"as_is"}},
		{Call: "c3", Tool: "write_file", Outcome: bus.OutcomeInvalid, Error: "invalid arguments for write_file: /path: required"},
	}})
	r.step(bus.TurnStatus{Text: "All read."})
	clock.advance(time.Second)
	r.done(bus.TurnStatus{State: bus.TurnCompleted, Step: 2, Text: "All read.", Calls: make([]bus.CallRecord, 3)}, 2500*time.Millisecond)
}

func TestRenderer(t *testing.T) {
	t.Parallel()
	final := []string{
		"turn T1 on node n1",
		"Looking.",
		"✓ Read 3 lines of a.txt (2ms)",
		"✗ Running `make`: 1 s (1.6s) — exit 2",
		"    make: no rule",
		"✗ write_file: invalid arguments for write_file: /path: required",
		"  ↳ read_file: arguments repaired (repair)",
		"",
		"All read.",
		"",
		"completed · 2 steps · 3 calls · 2.5s",
	}
	t.Run("terminal", func(t *testing.T) {
		var out bytes.Buffer
		clock := &fakeClock{t: time.Unix(1e9, 0)}
		r := &renderer{w: &out, tty: true, color: true, width: func() int { return 60 }, now: clock.now}
		playTurn(t, r, &out, clock)
		got := screen(t, out.String())
		if strings.Join(got, "\n") != strings.Join(append(final, ""), "\n") {
			t.Errorf("screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(final, "\n"))
		}
		if !strings.Contains(out.String(), "\x1b[32m✓\x1b[0m") {
			t.Errorf("no colour on a terminal: %q", out.String())
		}
	})
	t.Run("plain", func(t *testing.T) {
		var out bytes.Buffer
		clock := &fakeClock{t: time.Unix(1e9, 0)}
		r := &renderer{w: &out, now: clock.now}
		playTurn(t, r, &out, clock)
		want := append([]string{"turn T1 on node n1", "Looking.", "→ Reading a.txt", "→ Running `make`"}, final[2:]...)
		if got := out.String(); got != strings.Join(want, "\n")+"\n" {
			t.Errorf("output:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
		}
	})
}

func TestRendererMatchesRecordsByTool(t *testing.T) {
	t.Parallel()
	// A model call id that is not a valid subject token travels under another
	// id on the bus; the batch record still settles the call shown.
	var out bytes.Buffer
	r := &renderer{w: &out, now: time.Now}
	r.event(bus.Event{Call: "wire1", Tool: "run_command", Kind: bus.EventStarted, Label: "Running `sleep 9`"})
	r.step(bus.TurnStatus{Calls: []bus.CallRecord{
		{Call: "call.with.dots", Tool: "run_command", Outcome: bus.OutcomeAbandoned, Error: "call abandoned", Label: "Running `sleep 9` (abandoned)"},
	}})
	want := "→ Running `sleep 9`\n✗ Running `sleep 9` (abandoned) ("
	if got := out.String(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, ") — call abandoned\n") || strings.Count(got, "\n") != 2 {
		t.Errorf("output %q", got)
	}
	if len(r.live) != 0 {
		t.Errorf("%d calls still shown as running", len(r.live))
	}
}

// TestRepairNoteNamesTheCall: of two calls of one tool, the note of repaired arguments
// says which: by the label the call was shown with, or by its place in the batch.
func TestRepairNoteNamesTheCall(t *testing.T) {
	var out bytes.Buffer
	r := &renderer{w: &out, now: time.Now}
	for _, c := range []struct{ call, file string }{{"c1", "a.txt"}, {"c2", "b.txt"}} {
		r.event(bus.Event{Call: c.call, Tool: "read_file", Kind: bus.EventStarted, Label: "Reading " + c.file})
		r.event(bus.Event{Call: c.call, Tool: "read_file", Kind: bus.EventCompleted, Label: "Read 3 lines of " + c.file})
		r.result(c.call, bus.ToolReply{Call: c.call, Tool: "read_file", Outcome: bus.OutcomeOK})
	}
	r.step(bus.TurnStatus{Calls: []bus.CallRecord{
		{Call: "c1", Tool: "read_file", Outcome: bus.OutcomeOK, Rungs: []string{"as_is"}},
		{Call: "c2", Tool: "read_file", Outcome: bus.OutcomeOK, Rungs: []string{"repair"}},
		{Call: "c3", Tool: "write_file", Outcome: bus.OutcomeInvalid, Error: "bad", Rungs: []string{"repair"}},
		{Call: "c4", Tool: "write_file", Outcome: bus.OutcomeInvalid, Error: "bad", Rungs: []string{"unquote"}},
	}})
	for _, want := range []string{
		"  ↳ read_file (Read 3 lines of b.txt): arguments repaired (repair)\n",
		"  ↳ write_file (call 3 of 4): arguments repaired (repair)\n",
		"  ↳ write_file (call 4 of 4): arguments repaired (unquote)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "a.txt): arguments") {
		t.Errorf("a call repaired as is is noted:\n%s", out.String())
	}
}

func TestTruncateAndElapsed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"short", "short"},
		{"exactly ten", "exactly t…"},
		{"two\nlines", "two …"},
		{"ééééééééééé", "ééééééééé…"},
	} {
		if got := truncate(tc.in, 10); got != tc.want {
			t.Errorf("truncate(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{850 * time.Microsecond, "850µs"},
		{12 * time.Millisecond, "12ms"},
		{1240 * time.Millisecond, "1.2s"},
		{125 * time.Second, "2m05s"},
	} {
		if got := formatElapsed(tc.d); got != tc.want {
			t.Errorf("formatElapsed(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// While the model thinks, a terminal shows how long it has been thinking:
// from the turn's start or a batch record until the turn's next message.
func TestRendererWaitsForModel(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	r := &renderer{w: &out, tty: true, width: func() int { return 60 }, now: clock.now}
	check := func(want ...string) {
		t.Helper()
		want = append(want, "")
		if got := screen(t, out.String()); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	r.started("T1", "n1")
	r.awaitModel() // the turn's started status
	clock.advance(2500 * time.Millisecond)
	r.tick()
	check("turn T1 on node n1", "⠙ waiting for the model 2.5s")
	clock.advance(2 * time.Minute)
	r.tick()
	check("turn T1 on node n1", "⠹ waiting for the model 2m03s")

	// The model answered with a call: the call replaces the waiting line.
	r.event(bus.Event{Call: "c1", Tool: "read_file", Kind: bus.EventStarted, Label: "Reading a.txt"})
	check("turn T1 on node n1", "⠹ Reading a.txt 0µs")
	r.result("c1", bus.ToolReply{Call: "c1", Tool: "read_file", Outcome: bus.OutcomeOK, Label: "Read a.txt", Duration: 2 * time.Millisecond})
	r.step(bus.TurnStatus{Calls: []bus.CallRecord{{Call: "c1", Tool: "read_file", Outcome: bus.OutcomeOK}}})
	clock.advance(time.Second)
	r.tick()
	check("turn T1 on node n1", "✓ Read a.txt (2ms)", "⠸ waiting for the model 1.0s")

	// Any message of the turn ends the wait, even one that prints nothing; the
	// next tick erases the line.
	r.event(bus.Event{Call: "other", Kind: bus.EventProgress, Label: "not ours"})
	r.tick()
	check("turn T1 on node n1", "✓ Read a.txt (2ms)")

	r.awaitModel()
	r.done(bus.TurnStatus{State: bus.TurnCompleted, Step: 2, Text: "Done.", Calls: make([]bus.CallRecord, 1)}, 3*time.Second)
	check("turn T1 on node n1", "✓ Read a.txt (2ms)", "", "Done.", "", "completed · 2 steps · 1 call · 3.0s")
}

func TestRendererPlainShowsNoWait(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	r := &renderer{w: &out, now: time.Now}
	r.started("T1", "n1")
	r.awaitModel()
	r.tick()
	r.done(bus.TurnStatus{State: bus.TurnCompleted, Step: 1, Text: "Done."}, time.Second)
	if want := "turn T1 on node n1\n\nDone.\n\ncompleted · 1 step · 0 calls · 1.0s\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

func TestDescribeApproval(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2026, 11, 30, 21, 0, 0, 0, time.Local)
	for _, tc := range []struct {
		req  bus.ApprovalRequest
		want string
	}{
		{
			bus.ApprovalRequest{Tool: "delete_file", Args: json.RawMessage(`{"path":"notes.txt"}`), Destructive: true, Deadline: deadline, Label: "Deleting notes.txt"},
			`delete_file (destructive): Deleting notes.txt, with {"path":"notes.txt"} — held for approval until 21:00:00`,
		},
		{
			bus.ApprovalRequest{Tool: "update", Namespace: "crm", Args: json.RawMessage(`{"id":7}`), Deadline: deadline},
			`crm.update (changes things), with {"id":7} — held for approval until 21:00:00`,
		},
	} {
		if got := describeApproval(tc.req); got != tc.want {
			t.Errorf("describeApproval:\n got %s\nwant %s", got, tc.want)
		}
	}
}

// The model's text grows in place above the spinner while it streams; once a call of
// its response starts, it is printed for good, once; a streamed answer is printed whole
// at the end, once.
func TestRendererStreamsText(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	r := &renderer{w: &out, tty: true, width: func() int { return 60 }, now: clock.now}
	check := func(want ...string) {
		t.Helper()
		want = append(want, "")
		if got := screen(t, out.String()); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	r.started("T1", "n1")
	r.awaitModel()
	r.message(bus.TurnMessage{Text: &bus.TextDelta{Step: 1, Seq: 1, Text: "Reading "}})
	check("turn T1 on node n1", "Reading ", "⠋ waiting for the model 0µs")
	r.message(bus.TurnMessage{Text: &bus.TextDelta{Step: 1, Seq: 2, Text: "a.txt."}})
	check("turn T1 on node n1", "Reading a.txt.", "⠋ waiting for the model 0µs")

	// A call of the response starts while the rest streams: the words are whole.
	r.event(bus.Event{Call: "c1", Tool: "read_file", Kind: bus.EventStarted, Label: "Reading a.txt"})
	check("turn T1 on node n1", "Reading a.txt.", "⠋ Reading a.txt 0µs")
	r.step(bus.TurnStatus{Text: "Reading a.txt."})
	r.result("c1", bus.ToolReply{Call: "c1", Tool: "read_file", Outcome: bus.OutcomeOK, Label: "Read a.txt", Duration: 2 * time.Millisecond})
	r.step(bus.TurnStatus{Calls: []bus.CallRecord{{Call: "c1", Tool: "read_file", Outcome: bus.OutcomeOK}}})
	check("turn T1 on node n1", "Reading a.txt.", "✓ Read a.txt (2ms)", "⠋ waiting for the model 0µs")

	// The answer streams, then the turn ends: it is printed once, whole.
	r.message(bus.TurnMessage{Text: &bus.TextDelta{Step: 2, Seq: 3, Text: "It says "}})
	r.message(bus.TurnMessage{Text: &bus.TextDelta{Step: 2, Seq: 4, Text: "hello."}})
	check("turn T1 on node n1", "Reading a.txt.", "✓ Read a.txt (2ms)", "It says hello.", "⠋ waiting for the model 0µs")
	r.step(bus.TurnStatus{Text: "It says hello."})
	r.done(bus.TurnStatus{State: bus.TurnCompleted, Step: 2, Text: "It says hello.", Calls: make([]bus.CallRecord, 1)}, 3*time.Second)
	check("turn T1 on node n1", "Reading a.txt.", "✓ Read a.txt (2ms)", "", "It says hello.", "", "completed · 2 steps · 1 call · 3.0s")

	// Plain output shows no pieces: the text comes once, whole, as without streaming.
	var plain bytes.Buffer
	p := &renderer{w: &plain, now: time.Now}
	p.message(bus.TurnMessage{Text: &bus.TextDelta{Step: 1, Seq: 1, Text: "Done."}})
	p.done(bus.TurnStatus{State: bus.TurnCompleted, Step: 1, Text: "Done."}, time.Second)
	if want := "\nDone.\n\ncompleted · 1 step · 0 calls · 1.0s\n"; plain.String() != want {
		t.Errorf("plain output %q, want %q", plain.String(), want)
	}
}

// watch shows a step's streamed text as one line: growing in place on a terminal, a
// whole line at a time elsewhere (what is left when the turn's next status comes);
// -text=false hides it, the statuses stay.
func TestWatchViewText(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)
	const turn = "0123456789abcdef"
	piece := func(step, item int, text string) bus.TurnMessage {
		return bus.TurnMessage{Subject: bus.TurnSubject{Turn: turn, Kind: bus.KindText}, Text: &bus.TextDelta{Step: step, Item: item, Text: text}}
	}
	status := bus.TurnMessage{Subject: bus.TurnSubject{Turn: turn, Kind: bus.KindStatus, Status: bus.StatusStep},
		Status: &bus.TurnStatus{Turn: turn, Step: 2, State: bus.TurnRunning, Text: "Hello world.\nBye."}}
	// A heartbeat comes any time, mid-line too: the line stays whole.
	beat := bus.TurnMessage{Subject: bus.TurnSubject{Turn: turn, Kind: bus.KindStatus, Status: bus.StatusBeat},
		Status: &bus.TurnStatus{Turn: turn, State: bus.TurnRunning}}
	msgs := []bus.TurnMessage{piece(2, 0, "Hello "), beat, piece(2, 0, "world."), piece(2, 1, "Bye."), status}

	var plain bytes.Buffer
	v := &watchView{w: &plain, steps: map[string]*streamedStep{}}
	for _, m := range msgs {
		v.message(m, at)
	}
	want := "03:04:05.000 89abcdef text            step 2: Hello world.\n" +
		"03:04:05.000 89abcdef text            step 2: Bye.\n" +
		"03:04:05.000 89abcdef status.step     step 2: Hello world.\n"
	if plain.String() != want {
		t.Errorf("plain:\n%s\nwant:\n%s", plain.String(), want)
	}

	var term bytes.Buffer
	v = &watchView{w: &term, tty: true, width: 80, steps: map[string]*streamedStep{}}
	for _, m := range msgs {
		v.message(m, at)
	}
	const prefix = "\r\x1b[K03:04:05.000 89abcdef text            step 2: "
	want = prefix + "Hello " + prefix + "Hello world." + prefix + "Hello world. Bye." + "\n" +
		"03:04:05.000 89abcdef status.step     step 2: Hello world.\n"
	if term.String() != want {
		t.Errorf("terminal:\n%q\nwant:\n%q", term.String(), want)
	}

	var hidden bytes.Buffer
	v = &watchView{w: &hidden, hide: true, steps: map[string]*streamedStep{}}
	for _, m := range msgs {
		v.message(m, at)
	}
	if want := "03:04:05.000 89abcdef status.step     step 2: Hello world.\n"; hidden.String() != want {
		t.Errorf("-text=false:\n%s\nwant:\n%s", hidden.String(), want)
	}
}
