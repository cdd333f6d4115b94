package durable

import (
	"fmt"
	"os"
	"testing"

	"github.com/toolbus/toolbus/bus/bustest"
)

func TestMain(m *testing.M) {
	// The tests wait on leases and servers more than they compute: 6 at a time take the
	// package from 5 s to 4 s on 2 cores.
	if err := bustest.Parallel(6); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}
