package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The cron dialect of JetStream message schedules (nats-server server/cron.go, itself
// derived from robfig/cron): six fields, seconds first, each a comma-separated list of
// "*", "?", a number or name, a range "a-b", and an optional step "/n"; day of month and
// day of week match when either does, unless one of them is a star. The predefined
// @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly stand for their
// six-field forms. Next walks the calendar the same way the server does, so the time
// this package tells the model a schedule fires is the time the server fires it.

// cronSpec is a parsed expression: one bit per allowed value of each field, and the
// star bit (set when the field was written with a star and no step above 1).
type cronSpec struct {
	second, minute, hour, dom, month, dow uint64
}

const starBit = 1 << 63

type cronField struct {
	name     string
	min, max uint
	names    map[string]uint
}

var cronFields = [6]cronField{
	{"second", 0, 59, nil},
	{"minute", 0, 59, nil},
	{"hour", 0, 23, nil},
	{"day of month", 1, 31, nil},
	{"month", 1, 12, map[string]uint{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}},
	{"day of week", 0, 6, map[string]uint{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}},
}

// predefined are the server's descriptors.
var predefined = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

// NormalizeCron returns expr in the form the server reads: a descriptor as it is, six
// fields as they are, and five fields (minute first, as most cron dialects write them)
// with second 0 in front. It refuses what the server would refuse, saying why.
func NormalizeCron(expr string) (string, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "@") {
		if _, ok := predefined[expr]; ok {
			return expr, nil
		}
		return "", fmt.Errorf("cron %q: unknown descriptor; use @hourly, @daily, @weekly, @monthly or @yearly (or give every/at instead)", expr)
	}
	fields := strings.Fields(expr)
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return "", fmt.Errorf("cron %q has %d fields; want 6 (second minute hour day-of-month month day-of-week, e.g. \"0 30 9 * * mon-fri\") or 5 (without the second)", expr, len(fields))
	}
	norm := strings.Join(fields, " ")
	if _, err := parseCron(norm); err != nil {
		return "", fmt.Errorf("cron %q: %w", expr, err)
	}
	return norm, nil
}

// parseCron parses a six-field expression or a descriptor.
func parseCron(expr string) (cronSpec, error) {
	if p, ok := predefined[expr]; ok {
		expr = p
	}
	fields := strings.Fields(expr)
	if len(fields) != 6 {
		return cronSpec{}, fmt.Errorf("want 6 fields, got %d", len(fields))
	}
	var out [6]uint64
	for i, f := range fields {
		b, err := parseCronField(f, cronFields[i])
		if err != nil {
			return cronSpec{}, fmt.Errorf("%s field %q: %w", cronFields[i].name, f, err)
		}
		out[i] = b
	}
	return cronSpec{second: out[0], minute: out[1], hour: out[2], dom: out[3], month: out[4], dow: out[5]}, nil
}

func parseCronField(field string, f cronField) (uint64, error) {
	var set uint64
	for expr := range strings.SplitSeq(field, ",") {
		if expr == "" {
			continue // the server skips empty list items too
		}
		b, err := parseCronRange(expr, f)
		if err != nil {
			return 0, err
		}
		set |= b
	}
	if set&^starBit == 0 {
		return 0, errors.New("no value")
	}
	return set, nil
}

func parseCronRange(expr string, f cronField) (uint64, error) {
	rangeAndStep := strings.Split(expr, "/")
	lowHigh := strings.Split(rangeAndStep[0], "-")
	var start, end, step uint = 0, 0, 1
	var extra uint64
	var err error
	if lowHigh[0] == "*" || lowHigh[0] == "?" {
		start, end, extra = f.min, f.max, starBit
	} else {
		if start, err = cronValue(lowHigh[0], f); err != nil {
			return 0, err
		}
		switch len(lowHigh) {
		case 1:
			end = start
		case 2:
			if end, err = cronValue(lowHigh[1], f); err != nil {
				return 0, err
			}
		default:
			return 0, fmt.Errorf("too many hyphens in %q", expr)
		}
	}
	switch len(rangeAndStep) {
	case 1:
	case 2:
		if step, err = cronNumber(rangeAndStep[1]); err != nil {
			return 0, err
		}
		if len(lowHigh) == 1 {
			end = f.max // "n/step" means "n-max/step"
		}
		if step > 1 {
			extra = 0
		}
	default:
		return 0, fmt.Errorf("too many slashes in %q", expr)
	}
	switch {
	case start < f.min:
		return 0, fmt.Errorf("%d is below the %s's minimum %d", start, f.name, f.min)
	case end > f.max:
		return 0, fmt.Errorf("%d is above the %s's maximum %d", end, f.name, f.max)
	case start > end:
		return 0, fmt.Errorf("range %d-%d runs backwards", start, end)
	case step == 0:
		return 0, fmt.Errorf("step 0 in %q", expr)
	}
	var set uint64
	for i := start; i <= end; i += step {
		set |= 1 << i
	}
	return set | extra, nil
}

func cronValue(s string, f cronField) (uint, error) {
	if v, ok := f.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	return cronNumber(s)
}

func cronNumber(s string) (uint, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("negative number %d", n)
	}
	return uint(n), nil
}

// errNeverFires is a pattern with no firing within five years (the 31st of February).
var errNeverFires = errors.New("it never fires within five years")

// next is the first firing strictly after t, walked as the server walks it: in loc
// (UTC when nil), from the next whole second, a field at a time, starting over from the
// month whenever a field wraps.
func (s cronSpec) next(t time.Time, loc *time.Location) (time.Time, error) {
	if loc == nil {
		loc = time.UTC
	}
	t = t.In(loc).Truncate(time.Second).Add(time.Second)
	truncated := false
	yearLimit := t.Year() + 5
wrap:
	if t.Year() > yearLimit {
		return time.Time{}, errNeverFires
	}
	for 1<<uint(t.Month())&s.month == 0 {
		if !truncated {
			truncated = true
			t = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, loc)
		}
		if t = t.AddDate(0, 1, 0); t.Month() == time.January {
			goto wrap
		}
	}
	for !s.dayMatches(t) {
		if !truncated {
			truncated = true
			t = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc)
		}
		if t = t.AddDate(0, 0, 1); t.Day() == 1 {
			goto wrap
		}
	}
	for 1<<uint(t.Hour())&s.hour == 0 {
		if !truncated {
			truncated = true
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), 0, 0, 0, loc)
		}
		if t = t.Add(time.Hour); t.Hour() == 0 {
			goto wrap
		}
	}
	for 1<<uint(t.Minute())&s.minute == 0 {
		if !truncated {
			truncated = true
			t = t.Truncate(time.Minute)
		}
		if t = t.Add(time.Minute); t.Minute() == 0 {
			goto wrap
		}
	}
	for 1<<uint(t.Second())&s.second == 0 {
		if !truncated {
			truncated = true
			t = t.Truncate(time.Second)
		}
		if t = t.Add(time.Second); t.Second() == 0 {
			goto wrap
		}
	}
	return t, nil
}

func (s cronSpec) dayMatches(t time.Time) bool {
	domMatch := 1<<uint(t.Day())&s.dom > 0
	dowMatch := 1<<uint(t.Weekday())&s.dow > 0
	if s.dom&starBit > 0 || s.dow&starBit > 0 {
		return domMatch && dowMatch
	}
	return domMatch || dowMatch
}

// NextCron is the first firing of a cron expression (six fields or a descriptor, as
// NormalizeCron returns it) strictly after t, in loc (nil: UTC), as the server computes
// it.
func NextCron(expr string, loc *time.Location, t time.Time) (time.Time, error) {
	s, err := parseCron(expr)
	if err != nil {
		return time.Time{}, fmt.Errorf("cron %q: %w", expr, err)
	}
	next, err := s.next(t, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("cron %q: %w", expr, err)
	}
	return next, nil
}

// shortestGap is the shortest time between two firings of s among the first n after t
// (and within five years of t); ok is false when it fires at most once in that span.
func (s cronSpec) shortestGap(t time.Time, loc *time.Location, n int) (gap time.Duration, at time.Time, ok bool) {
	prev, err := s.next(t, loc)
	if err != nil {
		return 0, time.Time{}, false
	}
	horizon := t.AddDate(5, 0, 0)
	for range n {
		nx, err := s.next(prev, loc)
		if err != nil || nx.After(horizon) {
			break
		}
		if d := nx.Sub(prev); !ok || d < gap {
			gap, at, ok = d, prev, true
		}
		prev = nx
	}
	return gap, at, ok
}
