//go:build !race

package testmain

const raceEnabled = false

func raceErrors() int { return 0 }
