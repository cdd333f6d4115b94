package actors

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/internal/testparallel"
)

// parallelTests: most tests here wait on the bus, leases and timed tools (20 s of CPU in
// 30 s on 2 cores at go test's default of 2; 17 s at 6).
const parallelTests = 6

func TestMain(m *testing.M) {
	if err := testparallel.Default(parallelTests); err != nil {
		fmt.Fprintln(os.Stderr, "actors:", err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, bustest.KnownLeaks()...)
}
