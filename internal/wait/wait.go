// Package wait holds the tests' one way to wait for an event: poll a condition until it
// holds or a limit passes (as nats.go's checkFor), never a bare sleep.
package wait

import (
	"testing"
	"time"
)

// CheckFor calls f every `every` until it returns nil or total has passed, then fails the
// test with f's last error.
func CheckFor(t testing.TB, total, every time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(every)
	}
	t.Fatal(err)
}
