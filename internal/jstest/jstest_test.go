package jstest

import (
	"fmt"
	"net"
	"testing"
)

// FreePorts gives distinct ports below the ephemeral range, each free to bind.
func TestFreePorts(t *testing.T) {
	t.Parallel()
	lo, hi := belowEphemeral()
	ports := FreePorts(t, 50)
	seen := map[int]bool{}
	for _, p := range ports {
		if p < lo || p >= hi || seen[p] {
			t.Fatalf("port %d: want distinct ports in [%d, %d)", p, lo, hi)
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		l.Close()
	}
	for _, p := range FreePorts(t, 10) {
		if seen[p] {
			t.Errorf("port %d given twice", p)
		}
	}
}
