package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"

	"github.com/toolbus/toolbus/internal/label"
)

// shortTurn is how many trailing characters of a turn id watch shows: ids
// made by one process share their leading characters.
const shortTurn = 8

func cmdWatch(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("watch", "-server URL [flags] [TURN]",
		"Prints the messages of one turn, or of every turn, as they pass on the bus: one\n"+
			"line each with time, turn, kind and label. The model's text as it streams is one\n"+
			"line a step, growing in place on a terminal, else printed a whole line at a time.\n"+
			"Steps are counted from 1, as everywhere. Runs until Ctrl-C.", stderr)
	var bf busFlags
	bf.register(fs, e)
	showText := fs.Bool("text", true, "show the model's text as it streams (-text=false: only the steps' statuses)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if bf.server == "" {
		return usagef("watch needs -server (or NATS_URL): an embedded bus is private to its own `run`")
	}
	turn := "" // every turn
	switch len(pos) {
	case 0:
	case 1:
		if !bus.ValidToken(pos[0]) {
			return usagef("%q is not a turn id", pos[0])
		}
		turn = pos[0]
	default:
		return usagef("want at most one turn id")
	}
	nc, err := bf.dial(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := newBusConn(nc, nil).cl.Watch(turn)
	if err != nil {
		return err
	}
	defer w.Stop()
	lost := newLostWatch()
	view := newWatchView(stdout, e, !*showText)
	defer view.close()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			for _, line := range lost.check(now) {
				view.line(line)
			}
		case m := <-w.C:
			now := time.Now()
			lost.heard(m, now)
			view.message(m, now)
		}
	}
}

// watchView prints watch's lines, and the model's streamed text a line a step: on a
// terminal that line grows in place while it is the last one printed (a piece a line
// made 116 lines of the demo's last answer alone); elsewhere the text is printed a
// whole line at a time, and what is left of a step when the turn's next status comes.
type watchView struct {
	w     io.Writer
	tty   bool
	width int
	hide  bool                     // -text=false
	steps map[string]*streamedStep // by turn: the step whose text streams
	open  *streamedStep            // on a terminal, the step whose line is last and unfinished
}

// streamedStep is the text of one turn's step so far.
type streamedStep struct {
	turn    string
	step    int
	item    int // the message of the response the last piece was of
	at      time.Time
	text    string
	printed int // of text, printed as whole lines (not on a terminal)
}

func newWatchView(w io.Writer, e *env, hide bool) *watchView {
	v := &watchView{w: w, hide: hide, steps: make(map[string]*streamedStep)}
	v.width, v.tty = terminalWidth(w, e)
	return v
}

// line prints one whole line, below a growing one.
func (v *watchView) line(s string) {
	v.finish()
	fmt.Fprintln(v.w, s)
}

// finish ends the terminal's growing line, so that what comes next goes below it.
func (v *watchView) finish() {
	if v.open != nil {
		fmt.Fprintln(v.w)
		v.open = nil
	}
}

// close prints what is left of every step's text, as watch stops.
func (v *watchView) close() {
	for turn := range v.steps {
		v.flush(turn, time.Now())
	}
	v.finish()
}

// message shows one message of a turn.
func (v *watchView) message(m bus.TurnMessage, now time.Time) {
	if m.Text != nil {
		if !v.hide {
			v.piece(m.Subject.Turn, *m.Text, now)
		}
		return
	}
	if m.Status != nil && m.Subject.Status != bus.StatusBeat {
		// The turn moved on (a step's status comes after its text, from the same
		// publisher): what is left of its text is whole. A heartbeat comes any time,
		// mid-sentence too.
		v.flush(m.Subject.Turn, now)
	}
	if line, ok := watchLine(m, now); ok {
		v.line(line)
	}
}

// piece adds a piece of a step's text.
func (v *watchView) piece(turn string, d bus.TextDelta, now time.Time) {
	s := v.steps[turn]
	if s != nil && s.step != d.Step {
		v.flush(turn, now)
		s = nil
	}
	if s == nil {
		s = &streamedStep{turn: turn, step: d.Step, item: d.Item, at: now}
		v.steps[turn] = s
	}
	if s.text != "" && d.Item != s.item {
		s.text += "\n" // the next message of the response: a line of its own, as the transcript joins them
	}
	s.item = d.Item
	s.text += d.Text
	if v.tty {
		v.draw(s)
		return
	}
	for {
		i := strings.IndexByte(s.text[s.printed:], '\n')
		if i < 0 {
			return
		}
		v.textLine(s, s.text[s.printed:s.printed+i], now)
		s.printed += i + 1
	}
}

// flush ends a turn's streaming step: what is left of its text is printed.
func (v *watchView) flush(turn string, now time.Time) {
	s := v.steps[turn]
	if s == nil {
		return
	}
	delete(v.steps, turn)
	switch {
	case v.tty && v.open == s:
		v.finish()
	case !v.tty && s.printed < len(s.text):
		v.textLine(s, s.text[s.printed:], now)
	}
}

// prefix begins a line of a step's text: at is when the step began streaming (its line
// on a terminal), or when the line was whole.
func (v *watchView) prefix(s *streamedStep, at time.Time) string {
	return fmt.Sprintf("%s %s %-15s step %d: ", at.Format("15:04:05.000"), shortID(s.turn), "text", s.step)
}

func (v *watchView) textLine(s *streamedStep, text string, at time.Time) {
	v.line(v.prefix(s, at) + text)
}

// draw shows a step's text on its line, in place while that line is the last one: its
// newest words, as many as the terminal's width holds.
func (v *watchView) draw(s *streamedStep) {
	if v.open != s {
		v.finish()
	}
	prefix := v.prefix(s, s.at)
	text := strings.ReplaceAll(s.text, "\n", " ")
	if room := v.width - 1 - utf8.RuneCountInString(prefix); room > 8 && utf8.RuneCountInString(text) > room {
		runes := []rune(text)
		text = "…" + string(runes[len(runes)-room+1:])
	}
	fmt.Fprint(v.w, "\r\x1b[K"+prefix+text)
	v.open = s
}

// lostWatch notices the durable turns whose node went silent for a whole lease.
type lostWatch struct {
	turns map[string]*watchedTurn
}

type watchedTurn struct {
	node  string
	lease time.Duration
	last  time.Time
	said  bool // the silence was reported
}

func newLostWatch() *lostWatch { return &lostWatch{turns: make(map[string]*watchedTurn)} }

func (l *lostWatch) heard(m bus.TurnMessage, now time.Time) {
	ts := m.Subject
	w := l.turns[ts.Turn]
	if m.Status != nil && ts.Status == bus.StatusDone {
		delete(l.turns, ts.Turn)
		return
	}
	if st := m.Status; st != nil && (ts.Status == bus.StatusStarted || ts.Status == bus.StatusBeat) && st.Lease > 0 {
		if w == nil {
			w = &watchedTurn{}
			l.turns[ts.Turn] = w
		}
		w.node, w.lease = st.Node, st.Lease
	}
	if w != nil {
		w.last, w.said = now, false
	}
}

// check reports, once each, the turns silent for a lease.
func (l *lostWatch) check(now time.Time) []string {
	var lines []string
	for id, w := range l.turns {
		if !w.said && now.Sub(w.last) > w.lease {
			w.said = true
			lines = append(lines, fmt.Sprintf("%s %s %-15s node %s silent for %s: it seems lost; the intake gives the turn to another node",
				now.Format("15:04:05.000"), shortID(id), "lost", w.node, w.lease))
		}
	}
	return lines
}

// watchLine describes one turn message: time, short turn id, kind, and what
// the message says.
func watchLine(m bus.TurnMessage, now time.Time) (string, bool) {
	ts := m.Subject
	at, kind, text := now, ts.Kind, ""
	switch {
	case m.Event != nil:
		ev := m.Event
		at, kind = cmpTime(ev.Time, now), ts.Kind+"."+string(ts.Event)
		text = fmt.Sprintf("%-12s %s", ev.Tool, ev.Label)
		if ev.Kind == bus.EventPresentation && len(ev.Data) > 0 {
			text += " " + truncate(string(ev.Data), 100)
		}
	case m.NoResponders:
		text = "no responders: no host serves the tool"
	case m.Payload != nil:
		text = fmt.Sprintf("%-12s reply of %s in the object store", "", bus.FormatBytes(m.Payload.Size))
	case m.Reply != nil:
		r := m.Reply
		text = fmt.Sprintf("%-12s %s %s", r.Tool, r.Outcome, formatElapsed(r.Duration))
		if r.Error != "" {
			text += " — " + r.Error
		}
	case m.Abort != nil:
		text = cmp.Or(m.Abort.Reason, "no reason given")
		if m.Abort.By != "" {
			text += " (by " + m.Abort.By + ")"
		}
	case m.Status != nil:
		if ts.Status == bus.StatusBeat {
			return "", false // heartbeats only keep the lost-node watch quiet
		}
		at, kind = cmpTime(m.Status.Time, now), ts.Kind+"."+ts.Status
		text = statusText(ts.Status, *m.Status)
	case m.Text != nil:
		return "", false // watchView shows streamed text, a line a step
	case m.Approval != nil:
		text = fmt.Sprintf("%-12s held for approval: %s", m.Approval.Tool, m.Approval.Label)
	case m.Approve != nil:
		text = cmp.Or(m.Approve.Decision, "asked for the held call")
		if m.Approve.By != "" {
			text += " (by " + m.Approve.By + ")"
		}
	default:
		return "", false
	}
	return fmt.Sprintf("%s %s %-15s %s", at.Format("15:04:05.000"), shortID(ts.Turn), kind, text), true
}

func statusText(kind string, st bus.TurnStatus) string {
	switch kind {
	case bus.StatusStarted:
		s := "node " + st.Node
		if st.Agent != "" {
			s += ", agent " + st.Agent
		}
		if r := st.Resumed; r != nil {
			s += fmt.Sprintf(", resumed from %s: %s", cmp.Or(r.From, "the intake"), r.Why)
		}
		return s
	case bus.StatusDone:
		s := fmt.Sprintf("%s after %s, %s", endedAs(st), label.Plural(st.Step, "step"), label.Plural(st.NumCalls(), "call"))
		if st.Usage != nil {
			s += ", " + tokens(*st.Usage)
		}
		if st.Error != "" {
			s += " — " + st.Error
		}
		return s
	}
	if len(st.Calls) > 0 {
		outcomes := make([]string, len(st.Calls))
		for i, c := range st.Calls {
			outcomes[i] = c.Tool + " " + string(c.Outcome)
		}
		return fmt.Sprintf("step %d: %s%s", st.Step, strings.Join(outcomes, ", "), stepTokens(st.Usage))
	}
	first, _, _ := strings.Cut(st.Text, "\n")
	return fmt.Sprintf("step %d: %s%s", st.Step, truncate(first, 100), stepTokens(st.Usage))
}

func stepTokens(u *bus.Usage) string {
	if u == nil {
		return ""
	}
	return " (" + tokens(*u) + ")"
}

func shortID(id string) string {
	if len(id) <= shortTurn {
		return id
	}
	return id[len(id)-shortTurn:]
}

func cmpTime(t, fallback time.Time) time.Time {
	if t.IsZero() {
		return fallback
	}
	return t.Local()
}
