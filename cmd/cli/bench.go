package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bench"
)

// runBench runs the performance suite (package bench) and prints its report: a table, or
// with -json the report as bench.Report encodes it.
func runBench(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
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

// benchWidth is the bench table's width in columns (issue 26).
const benchWidth = 120

// minBenchName is the narrowest the measurement column gets, however wide the figures.
const minBenchName = 16

func printBench(w io.Writer, r bench.Report) { writeBenchTable(w, r, benchWidth) }

// writeBenchTable prints r as a table at most width columns wide: the figures' columns
// take what they need, and a measurement's name wraps in what is left.
func writeBenchTable(w io.Writer, r bench.Report, width int) {
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
	// Every cell but the name's (column 1), header first.
	cells := [][]string{{"#", "", "p50", "p90", "p99", "value", "vs", "ratio", "target"}}
	names := []string{"measurement"}
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
		cells = append(cells, []string{fmt.Sprint(i + 1), "", num(res.P50), num(res.P90), num(res.P99), num(res.Value), vs, ratio,
			strings.TrimSpace(strings.Replace(res.Target, " baseline", "", 1) + " " + met)})
		names = append(names, res.Name+" ("+res.Unit+")")
	}
	const gap = 2
	widths := make([]int, len(cells[0]))
	for _, row := range cells {
		for c, cell := range row {
			widths[c] = max(widths[c], utf8.RuneCountInString(cell))
		}
	}
	// The name's column gets what the others leave, and no more than its longest name.
	room := width
	for c, cw := range widths {
		if c != 1 {
			room -= cw + gap
		}
	}
	longest := 0
	for _, n := range names {
		longest = max(longest, utf8.RuneCountInString(n))
	}
	render := func(nameWidth int) (lines []string, over int) {
		for i, row := range cells {
			// Continued lines of a name are indented by two.
			for l, name := range wrapWords(names[i], nameWidth, nameWidth-2) {
				if l > 0 {
					row = make([]string, len(row))
					name = "  " + name
				}
				row[1] = name
				var line strings.Builder
				for c, cell := range row {
					line.WriteString(cell)
					if c < len(row)-1 {
						pad := widths[c] - utf8.RuneCountInString(cell)
						if c == 1 {
							pad = nameWidth - utf8.RuneCountInString(cell)
						}
						line.WriteString(strings.Repeat(" ", max(pad, 0)+gap))
					}
				}
				text := strings.TrimRight(line.String(), " ")
				// Counted in bytes as well as in characters: a tool that counts bytes
				// (awk's length in a C locale) sees "×", "≤", "µ" and "→" wider.
				over = max(over, len(text)-width)
				lines = append(lines, text)
			}
		}
		return lines, over
	}
	nameWidth := max(min(room, longest), minBenchName)
	lines, over := render(nameWidth)
	for over > 0 && nameWidth > minBenchName {
		nameWidth = max(nameWidth-over, minBenchName)
		lines, over = render(nameWidth)
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "\n%s, %d CPUs. Latencies in microseconds; each ratio is against\nthe row numbered under vs, measured in this run.\n", r.GoVersion, r.CPUs)
}

// wrapWords breaks s into lines of at most first characters, then at most rest, at
// spaces; a word longer than that is a line of its own.
func wrapWords(s string, first, rest int) []string {
	var lines []string
	line, width := "", first
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line, width = word, rest
		}
	}
	return append(lines, line)
}
