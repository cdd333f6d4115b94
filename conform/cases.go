package conform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// notJSON is the body of the refusal cases that the host must refuse before it reads the
// arguments: a host that misses the check refuses it as not JSON, and runs nothing.
var notJSON = []byte("not json")

const (
	// truncated is the truncation refusal of §5, step 2.
	truncated = "arguments were cut off (truncated); re-issue the call with the complete arguments"
	// rfc3339 is the reason of a Toolbus-Deadline that does not parse (§4).
	rfc3339 = "want an RFC 3339 time such as 2006-01-02T15:04:05.999999999Z or 2006-01-02T15:04:05+01:00"
	// abortReason and abortBy are those of the aborts the cases publish.
	abortReason = "conform"
	abortBy     = "toolbus conform"
	// slowDeadline is the deadline of the case whose call must end by it.
	slowDeadline = 1500 * time.Millisecond
)

// id is a call or turn id of this run, unique to the case.
func (r *runner) id(kind string) string {
	r.n++
	return fmt.Sprintf("%s%d-%s", kind, r.n, r.run)
}

// argsFrame is the reply to arguments that fail the schema: the frame of §5, step 5, with
// one line per failing place and the messages the host's own.
func argsFrame(tool string, paths ...string) text {
	parts := []string{"invalid arguments for " + tool + ": arguments do not match the schema:"}
	for i, p := range paths {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("\n... and %d more", len(paths)-10))
			break
		}
		parts = append(parts, "\n- "+p+": ", free)
	}
	return pattern(parts...)
}

// notJSONFrame is the reply to a body that is not JSON.
func notJSONFrame(tool string) text {
	return pattern("invalid arguments for "+tool+": arguments do not match the schema:\n- /: not valid JSON: ", free)
}

func refused(call string, o bus.Outcome, err text) reply {
	return reply{call: call, outcome: o, err: err, refusal: true}
}

func exact(s string) text { return pattern(s) }

// cases are the requests of a run, in the order of the contract: headers (§4), their
// order and forms, truncation, deadlines, arguments, payload references, then the calls
// that run (aborts and a deadline during the call).
func (r *runner) cases() []kase {
	t := r.tool
	var cs []kase
	add := func(name string, tool *toolbus.Spec, headers [][2]string, body []byte, want reply) {
		cs = append(cs, kase{name: name, tool: tool, headers: headers, body: body, want: want})
	}
	h := func(kv ...string) [][2]string {
		var out [][2]string
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, [2]string{kv[i], kv[i+1]})
		}
		return out
	}

	// Headers (§4): each refused with its text, in the order turn, call, agent, deadline.
	c := r.id("c")
	add("Toolbus-Turn that is not an id", t, h(bus.HeaderTurn, "a.b", bus.HeaderCall, c), notJSON,
		refused(c, bus.OutcomeInvalid, exact(`bad Toolbus-Turn header "a.b"`)))
	add("Toolbus-Call that is not an id: call_id is the bad value as sent", t, h(bus.HeaderCall, "c 1"), notJSON,
		refused("c 1", bus.OutcomeInvalid, exact(`bad Toolbus-Call header "c 1"`)))
	long := strings.Repeat("x", 129)
	add("Toolbus-Call of 129 bytes", t, h(bus.HeaderCall, long), notJSON,
		refused(long, bus.OutcomeInvalid, exact(`bad Toolbus-Call header "`+long+`"`)))
	c = r.id("c")
	add("Toolbus-Agent that is not an agent id", t, h(bus.HeaderCall, c, bus.HeaderAgent, "../a1"), notJSON,
		refused(c, bus.OutcomeInvalid, exact(`bad Toolbus-Agent header "../a1": agent id has '.' at position 1; only ASCII letters, digits, '_' and '-' are allowed`)))
	c = r.id("c")
	agent65 := strings.Repeat("a", 65)
	add("Toolbus-Agent of 65 bytes", t, h(bus.HeaderCall, c, bus.HeaderAgent, agent65), notJSON,
		refused(c, bus.OutcomeInvalid, exact(`bad Toolbus-Agent header "`+agent65+`": agent id is 65 bytes long; at most 64 are allowed`)))
	for _, d := range []struct{ value, why string }{
		{"tomorrow", rfc3339},
		{"2026-11-29T19:09:29", rfc3339},
		{"2026-11-29T19:09:29+0100", rfc3339},
		{"2026-02-30T19:09:29Z", "day out of range"},
		{"2026-11-29T19:09:29.1234567891Z", "more than 9 fractional digits"},
		{"2026-11-29T24:00:00Z", "hour out of range"},
	} {
		c = r.id("c")
		add(fmt.Sprintf("Toolbus-Deadline %q", d.value), t, h(bus.HeaderCall, c, bus.HeaderDeadline, d.value), notJSON,
			refused(c, bus.OutcomeInvalid, exact(fmt.Sprintf("bad Toolbus-Deadline header %q: %s", d.value, d.why))))
	}
	c = r.id("c")
	add("bad Toolbus-Turn and bad Toolbus-Agent: the turn is checked first", t,
		h(bus.HeaderAgent, "a.b", bus.HeaderCall, c, bus.HeaderTurn, "x y"), notJSON,
		refused(c, bus.OutcomeInvalid, exact(`bad Toolbus-Turn header "x y"`)))
	c = r.id("c")
	add("bad Toolbus-Deadline that is past: invalid, not timeout", t, h(bus.HeaderCall, c, bus.HeaderDeadline, "2020-01-01T00:00:00"), notJSON,
		refused(c, bus.OutcomeInvalid, exact(`bad Toolbus-Deadline header "2020-01-01T00:00:00": `+rfc3339)))

	// Forms of headers (§4, Accepted forms).
	c = r.id("c")
	add("Toolbus-Call sent twice: the first value counts", t, h(bus.HeaderCall, c, bus.HeaderCall, "c 2", bus.HeaderTurn, "a.b"), notJSON,
		refused(c, bus.OutcomeInvalid, exact(`bad Toolbus-Turn header "a.b"`)))
	c = r.id("c")
	add("a header name in another case is another header, ignored", t, h(bus.HeaderCall, c, "toolbus-turn", "a.b"), notJSON,
		refused(c, bus.OutcomeInvalid, notJSONFrame(t.Name)))
	c = r.id("c")
	add("an empty value is an absent header", t, h(bus.HeaderCall, c, bus.HeaderTurn, "", bus.HeaderDeadline, "", bus.HeaderAgent, ""), notJSON,
		refused(c, bus.OutcomeInvalid, notJSONFrame(t.Name)))
	cs = append(cs, kase{name: "no Toolbus-Call: the host makes a call id", tool: t, body: notJSON,
		want: reply{anyCall: true, outcome: bus.OutcomeInvalid, err: notJSONFrame(t.Name), refusal: true}})
	c = r.id("c")
	add("a Unicode turn id is an id", t, h(bus.HeaderTurn, "tür-"+r.run, bus.HeaderCall, c), notJSON,
		refused(c, bus.OutcomeInvalid, notJSONFrame(t.Name)))

	// Truncation (§5, step 2): only a destructive tool refuses it, whatever the value but false.
	if d := r.destructive; d != nil {
		for _, v := range []string{"true", "1", "no"} {
			c = r.id("c")
			add(fmt.Sprintf("Toolbus-Truncated %q on a destructive tool", v), d, h(bus.HeaderCall, c, bus.HeaderTruncated, v), notJSON,
				refused(c, bus.OutcomeInvalid, exact(truncated)))
		}
		c = r.id("c")
		add(`Toolbus-Truncated "False" is false`, d, h(bus.HeaderCall, c, bus.HeaderTruncated, "False"), notJSON,
			refused(c, bus.OutcomeInvalid, notJSONFrame(d.Name)))
		c = r.id("c")
		add("truncated and past its deadline: truncation is checked first", d,
			h(bus.HeaderCall, c, bus.HeaderTruncated, "true", bus.HeaderDeadline, "2020-01-01T00:00:00Z"), notJSON,
			refused(c, bus.OutcomeInvalid, exact(truncated)))
	} else {
		cs = append(cs, kase{name: "Toolbus-Truncated on a destructive tool", skip: "the category has no destructive tool"})
	}
	if !t.Destructive {
		c = r.id("c")
		add("Toolbus-Truncated on a tool that is not destructive is ignored", t, h(bus.HeaderCall, c, bus.HeaderTruncated, "true"), notJSON,
			refused(c, bus.OutcomeInvalid, notJSONFrame(t.Name)))
	}

	// Deadlines already past (§5, step 3; §10): timeout, the deadline in UTC.
	c = r.id("c")
	add("deadline already past on arrival", t, h(bus.HeaderCall, c, bus.HeaderDeadline, "2020-01-01T00:00:00Z"), notJSON,
		refused(c, bus.OutcomeTimeout, exact("deadline already past on arrival (2020-01-01T00:00:00Z); the tool did not run")))
	c = r.id("c")
	add("deadline past, with an offset and a fraction: written in UTC", t,
		h(bus.HeaderCall, c, bus.HeaderDeadline, "2020-01-01t01:00:00.120+01:00"), notJSON,
		refused(c, bus.OutcomeTimeout, exact("deadline already past on arrival (2020-01-01T00:00:00.12Z); the tool did not run")))

	// Arguments (§5, step 5): refused with the frame, one line per place, never repaired.
	c = r.id("c")
	add("a body that is not JSON", t, h(bus.HeaderCall, c), notJSON, refused(c, bus.OutcomeInvalid, notJSONFrame(t.Name)))
	c = r.id("c")
	add("JSON a turn would repair (a trailing comma) is not repaired", t, h(bus.HeaderCall, c), []byte(`{"a":1,}`),
		refused(c, bus.OutcomeInvalid, notJSONFrame(t.Name)))
	c = r.id("c")
	add("a body that is JSON but not an object", t, h(bus.HeaderCall, c), []byte(`[1,2]`),
		refused(c, bus.OutcomeInvalid, argsFrame(t.Name, "/")))
	for _, v := range r.violations(t) {
		c = r.id("c")
		add(v.name, t, h(bus.HeaderCall, c), v.body, refused(c, bus.OutcomeInvalid, argsFrame(t.Name, v.paths...)))
	}
	if size := bus.InlineLimit(r.nc.MaxPayload()) - 1024; size > 0 {
		big := make([]byte, size)
		for i := range big {
			big[i] = 'a'
		}
		big[0], big[len(big)-1] = '"', '"'
		c = r.id("c")
		add(fmt.Sprintf("an oversize body (%s, a JSON string)", bus.FormatBytes(int64(size))), t, h(bus.HeaderCall, c), big,
			refused(c, bus.OutcomeInvalid, argsFrame(t.Name, "/")))
	}

	// Payload references (§4, Large arguments): refused as invalid. A host that does not
	// read the payload store takes the note for its body, which is not JSON: invalid too,
	// and its words are its own (§15).
	zero := strings.Repeat("0", 64)
	for _, p := range []struct{ name, ref string }{
		{"a Toolbus-Payload that does not parse", "nonsense"},
		{"a payload reference to another bucket", "elsewhere/x; size=10; sha256=" + zero},
		{"a payload reference over 16 MiB", fmt.Sprintf("%s/x; size=%d; sha256=%s", bus.ObjectPayloads, bus.MaxCallPayload+1, zero)},
		{"a payload reference to an object that does not exist", bus.ObjectPayloads + "/conform-" + r.run + "; size=10; sha256=" + zero},
	} {
		c = r.id("c")
		add(p.name, t, h(bus.HeaderCall, c, bus.HeaderPayload, p.ref), bus.PayloadNote,
			refused(c, bus.OutcomeInvalid, pattern(anything)))
	}

	// Calls that run: an abort before the request does not stop it, its deadline does;
	// an abort during it stops it, with the abort's reason or without one.
	const (
		before = "abort before the call, deadline during it: the call runs, then times out"
		during = "abort during the call: stopped, with the abort"
		noBody = "abort without a body during the call: stopped, with the abort"
	)
	if r.slow == nil {
		for _, name := range []string{before, during, noBody} {
			cs = append(cs, kase{name: name, skip: "needs a call that runs 3 s or more (-slow-tool and -slow-args)"})
		}
		return cs
	}
	slow := []byte(r.cfg.Slow.Args)
	turn, c := r.id("t"), r.id("c")
	cs = append(cs, kase{name: before, tool: r.slow,
		headers: h(bus.HeaderTurn, turn, bus.HeaderCall, c, bus.HeaderDeadline, "<now + 1.5 s>"), body: slow,
		want: reply{call: c, outcome: bus.OutcomeTimeout, err: pattern("call timeout: context deadline exceeded", more)},
		flow: abortBefore(turn, c)})
	for _, withBody := range []bool{true, false} {
		turn, c := r.id("t"), r.id("c")
		name, why, abort := during, "call stopped: the turn was aborted: "+abortReason, &bus.Abort{Turn: turn, Reason: abortReason, By: abortBy}
		if !withBody {
			name, why, abort = noBody, "call stopped: the turn was aborted", &bus.Abort{Turn: turn}
		}
		cs = append(cs, kase{name: name, tool: r.slow,
			headers: h(bus.HeaderTurn, turn, bus.HeaderCall, c), body: slow,
			want: reply{call: c, outcome: bus.OutcomeStopped, err: pattern(why, more), abort: abort},
			flow: abortDuring(turn, c, withBody)})
	}
	return cs
}

// violation is a body that fails the tool's schema, and where.
type violation struct {
	name  string
	body  []byte
	paths []string
}

// violations are bodies that the tool's schema refuses, each with the places of its
// failures as the Go validator finds them: {} when properties are required, every
// declared property of a wrong type, a property the schema does not declare. Only
// bodies the schema refuses are sent: a tool never runs on them.
func (r *runner) violations(t *toolbus.Spec) []violation {
	var doc struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	_ = json.Unmarshal(t.Params.JSON(), &doc)
	wrong := map[string]any{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range doc.Properties {
			if !yield(k) {
				return
			}
		}
	}) {
		var p struct {
			Type any `json:"type"`
		}
		if json.Unmarshal(doc.Properties[name], &p) != nil || p.Type == nil {
			continue
		}
		types := fmt.Sprint(p.Type)
		switch {
		case !strings.Contains(types, "object"):
			wrong[name] = map[string]any{"conform": true}
		case !strings.Contains(types, "string"):
			wrong[name] = "conform"
		}
	}
	var out []violation
	for _, v := range []struct {
		name string
		body any
	}{
		{"arguments that leave out the required properties", map[string]any{}},
		{"every property of a wrong type", wrong},
		{"a property the schema does not declare", map[string]any{"conform_undeclared_property": true}},
	} {
		b, _ := json.Marshal(v.body)
		if v.name != "arguments that leave out the required properties" && len(b) <= 2 {
			continue
		}
		err := t.Params.Validate(b)
		var ve *schema.ValidationError
		if !errors.As(err, &ve) || len(ve.Leaves) == 0 {
			continue // the schema takes it: it would run the tool
		}
		var paths []string
		for _, l := range ve.Leaves {
			paths = append(paths, l.Path)
		}
		out = append(out, violation{name: v.name + " (§5, step 5)", body: b, paths: paths})
	}
	if len(out) > 0 {
		// An empty body means {} (§4): refused as {} is, when {} is.
		if v := out[0]; string(v.body) == "{}" {
			out = append(out, violation{name: "an empty body is {}", body: nil, paths: v.paths})
		}
	}
	return out
}

// events subscribes to a call's activity events.
func (r *runner) events(turn, call string) (chan *nats.Msg, func(), error) {
	ch := make(chan *nats.Msg, 16)
	sub, err := r.nc.ChanSubscribe(bus.EventSubject(turn, call, "*"), ch)
	if err != nil {
		return nil, nil, err
	}
	if err := r.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, nil, err
	}
	return ch, func() { _ = sub.Unsubscribe() }, nil
}

// event waits for the call's event of kind, up to wait.
func event(ctx context.Context, ch chan *nats.Msg, kind bus.EventKind, wait time.Duration) (bus.Event, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case m := <-ch:
			var ev bus.Event
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				return ev, fmt.Errorf("an event that is not an Event (%v): %s", err, m.Data)
			}
			if ev.Kind == kind {
				return ev, nil
			}
		case <-t.C:
			return bus.Event{}, fmt.Errorf("no %s event within %s", kind, wait)
		case <-ctx.Done():
			return bus.Event{}, ctx.Err()
		}
	}
}

// slowRun sends a case's call, which runs, and checks its reply and its completed event
// (its label ends with " (<outcome>)", §8). during, when set, runs once the started
// event came.
func (r *runner) slowRun(ctx context.Context, c *kase, res *Result, deadline time.Time, during func() error) {
	fail := func(err error) {
		if res.Got == "" {
			res.Got = err.Error()
		}
		res.Problems = append(res.Problems, err.Error())
	}
	evs, stopEvents, err := r.events(c.headers[0][1], c.want.call)
	if err != nil {
		fail(err)
		return
	}
	defer stopEvents()
	m := r.message(*c)
	if !deadline.IsZero() {
		m.Header.Set(bus.HeaderDeadline, bus.FormatDeadline(deadline))
	}
	replies, stop, err := r.send(m)
	if err != nil {
		fail(err)
		return
	}
	defer stop()
	if _, err := event(ctx, evs, bus.EventStarted, r.cfg.ReplyTimeout); err != nil {
		fail(fmt.Errorf("%w (a call of a turn that runs publishes started, §8)", err))
	} else if during != nil {
		if err := during(); err != nil {
			fail(err)
			return
		}
	}
	wait := r.cfg.ReplyTimeout + bus.DefaultAbortGrace
	if !deadline.IsZero() {
		wait += time.Until(deadline)
	}
	reply, err := r.await(ctx, replies, wait)
	if err != nil {
		fail(err)
		return
	}
	r.check(*c, reply, res)
	ev, err := event(ctx, evs, bus.EventCompleted, r.cfg.ReplyTimeout)
	switch {
	case err != nil:
		fail(fmt.Errorf("%w (published after the reply, §8)", err))
	case !strings.HasSuffix(ev.Label, " ("+string(c.want.outcome)+")"):
		fail(fmt.Errorf("completed event label %q does not end with %q (§8)", ev.Label, " ("+string(c.want.outcome)+")"))
	}
}

// abortBefore aborts the turn, then sends its call with a deadline 1.5 s away: the abort
// came before the call, which runs normally (§9) until its deadline (§10).
func abortBefore(turn, call string) func(context.Context, *runner, *kase, *Result) {
	return func(ctx context.Context, r *runner, c *kase, res *Result) {
		b, _ := json.Marshal(bus.Abort{Turn: turn, Reason: abortReason, By: abortBy})
		if err := r.nc.Publish(bus.AbortSubject(turn), b); err != nil {
			res.Problems = append(res.Problems, err.Error())
			return
		}
		r.slowRun(ctx, c, res, time.Now().Add(slowDeadline), nil)
	}
}

// abortDuring aborts the turn once its call started, with a body or without.
func abortDuring(turn, call string, withBody bool) func(context.Context, *runner, *kase, *Result) {
	return func(ctx context.Context, r *runner, c *kase, res *Result) {
		r.slowRun(ctx, c, res, time.Time{}, func() error {
			var body []byte
			if withBody {
				body, _ = json.Marshal(bus.Abort{Turn: turn, Reason: abortReason, By: abortBy})
			}
			return r.nc.Publish(bus.AbortSubject(turn), body)
		})
	}
}
