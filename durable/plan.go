package durable

import "github.com/toolbus/toolbus"

// Resuming a turn is planned from its transcript alone: which calls of the last batch
// the model made, which have a recorded output, and which may have gone out before the
// node that ran them was lost. PlanBatch is pure, so every case is a table test.

// Action is what a resumed turn does with one call of its last batch.
type Action uint8

const (
	// Recorded: its output is in the transcript; it is not run again.
	Recorded Action = iota
	// Refused: the turn refuses it again (unknown tool, invalid arguments); it never ran.
	Refused
	// Run: it never went out (the execution modes held it back), or it is read-only
	// and running it again is harmless; it runs now.
	Run
	// Abandon: it may have run; it is not run again, and the model is told to check
	// its effect.
	Abandon
)

func (a Action) String() string {
	switch a {
	case Recorded:
		return "recorded"
	case Refused:
		return "refused"
	case Run:
		return "run"
	case Abandon:
		return "abandon"
	}
	return "unknown"
}

// CallInfo is what the plan needs to know of a call's tool, as the resuming node finds
// it. A call that records its run (toolbus.Item.Run) is planned by the mode and flag it
// records, which were its tool's when the turn took it.
type CallInfo struct {
	// Refused: the turn refuses the call (unknown tool, invalid arguments).
	Refused    bool
	Sequential bool
	ReadOnly   bool
}

// Plan is what a resumed turn does next.
type Plan struct {
	// Calls are the function calls of the transcript's last response, in the model's
	// order; Actions says what becomes of each, and Outputs holds the recorded ones.
	Calls   []toolbus.Item
	Actions []Action
	Outputs map[string]toolbus.Item
	// Open reports a batch with a call that has no output yet (refused ones included):
	// the turn finishes it.
	// Otherwise the turn asks the model for its next step, unless Answered.
	Open bool
	// Answered reports a transcript that ends with the model's answer (a response
	// without calls): the node that wrote it was lost before it stored the end.
	Answered bool
	// Text is that answer's text.
	Text string
}

// PlanBatch plans the resumption of a turn from its transcript. A call without a
// recorded output may have gone out before the node was lost unless the execution
// modes held it back: a sequential call waits for every call before it, and every call
// after a sequential one waits for that one. The modes are those the calls record
// (toolbus.CallRun), or info's for a transcript of an earlier build.
func PlanBatch(items []toolbus.Item, info func(i int, call toolbus.Item) CallInfo) Plan {
	var p Plan
	start, end := lastResponse(items)
	p.Outputs = make(map[string]toolbus.Item)
	for _, it := range items {
		if it.Kind == toolbus.KindCallOutput {
			p.Outputs[it.CallID] = it
		}
	}
	for _, it := range items[start:end] {
		if it.Kind == toolbus.KindFunctionCall {
			p.Calls = append(p.Calls, it)
		}
	}
	if len(p.Calls) == 0 {
		for _, it := range items[start:end] {
			if it.Kind == toolbus.KindMessage && it.Role == toolbus.RoleAssistant {
				p.Answered = true
				p.Text += it.Text
			}
		}
		return p
	}
	anyOpen, blocked := false, false
	for i, c := range p.Calls {
		in := info(i, c)
		if r := c.Run; r != nil {
			in.Sequential, in.ReadOnly = r.Sequential, r.ReadOnly
		}
		_, done := p.Outputs[c.CallID]
		var a Action
		switch {
		case done:
			a = Recorded
		case in.Refused:
			a = Refused // it never ran and held nothing back
		case blocked || (in.Sequential && anyOpen):
			a = Run // held back by the modes: it never went out
		case in.ReadOnly:
			a = Run
		default:
			a = Abandon
		}
		p.Actions = append(p.Actions, a)
		if a == Recorded {
			continue
		}
		p.Open = true // a refused call still needs its output
		if a == Refused {
			continue
		}
		anyOpen = true
		if in.Sequential {
			blocked = true
		}
	}
	return p
}

// lastResponse bounds the transcript's last model response: the run of items before
// its outputs (which come in any order after it) and after the input, or the outputs
// of the batch before. Notes are skipped on both sides.
func lastResponse(items []toolbus.Item) (start, end int) {
	end = len(items)
	for end > 0 && (items[end-1].Kind == toolbus.KindCallOutput || IsNote(items[end-1])) {
		end--
	}
	start = end
	for start > 0 {
		it := items[start-1]
		if it.Kind == toolbus.KindCallOutput || IsNote(it) || (it.Kind == toolbus.KindMessage && it.Role != toolbus.RoleAssistant) {
			break
		}
		start--
	}
	return start, end
}

// LastCalls are the function calls of the transcript's last model response.
func LastCalls(items []toolbus.Item) []toolbus.Item {
	start, end := lastResponse(items)
	var calls []toolbus.Item
	for _, it := range items[start:end] {
		if it.Kind == toolbus.KindFunctionCall {
			calls = append(calls, it)
		}
	}
	return calls
}

// Steps counts the model responses of a transcript: each is a run of the model's
// items (calls, messages, reasoning) between inputs, outputs and notes.
func Steps(items []toolbus.Item) int {
	n, in := 0, false
	for _, it := range items {
		model := !IsNote(it) && it.Kind != toolbus.KindCallOutput && !(it.Kind == toolbus.KindMessage && it.Role != toolbus.RoleAssistant)
		if model && !in {
			n++
		}
		in = model
	}
	return n
}
