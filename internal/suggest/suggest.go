// Package suggest finds the name a person most likely meant when they mistyped one: a
// flag of a command, a tool of the catalog. It is a leaf: it knows names, nothing of
// toolbus.
package suggest

import (
	"flag"
	"strings"
)

// MaxDistance is the most edits (an insertion, a deletion or a substitution of one
// character, or a swap of two side by side) a name may be from what was typed to be
// suggested: two covers a dropped letter and a swap ("-modle"), while three already
// matches unrelated short names.
const MaxDistance = 2

// Closest returns the name of names nearest to typed, at most MaxDistance edits away,
// and whether there is one. A tie between two names suggests neither: a guess between
// two is no help. Case is ignored, as typists do.
func Closest(typed string, names []string) (string, bool) {
	best, bestD, tie := "", MaxDistance+1, false
	lt := strings.ToLower(typed)
	for _, n := range names {
		if n == typed {
			return "", false // typed is a name: nothing to suggest
		}
		d := distance(lt, strings.ToLower(n))
		switch {
		case d < bestD:
			best, bestD, tie = n, d, false
		case d == bestD && n != best:
			tie = true
		}
	}
	if bestD > MaxDistance || tie {
		return "", false
	}
	return best, true
}

// DidYouMean is " (did you mean X?)" for the name of names closest to typed, or "".
func DidYouMean(typed string, names []string) string {
	if n, ok := Closest(typed, names); ok {
		return " (did you mean " + n + "?)"
	}
	return ""
}

// undefinedFlag is the start of the flag package's error for a flag the set lacks.
const undefinedFlag = "flag provided but not defined: -"

// Flag is, for an error of fs.Parse about a flag fs does not define, "did you mean
// -X?" naming fs's closest flag; "" for any other error, or when no flag is close.
// The flag package's error says what was wrong; this says what to type instead.
func Flag(fs *flag.FlagSet, err error) string {
	if err == nil {
		return ""
	}
	typed, ok := strings.CutPrefix(err.Error(), undefinedFlag)
	if !ok {
		return ""
	}
	typed = strings.TrimPrefix(typed, "-") // --modle
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if n, ok := Closest(typed, names); ok {
		return "did you mean -" + n + "?"
	}
	return ""
}

// distance is the edit distance of a and b counting a swap of two neighbours as one
// edit (optimal string alignment), in bytes: names are ASCII. With swaps at two edits
// (plain Levenshtein), "-modle" is as far from -node as from -model, and a tie
// suggests nothing.
func distance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
