package bench

import (
	"fmt"
	"slices"
	"time"
)

// latency summarises samples in microseconds.
func latency(name string, samples []time.Duration, note string) Row {
	s := slices.Clone(samples)
	slices.Sort(s)
	pct := func(p float64) float64 {
		if len(s) == 0 {
			return 0
		}
		i := min(int(p*float64(len(s))), len(s)-1)
		return float64(s[i]) / float64(time.Microsecond)
	}
	return Row{Name: name, Unit: "us", P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), Samples: len(s), Note: note}
}

// compare sets r's ratio of p50s to base and checks it against a maximum.
func compare(r, base Row, maxRatio float64, withTarget bool) Row {
	r.Baseline = base.Name
	if base.P50 > 0 {
		r.Ratio = r.P50 / base.P50
	}
	if withTarget {
		r.Target = fmt.Sprintf("p50 ≤ %.1f× baseline", maxRatio)
		met := r.Ratio <= maxRatio
		r.Met = &met
	}
	return r
}

func compareThroughput(r, base Row, minRatio float64) Row {
	r.Baseline = base.Name
	if base.Value > 0 {
		r.Ratio = r.Value / base.Value
	}
	r.Target = fmt.Sprintf("≥ %.2g× baseline", minRatio)
	met := r.Ratio >= minRatio
	r.Met = &met
	return r
}

// compareAdded sets r's ratio of p50s to base and checks its p50 against the base's
// plus at most maxAdded microseconds: what a layer adds over the hop it rides on.
func compareAdded(r, base Row, maxAdded float64) Row {
	r.Baseline = base.Name
	if base.P50 > 0 {
		r.Ratio = r.P50 / base.P50
	}
	r.Target = fmt.Sprintf("p50 ≤ baseline + %.0f µs", maxAdded)
	met := r.P50 <= base.P50+maxAdded
	r.Met = &met
	return r
}
