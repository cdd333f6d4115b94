package durable

import (
	"testing"

	"github.com/toolbus/toolbus/internal/testmain"
)

// parallelTests: the package's tests wait on servers and leases more than they compute;
// with -race on 2 cores it took 24.7 s at go test's default of 2 at once, 13.1 s at 6.
const parallelTests = 6

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{Parallel: parallelTests})
}
