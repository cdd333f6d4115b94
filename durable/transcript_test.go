package durable

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus"
)

// TestAssembleTranscript is the table of how a transcript's stored messages are read: in
// the order of their positions, once each, and as each claim saw the transcript when it
// fenced the ones before it, whatever a replicated stream let past its fence.
func TestAssembleTranscript(t *testing.T) {
	t.Parallel()
	// m is a message at position pos of claim epoch, holding one text item named text.
	m := func(pos, epoch int, text string) transcriptPart {
		return transcriptPart{pos: pos, epoch: epoch, items: []toolbus.Item{{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: text}}}
	}
	for _, tc := range []struct {
		name  string
		parts []transcriptPart
		want  string
		pos   int
	}{
		{"one claim", []transcriptPart{m(1, 1, "a"), m(2, 1, "b"), m(3, 1, "c")}, "a b c", 3},
		{"a resume after the last message", []transcriptPart{m(1, 1, "a"), m(2, 1, "b"), m(3, 2, "note"), m(4, 2, "c")}, "a b note c", 4},
		{"a retried append stored twice", []transcriptPart{m(1, 1, "a"), m(2, 1, "b"), m(2, 1, "b")}, "a b", 2},
		{"an older claim's write after the fence", []transcriptPart{m(1, 1, "a"), m(2, 2, "note"), m(2, 1, "late"), m(3, 2, "c")}, "a note c", 3},
		{"an older claim's write the newer one did not see", []transcriptPart{m(1, 1, "a"), m(2, 1, "unseen"), m(2, 2, "note"), m(3, 2, "c")}, "a note c", 3},
		{"two unseen, then a third claim", []transcriptPart{m(1, 1, "a"), m(2, 1, "x"), m(3, 1, "y"), m(2, 2, "note2"), m(3, 3, "note3"), m(3, 2, "late")}, "a note2 note3", 3},
		{"no claims (an earlier build)", []transcriptPart{m(1, 0, "a"), m(3, 0, "c"), m(2, 0, "b"), m(2, 0, "b")}, "a b c", 3},
		{"no positions (an earlier build)", []transcriptPart{m(0, 0, "a"), m(0, 0, "b")}, "a b", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items, pos := assemble(tc.parts)
			var got []string
			for _, it := range items {
				got = append(got, it.Text)
			}
			if g := strings.Join(got, " "); g != tc.want || pos != tc.pos {
				t.Errorf("read %q at position %d, want %q at %d", g, pos, tc.want, tc.pos)
			}
		})
	}
}
