package main

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// The bench table fits in 120 columns, whatever the measurements' names.
func TestBenchTableFits120Columns(t *testing.T) {
	t.Parallel()
	met, missed := true, false
	r := benchReport{GoVersion: "go1.26.8", CPUs: 2, Results: []benchResult{
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
	for _, line := range strings.Split(out.String(), "\n") {
		if n := utf8.RuneCountInString(line); n > 120 {
			t.Errorf("%d columns: %q", n, line)
		}
	}
	if !strings.Contains(out.String(), "#1   0.10×") && !strings.Contains(out.String(), "#1  0.10×") {
		t.Errorf("the baseline is not named by its row:\n%s", out.String())
	}
}
