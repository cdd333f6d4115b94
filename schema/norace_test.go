//go:build !race

package schema

// raceEnabled: the tests run under the race detector (see race_test.go).
const raceEnabled = false
