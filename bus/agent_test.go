package bus

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckAgent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want string // the error, "" for a good id
	}{
		{"alice", ""},
		{"agent-1", ""},
		{"team_A-9", ""},
		{"-", ""},
		{strings.Repeat("a", MaxAgentLen), ""},
		{"", "agent id is empty"},
		{strings.Repeat("a", MaxAgentLen+1), "agent id is 65 bytes long; at most 64 are allowed"},
		{"a.b", `agent id has '.' at position 2; only ASCII letters, digits, '_' and '-' are allowed`},
		{"team.agent_2", `agent id has '.' at position 5; only ASCII letters, digits, '_' and '-' are allowed`},
		{"a/b", `agent id has '/' at position 2; only ASCII letters, digits, '_' and '-' are allowed`},
		{"../a1", `agent id has '.' at position 1; only ASCII letters, digits, '_' and '-' are allowed`},
		{"a=b", `agent id has '=' at position 2; only ASCII letters, digits, '_' and '-' are allowed`},
		{"a b", `agent id has ' ' at position 2; only ASCII letters, digits, '_' and '-' are allowed`},
		{"a*", `agent id has '*' at position 2; only ASCII letters, digits, '_' and '-' are allowed`},
		{"a>", `agent id has '>' at position 2; only ASCII letters, digits, '_' and '-' are allowed`},
		{"a\nb", `agent id has '\n' at position 2; only ASCII letters, digits, '_' and '-' are allowed`},
		{"agént", `agent id has 'é' at position 3; only ASCII letters, digits, '_' and '-' are allowed`},
		{"a\xffb", `agent id has byte 0xff at position 2; only ASCII letters, digits, '_' and '-' are allowed`},
		// Length is checked first: a long id with a bad character is too long.
		{strings.Repeat("a.", 40), "agent id is 80 bytes long; at most 64 are allowed"},
	}
	for _, tt := range tests {
		err := CheckAgent(tt.id)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckAgent(%q) = %v, want nil", tt.id, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want):
			t.Errorf("CheckAgent(%q) = %v, want %q", tt.id, err, tt.want)
		case tt.want != "" && !errors.Is(err, ErrBadAgent):
			t.Errorf("CheckAgent(%q) = %v, which does not match ErrBadAgent", tt.id, err)
		}
	}
}

func TestCheckAgentDoesNotAllocate(t *testing.T) {
	id := strings.Repeat("a-Z_9", 12)
	if allocs := testing.AllocsPerRun(100, func() { _ = CheckAgent(id) }); allocs != 0 {
		t.Errorf("CheckAgent of a good id allocates %v times", allocs)
	}
}
