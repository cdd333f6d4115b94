package label

import "testing"

func TestCompleted(t *testing.T) {
	if got := Completed(false, "Cancelled job j1", "cancel job j1"); got != "Cancelled job j1" {
		t.Errorf("done: %q", got)
	}
	if got := Completed(true, "Cancelled job j1", "cancel job j1"); got != "Could not cancel job j1" {
		t.Errorf("failed: %q", got)
	}
}
