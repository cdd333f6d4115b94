//go:build race

package schema

// raceEnabled: the tests run under the race detector, which makes every instruction
// slower; single-goroutine property checks take fewer cases then (see
// TestStrictEquivalenceProperty).
const raceEnabled = true
