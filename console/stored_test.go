package console_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

// lanesMetaJS is each lane's call and what its line says after the name: outcome,
// duration, label, repair rungs.
const lanesMetaJS = `[...document.querySelectorAll('#timeline .lane')].map(l => l.dataset.call + ': ' + l.querySelector('.lmeta').textContent)`

// A turn opened after its end shows what a page that watched it run showed: each call's
// duration, its host's label and its repair rungs, a time axis on each step with calls,
// and bars laid out on it (not every one the track's whole width). The live page learns
// them from the turn's statuses; the stored one from the calls note stored after each
// batch.
func TestConsoleStoredTurnShowsDurations(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	const id = "stored1"
	live := newTab(t)
	do(t, live, "open the turn's page before it starts", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, live, "the turn's live feed", `document.getElementById('live').dataset.live === 'on'`)

	ended, err := w.cl.Watch(id)
	if err != nil {
		t.Fatal(err)
	}
	defer ended.Stop()
	w.start(t, id, "ann", `{"responses":[
	  {"text":"Reading the notes.","calls":[
	    {"id":"c1","name":"list_files","arguments":"{\"path\":\".\"}"},
	    {"id":"c2","name":"read_file","arguments":"{\"path\":\"a.txt\"}"},
	    {"id":"c3","name":"read_file","arguments":"{'path': 'b.txt',}"},
	    {"id":"c4","name":"write_file","arguments":"{\"path\":\"out.txt\",\"content\":\"one\\n\"}"},
	    {"id":"c5","name":"run_command","arguments":"{\"command\":\"sleep 1; cat out.txt\"}"}]},
	  {"calls":[{"id":"c6","name":"read_file","arguments":"{\"path\":\"out.txt\"}"}]},
	  {"text":"Done."}]}`)
	ctx := bustest.Context(t)
	for done := false; !done; {
		select {
		case m := <-ended.C:
			done = m.Status != nil && m.Subject.Status == bus.StatusDone
		case <-ctx.Done():
			t.Fatal("the turn did not end")
		}
	}
	waitFor(t, live, "the live page's stored steps", `document.getElementById('turn-state').dataset.state === 'completed' && document.querySelectorAll('#timeline .step').length === 3 && !document.querySelector('#timeline .step[data-pending]')`)
	liveMeta := eval[[]string](t, live, lanesMetaJS)
	liveAxes := eval[int](t, live, `document.querySelectorAll('#timeline .step .axis').length`)

	tab := newTab(t)
	do(t, tab, "open the ended turn", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#turn-end`)))
	waitFor(t, tab, "the ended turn's calls", `document.querySelectorAll('#timeline .lane').length === 6`)
	meta := eval[[]string](t, tab, lanesMetaJS)
	if fmt.Sprint(meta) != fmt.Sprint(liveMeta) {
		t.Errorf("opened after the end, the calls say\n%s\nwatched live, they said\n%s", strings.Join(meta, "\n"), strings.Join(liveMeta, "\n"))
	}
	wantLabel := map[string]string{"c1": "Listed ", "c2": "Read 1 line of a.txt", "c3": "Read 2 lines of b.txt", "c4": "Wrote ", "c5": "Ran `sleep 1; cat out.txt` (exit 0)", "c6": "Read 1 line of out.txt"}
	duration := `(<1 ms|\d+ ms|\d+\.\d+ s) · `
	for _, m := range meta {
		call, text, _ := strings.Cut(m, ": ")
		if !strings.Contains(text, wantLabel[call]) {
			t.Errorf("%s: no label %q: %q", call, wantLabel[call], text)
		}
		if ok := regexpMatch(t, `^ok`+duration, text); !ok {
			t.Errorf("%s: no duration: %q", call, text)
		}
	}
	if rungs := eval[string](t, tab, `document.querySelector('.lane[data-call="c3"] .rung')?.textContent || ''`); !strings.Contains(rungs, "repair") {
		t.Errorf("c3 shows no repair rung: %q", rungs)
	}
	if axes := eval[int](t, tab, `document.querySelectorAll('#timeline .step .axis').length`); axes != 2 || axes != liveAxes {
		t.Errorf("%d steps with a time axis, %d live, want 2 (the steps with calls)", axes, liveAxes)
	}
	// Laid out on the axis: the sequential write starts after the parallel reads, and the
	// slow command's bar is the longest of its step. It sleeps 1 s: with 0.3 s, list_files
	// took longer once in CI (race-built, beside other packages' tests).
	bars := eval[map[string][]float64](t, tab, `Object.fromEntries([...document.querySelectorAll('#timeline .lane')].map(l => { const b = l.querySelector('.bar'); return [l.dataset.call, [parseFloat(b.style.left), parseFloat(b.style.width)]]; }))`)
	if bars["c4"][0] <= 0 || bars["c5"][0] <= bars["c4"][0] {
		t.Errorf("the runs of step 1 do not follow each other on the axis: %v", bars)
	}
	for _, c := range []string{"c1", "c2", "c3", "c4"} {
		if bars[c][1] >= bars["c5"][1] || bars[c][1] >= 99 {
			t.Errorf("%s's bar (%v) is not shorter than the slow command's (%v)", c, bars[c], bars["c5"])
		}
	}
}

func regexpMatch(t *testing.T, re, s string) bool {
	t.Helper()
	return regexp.MustCompile(re).MatchString(s)
}
