package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/internal/label"
)

// Bounds of what a workflow holds and what its tools return. Every workflow message
// crosses the bus whole: a task turn's spec (the intake, the turn's record), the
// workflow's document (a KV value) and each tool's reply are one message each, and the
// servers refuse one over their max_payload (1 MiB unless configured). A step that
// cannot be carried is refused or failed with its reason when it is made, never tried
// again: a refusal of that kind is the same every time.
const (
	// MaxInstructionsBytes bounds a task's instructions, as written in its definition
	// and as expanded (its dependencies' results filled in): the task turn's input. A
	// task whose instructions expand past it fails without a turn, with the sizes.
	MaxInstructionsBytes = 256 << 10
	// MaxDocumentBytes bounds a workflow's document as stored (its definition, each
	// task's result and attempts): a definition over it is refused, and a result that
	// would take the document past it fails its attempt. It is lowered to 3/8 of the
	// bus's max_payload where that is smaller, which leaves room for the attempts that
	// follow and for workflow_view's reply, which carries the document beside its text.
	MaxDocumentBytes = 384 << 10
	// MaxReasonBytes bounds each reason and error a workflow records (an attempt's
	// reason, a task's error, a cancel's reason); longer ones are clipped, with a note.
	MaxReasonBytes = 1 << 10

	// DefaultListLimit and MaxListLimit are workflow_list's page sizes: the default and
	// the most a call may ask for.
	DefaultListLimit = 20
	MaxListLimit     = 100
	// maxListBytes bounds one page of workflow_list (its text and its details): a page
	// stops early rather than grow past it.
	maxListBytes = 256 << 10
	// maxViewBytes bounds the text of workflow_view and workflow_cancel: task results
	// past it are left out with a note (workflow_view with task_id shows one whole).
	maxViewBytes = 128 << 10
	// maxSummaryError bounds a workflow's error in a listing.
	maxSummaryError = 300
)

// limits are the bounds of one engine's writes, from its connection's max_payload.
type limits struct {
	doc     int // a workflow's document (MaxDocumentBytes, or less)
	spec    int // a task turn's spec, encoded; 0: unbounded (no connection)
	payload int // the bus's max_payload; 0: unknown
}

func (e *Engine) limits() limits {
	l := limits{doc: MaxDocumentBytes}
	if e == nil || e.js == nil {
		return l
	}
	if nc := e.js.Conn(); nc != nil {
		if p := int(nc.MaxPayload()); p > 0 {
			l.payload = p
			l.doc = min(l.doc, p*3/8)
			// Half of a message: the turn's record holds its spec and, later, its
			// progress and its submission.
			l.spec = p / 2
		}
	}
	return l
}

// unstartable says why a task that is ready cannot start, or "": its instructions, as
// expanded from its dependencies' results, are over MaxInstructionsBytes, or its turn's
// spec is more than the bus can carry for it. Either stays so, whatever node tries.
func (l limits) unstartable(wf *bus.Workflow, t *bus.Task) string {
	// Measured before anything is built: instructions that repeat a large result
	// many times would take that much memory to expand.
	if n := renderedSize(t.Instructions, dependencyResults(wf, t)); n > MaxInstructionsBytes {
		refs := len(refPattern.FindAllStringIndex(t.Instructions, -1))
		return fmt.Sprintf("not started: the instructions of task %s expand to %s (%d bytes, with %s filled in), "+
			"over the %s a task's instructions may hold; refer to each result once, or to the one field of it the task "+
			"needs ({{tasks.<id>.result.<field>}}), instead of repeating it",
			t.ID, sizeOf(n), n, label.Plural(refs, "reference"), sizeOf(MaxInstructionsBytes))
	}
	if l.spec > 0 {
		spec := taskTurn(wf, t, bus.Attempt{N: 1, Turn: bus.AttemptTurn(wf.ID, t.ID, 1)})
		if n := specSize(spec); n > l.spec {
			return "not started: " + l.specTooLarge(t.ID, n)
		}
	}
	return ""
}

// specTooLarge says that the turn of a task would be n bytes, more than l allows.
func (l limits) specTooLarge(task string, n int) string {
	return fmt.Sprintf("the turn of task %s would be %s (%d bytes, its instructions, result schema and script), "+
		"over the %s a task turn may be (half the %s the bus carries in one message, the servers' max_payload); "+
		"shorten them, or the results its instructions repeat", task, sizeOf(n), n, sizeOf(l.spec), sizeOf(l.payload))
}

func specSize(spec bus.TurnSpec) int {
	b, err := json.Marshal(spec)
	if err != nil {
		return 0
	}
	return len(b)
}

// tooLarge reports an error of a message the bus refused for its size, however it came
// back: nats.go's own refusal, the intake's (durable), or a node's reply that says so.
// Such a refusal is the same on every try.
func tooLarge(err error) bool {
	return errors.Is(err, durable.ErrSpecTooLarge) || errors.Is(err, nats.ErrMaxPayload)
}

// clip bounds s to n bytes (at a rune boundary), saying how long it was.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (clipped: %d bytes in all)", len(s))
}

// sizeOf writes a byte count for people: "900 bytes", "64 KiB", "1.2 MiB".
func sizeOf(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<10))) + " KiB"
	default:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<20))) + " MiB"
	}
}

func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }
