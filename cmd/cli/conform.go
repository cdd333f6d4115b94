package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/toolbus/toolbus/conform"
)

func cmdConform(ctx context.Context, e *env, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("conform", "-server URL -category NAME [flags]",
		"Checks the host of a tool category against the host contract (docs/protocol.md):\n"+
			"sends it the edge-case requests the contract defines (bad headers and their\n"+
			"forms, truncation, deadlines already past, bad JSON, schema violations, an\n"+
			"oversize body, payload references) and prints, per case, the request, the reply\n"+
			"the contract asks for (… stands for the host's own words) and what the host\n"+
			"answered. Every request is refused before the tool runs, except the slow call:\n"+
			"with -slow-tool and -slow-args it runs that call three times, to abort it before\n"+
			"and during its run and to let it pass its deadline. Exits with status 1 when the\n"+
			"host answered a case otherwise. Run it with one host of the category up.", stderr)
	var bf busFlags
	bf.register(fs, e)
	var (
		category = fs.String("category", "", "the `category` whose host is checked")
		tool     = fs.String("tool", "", "the `tool` the refusal cases call (default: a read-only tool of the category)")
		slowTool = fs.String("slow-tool", "", "a `tool` whose call may run and lasts 3 s or more, for the abort and deadline cases")
		slowArgs = fs.String("slow-args", "", "the `JSON` arguments of that call")
		timeout  = fs.Duration("timeout", conform.DefaultReplyTimeout, "how long to wait for each reply")
	)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("conform takes no arguments, only flags")
	case bf.server == "":
		return usagef("conform needs -server (or NATS_URL): the bus the host under test is connected to")
	case *category == "":
		return usagef("want -category: the category whose host is checked")
	case (*slowTool == "") != (*slowArgs == ""):
		return usagef("-slow-tool and -slow-args go together")
	}
	cfg := conform.Config{Category: *category, Tool: *tool, ReplyTimeout: *timeout}
	if *slowTool != "" {
		cfg.Slow = &conform.Call{Tool: *slowTool, Args: *slowArgs}
	}
	nc, err := bf.dialFor(ctx, "conform")
	if err != nil {
		return err
	}
	defer nc.Close()

	var ran, failed, skipped int
	err = conform.Run(ctx, nc, cfg, func(r conform.Result) {
		switch {
		case r.Skipped != "":
			skipped++
			fmt.Fprintf(stdout, "skip  %s: %s\n", r.Case, r.Skipped)
			return
		case r.Passed():
			fmt.Fprintf(stdout, "ok    %s\n", caseTitle(r))
		default:
			failed++
			fmt.Fprintf(stdout, "FAIL  %s\n", caseTitle(r))
		}
		ran++
		fmt.Fprintf(stdout, "      sent  %s\n      want  %s\n      got   %s\n", r.Sent, r.Want, strings.TrimSpace(r.Got))
		for _, p := range r.Problems {
			fmt.Fprintf(stdout, "      why   %s\n", p)
		}
	})
	if err != nil {
		if errors.Is(err, conform.ErrCategory) && ran == 0 {
			return err
		}
		return fmt.Errorf("conform %s: %w", *category, err)
	}
	fmt.Fprintf(stdout, "category %s: %d cases, %d passed, %d failed, %d skipped\n", *category, ran+skipped, ran-failed, failed, skipped)
	if failed > 0 {
		return &exitError{code: exitFailed, err: fmt.Errorf("the host of category %s answered %d of %d cases otherwise than docs/protocol.md says", *category, failed, ran)}
	}
	return nil
}

func caseTitle(r conform.Result) string {
	if r.Tool == "" {
		return r.Case
	}
	return r.Case + " (" + r.Tool + ")"
}
