package conform

import "testing"

// The expected texts leave the host its own words where docs/protocol.md §15 does, and
// no more: free stays within a line, so a frame keeps its count of lines; more is only
// an optional " (…)" at the end.
func TestPattern(t *testing.T) {
	t.Parallel()
	frame := argsFrame("add", "/", "/a")
	stopped := pattern("call stopped: the turn was aborted: x", more)
	for _, tc := range []struct {
		p    text
		s    string
		want bool
	}{
		{frame, "invalid arguments for add: arguments do not match the schema:\n- /: required property 'a' is missing\n- /a: bad", true},
		{frame, "invalid arguments for add: arguments do not match the schema:\n- /: one\n- /: two\n- /a: bad", false},
		{frame, "invalid arguments for add: arguments do not match the schema:\n- /a: bad\n- /: x", false},
		{frame, "invalid arguments for pycalc.add: arguments do not match the schema:\n- /: x\n- /a: y", false},
		{stopped, "call stopped: the turn was aborted: x", true},
		{stopped, "call stopped: the turn was aborted: x (killed)", true},
		{stopped, "call stopped: the turn was aborted: xy", false},
		{pattern(anything), "two\nlines", true},
		{exact(`bad Toolbus-Turn header "a.b"`), `bad Toolbus-Turn header "a.b" `, false},
	} {
		if got := tc.p.re.MatchString(tc.s); got != tc.want {
			t.Errorf("%q against %q: %v, want %v", tc.s, tc.p.show, got, tc.want)
		}
	}
}
