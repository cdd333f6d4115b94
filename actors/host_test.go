package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// TestHostReadsRequestHeaders sends direct requests with hand-made headers:
// the host reads them with bus.ParseToolRequest, so a Toolbus-Truncated
// other than "false" stops a destructive tool, and a bad header is refused
// with the parser's message.
func TestHostReadsRequestHeaders(t *testing.T) {
	t.Parallel()
	var wrote, peeked atomic.Int32
	write := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "write", Category: "test", Destructive: true},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			wrote.Add(1)
			return toolbus.TextResult("written by " + c.Agent), nil
		},
	})
	peek := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "peek", Category: "test", ReadOnly: true},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			peeked.Add(1)
			return toolbus.TextResult(c.Deadline.Format(time.RFC3339Nano)), nil
		},
	})
	h := newHarness(t, write, peek)
	nc, err := h.srv.Connect("direct")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	const truncatedErr = "arguments were cut off (truncated); re-issue the call with the complete arguments"
	soon := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	late := soon.Add(time.Hour) // after the host's own limit (DefaultCallTimeout)
	tests := []struct {
		name    string
		tool    string
		headers map[string]string
		outcome bus.Outcome
		err     string // the reply's error, exactly
		call    string // the reply's call id, when the request names one
		// deadline is the one peek must see; zero: before late, the host's own.
		deadline time.Time
	}{
		{"destructive, truncated true", "write", map[string]string{bus.HeaderTruncated: "true", bus.HeaderCall: "c1"}, bus.OutcomeInvalid, truncatedErr, "c1", time.Time{}},
		{"destructive, truncated 1", "write", map[string]string{bus.HeaderTruncated: "1"}, bus.OutcomeInvalid, truncatedErr, "", time.Time{}},
		{"destructive, truncated yes", "write", map[string]string{bus.HeaderTruncated: "yes"}, bus.OutcomeInvalid, truncatedErr, "", time.Time{}},
		{"destructive, truncated TRUE", "write", map[string]string{bus.HeaderTruncated: "TRUE"}, bus.OutcomeInvalid, truncatedErr, "", time.Time{}},
		{"destructive, truncated false", "write", map[string]string{bus.HeaderTruncated: "false"}, bus.OutcomeOK, "", "", time.Time{}},
		{"destructive, truncated False", "write", map[string]string{bus.HeaderTruncated: "False"}, bus.OutcomeOK, "", "", time.Time{}},
		{"destructive, truncated empty", "write", map[string]string{bus.HeaderTruncated: ""}, bus.OutcomeOK, "", "", time.Time{}},
		{"destructive, not truncated", "write", nil, bus.OutcomeOK, "", "", time.Time{}},
		{"read-only, truncated 1", "peek", map[string]string{bus.HeaderTruncated: "1"}, bus.OutcomeOK, "", "", time.Time{}},
		{
			"deadline in lower case", "peek",
			map[string]string{bus.HeaderDeadline: strings.ToLower(soon.Format(time.RFC3339)), bus.HeaderTurn: "t1", bus.HeaderCall: "c2"},
			bus.OutcomeOK, "", "c2", soon,
		},
		{"deadline with an offset", "peek", map[string]string{bus.HeaderDeadline: soon.In(time.FixedZone("", -5*3600)).Format(time.RFC3339Nano)}, bus.OutcomeOK, "", "", soon},
		{"deadline after the host's limit", "peek", map[string]string{bus.HeaderDeadline: bus.FormatDeadline(late)}, bus.OutcomeOK, "", "", time.Time{}},
		{
			"bad deadline", "peek", map[string]string{bus.HeaderDeadline: "2026-11-29 19:09:29Z", bus.HeaderCall: "c3"}, bus.OutcomeInvalid,
			`bad Toolbus-Deadline header "2026-11-29 19:09:29Z": want an RFC 3339 time such as 2006-01-02T15:04:05.999999999Z or 2006-01-02T15:04:05+01:00`, "c3", time.Time{},
		},
		{
			"bad agent", "write", map[string]string{bus.HeaderAgent: "team.a"}, bus.OutcomeInvalid,
			`bad Toolbus-Agent header "team.a": agent id has '.' at position 5; only ASCII letters, digits, '_' and '-' are allowed`, "", time.Time{},
		},
		{"bad turn", "peek", map[string]string{bus.HeaderTurn: "t.1", bus.HeaderCall: "c4"}, bus.OutcomeInvalid, `bad Toolbus-Turn header "t.1"`, "c4", time.Time{}},
		{"turn id too long", "peek", map[string]string{bus.HeaderTurn: strings.Repeat("t", bus.MaxIDLen+1)}, bus.OutcomeInvalid, `bad Toolbus-Turn header "` + strings.Repeat("t", bus.MaxIDLen+1) + `"`, "", time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := nats.NewMsg(bus.ToolSubject("test", tc.tool))
			for k, v := range tc.headers {
				m.Header.Set(k, v)
			}
			res, err := nc.RequestMsg(m, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var r bus.ToolReply
			if err := json.Unmarshal(res.Data, &r); err != nil {
				t.Fatal(err)
			}
			if r.Outcome != tc.outcome || r.Error != tc.err {
				t.Errorf("outcome %s, error %q; want %s, %q", r.Outcome, r.Error, tc.outcome, tc.err)
			}
			switch {
			case tc.call != "" && r.Call != tc.call:
				t.Errorf("call id %q, want %q", r.Call, tc.call)
			case tc.call == "" && !bus.ValidID(r.Call):
				t.Errorf("call id %q: the host should have made one", r.Call)
			}
			if tc.tool != "peek" || r.Outcome != bus.OutcomeOK {
				return
			}
			var text string
			if len(r.Content) > 0 {
				text = r.Content[0].Text
			}
			got, err := time.Parse(time.RFC3339Nano, text)
			switch {
			case err != nil:
				t.Errorf("peek's deadline %q: %v", text, err)
			case !tc.deadline.IsZero() && !got.Equal(tc.deadline):
				t.Errorf("peek's deadline %v, want the header's %v", got, tc.deadline)
			case tc.deadline.IsZero() && !got.Before(late):
				t.Errorf("peek's deadline %v, want the host's own limit, before %v", got, late)
			}
		})
	}
	// Only the accepted calls ran: four writes and four peeks.
	if w, p := wrote.Load(), peeked.Load(); w != 4 || p != 4 {
		t.Errorf("write ran %d times, peek %d; want 4 and 4", w, p)
	}
}

// TestHostTakesAgentFromStoredTurn: a call of a durable turn runs for the agent in the
// turn's stored spec, whatever the Toolbus-Agent header says; a header that names
// another agent is refused; a turn without a record goes by its header.
func TestHostTakesAgentFromStoredTurn(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	whoami := toolbus.MustDefine(toolbus.Def[noArgs]{
		Spec: toolbus.Spec{Name: "whoami", Category: "test", ReadOnly: true},
		Execute: func(ctx context.Context, c toolbus.Call, _ noArgs) (toolbus.Result, error) {
			ran.Add(1)
			return toolbus.TextResult("agent=" + c.Agent), nil
		},
	})
	h := newHarness(t, whoami)
	nc, err := h.srv.Connect("direct")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The record of a turn that runs, as its node wrote it (this node runs no turns: the
	// state is made here).
	turns, err := durable.Open(ctx, js, durable.Config{Replicas: 1, Create: true, Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := turns.RestoreRecord(ctx, bus.TurnRecord{Spec: bus.TurnSpec{ID: "t-ann", Agent: "ann"}, State: bus.TurnRunning}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, turn, agent string
		outcome           bus.Outcome
		text              string // the result's text, or the start of the error
	}{
		{"stored, no header", "t-ann", "", bus.OutcomeOK, "agent=ann"},
		{"stored, same header", "t-ann", "ann", bus.OutcomeOK, "agent=ann"},
		{"stored, another agent claimed", "t-ann", "bob", bus.OutcomeInvalid,
			`the request's agent is not its turn's: turn t-ann is agent "ann"'s (its stored spec), the request says "bob"`},
		{"no record", "t-ephemeral", "bob", bus.OutcomeOK, "agent=bob"},
		{"an id no record can have", "tür-1", "bob", bus.OutcomeOK, "agent=bob"},
		{"no turn", "", "bob", bus.OutcomeOK, "agent=bob"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := nats.NewMsg(bus.ToolSubject("test", "whoami"))
			if tc.turn != "" {
				m.Header.Set(bus.HeaderTurn, tc.turn)
			}
			if tc.agent != "" {
				m.Header.Set(bus.HeaderAgent, tc.agent)
			}
			res, err := nc.RequestMsg(m, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var r bus.ToolReply
			if err := json.Unmarshal(res.Data, &r); err != nil {
				t.Fatal(err)
			}
			got := r.Error
			if r.Outcome == bus.OutcomeOK && len(r.Content) > 0 {
				got = r.Content[0].Text
			}
			if r.Outcome != tc.outcome || got != tc.text {
				t.Errorf("outcome %s, %q; want %s, %q", r.Outcome, got, tc.outcome, tc.text)
			}
		})
	}
	if n := ran.Load(); n != 5 {
		t.Errorf("whoami ran %d times, want 5 (the refused call must not run)", n)
	}
}

// TestHostTrustsOnlyItsNodesVouch: a host skips validating arguments that a turn of its
// node vouched for (bus.Vouch under the node's key) and validates every other request in
// full. The vouched request below carries arguments the schema refuses, which a turn would
// never send, to show the check was skipped, and only for that vouch.
func TestHostTrustsOnlyItsNodesVouch(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	echo := toolbus.MustDefine(toolbus.Def[valueArgs]{
		Spec: toolbus.Spec{Name: "echo", Category: "test", ReadOnly: true},
		Execute: func(ctx context.Context, c toolbus.Call, a valueArgs) (toolbus.Result, error) {
			got.Store(string(c.Args))
			return toolbus.TextResult("ran"), nil
		},
	})
	h := newHarness(t, echo)
	nc, err := h.srv.Connect("direct")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	bad := []byte(`{"v":"x","w":5}`) // no property w: the schema is closed, Go's decoding ignores it
	sum := echo.Params.Sum()
	otherKey := bytes.Repeat([]byte{1}, bus.VouchKeySize)
	tests := []struct {
		name    string
		vouch   string
		outcome bus.Outcome
	}{
		{"no vouch", "", bus.OutcomeInvalid},
		{"another deployment's vouch", bus.NewVoucher(otherKey).Vouch("test", "echo", sum, bad), bus.OutcomeInvalid},
		{"the node's vouch for other arguments", h.node.voucher.Vouch("test", "echo", sum, []byte(`{"v":"x"}`)), bus.OutcomeInvalid},
		{"the node's vouch", h.node.voucher.Vouch("test", "echo", sum, bad), bus.OutcomeOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := nats.NewMsg(bus.ToolSubject("test", "echo"))
			m.Data = bad
			if tc.vouch != "" {
				m.Header.Set(bus.HeaderVouch, tc.vouch)
			}
			res, err := nc.RequestMsg(m, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var r bus.ToolReply
			if err := json.Unmarshal(res.Data, &r); err != nil {
				t.Fatal(err)
			}
			if r.Outcome != tc.outcome {
				t.Errorf("outcome %s (%s), want %s", r.Outcome, r.Error, tc.outcome)
			}
		})
	}
}

// TestCompletedLabelToldTheOutcome: a tool's completed label learns whether the call
// failed from res.IsError, however it failed: an error result, an error returned by
// Execute (with the error as the result's text), or a deadline.
func TestCompletedLabelToldTheOutcome(t *testing.T) {
	labelled := func(name string, exec func(ctx context.Context) (toolbus.Result, error)) *toolbus.Tool {
		return toolbus.MustDefine(toolbus.Def[noArgs]{
			Spec:    toolbus.Spec{Name: name, Category: "test", ReadOnly: true, Timeout: 200 * time.Millisecond},
			Execute: func(ctx context.Context, _ toolbus.Call, _ noArgs) (toolbus.Result, error) { return exec(ctx) },
			DescribeCompletedActivity: func(_ noArgs, res toolbus.Result) string {
				if res.IsError {
					return "failed: " + res.Text()
				}
				return "done: " + res.Text()
			},
		})
	}
	h := newHarness(t,
		labelled("ok", func(context.Context) (toolbus.Result, error) { return toolbus.TextResult("fine"), nil }),
		labelled("erring", func(context.Context) (toolbus.Result, error) { return toolbus.ErrorResult("no such file"), nil }),
		labelled("returning", func(context.Context) (toolbus.Result, error) { return toolbus.Result{}, errors.New("disk on fire") }),
		labelled("slow", func(ctx context.Context) (toolbus.Result, error) { <-ctx.Done(); return toolbus.Result{}, ctx.Err() }),
	)
	nc, err := h.srv.Connect("direct")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for tool, want := range map[string]string{
		"ok":        "done: fine",
		"erring":    "failed: no such file",
		"returning": "failed: disk on fire",
		"slow":      "failed: call timeout: ",
	} {
		m, err := nc.Request(bus.ToolSubject("test", tool), nil, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r bus.ToolReply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(r.Label, want) {
			t.Errorf("%s: label %q, want it to start %q", tool, r.Label, want)
		}
	}
}

// TestAbortGraceCoversKillGrace: an aborted command that ignores SIGTERM is killed after
// the computer tools' kill grace; the turn's abort grace must outlast it, with room for
// the reply, or such a command ends abandoned instead of stopped.
func TestAbortGraceCoversKillGrace(t *testing.T) {
	if DefaultAbortGrace < computer.DefaultKillGrace+3*time.Second {
		t.Errorf("abort grace %s; want at least the kill grace %s and 3 s", DefaultAbortGrace, computer.DefaultKillGrace)
	}
}
