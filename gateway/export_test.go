package gateway

import (
	"testing"
	"time"
)

// SetDrainPatience sets how long a body's Close waits for its end, until t ends. t must
// not be parallel: every model of the package's tests reads it.
func SetDrainPatience(t *testing.T, d time.Duration) {
	old := drainPatience
	drainPatience = d
	t.Cleanup(func() { drainPatience = old })
}
