package bus

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// MaxIDLen is the longest turn or call id, in bytes, that a tool request
// may carry (see [ValidID]).
const MaxIDLen = 128

// ValidID reports whether s can be a turn or call id on the bus: a valid
// subject token ([ValidToken]) of at most [MaxIDLen] bytes.
func ValidID(s string) bool {
	return len(s) <= MaxIDLen && ValidToken(s)
}

// ToolRequest is what the headers of a tool request say about the call
// (docs/protocol.md §4). The zero value of a field means its header is
// absent.
type ToolRequest struct {
	Turn  string // HeaderTurn: the calling turn; empty for a direct call
	Call  string // HeaderCall: the call id; a host makes one when empty
	Agent string // HeaderAgent
	Task  string // HeaderTask
	// Deadline is absolute (HeaderDeadline); zero: the host's own limit.
	Deadline    time.Time
	Traceparent string // HeaderTraceparent, passed on unchecked
	// Truncated says that the model's arguments were cut off (HeaderTruncated).
	Truncated bool
	// Vouch is the turn's MAC over the validated arguments (HeaderVouch, see [Vouch]).
	Vouch string
	// Payload, when set, names the object that holds the arguments (HeaderPayload): they
	// were too large for the message, whose body is then PayloadNote.
	Payload PayloadRef
}

// SetHeaders writes the request's non-empty fields into h, which must not
// be nil: Deadline as [FormatDeadline] renders it, Truncated as "true".
func (r ToolRequest) SetHeaders(h nats.Header) {
	// Every value is a one-element slice of one array: a request's six headers cost one
	// allocation, not six (a turn's every call sends one).
	vals := make([]string, 0, 9)
	set := func(name, value string) {
		if value != "" {
			vals = append(vals, value)
			h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
	}
	set(HeaderTurn, r.Turn)
	set(HeaderCall, r.Call)
	set(HeaderAgent, r.Agent)
	set(HeaderTask, r.Task)
	if !r.Deadline.IsZero() {
		set(HeaderDeadline, FormatDeadline(r.Deadline))
	}
	set(HeaderTraceparent, r.Traceparent)
	if r.Truncated {
		set(HeaderTruncated, "true")
	}
	set(HeaderVouch, r.Vouch)
	if !r.Payload.IsZero() {
		set(HeaderPayload, r.Payload.String())
	}
}

// HeaderError is a tool request header that [ParseToolRequest] refuses.
type HeaderError struct {
	Name  string // the header
	Value string // its value as sent
	Err   error  // why, if there is more to say than that it is bad
}

func (e *HeaderError) Error() string {
	msg := "bad " + e.Name + " header " + strconv.Quote(e.Value)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *HeaderError) Unwrap() error { return e.Err }

// ParseToolRequest reads and checks the headers of a tool request. A header
// with an empty value counts as absent. The checks, in this order, and the
// first failure is the error (a *[HeaderError]):
//
//   - HeaderTurn and HeaderCall, when present, must satisfy [ValidID]:
//     `bad Toolbus-Turn header "<v>"`;
//   - HeaderAgent, when present, must pass [CheckAgent]:
//     `bad Toolbus-Agent header "<v>": <reason>`;
//   - HeaderDeadline, when present, must parse with [ParseDeadline]:
//     `bad Toolbus-Deadline header "<v>": <reason>`;
//   - HeaderPayload, when present, must parse with [ParsePayloadRef]:
//     `bad Toolbus-Payload header "<v>": <reason>`.
//
// HeaderTruncated with any value but "false" (in any case) means truncated,
// so that a value a sender thought meant yes is never taken for no.
// HeaderTask and HeaderTraceparent are taken as they are.
//
// The request comes back even with an error, holding every value as it was
// sent (Deadline zero if it did not parse), so that a refusal can name the
// call. ParseToolRequest does not allocate unless it fails.
func ParseToolRequest(h nats.Header) (ToolRequest, error) {
	r := ToolRequest{
		Turn:        h.Get(HeaderTurn),
		Call:        h.Get(HeaderCall),
		Agent:       h.Get(HeaderAgent),
		Task:        h.Get(HeaderTask),
		Traceparent: h.Get(HeaderTraceparent),
		Truncated:   truncated(h.Get(HeaderTruncated)),
		Vouch:       h.Get(HeaderVouch),
	}
	var err error
	switch {
	case r.Turn != "" && !ValidID(r.Turn):
		err = &HeaderError{Name: HeaderTurn, Value: r.Turn}
	case r.Call != "" && !ValidID(r.Call):
		err = &HeaderError{Name: HeaderCall, Value: r.Call}
	case r.Agent != "":
		if aerr := CheckAgent(r.Agent); aerr != nil {
			err = &HeaderError{Name: HeaderAgent, Value: r.Agent, Err: aerr}
		}
	}
	if d := h.Get(HeaderDeadline); d != "" {
		dl, derr := ParseDeadline(d)
		if derr != nil && err == nil {
			err = &HeaderError{Name: HeaderDeadline, Value: d, Err: derr}
		}
		r.Deadline = dl
	}
	if p := h.Get(HeaderPayload); p != "" {
		ref, perr := ParsePayloadRef(p)
		if perr != nil && err == nil {
			err = perr
		}
		r.Payload = ref
	}
	return r, err
}

// truncated reads a HeaderTruncated value: only absent, empty and "false"
// mean the arguments are complete.
func truncated(v string) bool {
	return v != "" && !strings.EqualFold(v, "false")
}

// Errors of [ParseDeadline].
var (
	errDeadlineSyntax   = errors.New("want an RFC 3339 time such as 2006-01-02T15:04:05.999999999Z or 2006-01-02T15:04:05+01:00")
	errDeadlineFraction = errors.New("more than 9 fractional digits")
	errDeadlineMonth    = errors.New("month out of range")
	errDeadlineDay      = errors.New("day out of range")
	errDeadlineHour     = errors.New("hour out of range")
	errDeadlineMinute   = errors.New("minute out of range")
	errDeadlineSecond   = errors.New("second out of range")
	errDeadlineOffset   = errors.New("time zone offset out of range")
)

// parseRFC3339 reads an RFC 3339 date-time
// (YYYY-MM-DD "T" hh:mm:ss [.fraction] ("Z" | ("+"|"-") hh:mm)): the
// separators "T" and "Z" in either case, from 1 to 9 fractional digits. It
// returns the instant in UTC and does not allocate.
func parseRFC3339(s string) (time.Time, error) {
	const minLen = len("2006-01-02T15:04:05Z")
	if len(s) < minLen || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') || s[13] != ':' || s[16] != ':' {
		return time.Time{}, errDeadlineSyntax
	}
	year, ok1 := atoi(s[0:4])
	month, ok2 := atoi(s[5:7])
	day, ok3 := atoi(s[8:10])
	hour, ok4 := atoi(s[11:13])
	minute, ok5 := atoi(s[14:16])
	sec, ok6 := atoi(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return time.Time{}, errDeadlineSyntax
	}
	rest := s[19:]
	nsec := 0
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
			n++
		}
		digits := n - 1
		switch {
		case digits == 0:
			return time.Time{}, errDeadlineSyntax
		case digits > 9:
			return time.Time{}, errDeadlineFraction
		}
		nsec, _ = atoi(rest[1:n])
		for range 9 - digits {
			nsec *= 10
		}
		rest = rest[n:]
	}
	offset := 0
	switch {
	case rest == "Z" || rest == "z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, okh := atoi(rest[1:3])
		om, okm := atoi(rest[4:6])
		if !okh || !okm {
			return time.Time{}, errDeadlineSyntax
		}
		if oh > 23 || om > 59 {
			return time.Time{}, errDeadlineOffset
		}
		offset = (oh*60 + om) * 60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, errDeadlineSyntax
	}
	switch {
	case month < 1 || month > 12:
		return time.Time{}, errDeadlineMonth
	case day < 1 || day > daysIn(time.Month(month), year):
		return time.Time{}, errDeadlineDay
	case hour > 23:
		return time.Time{}, errDeadlineHour
	case minute > 59:
		return time.Time{}, errDeadlineMinute
	case sec > 59:
		return time.Time{}, errDeadlineSecond
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	return t.Add(-time.Duration(offset) * time.Second), nil
}

// atoi reads a string of ASCII digits (at most 9, so it cannot overflow).
func atoi(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func daysIn(m time.Month, year int) int {
	switch m {
	case time.February:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}
