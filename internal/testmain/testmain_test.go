package testmain

import (
	"errors"
	"fmt"
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
	case "options":
		fmt.Printf("GORACE=%q\n", os.Getenv("GORACE"))
		Main(m, Config{})
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
		gorace   string // the child's GORACE, when set
		code     int
		says     string
		raceOnly bool
	}{
		{child: "pass", code: 0},
		{child: "leak", code: 1, says: "goroutines left after the tests passed"},
		{child: "done-fails", code: 1, says: "cgroups left behind: x"},
		// 66: the race runtime's exit code.
		{child: "race", code: 66, says: "WARNING: DATA RACE", raceOnly: true},
		// The race runtime's settings are added to the caller's, whose own value wins.
		{child: "options", gorace: "halt_on_error=1 atexit_sleep_ms=5", code: 0,
			says: `GORACE="halt_on_error=1 atexit_sleep_ms=5 clear_shadow_mmap_threshold=1073741824"`, raceOnly: true},
	}
	for _, tc := range cases {
		t.Run(tc.child, func(t *testing.T) {
			t.Parallel()
			if tc.raceOnly && !raceEnabled {
				t.Skip("needs -race")
			}
			cmd := exec.CommandContext(t.Context(), self, "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+tc.child)
			if tc.gorace != "" {
				cmd.Env = append(cmd.Env, "GORACE="+tc.gorace)
			}
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

// TestRaceOptions: a race-built test binary runs with raceOptions, which it gave itself.
func TestRaceOptions(t *testing.T) {
	t.Parallel()
	if !raceEnabled {
		t.Skip("needs -race")
	}
	if got, missing := addOptions(os.Getenv("GORACE"), raceOptions); missing {
		t.Errorf("GORACE=%q lacks some of %q (want %q)", os.Getenv("GORACE"), raceOptions, got)
	}
}

func TestAddOptions(t *testing.T) {
	t.Parallel()
	opts := []string{"a=1", "b=2"}
	for _, tc := range []struct {
		gorace, want string
		missing      bool
	}{
		{"", "a=1 b=2", true},
		{"a=1 b=2", "a=1 b=2", false},
		{"b=9", "b=9 a=1", true},
		{"  log_path=/tmp/r   a=0 ", "log_path=/tmp/r a=0 b=2", true},
		{"b=2 a=0", "b=2 a=0", false},
	} {
		got, missing := addOptions(tc.gorace, opts)
		if got != tc.want || missing != tc.missing {
			t.Errorf("addOptions(%q) = %q, %v; want %q, %v", tc.gorace, got, missing, tc.want, tc.missing)
		}
	}
}
