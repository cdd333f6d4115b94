package schema

import (
	"errors"
	"strconv"
)

// MaxDepth is how deep objects and arrays may nest in arguments (the root object is
// level 1). kaptinlin's validator recurses once per level and per branch of a recursive
// anyOf: arguments nested 10 000 deep against a tree schema cost it seconds of CPU, in
// the turn and again in the host, so such arguments are refused before it sees them. No
// tool's arguments need more: the deepest schemas in the wild nest a few levels.
const MaxDepth = 64

// ErrTooDeep is matched (errors.Is) by the error Parse and Validate return for
// arguments nested deeper than MaxDepth.
var ErrTooDeep = errors.New("arguments nested deeper than " + strconv.Itoa(MaxDepth) + " levels")

// tooDeepMsg is what the model reads.
var tooDeepMsg = ErrTooDeep.Error() + ": objects and arrays may nest " + strconv.Itoa(MaxDepth) +
	" deep at most; send a flatter value"

// textTooDeep reports whether text opens more than MaxDepth objects or arrays at once,
// outside double-quoted strings. It reads any text, JSON or not, in one pass with no
// allocation, so it runs before the text is decoded or repaired. On text that is not
// JSON it is an estimate (brackets in a single-quoted string count); only arguments
// that deep are refused on it.
func textTooDeep(text string) bool {
	depth := 0
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '"':
			for i++; i < len(text) && text[i] != '"'; i++ {
				if text[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if depth++; depth > MaxDepth {
				return true
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return false
}

// valueTooDeep reports whether a decoded value nests objects and arrays more than
// MaxDepth deep; it looks no further down than that.
func valueTooDeep(v any) bool { return nestedPast(v, MaxDepth) }

func nestedPast(v any, left int) bool {
	switch v := v.(type) {
	case map[string]any:
		if left == 0 {
			return true
		}
		for _, c := range v {
			if nestedPast(c, left-1) {
				return true
			}
		}
	case []any:
		if left == 0 {
			return true
		}
		for _, c := range v {
			if nestedPast(c, left-1) {
				return true
			}
		}
	}
	return false
}
