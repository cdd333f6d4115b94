package bus

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestSetHeaders(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2026, 11, 29, 19, 9, 29, 391614127, time.FixedZone("CET", 3600))
	tests := []struct {
		name string
		req  ToolRequest
		want nats.Header
	}{
		{"empty", ToolRequest{}, nats.Header{}},
		{
			"all",
			ToolRequest{Turn: "t30", Call: "call_Ab12", Agent: "alice", Task: "task-1", Deadline: deadline,
				Traceparent: "00-ab55daee783b548fd618ecbd4d74291d-05897abbd4b6a0cc-01", Truncated: true},
			nats.Header{
				HeaderTurn:        {"t30"},
				HeaderCall:        {"call_Ab12"},
				HeaderAgent:       {"alice"},
				HeaderTask:        {"task-1"},
				HeaderDeadline:    {"2026-11-29T18:09:29.391614127Z"},
				HeaderTraceparent: {"00-ab55daee783b548fd618ecbd4d74291d-05897abbd4b6a0cc-01"},
				HeaderTruncated:   {"true"},
			},
		},
		{"some", ToolRequest{Call: "c1", Agent: "bob"}, nats.Header{HeaderCall: {"c1"}, HeaderAgent: {"bob"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := nats.Header{}
			tt.req.SetHeaders(h)
			if !maps.EqualFunc(h, tt.want, func(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }) {
				t.Errorf("headers %v, want %v", h, tt.want)
			}
			got, err := ParseToolRequest(h)
			if err != nil || !got.Deadline.Equal(tt.req.Deadline) {
				t.Fatalf("parse back: %+v, %v", got, err)
			}
			got.Deadline = tt.req.Deadline
			if got != tt.req {
				t.Errorf("parsed back %+v, want %+v", got, tt.req)
			}
		})
	}
}

func TestParseToolRequest(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", MaxIDLen)
	tests := []struct {
		name    string
		h       nats.Header
		want    ToolRequest
		wantErr string
	}{
		{"no headers", nil, ToolRequest{}, ""},
		{
			"direct call", nats.Header{HeaderCall: {"c9"}, HeaderAgent: {"alice"}},
			ToolRequest{Call: "c9", Agent: "alice"}, "",
		},
		{
			"empty values are absent",
			nats.Header{HeaderTurn: {""}, HeaderCall: {""}, HeaderAgent: {""}, HeaderDeadline: {""}, HeaderTruncated: {""}},
			ToolRequest{}, "",
		},
		{"ids of the longest length", nats.Header{HeaderTurn: {long}, HeaderCall: {long}}, ToolRequest{Turn: long, Call: long}, ""},
		{"task and traceparent as sent", nats.Header{HeaderTask: {"any thing."}, HeaderTraceparent: {"junk"}}, ToolRequest{Task: "any thing.", Traceparent: "junk"}, ""},
		{
			"deadline", nats.Header{HeaderDeadline: {"2026-11-29T19:09:29.391614127Z"}},
			ToolRequest{Deadline: time.Date(2026, 11, 29, 19, 9, 29, 391614127, time.UTC)}, "",
		},

		{"truncated true", nats.Header{HeaderTruncated: {"true"}}, ToolRequest{Truncated: true}, ""},
		{"truncated 1", nats.Header{HeaderTruncated: {"1"}}, ToolRequest{Truncated: true}, ""},
		{"truncated yes", nats.Header{HeaderTruncated: {"yes"}}, ToolRequest{Truncated: true}, ""},
		{"truncated 0 fails closed", nats.Header{HeaderTruncated: {"0"}}, ToolRequest{Truncated: true}, ""},
		{"truncated false", nats.Header{HeaderTruncated: {"false"}}, ToolRequest{}, ""},
		{"truncated FALSE", nats.Header{HeaderTruncated: {"FALSE"}}, ToolRequest{}, ""},
		{"truncated False", nats.Header{HeaderTruncated: {"False"}}, ToolRequest{}, ""},

		{"bad turn", nats.Header{HeaderTurn: {"a.b"}}, ToolRequest{Turn: "a.b"}, `bad Toolbus-Turn header "a.b"`},
		{"turn too long", nats.Header{HeaderTurn: {long + "x"}}, ToolRequest{Turn: long + "x"}, `bad Toolbus-Turn header "` + long + `x"`},
		{"bad call", nats.Header{HeaderCall: {"c 1"}}, ToolRequest{Call: "c 1"}, `bad Toolbus-Call header "c 1"`},
		{"call too long", nats.Header{HeaderCall: {long + "x"}}, ToolRequest{Call: long + "x"}, `bad Toolbus-Call header "` + long + `x"`},
		{
			"bad agent", nats.Header{HeaderAgent: {"../a1"}}, ToolRequest{Agent: "../a1"},
			`bad Toolbus-Agent header "../a1": agent id has '.' at position 1; only ASCII letters, digits, '_' and '-' are allowed`,
		},
		{
			"bad deadline", nats.Header{HeaderDeadline: {"tomorrow"}, HeaderCall: {"c1"}}, ToolRequest{Call: "c1"},
			`bad Toolbus-Deadline header "tomorrow": ` + errDeadlineSyntax.Error(),
		},

		// The first failure in the fixed order wins; the rest is still read.
		{
			"turn before call",
			nats.Header{HeaderTurn: {"t*"}, HeaderCall: {"c>"}, HeaderAgent: {"a.b"}, HeaderDeadline: {"x"}},
			ToolRequest{Turn: "t*", Call: "c>", Agent: "a.b"}, `bad Toolbus-Turn header "t*"`,
		},
		{
			"call before agent",
			nats.Header{HeaderCall: {"c>"}, HeaderAgent: {"a.b"}, HeaderDeadline: {"x"}},
			ToolRequest{Call: "c>", Agent: "a.b"}, `bad Toolbus-Call header "c>"`,
		},
		{
			"agent before deadline",
			nats.Header{HeaderAgent: {"a.b"}, HeaderDeadline: {"x"}, HeaderTruncated: {"true"}},
			ToolRequest{Agent: "a.b", Truncated: true},
			`bad Toolbus-Agent header "a.b": agent id has '.' at position 2; only ASCII letters, digits, '_' and '-' are allowed`,
		},
		{
			"deadline kept when another header is bad",
			nats.Header{HeaderTurn: {"t.1"}, HeaderDeadline: {"2026-11-29T19:09:29Z"}},
			ToolRequest{Turn: "t.1", Deadline: time.Date(2026, 11, 29, 19, 9, 29, 0, time.UTC)}, `bad Toolbus-Turn header "t.1"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseToolRequest(tt.h)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
			if !got.Deadline.Equal(tt.want.Deadline) {
				t.Errorf("deadline %v, want %v", got.Deadline, tt.want.Deadline)
			}
			got.Deadline, tt.want.Deadline = time.Time{}, time.Time{}
			if got != tt.want {
				t.Errorf("request %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseToolRequestErrors(t *testing.T) {
	t.Parallel()
	_, err := ParseToolRequest(nats.Header{HeaderAgent: {"a/b"}})
	var he *HeaderError
	if !errors.As(err, &he) || he.Name != HeaderAgent || he.Value != "a/b" || !errors.Is(err, ErrBadAgent) {
		t.Errorf("bad agent: %#v; want a *HeaderError for %s wrapping ErrBadAgent", err, HeaderAgent)
	}
	_, err = ParseToolRequest(nats.Header{HeaderTurn: {"a.b"}})
	if !errors.As(err, &he) || he.Name != HeaderTurn || he.Err != nil {
		t.Errorf("bad turn: %#v; want a *HeaderError for %s", err, HeaderTurn)
	}
}

func TestParseDeadline(t *testing.T) {
	t.Parallel()
	at := func(nsec int) time.Time { return time.Date(2026, 11, 29, 19, 9, 29, nsec, time.UTC) }
	tests := []struct {
		s    string
		want time.Time
		err  error
	}{
		{"2026-11-29T19:09:29Z", at(0), nil},
		{"2026-11-29T19:09:29.3Z", at(300000000), nil},
		{"2026-11-29T19:09:29.39Z", at(390000000), nil},
		{"2026-11-29T19:09:29.391Z", at(391000000), nil},
		{"2026-11-29T19:09:29.391614Z", at(391614000), nil},
		{"2026-11-29T19:09:29.391614127Z", at(391614127), nil},
		{"2026-11-29T19:09:29.000000001Z", at(1), nil},
		{"2026-11-29T20:09:29+01:00", at(0), nil},
		{"2026-11-29T20:39:29.5+01:30", at(500000000), nil},
		{"2026-11-29T14:09:29-05:00", at(0), nil},
		{"2026-11-29T19:09:29+00:00", at(0), nil},
		{"2026-11-29T19:09:29-00:00", at(0), nil},
		{"2026-11-29t19:09:29z", at(0), nil},
		{"2026-11-29t19:09:29.391614127z", at(391614127), nil},
		{"2026-11-29T19:09:29z", at(0), nil},
		{"2026-11-29t19:09:29Z", at(0), nil},
		{"2026-11-30T04:09:29.25+09:00", at(250000000), nil},
		{"2026-11-29T00:09:29+00:00", time.Date(2026, 11, 29, 0, 9, 29, 0, time.UTC), nil},
		{"2026-11-30T00:00:00+01:00", time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC), nil},
		{"2024-02-29T12:00:00Z", time.Date(2024, 2, 29, 12, 0, 0, 0, time.UTC), nil},
		{"2000-02-29T12:00:00Z", time.Date(2000, 2, 29, 12, 0, 0, 0, time.UTC), nil},

		{"", time.Time{}, errDeadlineSyntax},
		{"tomorrow", time.Time{}, errDeadlineSyntax},
		{"2026-11-29", time.Time{}, errDeadlineSyntax},
		{"2026-11-29T19:09:29", time.Time{}, errDeadlineSyntax},               // no zone
		{"2026-11-29 19:09:29Z", time.Time{}, errDeadlineSyntax},              // space for T
		{"2026-11-29T19:09:29.Z", time.Time{}, errDeadlineSyntax},             // no fraction digit
		{"2026-11-29T19:09:29,5Z", time.Time{}, errDeadlineSyntax},            // comma
		{"2026-11-29T19:09:29.1234567891Z", time.Time{}, errDeadlineFraction}, // 10 digits
		{"2026-11-29T19:09:29+0100", time.Time{}, errDeadlineSyntax},
		{"2026-11-29T19:09:29+01", time.Time{}, errDeadlineSyntax},
		{"2026-11-29T19:09:29 Z", time.Time{}, errDeadlineSyntax},
		{"2026-11-29T19:09:29ZZ", time.Time{}, errDeadlineSyntax},
		{"2026-11-29T19:09:29Z ", time.Time{}, errDeadlineSyntax},
		{"+2026-11-29T19:09:29Z", time.Time{}, errDeadlineSyntax},
		{"2026-1a-29T19:09:29Z", time.Time{}, errDeadlineSyntax},
		{"2026-11-29T19:09:29+0a:00", time.Time{}, errDeadlineSyntax},
		{"2026-13-29T19:09:29Z", time.Time{}, errDeadlineMonth},
		{"2026-00-29T19:09:29Z", time.Time{}, errDeadlineMonth},
		{"2026-02-29T19:09:29Z", time.Time{}, errDeadlineDay},
		{"1900-02-29T19:09:29Z", time.Time{}, errDeadlineDay},
		{"2026-04-31T19:09:29Z", time.Time{}, errDeadlineDay},
		{"2026-11-00T19:09:29Z", time.Time{}, errDeadlineDay},
		{"2026-11-29T24:00:00Z", time.Time{}, errDeadlineHour},
		{"2026-11-29T19:60:29Z", time.Time{}, errDeadlineMinute},
		{"2026-11-29T19:09:60Z", time.Time{}, errDeadlineSecond},
		{"2026-11-29T19:09:29+24:00", time.Time{}, errDeadlineOffset},
		{"2026-11-29T19:09:29+01:60", time.Time{}, errDeadlineOffset},
	}
	for _, tt := range tests {
		got, err := ParseDeadline(tt.s)
		if err != tt.err || !got.Equal(tt.want) {
			t.Errorf("ParseDeadline(%q) = %v, %v; want %v, %v", tt.s, got, err, tt.want, tt.err)
		}
		if err == nil && got.Location() != time.UTC {
			t.Errorf("ParseDeadline(%q) is in %v, want UTC", tt.s, got.Location())
		}
		// Where Go's parser accepts the value, both read the same instant.
		if want, perr := time.Parse(time.RFC3339Nano, tt.s); perr == nil && err == nil && !want.Equal(got) {
			t.Errorf("ParseDeadline(%q) = %v, time.Parse reads %v", tt.s, got, want)
		}
	}
}

func TestParseToolRequestDoesNotAllocate(t *testing.T) {
	h := nats.Header{}
	ToolRequest{
		Turn: NewID(), Call: "call_Ab12", Agent: "alice", Task: "task-1", Deadline: time.Now().Add(time.Minute),
		Traceparent: "00-ab55daee783b548fd618ecbd4d74291d-05897abbd4b6a0cc-01", Truncated: true,
	}.SetHeaders(h)
	h.Set(HeaderDeadline, "2026-11-29T20:09:29.391614127+01:00")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ParseToolRequest(h); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("ParseToolRequest allocates %v times per run", allocs)
	}
}

// FuzzParseDeadline checks ParseDeadline against Go's parser: whatever it
// accepts, time.Parse reads as the same instant once the separators are
// upper case.
func FuzzParseDeadline(f *testing.F) {
	for _, s := range []string{"2026-11-29T19:09:29Z", "2026-11-29t19:09:29.5z", "2026-11-29T20:09:29.391614127+01:00", "2024-02-29T00:00:00-23:59"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseDeadline(s)
		if err != nil {
			return
		}
		upper := []byte(s)
		upper[10] = 'T'
		if upper[len(upper)-1] == 'z' {
			upper[len(upper)-1] = 'Z'
		}
		want, perr := time.Parse(time.RFC3339Nano, string(upper))
		if perr != nil || !want.Equal(got) {
			t.Errorf("ParseDeadline(%q) = %v; time.Parse reads %v, %v", s, got, want, perr)
		}
	})
}
