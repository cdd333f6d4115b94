package actors

import (
	"testing"

	"github.com/toolbus/toolbus/internal/testmain"
)

// parallelTests: most tests here wait on the bus, leases and timed tools (20 s of CPU in
// 30 s on 2 cores at go test's default of 2; the package alone 14.0-15.8 s at 6 and
// 10.6-10.8 s at 10).
const parallelTests = 10

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{Parallel: parallelTests})
}
