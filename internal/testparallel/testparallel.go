// Package testparallel sets a test binary's default -test.parallel: the one setting the
// packages whose tests mostly wait (on servers, leases, processes) share, bus's own
// tests among them, which cannot import bustest.
package testparallel

import (
	"flag"
	"strconv"
)

// Default sets how many parallel tests run at once when -parallel is not given; call it
// from TestMain, before m.Run. Tests that wait on servers, leases and processes use
// little of the CPU (a package of them: 34 s of CPU in 66 s on 2 cores), so go test's
// default (GOMAXPROCS) leaves the machine idle while they wait.
func Default(n int) error {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return nil
	}
	return flag.Set("test.parallel", strconv.Itoa(n))
}
