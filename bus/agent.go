package bus

import (
	"errors"
	"fmt"
)

// ErrBadAgent reports an agent id that breaks the agent-id rule.
var ErrBadAgent = errors.New("bad agent id")

// CheckAgent applies the one agent-id rule: 1 to 64 ASCII letters, digits, '_' or '-',
// so an id is safe as a path element, a KV key and a subject token.
func CheckAgent(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrBadAgent)
	case len(id) > 64:
		return fmt.Errorf("%w: %q is longer than 64 characters", ErrBadAgent, id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("%w: %q holds %q; use letters, digits, '_' and '-'", ErrBadAgent, id, r)
		}
	}
	return nil
}
