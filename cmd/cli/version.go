package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

func cmdVersion(_ context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", "Prints the module version and the VCS revision the program was built from.", stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments %q", pos)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("this binary carries no build information")
	}
	fmt.Fprintln(stdout, versionLine(bi))
	return nil
}

// versionLine is "toolbus MODULE VERSION, revision REV (TIME, modified), GO": what go
// build recorded. A go run or a build outside a VCS checkout has no revision.
func versionLine(bi *debug.BuildInfo) string {
	set := map[string]string{}
	for _, s := range bi.Settings {
		set[s.Key] = s.Value
	}
	var b strings.Builder
	fmt.Fprintf(&b, "toolbus %s %s", bi.Main.Path, bi.Main.Version)
	if rev := set["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, ", revision %s", rev)
		var notes []string
		if t := set["vcs.time"]; t != "" {
			notes = append(notes, t)
		}
		if set["vcs.modified"] == "true" {
			notes = append(notes, "modified")
		}
		if len(notes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
		}
	} else {
		b.WriteString(", no VCS revision recorded (built with go run, with -buildvcs=false, or outside a checkout)")
	}
	fmt.Fprintf(&b, ", %s", bi.GoVersion)
	return b.String()
}
