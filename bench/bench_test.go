package bench

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLatencyPercentiles(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- { // out of order: latency sorts a copy
		samples = append(samples, time.Duration(i)*time.Microsecond)
	}
	r := latency("x", samples, "a note")
	if r.P50 != 51 || r.P90 != 91 || r.P99 != 100 || r.Samples != 100 || r.Unit != "us" || r.Note != "a note" {
		t.Errorf("latency: %+v", r)
	}
	if samples[0] != 100*time.Microsecond {
		t.Error("latency sorted the caller's samples")
	}
	if e := latency("none", nil, ""); e.P50 != 0 || e.P99 != 0 || e.Samples != 0 {
		t.Errorf("no samples: %+v", e)
	}
}

func TestCompare(t *testing.T) {
	base := Row{Name: "base", P50: 10}
	r := compare(Row{Name: "r", P50: 25}, base, 2.0, true)
	if r.Baseline != "base" || r.Ratio != 2.5 || r.Target != "p50 ≤ 2.0× baseline" || r.Met == nil || *r.Met {
		t.Errorf("compare with a target: %+v", r)
	}
	if r = compare(Row{Name: "r", P50: 5}, base, 0, false); r.Ratio != 0.5 || r.Target != "" || r.Met != nil {
		t.Errorf("compare without a target: %+v", r)
	}
	if r = compare(Row{Name: "r", P50: 5}, Row{Name: "empty"}, 2, true); r.Ratio != 0 || !*r.Met {
		t.Errorf("compare with an empty baseline: %+v", r)
	}
	tp := compareThroughput(Row{Name: "turns", Value: 30}, Row{Name: "raw", Value: 100}, 0.5)
	if tp.Baseline != "raw" || tp.Ratio != 0.3 || tp.Target != "≥ 0.5× baseline" || *tp.Met {
		t.Errorf("compareThroughput: %+v", tp)
	}
}

func TestConfig(t *testing.T) {
	var c Config
	c.withDefaults()
	if c.Samples != DefaultSamples || c.Turns != DefaultTurns || c.Waiting != DefaultWaiting {
		t.Errorf("defaults: %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
	for _, bad := range []Config{{Samples: 9}, {Samples: 10, Turns: -1}, {Samples: 10, Waiting: -1}} {
		bad.withDefaults()
		var ce *ConfigError
		if err := bad.validate(); !errors.As(err, &ce) {
			t.Errorf("%+v: %v, want a *ConfigError", bad, err)
		}
	}
	_, err := Run(context.Background(), Config{Samples: 5}, nil)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Msg != "5 samples per latency measurement: want at least 10" {
		t.Errorf("Run with 5 samples: %v", err)
	}
}

// The report's JSON is `toolbus bench -json`'s output, documented field by field in
// docs/operations.md §8: its names and order do not change.
func TestReportJSON(t *testing.T) {
	met := false
	full := Report{GoVersion: "go1.26.8", CPUs: 2, Started: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Results: []Row{
		{Name: "a", Unit: "us", P50: 1, P90: 2, P99: 3, Value: 4, Samples: 5, Baseline: "b", Ratio: 6, Target: "t", Met: &met, Note: "n"},
		{Name: "b", Unit: "calls/s"},
	}}
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"go_version":"go1.26.8","cpus":2,"started":"2026-12-01T00:00:00Z","results":[` +
		`{"name":"a","unit":"us","p50":1,"p90":2,"p99":3,"value":4,"samples":5,"baseline":"b","ratio":6,"target":"t","met":false,"note":"n"},` +
		`{"name":"b","unit":"calls/s","samples":0}]}`
	if string(b) != want {
		t.Errorf("report JSON\n got %s\nwant %s", b, want)
	}
}

var toolCount = regexp.MustCompile(`\(\d+( built-in)? tools\)`)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Run with Only runs the first two rows and the groups named; the rows of calls
// through turns include the foreign host's, found through the catalog, and the design's
// skeleton's.
func TestRunOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		only  string
		steps int
		rows  []string
	}{
		{"one call through a turn", 2, []string{"direct Go call of the no-op tool", "raw NATS request-reply",
			"request to the no-op tool's host, no turn", "no-op call through a turn (dispatch → reply)", "turn step of 1 no-op call",
			"one no-op call through a turn to a foreign host (dispatch → reply)",
			"the design's skeleton: one no-op call (dispatch → reply)", "the design's skeleton: a step of one no-op call"}},
		{"traced", 3, []string{"direct Go call of the no-op tool", "raw NATS request-reply",
			"no-op call through a turn, no exporter (dispatch → reply)", "no-op call through a turn, traced to OTLP/HTTP (dispatch → reply)",
			"turn step of 1 no-op call, no exporter", "turn step of 1 no-op call, traced to OTLP/HTTP"}},
		{"assembly", 3, []string{"direct Go call of the no-op tool", "raw NATS request-reply", "tool set from already-built specs",
			"turn assembly (N built-in tools)", "turn assembly from a catalog of 500 tools in 20 namespaces (N tools)"}},
	} {
		t.Run(tc.only, func(t *testing.T) {
			var steps []string
			r, err := Run(testContext(t), Config{Samples: MinSamples, Only: tc.only}, func(s string) { steps = append(steps, s) })
			if err != nil {
				t.Fatal(err)
			}
			var names, counted []string
			for _, row := range r.Results {
				names = append(names, row.Name)
				// How many tools are built in is not this test's business.
				counted = append(counted, toolCount.ReplaceAllString(row.Name, "(N$1 tools)"))
				if row.Unit != "us" || row.Samples == 0 || row.P50 <= 0 || row.P99 < row.P50 {
					t.Errorf("row %+v", row)
				}
				if strings.Contains(row.Name, "traced to") && (row.Baseline == "" || strings.HasPrefix(row.Note, "0 spans")) {
					t.Errorf("traced row %+v: no baseline, or no span received", row)
				}
				if row.Baseline != "" && !slices.Contains(names, row.Baseline) {
					t.Errorf("row %q: baseline %q is not an earlier row", row.Name, row.Baseline)
				}
			}
			if !slices.Equal(counted, tc.rows) {
				t.Errorf("rows\n%s\nwant\n%s", strings.Join(counted, "\n"), strings.Join(tc.rows, "\n"))
			}
			if len(steps) != tc.steps || steps[0] != "direct call…" {
				t.Errorf("progress %q", steps)
			}
			if r.GoVersion == "" || r.CPUs == 0 || r.Started.IsZero() {
				t.Errorf("report %+v", r)
			}
		})
	}
}

// Run with Only "stream" measures streamed steps against the paced fake: the step not
// streamed and streamed (in ms, the second against the first), the bus's hop and the
// HTTP hop on their own, and a call's output_item.done to its request on the bus.
func TestRunStream(t *testing.T) {
	t.Parallel()
	r, err := Run(testContext(t), Config{Samples: MinSamples, Only: "stream"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows := r.Results[2:]
	if len(rows) != 5 {
		t.Fatalf("rows %+v", rows)
	}
	whole, streamed, hop, http, dispatch := rows[0], rows[1], rows[2], rows[3], rows[4]
	if hop.Unit != "us" || hop.Samples != 50 || hop.P50 <= 0 || dispatch.Baseline != hop.Name || dispatch.Ratio <= 0 {
		t.Errorf("bus row %+v\nagainst %+v", hop, dispatch)
	}
	if http.Unit != "us" || http.Samples != 50 || http.P50 <= 0 || http.Baseline != hop.Name || http.Met != nil {
		t.Errorf("HTTP row %+v", http)
	}
	if whole.Unit != "ms" || streamed.Unit != "ms" || streamed.Baseline != whole.Name || streamed.Met == nil ||
		whole.Samples != 1 || streamed.Samples != 1 || whole.P50 <= 0 || streamed.P50 <= 0 {
		t.Errorf("step rows %+v\n%+v", whole, streamed)
	}
	if dispatch.Unit != "us" || dispatch.Samples != 50 || dispatch.P50 <= 0 || dispatch.Met == nil || dispatch.Target != "p50 ≤ baseline + 30 µs" {
		t.Errorf("dispatch row %+v", dispatch)
	}
}

// Run with Only "throughput" measures calls/s of raw requesters, of the same requesters
// sending a turn's wire alone, of the design's skeleton and of turns; the last three
// against the first, the turns' with their target and their share of the skeleton's and
// the wire's in the note; each note gives the processor time a call took.
func TestRunThroughput(t *testing.T) {
	t.Parallel()
	r, err := Run(testContext(t), Config{Samples: MinSamples, Turns: 4, Only: "throughput"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows := r.Results[2:]
	if len(rows) != 4 {
		t.Fatalf("rows %+v", rows)
	}
	raw, wire, skel, turns := rows[0], rows[1], rows[2], rows[3]
	cpu := regexp.MustCompile(`(\d+\.\d) µs of processor time a call, (\d+\.\d\d) processors busy$`)
	for _, row := range rows {
		if row.Unit != "calls/s" || row.Value <= 0 || row.Samples == 0 {
			t.Errorf("row %+v", row)
		}
		if m := cpu.FindStringSubmatch(row.Note); m == nil || m[1] == "0.0" || m[2] == "0.00" {
			t.Errorf("row %q: its note gives no processor time: %q", row.Name, row.Note)
		}
	}
	if wire.Baseline != raw.Name || wire.Ratio <= 0 || wire.Met != nil || !strings.Contains(wire.Note, "micro endpoint") {
		t.Errorf("wire row %+v", wire)
	}
	if skel.Baseline != raw.Name || skel.Ratio <= 0 || skel.Met != nil || !strings.Contains(skel.Name, "design's skeleton") {
		t.Errorf("skeleton row %+v", skel)
	}
	if turns.Baseline != raw.Name || turns.Met == nil || turns.Target != "≥ 0.55× baseline" ||
		!strings.Contains(turns.Note, "× the design's skeleton") || !strings.Contains(turns.Note, "× the wire of a call alone") {
		t.Errorf("turns row %+v", turns)
	}
}
