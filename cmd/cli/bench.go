package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"text/tabwriter"

	"github.com/toolbus/toolbus/bench"
)

// runBench runs the performance suite (package bench) and prints its report: a table, or
// with -json the report as bench.Report encodes it.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg bench.Config
	var asJSON bool
	var cpuProfile string
	fs := newFlagSet("bench", "[flags]",
		"Measures the runtime in one process against one embedded server: raw NATS, a\n"+
			"tool's host, calls and steps through a turn, parallelism, throughput, abort and\n"+
			"assembly, each row against a baseline taken in the same run.", stderr)
	fs.IntVar(&cfg.Samples, "n", bench.DefaultSamples, "samples per latency measurement")
	fs.IntVar(&cfg.Turns, "turns", bench.DefaultTurns, "concurrent turns in the throughput measurement")
	fs.IntVar(&cfg.Waiting, "waiting", bench.DefaultWaiting, "turns waiting on their model in the memory and mass-abort measurement")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&cfg.Only, "only", "", "run only the measurements whose name contains this text")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments %q", pos)
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var progress func(string)
	if !asJSON {
		progress = func(step string) { fmt.Fprintln(stderr, step) }
	}
	report, err := bench.Run(ctx, cfg, progress)
	var ce *bench.ConfigError
	if errors.As(err, &ce) {
		return usagef("%s", ce.Msg)
	}
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	printBench(stdout, report)
	return nil
}

// benchNameWidth is where a measurement's name wraps, so the table fits in 120 columns.
const benchNameWidth = 42

func printBench(w io.Writer, r bench.Report) {
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "#\tmeasurement\tp50\tp90\tp99\tvalue\tvs\tratio\ttarget\t\n")
	num := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v)
	}
	// A baseline is named by its row number: its name is in its own row.
	rowOf := make(map[string]int, len(r.Results))
	for i, res := range r.Results {
		if _, dup := rowOf[res.Name]; !dup {
			rowOf[res.Name] = i + 1
		}
	}
	for i, res := range r.Results {
		met := ""
		if res.Met != nil {
			met = "met"
			if !*res.Met {
				met = "MISSED"
			}
		}
		ratio, vs := "-", "-"
		if res.Ratio != 0 {
			ratio = fmt.Sprintf("%.2f×", res.Ratio)
		}
		if n, ok := rowOf[res.Baseline]; ok && res.Baseline != "" {
			vs = fmt.Sprintf("#%d", n)
		}
		lines := wrapWords(res.Name+" ("+res.Unit+")", benchNameWidth)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", i+1, lines[0],
			num(res.P50), num(res.P90), num(res.P99), num(res.Value), vs, ratio,
			strings.TrimSpace(strings.Replace(res.Target, " baseline", "", 1)+" "+met))
		for _, l := range lines[1:] {
			fmt.Fprintf(tw, "\t  %s\t\t\t\t\t\t\t\t\n", l)
		}
	}
	tw.Flush()
	for _, line := range strings.Split(strings.TrimRight(table.String(), "\n"), "\n") {
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	fmt.Fprintf(w, "\n%s, %d CPUs. Latencies in microseconds; each ratio is against\nthe row numbered under vs, measured in this run.\n", r.GoVersion, r.CPUs)
}

// wrapWords breaks s into lines of at most width characters, at spaces.
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len([]rune(line))+1+len([]rune(word)) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}
