// Package label holds the small helpers the built-in tools make their activity labels
// with, so that every category words counts, cut text and failures alike.
package label

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Plural is n and word, with an s when n is not 1: "1 page", "3 pages".
func Plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// Truncate is s on one line, its runs of white space made single spaces, cut to n runes
// with "…" when longer.
func Truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// DetailsOf decodes a result's details; false when the call failed before producing
// them. It takes the details, not the result, so that this leaf knows nothing of the
// contract: DetailsOf[ReadDetails](res.Details).
func DetailsOf[T any](details json.RawMessage) (T, bool) {
	var d T
	if len(details) == 0 {
		return d, false
	}
	if err := json.Unmarshal(details, &d); err != nil {
		return d, false
	}
	return d, true
}

// Completed is a completed-activity label: done, or, when the call failed, "Could not "
// and what it could not do. Completed(res.IsError, "Cancelled job j1", "cancel job j1").
func Completed(failed bool, done, what string) string {
	if failed {
		return "Could not " + what
	}
	return done
}
