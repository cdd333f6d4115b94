package bus

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// MaxAgentLen is the longest agent id [CheckAgent] accepts, in bytes.
const MaxAgentLen = 64

// ErrBadAgent is wrapped by every error of [CheckAgent].
var ErrBadAgent = errors.New("bad agent id")

// agentError says what is wrong with an agent id; it matches [ErrBadAgent].
type agentError struct{ reason string }

func (e *agentError) Error() string { return e.reason }
func (e *agentError) Unwrap() error { return ErrBadAgent }

// CheckAgent applies the one rule for agent ids, wherever they enter: 1 to
// [MaxAgentLen] ASCII letters, digits, '_' or '-'. Such an id is safe as a
// path element (an agent's home), a KV key (its todo list) and a subject
// token. The error, which wraps [ErrBadAgent], says exactly what is wrong:
// the id is empty, too long, or which character is the first one refused.
// It does not allocate for a good id.
func CheckAgent(id string) error {
	if id == "" {
		return &agentError{"agent id is empty"}
	}
	if len(id) > MaxAgentLen {
		return &agentError{"agent id is " + strconv.Itoa(len(id)) + " bytes long; at most " + strconv.Itoa(MaxAgentLen) + " are allowed"}
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !agentByte(c) {
			// Every byte before i is ASCII, so i+1 is also the character's position.
			return &agentError{"agent id has " + quoteAt(id, i) + " at position " + strconv.Itoa(i+1) +
				"; only ASCII letters, digits, '_' and '-' are allowed"}
		}
	}
	return nil
}

func agentByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// quoteAt quotes the character that starts at byte i of s, or the byte
// itself if it starts no valid UTF-8 sequence.
func quoteAt(s string, i int) string {
	r, size := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size <= 1 {
		return "byte 0x" + strconv.FormatUint(uint64(s[i]), 16)
	}
	return strconv.QuoteRune(r)
}
