// Package conform checks a category host against the host contract of docs/protocol.md:
// it sends a category's host the edge-case requests the contract defines (bad JSON,
// schema violations, missing and odd headers, deadlines passed, aborts before and during
// a call, an oversize body, payload references) and compares each reply with the one the
// contract asks for, field by field, the host's own words left free where §15 leaves
// them free. `toolbus conform` runs it; a host author runs that against their host.
//
// Only requests the contract refuses before the tool runs are sent, with a body that
// fails the schema when a check is missed, so a host that conforms runs no tool: the
// cases that need a call to run (aborts, a deadline during the call) run the one call
// the caller names (Config.Slow), and are skipped without it.
package conform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
)

// DefaultReplyTimeout bounds the wait for one reply of a refusal.
const DefaultReplyTimeout = 10 * time.Second

// Config says what to check.
type Config struct {
	// Category is the category whose host is checked.
	Category string
	// Tool is the tool the refusal cases call; empty picks one: the first read-only
	// tool, else the first that is not destructive, else the first.
	Tool string
	// Slow is a call that may run and lasts 3 s or more (until aborted or past its
	// deadline): the abort and deadline cases run it. Nil skips them.
	Slow *Call
	// ReplyTimeout bounds the wait for a refusal's reply (DefaultReplyTimeout).
	ReplyTimeout time.Duration
}

// Call is a tool and its arguments.
type Call struct {
	Tool string
	Args string
}

// Result is how one case went.
type Result struct {
	Case string // what the case checks
	Tool string
	// Sent is the request: its headers and a short form of its body.
	Sent string
	// Want is the reply the contract asks for; … stands for the host's own words.
	Want string
	// Got is what the host answered, or what happened instead.
	Got string
	// Problems say where Got differs from Want; none when the case passed.
	Problems []string
	// Skipped says why the case was not run.
	Skipped string
}

// Passed reports whether the case ran and the host answered as the contract says.
func (r Result) Passed() bool { return r.Skipped == "" && len(r.Problems) == 0 }

// ErrCategory reports a category that cannot be checked: not served, or refused.
var ErrCategory = errors.New("category cannot be checked")

// Run reads the bus's catalog, finds the category, and runs every case against its
// hosts, calling report with each result as it comes. A category served by several hosts
// has each request answered by one of them (their queue group): run it with one host up
// to check that one.
func Run(ctx context.Context, nc *nats.Conn, cfg Config, report func(Result)) error {
	if cfg.ReplyTimeout <= 0 {
		cfg.ReplyTimeout = DefaultReplyTimeout
	}
	var (
		cat *catalog.Catalog
		i   = -1
	)
	// A host on a loaded machine can answer $SRV.INFO after the others have (see
	// client.Tool): look twice, the second time waiting longer, before saying it is not
	// there.
	for _, wait := range []time.Duration{time.Second, 3 * time.Second} {
		cat = catalog.New(nc, catalog.Options{FirstReply: wait, Quiet: wait})
		if err := cat.Refresh(ctx); err != nil {
			return err
		}
		if i = slices.IndexFunc(cat.Categories(), func(c catalog.Category) bool { return c.Name == cfg.Category }); i >= 0 {
			break
		}
	}
	if i < 0 {
		return fmt.Errorf("%w: no host serves category %s on the bus (no micro service %s answered $SRV.INFO)",
			ErrCategory, cfg.Category, bus.CategoryService(cfg.Category))
	}
	c := cat.Categories()[i]
	if c.Err != nil {
		return fmt.Errorf("%w: %v", ErrCategory, c.Err)
	}
	if len(c.Specs) == 0 {
		return fmt.Errorf("%w: category %s publishes no usable tool: %s", ErrCategory, cfg.Category, strings.Join(c.Problems(), "; "))
	}
	r := &runner{nc: nc, cfg: cfg, cat: c, run: bus.NewID()}
	if err := r.pick(); err != nil {
		return err
	}
	report(r.catalogCase())
	for _, cs := range r.cases() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		report(r.do(ctx, cs))
	}
	return nil
}

type runner struct {
	nc   *nats.Conn
	cfg  Config
	cat  catalog.Category
	run  string // this run's id, in its call and turn ids
	n    int    // cases so far
	tool *toolbus.Spec
	// destructive is a destructive tool of the category, for the truncation cases.
	destructive *toolbus.Spec
	slow        *toolbus.Spec
}

func (r *runner) pick() error {
	find := func(name string) *toolbus.Spec {
		i := slices.IndexFunc(r.cat.Specs, func(s *toolbus.Spec) bool { return s.Name == name })
		if i < 0 {
			return nil
		}
		return r.cat.Specs[i]
	}
	switch {
	case r.cfg.Tool != "":
		if r.tool = find(r.cfg.Tool); r.tool == nil {
			return fmt.Errorf("%w: category %s has no tool %s", ErrCategory, r.cat.Name, r.cfg.Tool)
		}
	default:
		for _, pick := range []func(*toolbus.Spec) bool{
			func(s *toolbus.Spec) bool { return s.ReadOnly },
			func(s *toolbus.Spec) bool { return !s.Destructive },
			func(*toolbus.Spec) bool { return true },
		} {
			if i := slices.IndexFunc(r.cat.Specs, pick); i >= 0 {
				r.tool = r.cat.Specs[i]
				break
			}
		}
	}
	if i := slices.IndexFunc(r.cat.Specs, func(s *toolbus.Spec) bool { return s.Destructive }); i >= 0 {
		r.destructive = r.cat.Specs[i]
	}
	if r.cfg.Slow != nil {
		if r.slow = find(r.cfg.Slow.Tool); r.slow == nil {
			return fmt.Errorf("%w: category %s has no tool %s (the slow call)", ErrCategory, r.cat.Name, r.cfg.Slow.Tool)
		}
		if err := r.slow.Params.Validate(json.RawMessage(r.cfg.Slow.Args)); err != nil {
			return fmt.Errorf("the slow call's arguments do not fit %s's schema: %w", r.slow.Name, err)
		}
	}
	return nil
}

// catalogCase checks what a catalog reads of the host: every endpoint usable, and the
// host named by its node.
func (r *runner) catalogCase() Result {
	res := Result{Case: "catalog: every endpoint is usable and the host names its node (§2, §3)",
		Sent: "$SRV.INFO", Want: "no endpoint skipped; service metadata node set"}
	var got []string
	for _, h := range r.cat.Hosts {
		got = append(got, "host "+h.String())
		if h.Node == "" {
			res.Problems = append(res.Problems, "host instance "+h.ID+" has no node metadata: catalogs name it by its instance id")
		}
	}
	for _, s := range r.cat.Specs {
		got = append(got, "tool "+s.Name)
	}
	for _, p := range r.cat.Problems() {
		got = append(got, p)
		res.Problems = append(res.Problems, p)
	}
	res.Got = strings.Join(got, "; ")
	return res
}

// kase is one request and the reply the contract asks for.
type kase struct {
	name    string
	tool    *toolbus.Spec
	headers [][2]string // in order, names as written (a name may repeat)
	body    []byte
	want    reply
	// needs, when set and empty of a tool, skips the case with this reason.
	skip string
	// flow runs a case that is more than one request and its reply (aborts).
	flow func(ctx context.Context, r *runner, c *kase, res *Result)
}

// reply is the expected ToolReply.
type reply struct {
	call    string // "" with anyCall: any non-empty id
	anyCall bool
	outcome bus.Outcome
	err     text
	refusal bool       // duration_ns must be 0
	abort   *bus.Abort // a stopped reply's abort
}

// text is an expected text: literal parts and places left to the host (…).
type text struct {
	show string
	re   *regexp.Regexp
}

// free stands for the host's own words within one line, anything for any text of its
// own, more for an optional " (<the tool's error>)" at the end.
const (
	free     = "\x00free"
	anything = "\x00anything"
	more     = "\x00more"
)

// pattern builds a text from literal parts, free and more.
func pattern(parts ...string) text {
	var show, re strings.Builder
	re.WriteString(`^(?s:`)
	for _, p := range parts {
		switch p {
		case free:
			show.WriteString("…")
			re.WriteString(`[^\n]*`)
		case anything:
			show.WriteString("…")
			re.WriteString(`.*`)
		case more:
			show.WriteString("[ (…)]")
			re.WriteString(`( \(.*\))?`)
		default:
			show.WriteString(p)
			re.WriteString(regexp.QuoteMeta(p))
		}
	}
	re.WriteString(`)$`)
	return text{show: show.String(), re: regexp.MustCompile(re.String())}
}

func (w reply) String() string {
	var b strings.Builder
	b.WriteString(`{"call_id":`)
	if w.anyCall {
		b.WriteString(`"<an id the host made>"`)
	} else {
		b.WriteString(quote(w.call))
	}
	fmt.Fprintf(&b, `,"tool":…,"outcome":%s`, quote(string(w.outcome)))
	if w.err.re != nil {
		fmt.Fprintf(&b, `,"error":%s`, quote(w.err.show))
	}
	if w.abort != nil {
		a, _ := json.Marshal(w.abort)
		fmt.Fprintf(&b, `,"abort":%s`, a)
	}
	if w.refusal {
		b.WriteString(`,"duration_ns":0}`)
	} else {
		b.WriteString(`,"duration_ns":<n>}`)
	}
	return b.String()
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// do runs one case.
func (r *runner) do(ctx context.Context, c kase) Result {
	res := Result{Case: c.name}
	if c.tool != nil {
		res.Tool = c.tool.Name
	}
	if c.skip != "" {
		res.Skipped = c.skip
		return res
	}
	res.Want = strings.Replace(c.want.String(), `"tool":…`, `"tool":`+quote(c.tool.Name), 1)
	res.Sent = sent(c)
	if c.flow != nil {
		c.flow(ctx, r, &c, &res)
		return res
	}
	m, err := r.request(ctx, c, r.cfg.ReplyTimeout)
	if err != nil {
		res.Got = err.Error()
		res.Problems = append(res.Problems, err.Error())
		return res
	}
	r.check(c, m, &res)
	return res
}

// sent is a short form of a request: its headers and at most 80 bytes of its body.
func sent(c kase) string {
	var b strings.Builder
	for _, h := range c.headers {
		fmt.Fprintf(&b, "%s: %q; ", h[0], h[1])
	}
	body := string(c.body)
	if len(body) > 80 {
		body = fmt.Sprintf("%s… (%d bytes)", body[:60], len(c.body))
	}
	fmt.Fprintf(&b, "body %q", body)
	return b.String()
}

// message is a case's request.
func (r *runner) message(c kase) *nats.Msg {
	m := nats.NewMsg(bus.ToolSubject(r.cat.Name, c.tool.Name))
	m.Data = c.body
	for _, h := range c.headers {
		// Straight into the map: names keep their case, repeats their order.
		m.Header[h[0]] = append(m.Header[h[0]], h[1])
	}
	return m
}

// request sends a case's request and waits up to wait for its reply.
func (r *runner) request(ctx context.Context, c kase, wait time.Duration) (*nats.Msg, error) {
	replies, stop, err := r.send(r.message(c))
	if err != nil {
		return nil, err
	}
	defer stop()
	return r.await(ctx, replies, wait)
}

// send publishes m with a reply subject of its own; replies delivers the answer.
func (r *runner) send(m *nats.Msg) (replies chan *nats.Msg, stop func(), err error) {
	replies = make(chan *nats.Msg, 2)
	m.Reply = r.nc.NewRespInbox()
	sub, err := r.nc.ChanSubscribe(m.Reply, replies)
	if err != nil {
		return nil, nil, err
	}
	if err := r.nc.PublishMsg(m); err != nil {
		_ = sub.Unsubscribe()
		return nil, nil, err
	}
	return replies, func() { _ = sub.Unsubscribe() }, nil
}

func (r *runner) await(ctx context.Context, replies chan *nats.Msg, wait time.Duration) (*nats.Msg, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case m := <-replies:
		if m.Header.Get("Status") == "503" {
			return nil, errors.New("no host answered: no responders on the tool's subject")
		}
		return m, nil
	case <-t.C:
		return nil, fmt.Errorf("no reply within %s", wait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// check compares a reply with the case's.
func (r *runner) check(c kase, m *nats.Msg, res *Result) {
	res.Got = string(m.Data)
	problem := func(format string, args ...any) { res.Problems = append(res.Problems, fmt.Sprintf(format, args...)) }
	if m.Header.Get(bus.HeaderPayload) != "" {
		// A large reply by reference: no refusal needs one.
		problem("the reply came through the payload store (%s), not in the message", m.Header.Get(bus.HeaderPayload))
		return
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(m.Data, &fields); err != nil {
		problem("the reply is not a JSON object (%v): a turn would record it as a malformed reply", err)
		return
	}
	var got bus.ToolReply
	if err := json.Unmarshal(m.Data, &got); err != nil {
		problem("the reply does not decode as a ToolReply: %v", err)
		return
	}
	w := c.want
	switch {
	case w.anyCall && got.Call == "":
		problem("call_id is empty; want an id the host made (the request had no Toolbus-Call)")
	case !w.anyCall && got.Call != w.call:
		problem("call_id %q; want %q (the request's Toolbus-Call)", got.Call, w.call)
	}
	if got.Tool != c.tool.Name {
		problem("tool %q; want %q (the tool's name, without namespace)", got.Tool, c.tool.Name)
	}
	if got.Outcome != w.outcome {
		problem("outcome %q; want %q", got.Outcome, w.outcome)
	}
	if w.err.re != nil && !w.err.re.MatchString(got.Error) {
		problem("error %q; want %q (… is the host's own words)", got.Error, w.err.show)
	}
	d, ok := fields["duration_ns"]
	switch {
	case !ok:
		problem("no duration_ns; it is always present (0 for a refusal)")
	case w.refusal && string(d) != "0":
		problem("duration_ns %s; want 0 for a refusal", d)
	}
	if w.abort != nil {
		if got.Abort == nil || *got.Abort != *w.abort {
			a, _ := json.Marshal(got.Abort)
			b, _ := json.Marshal(w.abort)
			problem("abort %s; want %s", a, b)
		}
	}
}
