package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/label"
)

// ANSI sequences of the live display.
const (
	ansiReset     = "\x1b[0m"
	ansiBold      = "1"
	ansiDim       = "2"
	ansiRed       = "31"
	ansiGreen     = "32"
	ansiCyan      = "36"
	ansiClearDown = "\x1b[J" // erase from the cursor to the end of the screen
)

// spinnerFrames turn once a second at spinnerEvery.
var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

const spinnerEvery = 100 * time.Millisecond

// maxLiveLines bounds the activities drawn at once; the rest are counted.
const maxLiveLines = 8

// terminalWidth reports whether w is a terminal and, if so, its width; TERM=dumb
// (in e's environment) says it is none.
func terminalWidth(w io.Writer, e *env) (int, bool) {
	f, ok := w.(*os.File)
	if !ok || e.getenv("TERM") == "dumb" {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, false
	}
	if ws.Col == 0 {
		return 80, true
	}
	return int(ws.Col), true
}

// activity is one tool call the display follows.
type activity struct {
	call      string // the call id on the bus
	tool      string
	label     string // running label, updated by progress
	completed string // completed label, once the host sent it
	start     time.Time
}

// renderer shows a turn as its messages arrive. On a terminal the running
// calls are redrawn in place below the lines already printed, each with a
// spinner and its elapsed time; elsewhere every change is a plain line.
type renderer struct {
	w     io.Writer
	tty   bool
	color bool
	width func() int
	now   func() time.Time

	live     []*activity // running calls, in start order
	finished []*activity // calls finished since the last batch record
	drawn    int         // lines of the live region on screen
	frame    int
	pending  string // the latest model text, printed once the turn moves on
	printed  string // the last model text printed
	// streaming is the text the model is writing now (bus.TextDelta), shown on a
	// terminal in place above the spinner until the turn moves on; streamStep its step.
	streaming  string
	streamStep int
	// waitingSince is when the turn last asked the model, while its answer is
	// out; zero otherwise. A terminal shows it as a live line.
	waitingSince time.Time
	// interrupted: this process asked for the abort, and a second Ctrl-C quits.
	interrupted bool
	// remote: the turn runs on a node of a running bus, whose agent home this process
	// did not choose; the started line says it (bus.TurnStatus.Home).
	remote bool
	// notes, when set, takes the turn's notes (what its assembly left out) instead of w:
	// standard error, under -json, whose standard output is the transcript alone.
	notes io.Writer
}

// newRenderer shows a turn on w, live and in color when w is a terminal (NO_COLOR in
// e's environment turns the color off).
func newRenderer(w io.Writer, e *env) *renderer {
	r := &renderer{w: w, now: time.Now}
	if _, ok := terminalWidth(w, e); ok {
		r.tty = true
		r.color = e.getenv("NO_COLOR") == ""
		r.width = func() int {
			n, _ := terminalWidth(w, e)
			return max(n, 20)
		}
	}
	return r
}

func (r *renderer) style(code, s string) string {
	if !r.color || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + ansiReset
}

// println prints permanent lines above the live region.
func (r *renderer) println(lines ...string) {
	var b bytes.Buffer
	r.clear(&b)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	r.draw(&b)
	_, _ = r.w.Write(b.Bytes())
}

// clear erases the live region; the cursor ends where it began.
func (r *renderer) clear(b *bytes.Buffer) {
	if !r.tty || r.drawn == 0 {
		return
	}
	fmt.Fprintf(b, "\x1b[%dA\r%s", r.drawn, ansiClearDown)
	r.drawn = 0
}

// draw writes the live region: one line per running call, and one while the
// model is thinking.
func (r *renderer) draw(b *bytes.Buffer) {
	if !r.tty || (len(r.live) == 0 && r.waitingSince.IsZero() && r.streaming == "") {
		return
	}
	width := r.width() - 1 // never touch the last column: some terminals wrap there
	for _, l := range lastLines(r.streaming, width, maxLiveLines) {
		fmt.Fprintf(b, "%s\n", l)
		r.drawn++
	}
	spin := r.style(ansiCyan, spinnerFrames[r.frame%len(spinnerFrames)])
	shown := r.live
	if len(shown) > maxLiveLines {
		shown = shown[:maxLiveLines-1]
	}
	now := r.now()
	for _, a := range shown {
		elapsed := formatElapsed(now.Sub(a.start))
		label := truncate(a.label, width-len(elapsed)-3)
		fmt.Fprintf(b, "%s %s %s\n", spin, label, r.style(ansiDim, elapsed))
		r.drawn++
	}
	if more := len(r.live) - len(shown); more > 0 {
		fmt.Fprintf(b, "%s\n", r.style(ansiDim, fmt.Sprintf("  … and %d more", more)))
		r.drawn++
	}
	if !r.waitingSince.IsZero() {
		fmt.Fprintf(b, "%s waiting for the model %s\n", spin, r.style(ansiDim, formatElapsed(now.Sub(r.waitingSince))))
		r.drawn++
	}
}

// tick advances the spinners and elapsed times.
func (r *renderer) tick() {
	r.frame++
	r.redraw()
}

// redraw draws the live region anew; it erases one that has nothing left to
// show.
func (r *renderer) redraw() {
	if !r.tty || (r.drawn == 0 && len(r.live) == 0 && r.waitingSince.IsZero() && r.streaming == "") {
		return
	}
	var b bytes.Buffer
	r.clear(&b)
	r.draw(&b)
	_, _ = r.w.Write(b.Bytes())
}

// flushText prints the model's latest text once the turn has moved past it:
// only then is it known not to be the final answer.
func (r *renderer) flushText() {
	if r.pending == "" {
		return
	}
	text := r.pending
	r.pending = ""
	r.streaming = "" // shown live until now: printed for good below
	if text == r.printed {
		return
	}
	r.printed = text
	r.println(text)
}

// text shows a piece of the text the model is writing: on a terminal it grows in place
// above the spinner; elsewhere the text is printed once, whole, as without streaming.
func (r *renderer) text(d bus.TextDelta) {
	if !r.tty {
		return
	}
	if d.Step != r.streamStep {
		r.streaming, r.streamStep = "", d.Step
	}
	r.streaming += d.Text
	r.redraw()
}

// keepStreamed prints the streamed text for good: the turn moved past it (a call of
// the same response started).
func (r *renderer) keepStreamed() {
	if r.streaming == "" {
		return
	}
	text := r.streaming
	r.streaming = ""
	r.printed = text
	r.println(text)
}

// lastLines is the end of text as a terminal of width columns shows it: at most n
// lines, the first saying how much came before.
func lastLines(text string, width, n int) []string {
	if text == "" || width < 2 {
		return nil
	}
	var lines []string
	for _, para := range strings.Split(text, "\n") {
		rs := []rune(para)
		for len(rs) > width {
			lines = append(lines, string(rs[:width]))
			rs = rs[width:]
		}
		lines = append(lines, string(rs))
	}
	if len(lines) > n {
		lines = append([]string{"…"}, lines[len(lines)-n+1:]...)
	}
	return lines
}

// awaitModel notes that the turn has asked the model: it started, or it sent
// the outputs of a batch of calls. The next message of the turn ends the wait.
func (r *renderer) awaitModel() {
	r.waitingSince = r.now()
	r.redraw()
}

// answered ends the wait for the model: whatever the turn says next comes
// after the model's answer, or instead of it.
func (r *renderer) answered() { r.waitingSince = time.Time{} }

func (r *renderer) started(turn string, node string) {
	r.println(r.style(ansiDim, fmt.Sprintf("turn %s on node %s", turn, node)))
}

// runningOn says which node runs the turn, and whether it took it over.
func (r *renderer) runningOn(st bus.TurnStatus) {
	if res := st.Resumed; res != nil {
		from := res.From
		if from == "" {
			from = "the intake"
		}
		r.println(r.style(ansiDim, fmt.Sprintf("turn %s resumed on node %s%s (from %s: %s)", st.Turn, st.Node, r.homeOf(st), from, res.Why)))
		return
	}
	if h := r.homeOf(st); h != "" {
		r.println(r.style(ansiDim, fmt.Sprintf("turn %s on node %s%s", st.Turn, st.Node, h)))
		return
	}
	r.started(st.Turn, st.Node)
}

// homeOf is ", agent home DIR" for a remote turn whose node said where its agent works.
// An embedded run said it before the turn started (homeNote).
func (r *renderer) homeOf(st bus.TurnStatus) string {
	if !r.remote || st.Home == "" {
		return ""
	}
	return ", agent home " + st.Home
}

// event shows a call's activity event.
func (r *renderer) event(ev bus.Event) {
	r.answered()
	r.flushText()
	if ev.Kind == bus.EventStarted {
		// A call started while its response streams: the words before it are whole.
		r.keepStreamed()
	}
	switch ev.Kind {
	case bus.EventStarted:
		a := &activity{call: ev.Call, tool: ev.Tool, label: cmp.Or(ev.Label, ev.Tool), start: r.now()}
		r.live = append(r.live, a)
		if r.tty {
			r.println()
		} else {
			r.println("→ " + a.label)
		}
	case bus.EventProgress:
		if a := r.running(ev.Call); a != nil && ev.Label != "" {
			a.label = ev.Label
			r.redraw()
		}
	case bus.EventCompleted:
		if a := r.running(ev.Call); a != nil {
			a.completed = ev.Label
		}
	}
}

// result shows the reply of a call that ran.
func (r *renderer) result(call string, reply bus.ToolReply) {
	r.answered()
	r.flushText()
	a := r.running(call)
	if a == nil {
		return
	}
	// The reply carries the completed label; the completed event may come
	// after it.
	if reply.Label != "" {
		a.completed = reply.Label
	}
	if reply.Completion != nil && reply.Completion.Label != "" {
		a.completed = reply.Completion.Label
	}
	r.finish(a, reply.Outcome, reply.Error, reply.Duration)
}

// finish moves a running call to the printed lines.
func (r *renderer) finish(a *activity, o bus.Outcome, errMsg string, d time.Duration) {
	r.live = slices.DeleteFunc(r.live, func(x *activity) bool { return x == a })
	r.finished = append(r.finished, a)
	if d <= 0 {
		d = r.now().Sub(a.start)
	}
	label := cmp.Or(a.completed, a.label)
	if o == bus.OutcomeOK {
		r.println(fmt.Sprintf("%s %s %s", r.style(ansiGreen, "✓"), label, r.style(ansiDim, "("+formatElapsed(d)+")")))
		return
	}
	line := fmt.Sprintf("%s %s %s", r.style(ansiRed, "✗"), label, r.style(ansiDim, "("+formatElapsed(d)+")"))
	if errMsg != "" {
		line += " — " + indentRest(errMsg)
	}
	r.println(line)
}

func (r *renderer) running(call string) *activity {
	for _, a := range r.live {
		if a.call == call {
			return a
		}
	}
	return nil
}

// step shows a turn status: a model response (its text) or the record of a
// batch of calls, which also accounts for calls that never ran. After a batch
// the turn asks the model again.
func (r *renderer) step(st bus.TurnStatus) {
	r.answered()
	r.flushText()
	if len(st.Calls) == 0 {
		if st.Text != r.printed {
			r.pending = st.Text
		}
		return
	}
	r.streaming = ""
	r.settle(st.Calls)
	r.awaitModel()
}

// settle matches a batch's records to the calls shown: a record whose call
// ran is already printed; one whose call never ran (refused arguments, an
// unknown tool, an abort before dispatch) is printed now; repaired arguments
// are noted.
func (r *renderer) settle(records []bus.CallRecord) {
	// The turn names calls by the model's ids, which the bus uses too unless
	// they are not valid subject tokens; then match by tool, in order.
	matched := make([]*activity, len(records))
	taken := make(map[*activity]bool)
	pool := append(slices.Clone(r.finished), r.live...)
	for i, rec := range records {
		for _, a := range pool {
			if a.call == rec.Call && !taken[a] {
				matched[i], taken[a] = a, true
				break
			}
		}
	}
	for i, rec := range records {
		if matched[i] != nil {
			continue
		}
		for _, a := range pool {
			if a.tool == rec.Tool && !taken[a] {
				matched[i], taken[a] = a, true
				break
			}
		}
	}
	var notes []string
	for i, rec := range records {
		a := matched[i]
		switch {
		case a != nil && slices.Contains(r.live, a):
			// Its reply never came: abandoned after an abort, or timed out.
			if rec.Label != "" {
				a.completed = rec.Label
			}
			r.finish(a, rec.Outcome, rec.Error, rec.Duration)
		case a == nil && rec.Outcome == bus.OutcomeOK:
			r.println(fmt.Sprintf("%s %s", r.style(ansiGreen, "✓"), cmp.Or(rec.Label, rec.Tool)))
		case a == nil:
			r.println(fmt.Sprintf("%s %s: %s", r.style(ansiRed, "✗"), rec.Tool, indentRest(cmp.Or(rec.Error, string(rec.Outcome)))))
		}
		if rungs := repairRungs(rec.Rungs); len(rungs) > 0 {
			notes = append(notes, r.style(ansiDim, fmt.Sprintf("  ↳ %s: arguments repaired (%s)", callName(records, i, a), strings.Join(rungs, ", "))))
		}
	}
	if len(notes) > 0 {
		r.println(notes...)
	}
	r.finished = r.finished[:0]
}

// callName names the batch's call i in a note: its tool, and when the batch has other
// calls of that tool, the label it was shown with (or its place in the batch).
func callName(records []bus.CallRecord, i int, a *activity) string {
	rec := records[i]
	n := 0
	for _, o := range records {
		if o.Tool == rec.Tool {
			n++
		}
	}
	if n < 2 {
		return rec.Tool
	}
	label := rec.Label
	if a != nil {
		label = cmp.Or(label, a.completed, a.label)
	}
	if label == "" {
		return fmt.Sprintf("%s (call %d of %d)", rec.Tool, i+1, len(records))
	}
	return fmt.Sprintf("%s (%s)", rec.Tool, label)
}

// repairRungs are the ladder rungs that changed the model's text.
func repairRungs(rungs []string) []string {
	var out []string
	for _, g := range rungs {
		if g != "as_is" && g != "empty" {
			out = append(out, g)
		}
	}
	return out
}

// aborted notes an abort request seen on the turn's subject.
func (r *renderer) aborted(a bus.Abort) {
	r.answered()
	r.flushText()
	msg := "abort requested"
	if a.Reason != "" {
		msg += ": " + a.Reason
	}
	if r.interrupted {
		msg += " (Ctrl-C again quits at once)"
	}
	r.println(r.style(ansiDim, "⊘ "+msg))
}

// done shows the end of the turn: the answer, then a summary line.
func (r *renderer) done(st bus.TurnStatus, took time.Duration) {
	r.answered()
	r.streaming = "" // the answer is printed whole below
	for _, a := range slices.Clone(r.live) {
		r.finish(a, bus.OutcomeAbandoned, "no result arrived before the turn ended", 0)
	}
	if r.pending != "" && r.pending != st.Text {
		r.flushText()
	}
	r.pending = ""
	if st.Text != "" && st.Text != r.printed {
		r.println("", st.Text)
		r.printed = st.Text
	}
	summary := fmt.Sprintf("%s · %s · %s · %s", endedAs(st), label.Plural(st.Step, "step"), label.Plural(st.NumCalls(), "call"), formatElapsed(took))
	if st.Usage != nil {
		summary += " · " + tokens(*st.Usage)
	}
	r.println("", r.style(ansiDim, summary))
}

// endedAs says how a turn ended: its state, except that a task turn ended by a tool
// result (its accepted submit_result, the only call that ends one) "submitted".
func endedAs(st bus.TurnStatus) string {
	if st.Kind == bus.TurnTask && st.State == bus.TurnTerminated {
		return "submitted"
	}
	return string(st.State)
}

// tokens says how many tokens the model read and wrote, and of those it read, how many
// the provider wrote to its prompt cache and read from it.
func tokens(u bus.Usage) string {
	s := fmt.Sprintf("%d tokens in, %d out", u.InputTokens, u.OutputTokens)
	if u.CacheCreationInputTokens != 0 || u.CacheReadInputTokens != 0 {
		s += fmt.Sprintf(" (cache: %d written, %d read)", u.CacheCreationInputTokens, u.CacheReadInputTokens)
	}
	return s
}

// indentRest indents the lines after the first, so that a multi-line error
// stays visibly part of its call.
func indentRest(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// formatElapsed is a short duration: 850µs, 12ms, 1.2s, 2m05s.
func formatElapsed(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}

// truncate cuts s to n runes, ending in "…" when cut, and keeps it to one line.
func truncate(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	n = max(n, 8)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return string(runes[:n-1]) + "…"
}
