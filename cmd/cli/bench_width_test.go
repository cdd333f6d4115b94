package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bench"
)

// checkWidth fails t for every line of out wider than width columns, counted in
// characters (a terminal's columns) and in bytes (awk's length in a C locale), which
// "×", "≤", "µ" and "→" make wider.
func checkWidth(t *testing.T, out string, width int) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > width {
			t.Errorf("%d columns: %q", n, line)
		} else if len(line) > width {
			t.Errorf("%d bytes: %q", len(line), line)
		}
	}
}

// The bench table fits in 120 columns, whatever the measurements' names.
func TestBenchTableFits120Columns(t *testing.T) {
	t.Parallel()
	met, missed := true, false
	r := bench.Report{GoVersion: "go1.26.8", CPUs: 2, Results: []bench.Row{
		{Name: "raw NATS request-reply, 64 concurrent requesters", Unit: "calls/s", Value: 123456.7},
		{Name: "64 concurrent turns, one no-op call per step", Unit: "calls/s", Value: 12345.6,
			Baseline: "raw NATS request-reply, 64 concurrent requesters", Ratio: 0.1, Target: "≥ 0.8× baseline", Met: &missed},
		{Name: "turn assembly from a catalog of 500 tools in 20 namespaces (506 tools)", Unit: "us", P50: 12345.6, P90: 123456.7, P99: 1234567.8,
			Target: "p50 ≤ 100 µs", Met: &met},
		{Name: "no-op call through a turn (dispatch → reply)", Unit: "us", P50: 72, P90: 130, P99: 322,
			Baseline: "raw NATS request-reply, 64 concurrent requesters", Ratio: 5.26, Target: "p50 ≤ 1.5× baseline", Met: &missed},
	}}
	var out bytes.Buffer
	printBench(&out, r)
	checkWidth(t, out.String(), 120)
	if !strings.Contains(out.String(), "#1   0.10×") && !strings.Contains(out.String(), "#1  0.10×") {
		t.Errorf("the baseline is not named by its row:\n%s", out.String())
	}
}

// The bench table fits in 120 columns whatever the figures too: with every figure's column
// at its widest (seven-digit latencies, a row number of two digits, the longest target), the
// names wrap in what is left. Wrapping names at a fixed 42 characters made this 124 columns wide.
func TestBenchTableFitsWidestFigures(t *testing.T) {
	missed := false
	name := "abort → all 100 in-flight calls cancelled, measured over and over again"
	r := bench.Report{GoVersion: "go1.26.8", CPUs: 2}
	for range 20 {
		r.Results = append(r.Results, bench.Row{Name: name, Unit: "calls/s",
			P50: 1234567.8, P90: 1234567.8, P99: 1234567.8, Value: 1234567.8, Baseline: name,
			Ratio: 10.41, Target: "p99 ≤ 2000 µs", Met: &missed})
	}
	var out bytes.Buffer
	printBench(&out, r)
	checkWidth(t, out.String(), 120)
	// Every word of every name is printed, in order.
	var words []string
	for _, line := range strings.Split(out.String(), "\n")[1:41] {
		if strings.HasPrefix(line, "  ") || line[0] >= '0' && line[0] <= '9' {
			f := strings.Fields(line)
			if !strings.HasPrefix(line, "  ") {
				f = f[1:] // the row's number
			}
			for _, w := range f {
				if strings.ContainsAny(w, "0123456789") && strings.Contains(w, ".") {
					break // the figures
				}
				words = append(words, w)
			}
		}
	}
	if got := strings.Join(words, " "); !strings.HasPrefix(got, name+" (calls/s) "+name) {
		t.Errorf("names printed as %q", got)
	}
}

// A narrower table wraps the names further and still fits; a name that fits is not wrapped.
func TestBenchTableWidth(t *testing.T) {
	met := true
	r := bench.Report{GoVersion: "go1.26.8", CPUs: 2, Results: []bench.Row{
		{Name: "direct Go call of the no-op tool", Unit: "us", P50: 0.2, P90: 0.4, P99: 9.1},
		{Name: "turn assembly from a catalog of 500 tools in 20 namespaces (510 tools)", Unit: "us", P50: 63.5, P90: 79.4, P99: 118,
			Target: "p50 ≤ 100 µs", Met: &met},
	}}
	for _, width := range []int{120, 100, 80} {
		var out bytes.Buffer
		writeBenchTable(&out, r, width)
		checkWidth(t, out.String(), width)
		if width >= 100 && !strings.Contains(out.String(), "1  direct Go call of the no-op tool (us)  ") {
			t.Errorf("at %d columns, a name wrapped that fits:\n%s", width, out.String())
		}
	}
}
