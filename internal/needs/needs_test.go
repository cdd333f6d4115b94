package needs

import (
	"fmt"
	"runtime"
	"testing"
)

// stub records how a test ended: Skip and Fatalf end the goroutine, as testing's do.
type stub struct {
	testing.TB
	skipped, failed string
}

func (s *stub) Helper() {}
func (s *stub) Skip(args ...any) {
	s.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}
func (s *stub) Fatalf(format string, args ...any) {
	s.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// end runs Missing on a stub in a goroutine of its own, as a test runs.
func end(why string) *stub {
	s := &stub{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Missing(s, why)
	}()
	<-done
	return s
}

func TestMissing(t *testing.T) {
	const why = "needs frobnicate (frob is not on PATH): apt-get install frob"

	t.Setenv(Env, "")
	if s := end(why); s.skipped != why || s.failed != "" {
		t.Errorf("%s unset: skipped %q, failed %q; want skipped %q", Env, s.skipped, s.failed, why)
	}

	t.Setenv(Env, "all")
	want := why + ", and TOOLBUS_TEST_NEEDS=all says every test must run"
	if s := end(why); s.failed != want || s.skipped != "" {
		t.Errorf("%s=all: skipped %q, failed %q; want failed %q", Env, s.skipped, s.failed, want)
	}
}
