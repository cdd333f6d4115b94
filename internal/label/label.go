// Package label holds the small helpers the built-in tools make their activity labels
// with, so that every category words counts, cut text and failures alike.
package label

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolbus/toolbus"
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

// Failed reports a call that did not succeed: an error result, or an error returned by
// Execute (the label then gets an empty result), for tools whose every success carries
// details.
func Failed(res toolbus.Result) bool { return res.IsError || len(res.Details) == 0 }

// DetailsOf decodes a result's details; false when the call failed before producing them.
func DetailsOf[T any](res toolbus.Result) (T, bool) {
	var d T
	if len(res.Details) == 0 {
		return d, false
	}
	if err := json.Unmarshal(res.Details, &d); err != nil {
		return d, false
	}
	return d, true
}
