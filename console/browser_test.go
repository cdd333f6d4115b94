package console_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/console"
	"github.com/toolbus/toolbus/internal/needs"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/internal/testmain"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/computer"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// The browser tests drive a headless Chromium (Debian's chromium package; .ci/run
// installs it) through chromedp: one browser for the package, a tab per test.

var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

// parallelTests: the tests wait on the browser and on scripted models' delays; the
// package took 12.5 s at go test's default (2 here), 9.6 s at 4 and 9.0 s at 8.
const parallelTests = 6

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{Parallel: parallelTests, Done: func() error {
		if browser.cancel != nil {
			browser.cancel()
		}
		return nil
	}})
}

// chromium is the browser's path: TOOLBUS_CHROMIUM, or chromium on PATH.
func chromium() string {
	if p := os.Getenv("TOOLBUS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newTab opens a tab of the package's browser, closed when the test ends; the test
// fails on any exception the page's script throws.
func newTab(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		needs.Missing(t, "no chromium on PATH (apt-get install chromium, or set TOOLBUS_CHROMIUM)")
	}
	browser.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Headless, chromedp.WindowSize(1280, 900),
			chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelCtx := chromedp.NewContext(alloc)
		browser.ctx, browser.cancel = ctx, func() { cancelCtx(); cancelAlloc() }
		browser.err = chromedp.Do(ctx) // starts the browser, with a first tab
	})
	if browser.err != nil {
		t.Fatalf("start chromium: %v", browser.err)
	}
	tab, closeTab := chromedp.NewContext(browser.ctx)
	if err := chromedp.Do(tab); err != nil {
		closeTab()
		t.Fatalf("open a tab: %v", err)
	}
	var (
		mu   sync.Mutex
		errs []string
	)
	events := chromedp.Events(tab, runtime.ExceptionThrown)
	go func() {
		for ev, err := range events {
			if err != nil {
				return
			}
			mu.Lock()
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			errs = append(errs, fmt.Sprintf("%s at %s:%d:%d", msg, d.URL, d.LineNumber+1, d.ColumnNumber+1))
			mu.Unlock()
		}
	}()
	ctx, cancel := context.WithTimeout(tab, 2*time.Minute)
	t.Cleanup(func() {
		cancel()
		closeTab()
		mu.Lock()
		defer mu.Unlock()
		for _, e := range errs {
			t.Errorf("the page threw: %s", e)
		}
	})
	return ctx
}

// do runs browser actions, failing the test with the page's text on an error.
func do(t *testing.T, tab context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(tab, steps...); err != nil {
		t.Fatalf("%s: %v\npage:\n%s", what, err, pageText(tab))
	}
}

// waitFor waits until the page's JavaScript condition holds.
func waitFor(t *testing.T, tab context.Context, what, cond string) {
	t.Helper()
	// A condition that throws (an element not there yet) is false for now.
	guarded := "(() => { try { return (" + cond + "); } catch (e) { return false; } })()"
	_, err := chromedp.Run(tab, chromedp.Poll[chromedp.Void](guarded,
		chromedp.WithPollingTimeout(45*time.Second), chromedp.WithPollingInterval(40*time.Millisecond)))
	if err != nil {
		t.Fatalf("waiting for %s (%s): %v\npage:\n%s", what, cond, err, pageText(tab))
	}
}

// click waits until sel matches a visible element and clicks it, found and clicked in
// one evaluation in the page: the console draws its timeline and lists again as events
// come, and a node chromedp.Click found by one request of the protocol can be gone by
// its next ("Could not find node with given id").
func click(sel string) chromedp.Action[chromedp.Void] {
	q, _ := json.Marshal(sel)
	return chromedp.Poll[chromedp.Void](`(() => { const e = document.querySelector(`+string(q)+`);
		if (!e || !e.getClientRects().length) return false;
		e.click(); return true; })()`,
		chromedp.WithPollingTimeout(45*time.Second), chromedp.WithPollingInterval(40*time.Millisecond))
}

// eval evaluates an expression in the page.
func eval[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func pageText(tab context.Context) string {
	ctx, cancel := context.WithTimeout(tab, 3*time.Second)
	defer cancel()
	// The flash box too, hidden or not: an ok message hides itself after 4 s, and a
	// test waiting for an error (TestConsoleRoleLimits, once in CI) must tell "no answer
	// yet" from "answered ok".
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.body ? document.body.innerText : '') +
		((f => f ? '\n[flash ' + (f.hidden ? 'hidden ' : '') + (f.dataset.kind || '-') + ': ' + f.textContent + ']' : '')(document.getElementById('flash')))`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return s
}

// screenshot saves the page as docs' name.png when TOOLBUS_SCREENSHOTS names a folder
// (relative to the module's root): TOOLBUS_SCREENSHOTS=docs/img go test ./console/.
func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	dir := os.Getenv("TOOLBUS_SCREENSHOTS")
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, scheme := range []string{"light", "dark"} {
		_, err := chromedp.Run(tab, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
			return err
		}))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		file := name + ".png"
		if scheme == "dark" {
			file = name + "-dark.png"
		}
		if err := os.WriteFile(filepath.Join(dir, file), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = chromedp.Run(tab, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{})
		return err
	}))
}

// world is a node of its own (an embedded bus that runs turns and hosts every
// category, commands unsandboxed in a home of the test's), an admin client of it, and
// a console.
type world struct {
	n    *node.Node
	cl   *client.Client // the test's own, in-process
	con  *console.Server
	url  string
	home string
	nats string // the listener's URL, when the bus has users
}

// Users of a world that listens (worldOptions.users).
const (
	opsPassword   = "ops-pw-9f3c61e0"
	watchPassword = "watch-pw-2b7d44a1"
)

type worldOptions struct {
	users    bool   // listen on loopback, with the users ops (operator) and watch (watcher)
	as       string // the console's user: "" (in-process), "ops" or "watch"
	password string // the console's own password
}

func newWorld(t *testing.T, o worldOptions) *world {
	t.Helper()
	ctx := bustest.Context(t)
	home := t.TempDir()
	for name, text := range map[string]string{"a.txt": "alpha\n", "b.txt": "beta\nbeta\n"} {
		if err := os.WriteFile(filepath.Join(home, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	quiet := bustest.Logger(t, slog.LevelWarn) // the node's warnings, shown should the test fail
	bc := server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if o.users {
		ops, err := server.RolePermissions(server.RoleOperator, "ops", nil)
		if err != nil {
			t.Fatal(err)
		}
		watch, err := server.RolePermissions(server.RoleWatcher, "watch", nil)
		if err != nil {
			t.Fatal(err)
		}
		bc.Listen = "127.0.0.1:-1"
		bc.Users = []server.User{
			{Name: "ops", Password: opsPassword, Role: server.RoleOperator, Permissions: ops},
			{Name: "watch", Password: watchPassword, Role: server.RoleWatcher, Permissions: watch},
		}
	}
	n, err := node.Start(ctx, node.Config{
		Bus: bc,
		Node: node.NodeConfig{
			Name: "n1", Turns: true, Home: home, Logger: quiet,
			Tools: toolsets.Settings{Computer: computer.Config{Sandbox: computer.SandboxConfig{Mode: computer.SandboxOff}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	nc, err := n.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	w := &world{n: n, cl: client.New(nc, client.OwnConn()), home: home}
	t.Cleanup(w.cl.Close)

	var cl *client.Client
	switch o.as {
	case "":
		cnc, err := n.Connect("console")
		if err != nil {
			t.Fatal(err)
		}
		cl = client.New(cnc, client.OwnConn(), client.Where("the embedded bus"))
	default:
		w.nats = n.Server().ClientURL()
		pass := map[string]string{"ops": opsPassword, "watch": watchPassword}[o.as]
		if cl, err = client.Dial(ctx, w.nats, "console", bus.Credentials{User: o.as, Password: pass}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(cl.Close)
	con, err := console.Start(console.Config{Addr: "127.0.0.1:0", Client: cl, Password: o.password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })
	w.con, w.url = con, con.URL()
	return w
}

// start starts a turn of agent with an inline script.
func (w *world) start(t *testing.T, id, agent, script string) {
	t.Helper()
	spec := bus.TurnSpec{ID: id, Kind: bus.TurnMain, Agent: agent, Input: "look at the project", Script: json.RawMessage(script)}
	if _, err := w.cl.Start(bustest.Context(t), spec, ""); err != nil {
		t.Fatal(err)
	}
}

// needsApprovals gives agent a profile that holds its destructive calls for approval.
func (w *world) needsApprovals(t *testing.T, agent string) {
	t.Helper()
	ctx := bustest.Context(t)
	p, err := w.cl.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Put(ctx, []byte(fmt.Sprintf(`{"version":%d,"agent":%q,"approvals":%q}`, toolsets.ProfileVersion, agent, toolsets.ApproveDestructive))); err != nil {
		t.Fatal(err)
	}
}

type lane struct {
	Call    string `json:"call"`
	Outcome string `json:"outcome"`
}

const lanesJS = `[...document.querySelectorAll('#timeline .lane')].map(l => ({call: l.dataset.call, outcome: l.dataset.outcome}))`

// recordTimeline makes a turn's page keep, in window.shown, each state its timeline
// passes through (the turn's state and how many lanes it shows): a state that lasts
// only until the next message of the feed is on the record however late the test
// reads it. Each feed message is a task of its own, drawn before the observer runs.
const recordTimeline = `(() => {
  window.shown = [];
  const note = () => {
    const st = document.getElementById('turn-state');
    const now = {state: st ? st.dataset.state : '', lanes: document.querySelectorAll('#timeline .lane').length};
    const last = window.shown[window.shown.length - 1];
    if (!last || last.state !== now.state || last.lanes !== now.lanes) window.shown.push(now);
  };
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true, attributes: true});
  note();
})()`

// shownRunning is true once the recorded page (recordTimeline) has shown the running
// turn with each of these numbers of lanes, in this order.
func shownRunning(lanes ...int) string {
	b, _ := json.Marshal(lanes)
	return `(() => {
  let i = 0;
  for (const n of ` + string(b) + `) {
    const j = window.shown.slice(i).findIndex(s => s.state === 'running' && s.lanes === n);
    if (j < 0) return false;
    i += j;
  }
  return true;
})()`
}

// A scripted turn of three steps: parallel reads and a sequential write, then a read
// and a write, then its answer, each response 1.2 s apart. The list shows the turn as
// it starts, beside two others, and filters them by agent; its page shows the first batch while the turn still runs, then the
// second, and at the end every call's outcome.
//
// The page that watches the batches come is open before the turn starts and keeps a
// record of what it showed (recordTimeline), which the test reads when it is ready.
// Waiting instead in the page the list opens, for a batch on screen, lost the race
// with the turn's clock: the list's checks and the click took 0.3 s alone, 0.65-1 s
// with six CPU hogs, and over the turn's whole 2.7 s in 1 run of 5 there, which then
// found the turn completed and waited 45 s for a batch already gone.
func TestConsoleLiveTurn(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	const id = "live1"
	live := newTab(t)
	do(t, live, "open the turn's page before it starts", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, live, "the turn's live feed", `document.getElementById('live').dataset.live === 'on'`)
	do(t, live, "record the timeline", chromedp.Evaluate[chromedp.Void](recordTimeline))

	tab := newTab(t)
	do(t, tab, "open the console", chromedp.Navigate(w.url), chromedp.WaitVisible(chromedp.CSS(`#turns`)))
	waitFor(t, tab, "the live feed", `document.getElementById('live').dataset.live === 'on'`)

	script := `{"responses":[
	  {"delay_ms":300,"text":"Reading the notes.","calls":[
	    {"id":"c1","name":"list_files","arguments":"{\"path\":\".\"}"},
	    {"id":"c2","name":"read_file","arguments":"{\"path\":\"a.txt\"}"},
	    {"id":"c3","name":"read_file","arguments":"{'path': 'b.txt',}"},
	    {"id":"c4","name":"write_file","arguments":"{\"path\":\"out.txt\",\"content\":\"one\\n\"}"},
	    {"id":"c5","name":"read_file","arguments":"{\"path\":\"out.txt\"}"}]},
	  {"delay_ms":1200,"calls":[
	    {"id":"c6","name":"write_file","arguments":"{\"path\":\"out.txt\",\"content\":\"two\\n\",\"append\":true}"},
	    {"id":"c7","name":"read_file","arguments":"{\"path\":\"out.txt\"}"}]},
	  {"delay_ms":1200,"text":"Both files read, out.txt written."}]}`
	w.start(t, "side1", "bob", `{"responses":[{"text":"Nothing to do."}]}`)
	w.start(t, "side2", "cy", `{"responses":[{"calls":[{"id":"x1","name":"no_such_tool","arguments":"{}"}]},{"text":"That tool does not exist."}]}`)
	w.start(t, id, "ann", script)
	waitFor(t, tab, "the turns in the list", `document.querySelectorAll('#turns tr[data-turn]').length === 3`)
	do(t, tab, "filter by agent", chromedp.SendKeys(chromedp.CSS(`#f-agent`), "ann"))
	waitFor(t, tab, "the filtered list", `[...document.querySelectorAll('#turns tr[data-turn]')].map(r => r.dataset.turn).join() === '`+id+`'`)
	do(t, tab, "clear the filter", chromedp.Evaluate[chromedp.Void](`(f => { f.value = ''; f.dispatchEvent(new Event('input')); })(document.getElementById('f-agent'))`))
	waitFor(t, tab, "the whole list", `document.querySelectorAll('#turns tr[data-turn]').length === 3`)

	do(t, tab, "open the turn", click(`#turns tr[data-turn="`+id+`"] a`), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, live, "the first batch while the turn ran", shownRunning(5))
	waitFor(t, live, "the second batch while the turn ran, after the first", shownRunning(5, 7))
	waitFor(t, tab, "the turn's end", `document.getElementById('turn-state').dataset.state === 'completed'`)
	waitFor(t, tab, "every outcome", `[...document.querySelectorAll('#timeline .lane')].every(l => l.dataset.outcome === 'ok')`)
	// The replies can come before the transcript: its steps, read back, replace the
	// pending one the feed's calls were shown in.
	waitFor(t, tab, "the stored steps", `document.querySelectorAll('#timeline .step').length === 3 && !document.querySelector('#timeline .step[data-pending]')`)

	lanes := eval[[]lane](t, tab, lanesJS)
	var calls []string
	for _, l := range lanes {
		calls = append(calls, l.Call)
	}
	if got := strings.Join(calls, ","); got != "c1,c2,c3,c4,c5,c6,c7" {
		t.Errorf("calls on the timeline: %s", got)
	}
	// c1-c3 run together; c4 is a barrier; c5 runs after it; step 2: c6 then c7.
	runs := eval[[]string](t, tab, `[...document.querySelectorAll('#timeline .run')].map(r => r.className + ':' + [...r.querySelectorAll('.lane')].map(l => l.dataset.call).join('+'))`)
	if got := strings.Join(runs, " "); got != "run parallel:c1+c2+c3 run sequential:c4 run parallel:c5 run sequential:c6 run parallel:c7" {
		t.Errorf("runs: %s", got)
	}
	// c3's arguments needed repair: its lane says which rungs.
	if rungs := eval[string](t, tab, `document.querySelector('.lane[data-call="c3"] .rung')?.textContent || ''`); !strings.Contains(rungs, "repair") {
		t.Errorf("c3 shows no repair rung: %q", rungs)
	}
	// A call's arguments and result, on demand.
	do(t, tab, "open c2", click(`.lane[data-call="c2"] .lname`), chromedp.WaitVisible(chromedp.CSS(`.lane[data-call="c2"] .detail`)))
	if detail := eval[string](t, tab, `document.querySelector('.lane[data-call="c2"] .detail').innerText`); !strings.Contains(detail, `"path": "a.txt"`) || !strings.Contains(detail, "alpha") {
		t.Errorf("c2's detail lacks its arguments or result:\n%s", detail)
	}
	// c3's detail has the model's text and, from the transcript, the JSON its tool got.
	do(t, tab, "open c3", click(`.lane[data-call="c3"] .lname`), chromedp.WaitVisible(chromedp.CSS(`.lane[data-call="c3"] .detail pre.repaired`)))
	if fixed := eval[string](t, tab, `document.querySelector('.lane[data-call="c3"] .detail pre.repaired').innerText`); !strings.Contains(fixed, `"path": "b.txt"`) {
		t.Errorf("c3's repaired arguments: %q", fixed)
	}
	screenshot(t, tab, "console-turn")

	// The list followed the turn to its end.
	do(t, tab, "back to the list", chromedp.Navigate(w.url+"#/"), chromedp.WaitVisible(chromedp.CSS(`#turns tr[data-turn="`+id+`"]`)))
	row := eval[[]string](t, tab, `[...document.querySelectorAll('#turns tr[data-turn="`+id+`"] td')].map(td => td.textContent)`)
	if got := strings.Join(row[:7], "|"); got != id+"|ann|main|completed|n1|3|7" {
		t.Errorf("the list's row: %s", got)
	}
	waitFor(t, tab, "the side turns ended", `[...document.querySelectorAll('#turns tr[data-turn]')].every(r => r.dataset.state === 'completed')`)
	screenshot(t, tab, "console-turns")

	// Opened after its end, the turn shows the same calls and outcomes, from its
	// transcript and record alone.
	do(t, tab, "open the ended turn", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#turn-end`)))
	waitFor(t, tab, "the ended turn's calls", `document.querySelectorAll('#timeline .lane').length === 7`)
	if got := eval[[]lane](t, tab, lanesJS); fmt.Sprint(got) != fmt.Sprint(lanes) {
		t.Errorf("after the end: %v, live: %v", got, lanes)
	}
	if b, err := os.ReadFile(filepath.Join(w.home, "out.txt")); err != nil || string(b) != "one\ntwo\n" {
		t.Errorf("out.txt: %q %v", b, err)
	}
}

// A step whose text the scripted model writes word by word, 100 ms apart, then a call
// it takes 1.5 s to finish: the page shows the text growing in the running step (a
// prefix, then a longer one, while the step is not stored), then the step's whole text
// from the transcript, as for the next step, streamed too.
func TestConsoleStreamsText(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	tab := newTab(t)
	const (
		id     = "stream1"
		first  = "Reading a.txt first: one word at a time, the way a model writes, so that the page has something to show before the step is over."
		second = "It holds alpha."
	)
	do(t, tab, "open the turn's page", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, tab, "the live feed", `document.getElementById('live').dataset.live === 'on'`)
	w.start(t, id, "ann", fmt.Sprintf(`{"responses":[
	  {"text":%q,"stream_delay_ms":100,"calls":[{"id":"r1","name":"read_file","arguments":"{\"path\":\"a.txt\"}","delay_ms":1500}]},
	  {"text":%q,"stream_delay_ms":100}]}`, first, second))

	say := func(step int) string {
		return fmt.Sprintf(`document.querySelector('#timeline .step[data-step="%d"] .say')`, step)
	}
	whole, _ := json.Marshal(first)
	streaming := fmt.Sprintf(`(s => s.hasAttribute('data-streaming') && s.textContent.length > %%d && s.textContent.length < %d && %s.startsWith(s.textContent))(%s)`,
		len(first), whole, say(1))
	waitFor(t, tab, "a prefix of the text while the step runs", fmt.Sprintf(streaming, 0))
	seen := eval[int](t, tab, say(1)+`.textContent.length`)
	waitFor(t, tab, "more of the text while the step runs", fmt.Sprintf(streaming, seen))

	waitFor(t, tab, "the turn's end", `document.getElementById('turn-state').dataset.state === 'completed'`)
	waitFor(t, tab, "the steps' text from the transcript", `!document.querySelector('#timeline [data-streaming]') && document.querySelectorAll('#timeline .step .say').length === 2`)
	for step, want := range map[int]string{1: first, 2: second} {
		if got := eval[string](t, tab, say(step)+`.textContent`); got != want {
			t.Errorf("step %d says %q, want %q", step, got, want)
		}
	}
	if lane := eval[string](t, tab, `document.querySelector('.lane[data-call="r1"]')?.dataset.outcome || ''`); lane != "ok" {
		t.Errorf("the call's lane says %q", lane)
	}
}

// A destructive call of an agent whose profile holds such calls waits on the page; its
// Approve button lets it run, as `toolbus approve` does.
func TestConsoleApprove(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	w.needsApprovals(t, "careful")
	tab := newTab(t)
	const id = "approve1"
	do(t, tab, "open the turn's page", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, tab, "the live feed", `document.getElementById('live').dataset.live === 'on'`)
	w.start(t, id, "careful", `{"responses":[
	  {"calls":[{"id":"w1","name":"write_file","arguments":"{\"path\":\"approved.txt\",\"content\":\"yes\\n\"}"}]},
	  {"text":"Written."}]}`)
	waitFor(t, tab, "the held call", `!!document.querySelector('.held[data-call="w1"] button.approve')`)
	if _, err := os.Stat(filepath.Join(w.home, "approved.txt")); !os.IsNotExist(err) {
		t.Fatalf("the held call ran before its approval: %v", err)
	}
	if lane := eval[string](t, tab, `document.querySelector('.lane[data-call="w1"]')?.dataset.outcome || ''`); lane != "held" {
		t.Errorf("the held call's lane says %q", lane)
	}
	waitFor(t, tab, "the turn's record", `document.querySelector('.facts').innerText.includes('careful') && document.querySelector('.lane[data-call="w1"]').closest('.run').classList.contains('sequential')`)
	screenshot(t, tab, "console-held")
	// A page opened after the call was held asks the turn for it.
	late := newTab(t)
	do(t, late, "open the turn's page late", chromedp.Navigate(w.url+"#/turn/"+id))
	waitFor(t, late, "the held call, late", `!!document.querySelector('.held[data-call="w1"] button.approve')`)
	do(t, tab, "approve", click(`.held[data-call="w1"] button.approve`))
	waitFor(t, tab, "the turn's end", `document.getElementById('turn-state').dataset.state === 'completed'`)
	waitFor(t, tab, "the call's outcome", `document.querySelector('.lane[data-call="w1"]').dataset.outcome === 'ok'`)
	if n := eval[int](t, tab, `document.querySelectorAll('.held').length`); n != 0 {
		t.Errorf("%d held boxes remain", n)
	}
	if b, err := os.ReadFile(filepath.Join(w.home, "approved.txt")); err != nil || string(b) != "yes\n" {
		t.Errorf("approved.txt: %q %v", b, err)
	}
}

// A turn that moves: node A runs its first step, then stops and hands the turn back to
// the intake; node B takes it on. The page shows the resume between the steps, and the
// node each step ran on.
func TestConsoleResume(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	srv := bustest.Server(t, nil)
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "a.txt"), []byte("alpha\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := func(name string) *actors.Node {
		n, err := actors.StartNode(ctx, actors.NodeConfig{
			Name: name, Connect: func(conn string) (*nats.Conn, error) { return srv.Connect(conn) },
			Categories: toolsets.Categories(), Turns: true, Home: home, Logger: quiet,
			Tools: toolsets.Settings{Computer: computer.Config{Sandbox: computer.SandboxConfig{Mode: computer.SandboxOff}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	a := start("A")
	cl := client.New(bustest.Conn(t, srv, "test"))
	con, err := console.Start(console.Config{Addr: "127.0.0.1:0", Client: client.New(bustest.Conn(t, srv, "console"))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })
	tab := newTab(t)
	const id = "moved1"
	do(t, tab, "open the turn's page", chromedp.Navigate(con.URL()+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, tab, "the live feed", `document.getElementById('live').dataset.live === 'on'`)
	spec := bus.TurnSpec{ID: id, Kind: bus.TurnMain, Agent: "ann", Input: "read, then think", Script: json.RawMessage(`{"responses":[
	  {"calls":[{"id":"r1","name":"read_file","arguments":"{\"path\":\"a.txt\"}"}]},
	  {"delay_ms":6000,"text":"Done, on another node."}]}`)}
	// Queued for any node: A, the only one yet, takes it; a turn started on a named node
	// would wait for that node again after its hand-back.
	if _, err := cl.Start(ctx, spec, ""); err != nil {
		t.Fatal(err)
	}
	// B starts once A holds the turn, while A runs its first step; A stops as soon as the
	// step's output is stored, while the model takes 6 s over the second, and hands the
	// turn back. Each waits on the bus, not on the page: with the page between them (and
	// B's start after the step), A stopped too late under load once and ran both steps.
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		rec, err := cl.Record(ctx, id)
		if err != nil || rec == nil || rec.Owner != "A" {
			return fmt.Errorf("record %+v: %v", rec, err)
		}
		return nil
	})
	start("B")
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		items, err := cl.Transcript(ctx, id)
		for _, it := range items {
			if it.Kind == toolbus.KindCallOutput && it.CallID == "r1" {
				return nil
			}
		}
		return fmt.Errorf("no output of r1 yet (%v)", err)
	})
	a.Close()
	waitFor(t, tab, "the first step on A", `document.querySelector('.lane[data-call="r1"]')?.dataset.outcome === 'ok' && document.querySelector('.step[data-step="1"] .step-head').innerText.includes('on A')`)
	waitFor(t, tab, "the turn's end", `document.getElementById('turn-state').dataset.state === 'completed'`)
	waitFor(t, tab, "the resume", `document.querySelector('#timeline .resume')?.innerText.includes('resumed on B')`)
	waitFor(t, tab, "the step after it, from the transcript", `document.querySelectorAll('#timeline .step').length === 2 && !document.querySelector('#timeline [data-streaming]')`)
	heads := eval[[]string](t, tab, `[...document.querySelectorAll('#timeline .step-head, #timeline .resume')].map(e => e.className + ': ' + e.innerText.replace(/\s+/g, ' '))`)
	got := strings.Join(heads, " | ")
	if !regexp.MustCompile(`^step-head: step 1 on A 1 call .*\| resume: ⟳ resumed on B: the turn was handed back by its node \(stopping\).* \| step-head: step 2 on B$`).MatchString(got) {
		t.Errorf("steps and resumes: %s", got)
	}
}

// Refuse, with a reason, tells the model and the tool never runs.
func TestConsoleRefuse(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	w.needsApprovals(t, "careful")
	tab := newTab(t)
	const id = "refuse1"
	do(t, tab, "open the turn's page", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, tab, "the live feed", `document.getElementById('live').dataset.live === 'on'`)
	w.start(t, id, "careful", `{"responses":[
	  {"calls":[{"id":"w1","name":"write_file","arguments":"{\"path\":\"refused.txt\",\"content\":\"no\\n\"}"}]},
	  {"text":"Not written, then."}]}`)
	waitFor(t, tab, "the held call", `!!document.querySelector('.held[data-call="w1"] button.refuse')`)
	do(t, tab, "refuse", chromedp.SendKeys(chromedp.CSS(`.held[data-call="w1"] input.reason`), "not on a Friday"),
		click(`.held[data-call="w1"] button.refuse`))
	waitFor(t, tab, "the turn's end", `document.getElementById('turn-state').dataset.state === 'completed'`)
	waitFor(t, tab, "the refused outcome", `document.querySelector('.lane[data-call="w1"]').dataset.outcome === 'refused'`)
	do(t, tab, "open the call", click(`.lane[data-call="w1"] .lname`))
	waitFor(t, tab, "the model's word", `document.querySelector('.lane[data-call="w1"] .detail').innerText.includes('not on a Friday')`)
	if _, err := os.Stat(filepath.Join(w.home, "refused.txt")); !os.IsNotExist(err) {
		t.Errorf("the refused call ran: %v", err)
	}
}

// The Abort button, with a reason, stops a turn whose model thinks for a minute: the
// page shows it aborted, and its record keeps the reason.
func TestConsoleAbort(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	tab := newTab(t)
	const id = "abort1"
	w.start(t, id, "ann", `{"responses":[{"delay_ms":60000,"text":"never"}]}`)
	do(t, tab, "open the turn", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, tab, "the running turn", `document.getElementById('turn-state')?.dataset.state === 'running' && document.getElementById('live').dataset.live === 'on'`)
	do(t, tab, "abort", chromedp.SendKeys(chromedp.CSS(`#abort-reason`), "wrong project"), click(`#abort`))
	waitFor(t, tab, "the aborted turn", `document.getElementById('turn-state').dataset.state === 'aborted'`)
	waitFor(t, tab, "the abort button gone", `document.getElementById('abort').closest('.toolbar').hidden`)
	ctx := bustest.Context(t)
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		rec, err := w.cl.Record(ctx, id)
		switch {
		case err != nil:
			return err
		case rec == nil || rec.State != bus.TurnAborted:
			return fmt.Errorf("record: %+v", rec)
		case !strings.Contains(rec.Error, "wrong project"):
			return fmt.Errorf("the record's error lacks the reason: %q", rec.Error)
		}
		return nil
	})
	if end := eval[string](t, tab, `document.getElementById('turn-end').innerText`); !strings.Contains(end, "wrong project") {
		t.Errorf("the page's end lacks the reason: %q", end)
	}
}

// The example workflow (examples/workflow/compare.json: two research tasks, one of
// which submits twice, and a verdict that depends on both) started on the
// bus: its page draws the graph and follows it to completed.
func TestConsoleWorkflow(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	tab := newTab(t)
	def, err := os.ReadFile("../examples/workflow/compare.json")
	if err != nil {
		t.Fatal(err)
	}
	ctx := bustest.Context(t)
	var spec *toolbus.Spec
	for _, s := range workflow.Specs() {
		if s.Name == "workflow_start" {
			spec = s
		}
	}
	args, err := spec.Params.Parse(string(def), schema.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := w.cl.Call(ctx, spec, "default", args)
	if err != nil || reply.Outcome != bus.OutcomeOK {
		t.Fatalf("workflow_start: %v %+v", err, reply)
	}
	var wf bus.Workflow
	if err := json.Unmarshal(reply.Details, &wf); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// Whether the page or the workflow was behind: the document as stored, and
		// the records of its task turns.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		doc, err := w.cl.Workflow(ctx, "default", wf.ID)
		if err != nil {
			t.Logf("read the workflow: %v", err)
			return
		}
		b, _ := json.MarshalIndent(doc, "", "  ")
		t.Logf("the workflow as stored:\n%s", b)
		for _, task := range doc.Tasks {
			for _, a := range task.Attempts {
				rec, err := w.cl.Record(ctx, a.Turn)
				if err == nil && rec != nil {
					t.Logf("turn %s: %s on %s, updated %s, error %q", a.Turn, rec.State, rec.Owner, rec.Updated.Format(time.RFC3339Nano), rec.Error)
				}
			}
		}
	})
	do(t, tab, "open the workflow", chromedp.Navigate(w.url+"#/workflow/default/"+wf.ID), chromedp.WaitVisible(chromedp.CSS(`#graph svg`)))
	if n := eval[int](t, tab, `document.querySelectorAll('#graph g.task').length`); n != 3 {
		t.Errorf("the graph has %d tasks", n)
	}
	if n := eval[int](t, tab, `document.querySelectorAll('#graph path.edge').length`); n != 2 {
		t.Errorf("the graph has %d edges", n)
	}
	waitFor(t, tab, "the completed workflow", `document.getElementById('wf-state').dataset.state === 'completed'`)
	waitFor(t, tab, "every task done", `[...document.querySelectorAll('#graph g.task')].every(g => g.dataset.state === 'done')`)
	// fts5's first result is refused by its schema; the same attempt submits again.
	if got := eval[string](t, tab, `document.querySelector('#task-fts5 td:nth-child(4)').innerText`); !strings.HasPrefix(got, "#1 accepted") {
		t.Errorf("fts5's attempts: %q", got)
	}
	if res := eval[string](t, tab, `document.querySelector('#task-verdict').innerText`); !strings.Contains(res, `"choice": "bleve"`) {
		t.Errorf("the verdict's result: %q", res)
	}
	screenshot(t, tab, "console-workflow")
	do(t, tab, "the list", chromedp.Navigate(w.url+"#/workflows"), chromedp.WaitVisible(chromedp.CSS(`#workflows tr[data-workflow="`+wf.ID+`"][data-state="completed"]`)))
}

// Cancel workflow, with a reason, on a workflow whose task thinks for a minute: its page
// shows it cancelled, the task too.
func TestConsoleWorkflowCancel(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	tab := newTab(t)
	ctx := bustest.Context(t)
	var spec *toolbus.Spec
	for _, s := range workflow.Specs() {
		if s.Name == "workflow_start" {
			spec = s
		}
	}
	def := `{"title":"Slow","tasks":[{"id":"slow","instructions":"Think.","result_schema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]},
	  "script":{"responses":[{"delay_ms":60000},{"calls":[{"name":"submit_result","arguments":"{\"result\":{\"ok\":true}}"}]}]}}]}`
	args, err := spec.Params.Parse(def, schema.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := w.cl.Call(ctx, spec, "default", args)
	if err != nil || reply.Outcome != bus.OutcomeOK {
		t.Fatalf("workflow_start: %v %+v", err, reply)
	}
	var wf bus.Workflow
	if err := json.Unmarshal(reply.Details, &wf); err != nil {
		t.Fatal(err)
	}
	do(t, tab, "open the workflow", chromedp.Navigate(w.url+"#/workflow/default/"+wf.ID), chromedp.WaitVisible(chromedp.CSS(`#wf-cancel`)))
	waitFor(t, tab, "the running task", `document.querySelector('#graph g.task[data-task="slow"]').dataset.state === 'running'`)
	do(t, tab, "cancel", chromedp.SendKeys(chromedp.CSS(`#view input.reason`), "changed my mind"), click(`#wf-cancel`))
	waitFor(t, tab, "the cancelled workflow", `document.getElementById('wf-state').dataset.state === 'cancelled'`)
	waitFor(t, tab, "the cancelled task", `document.querySelector('#graph g.task[data-task="slow"]').dataset.state === 'cancelled'`)
	if text := eval[string](t, tab, `document.getElementById('view').innerText`); !strings.Contains(text, "changed my mind") {
		t.Errorf("the page lacks the reason:\n%s", text)
	}
}

// The nodes page lists the node with the categories it hosts, and each category's tools.
func TestConsoleNodes(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	tab := newTab(t)
	do(t, tab, "open the nodes", chromedp.Navigate(w.url+"#/nodes"), chromedp.WaitVisible(chromedp.CSS(`#nodes tr[data-node="n1"]`)))
	// The catalog hears the categories' hosts as they answer: on a loaded machine the
	// page first listed 4 of the 7, and the rest came after.
	want, _ := json.Marshal(toolsets.Categories())
	waitFor(t, tab, "every category of n1", `(() => { const row = document.querySelector('#nodes tr[data-node="n1"]')?.innerText || '';
	  return `+string(want)+`.every(c => row.includes(c)) && !!document.querySelector('#categories tr[data-category="computer"]') })()`)
	hosts := eval[string](t, tab, `document.querySelector('#nodes tr[data-node="n1"]').innerText`)
	for _, c := range toolsets.Categories() {
		if !strings.Contains(hosts, c) {
			t.Errorf("node n1 does not show %s: %q", c, hosts)
		}
	}
	tools := eval[string](t, tab, `document.querySelector('#categories tr[data-category="computer"]').innerText`)
	for _, name := range []string{"list_files", "read_file", "write_file", "run_command"} {
		if !strings.Contains(tools, name) {
			t.Errorf("computer lacks %s: %q", name, tools)
		}
	}
	if seq := eval[string](t, tab, `document.querySelector('#categories tr[data-category="computer"] .chip.seq.destructive')?.textContent || ''`); seq != "write_file" {
		t.Errorf("the first sequential destructive chip of computer is %q", seq)
	}
}

// A turn of an agent that may spawn jobs and make schedules starts a job that thinks
// for a minute and a yearly schedule: the jobs page lists both; Cancel stops the job
// (job_cancel on the agent's behalf) and Remove deletes the schedule.
func TestConsoleJobsAndSchedules(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	ctx := bustest.Context(t)
	p, err := w.cl.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Put(ctx, []byte(`{"version":3,"agent":"helper","jobs":{"spawn":true,"max_running":2,"max_per_hour":10,"keep":"24h"},"schedules":{"enabled":true}}`)); err != nil {
		t.Fatal(err)
	}
	tab := newTab(t)
	do(t, tab, "open the jobs", chromedp.Navigate(w.url+"#/jobs"), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	waitFor(t, tab, "the live feed", `document.getElementById('live').dataset.live === 'on'`)
	w.start(t, "spawner", "helper", `{"responses":[
	  {"calls":[{"id":"j1","name":"job_start","arguments":"{\"prompt\": \"Think for a minute.\"}"},
	            {"id":"s1","name":"schedule_create","arguments":"{\"prompt\": \"Happy new year.\", \"cron\": \"@yearly\"}"}]},
	  {"text":"Started."}],
	  "child":{"responses":[{"delay_ms":60000,"text":"done"}]}}`)
	waitFor(t, tab, "the running job", `!!document.querySelector('#jobs tr[data-job][data-state="running"] button')`)
	waitFor(t, tab, "the schedule", `!!document.querySelector('#schedules tr[data-schedule] button')`)
	if next := eval[string](t, tab, `document.querySelector('#schedules tr[data-schedule] td:nth-child(4)').textContent`); next == "–" || next == "" {
		t.Errorf("the schedule's next firing: %q", next)
	}
	do(t, tab, "cancel the job", click(`#jobs tr[data-job] button`))
	waitFor(t, tab, "the cancelled job", `(r => r && r.dataset.state !== 'running' && r.dataset.state !== 'queued' && !r.querySelector('button'))(document.querySelector('#jobs tr[data-job]'))`)
	do(t, tab, "remove the schedule", click(`#schedules tr[data-schedule] button`))
	waitFor(t, tab, "the schedule gone", `!document.querySelector('#schedules tr[data-schedule]')`)
	js, err := w.cl.Jobs(ctx, "")
	if err != nil || len(js) != 1 || !js[0].State.Ended() {
		t.Fatalf("jobs: %+v %v", js, err)
	}
	ss, err := w.cl.Schedules(ctx, "")
	if err != nil || len(ss) != 0 {
		t.Fatalf("schedules: %+v %v", ss, err)
	}
}

// A console whose NATS user is a watcher shows the turns, the held call and the
// buttons, but the bus refuses what the buttons ask: the page says so, the call stays
// held and the turn runs on.
func TestConsoleRoleLimits(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{users: true, as: "watch"})
	w.needsApprovals(t, "careful")
	tab := newTab(t)
	const id = "watched1"
	do(t, tab, "open the turn's page", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, tab, "the live feed", `document.getElementById('live').dataset.live === 'on'`)
	w.start(t, id, "careful", `{"responses":[
	  {"calls":[{"id":"w1","name":"write_file","arguments":"{\"path\":\"nope.txt\",\"content\":\"no\\n\"}"}]},
	  {"text":"Written."}]}`)
	waitFor(t, tab, "the held call", `!!document.querySelector('.held[data-call="w1"] button.approve')`)

	do(t, tab, "approve", click(`.held[data-call="w1"] button.approve`))
	waitFor(t, tab, "the refusal", `document.getElementById('flash').dataset.kind === 'error'`)
	if msg := eval[string](t, tab, `document.getElementById('flash').textContent`); !strings.Contains(msg, "refused by the bus") || !strings.Contains(msg, "Permissions Violation") {
		t.Errorf("the approve's refusal says %q", msg)
	}
	do(t, tab, "clear the message", chromedp.Evaluate[chromedp.Void](`document.getElementById('flash').dataset.kind = ''`))
	do(t, tab, "abort", click(`#abort`))
	waitFor(t, tab, "the refusal", `document.getElementById('flash').dataset.kind === 'error'`)
	if msg := eval[string](t, tab, `document.getElementById('flash').textContent`); !strings.Contains(msg, "refused by the bus") || !strings.Contains(msg, "toolbus.turn."+id+".abort") {
		t.Errorf("the abort's refusal says %q", msg)
	}

	ctx := bustest.Context(t)
	rec, err := w.cl.Record(ctx, id)
	if err != nil || rec == nil || rec.State != bus.TurnRunning {
		t.Fatalf("the turn after the refused buttons: %+v %v", rec, err)
	}
	if _, err := os.Stat(filepath.Join(w.home, "nope.txt")); !os.IsNotExist(err) {
		t.Errorf("the refused approval ran the call: %v", err)
	}
	do(t, tab, "the list", chromedp.Navigate(w.url+"#/"), chromedp.WaitVisible(chromedp.CSS(`#turns tr[data-turn="`+id+`"][data-state="running"]`)))
	if err := w.cl.Abort(ctx, id, "test over"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tab, "the list hears the end", `!!document.querySelector('#turns tr[data-turn="`+id+`"][data-state="aborted"]')`)
}

// The console logs in to NATS as ops with a password, and asks its own password of the
// browser; neither reaches the page: not its HTML, nor any answer of its API, nor a
// secret the process registered for redaction that a turn's model quoted.
func TestConsoleNoCredentialInPage(t *testing.T) {
	t.Parallel()
	const consolePassword = "console-pw-51a0e7"
	w := newWorld(t, worldOptions{users: true, as: "ops", password: consolePassword})
	secret := "sk-test-" + bus.NewID()
	redact.AddSecrets(secret)
	tab := newTab(t)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("me:"+consolePassword))
	do(t, tab, "log in", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}})
		return err
	}))
	const id = "secret1"
	w.start(t, id, "ann", `{"responses":[{"calls":[{"id":"r1","name":"read_file","arguments":"{\"path\":\"a.txt\"}"}]},{"text":"the key is `+secret+`"}]}`)
	do(t, tab, "open the turn", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, tab, "the turn's end", `document.getElementById('turn-state').dataset.state === 'completed'`)
	waitFor(t, tab, "the answer", `document.getElementById('timeline').innerText.includes('the key is')`)

	var seen strings.Builder
	for _, route := range []string{"#/turn/" + id, "#/", "#/workflows", "#/jobs", "#/nodes"} {
		do(t, tab, "open "+route, chromedp.Navigate(w.url+route), chromedp.WaitVisible(chromedp.CSS(`main`)))
		waitFor(t, tab, route+" loaded", `!document.querySelector('main').innerText.startsWith('Loading')`)
		seen.WriteString(eval[string](t, tab, `document.documentElement.outerHTML`))
	}
	seen.WriteString(eval[string](t, tab, `document.cookie + JSON.stringify(localStorage) + JSON.stringify(sessionStorage)`))
	apis := []string{"/api/info", "/api/turns", "/api/turn?id=" + id, "/api/workflows", "/api/jobs", "/api/schedules", "/api/nodes"}
	for _, api := range apis {
		body, err := chromedp.Run(tab, chromedp.Evaluate[string](`fetch('`+api+`').then(r => r.text())`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("fetch %s: %v", api, err)
		}
		seen.WriteString(body)
	}
	page := seen.String()
	if !strings.Contains(page, "the key is") || !strings.Contains(page, `"turn_id":"`+id+`"`) {
		t.Fatalf("the page does not show the turn: the check below would prove nothing")
	}
	for what, s := range map[string]string{"the NATS password": opsPassword, "the console's password": consolePassword,
		"the basic auth header": auth[len("Basic "):], "the registered secret": secret} {
		if strings.Contains(page, s) {
			t.Errorf("%s reached the page", what)
		}
	}
}

// The running call of a turn has a Cancel button on its lane: the call is stopped, its
// lane says so, and the turn goes on to its end (toolbus abort -call).
func TestConsoleCancelCall(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{})
	tab := newTab(t)
	const id = "cancel1"
	do(t, tab, "open the turn", chromedp.Navigate(w.url+"#/turn/"+id), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	waitFor(t, tab, "the live feed", `document.getElementById('live').dataset.live === 'on'`)
	w.start(t, id, "ann", `{"responses":[
	  {"calls":[{"id":"s1","name":"run_command","arguments":"{\"command\":\"sleep 60\"}"}]},
	  {"text":"Went on."}]}`)
	do(t, tab, "cancel the running call", click(`.lane[data-call="s1"][data-outcome="running"] button.cancel`))
	waitFor(t, tab, "the stopped call", `document.querySelector('.lane[data-call="s1"]')?.dataset.outcome === 'stopped'`)
	waitFor(t, tab, "the turn's end", `document.getElementById('turn-state').dataset.state === 'completed'`)
	ctx := bustest.Context(t)
	rec, err := w.cl.Record(ctx, id)
	if err != nil || rec == nil || rec.State != bus.TurnCompleted {
		t.Fatalf("the turn after the cancel: %+v %v", rec, err)
	}
	if !strings.Contains(eval[string](t, tab, `document.getElementById('view').innerText`), "Went on.") {
		t.Errorf("the page lacks the turn's answer")
	}
}
