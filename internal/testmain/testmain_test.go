package testmain

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// childEnv names the ending a child of TestExitCodes gives its run.
const childEnv = "TESTMAIN_CHILD"

var raced int

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		Main(m, Config{Parallel: 4})
	case "pass":
		Main(m, Config{})
	case "leak":
		Main(m, Config{Done: func() error {
			go func() { select {} }()
			return nil
		}})
	case "done-fails":
		Main(m, Config{Done: func() error { return errors.New("cgroups left behind: x") }})
	case "race":
		// A race after m.Run has checked for one: only the race runtime's exit sees it.
		Main(m, Config{Done: func() error {
			done := make(chan struct{})
			go func() { raced++; close(done) }()
			raced++
			<-done
			return nil
		}})
	}
}

// TestExitCodes runs this test binary again, without tests, for each way a run can end.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		child    string
		code     int
		says     string
		raceOnly bool
	}{
		{child: "pass", code: 0},
		{child: "leak", code: 1, says: "goroutines left after the tests passed"},
		{child: "done-fails", code: 1, says: "cgroups left behind: x"},
		// 66: the race runtime's exit code.
		{child: "race", code: 66, says: "WARNING: DATA RACE", raceOnly: true},
	}
	for _, tc := range cases {
		t.Run(tc.child, func(t *testing.T) {
			t.Parallel()
			if tc.raceOnly && !raceEnabled {
				t.Skip("needs -race")
			}
			cmd := exec.CommandContext(t.Context(), self, "-test.run=^$")
			// Without the race runtime's exit sleep: the race child exits through it.
			cmd.Env = append(os.Environ(), childEnv+"="+tc.child, "GORACE=atexit_sleep_ms=0")
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(string(out), tc.says) {
				t.Errorf("exit %d, want %d with %q; output:\n%s", code, tc.code, tc.says, out)
			}
		})
	}
}

func TestParallelValidated(t *testing.T) {
	t.Parallel()
	if err := (Config{Parallel: -1}).validate(); err == nil || !strings.Contains(err.Error(), "parallel -1") {
		t.Errorf("Parallel -1: %v", err)
	}
}
