//go:build race

package testmain

import "runtime"

const raceEnabled = true

// raceErrors is how many races the detector has reported in this process.
func raceErrors() int { return runtime.RaceErrors() }
