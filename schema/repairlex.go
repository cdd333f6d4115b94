package schema

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// repairBudget bounds the work of the repair rung, counted in steps of the
// pre-pass plus an estimate of the bytes jsonrepair will copy. jsonrepair
// copies its whole output for every string, object member and missing
// bracket, so its time grows with the square of the text (about 20 s for
// 100 kB of "["). Measured at 2 to 5 ns per unit on a shared 2-core machine,
// the budget keeps one repair under about 0.1 s (BenchmarkRepairAtBudget).
// It is checked before jsonrepair starts, so nothing is left running;
// arguments over it are refused (KindTooCostly). Strings count as a few
// bytes each (jsonrepair sees placeholders), so it limits structure (a
// thousand or so members), not text.
const repairBudget = 16 << 20

// maxDepth is encoding/json's nesting limit: deeper text can never decode.
const maxDepth = 10000

// marker starts a placeholder. It is a private-use character, and text
// that holds one outside its strings is refused rather than confused with
// a placeholder.
const marker = "\uE000"

// The repair pre-pass (lex) reads candidate text in one pass before
// jsonrepair sees it, for four things:
//
//   - strings: every string is read here, escapes and all, and jsonrepair
//     gets a placeholder ("\uE000" and an index) in its place; restore puts
//     the exact JSON literal back. jsonrepair's own string handling drops
//     the backslash of an escape JSON lacks (^\d becomes ^d), doubles the
//     backslashes of anything that looks like a file path, and trims a comma
//     that ends an array string; none of it reaches a value any more.
//   - numbers: a bare value written as another language would (0x10, 007,
//     +5, .5) is rewritten as the JSON number it is; NaN and Infinity, and a
//     leading zero that could be octal, are refused. jsonrepair would make
//     each a string.
//   - structure: brackets, for truncation (the text ended inside a string or
//     with containers open) and for what to drop when a member was cut in
//     its key or in a literal. A closer that does not match its opener
//     closes the container it does match (or the innermost one): that is a
//     repair, not a truncation.
//   - cost: its own steps and an estimate of jsonrepair's, against
//     repairBudget.
type lexer struct {
	text  string
	base  int // text's byte offset in the raw arguments, for error positions
	stack []frame
	open  [2]int // open frames by kind: objects, arrays

	edits []edit   // in text order
	lits  []string // protected strings: JSON literals without their quotes
	shift int      // how much the edits so far lengthened the text

	steps int // the pre-pass's own work
	cost  int // estimated jsonrepair work
	err   *lexError

	truncated   bool // the text ended inside a string, or with containers open
	cut         int  // keep text[:cut]: a member cut in its key or literal is dropped
	kept        bool // an escape JSON lacks was read as a literal backslash
	overEscaped bool // a key or value starts with \": the whole text is escaped once more
	roots       int  // values seen at the top level
	afterString bool // the last token was a string, so a + continues it ("a" + "b")
	concat      bool // a + after a string: the next string continues it

	comments commentMemo
	noEnd    [5]int // by quote family: a string whose content starts here found no end before the end of the text
}

// edit replaces text[start:end] with repl.
type edit struct {
	start, end int
	repl       string
}

type lexError struct {
	kind ErrorKind
	msg  string
}

// Scanner states for the innermost container.
const (
	stKey        = iota // object: expecting a key or '}'
	stInKey             // object: inside a bare key
	stColon             // object: key read, expecting ':'
	stValue             // expecting a value
	stInValue           // inside a bare value (number, literal, unquoted text)
	stAfterValue        // expecting ',' or a closer
)

type frame struct {
	closer      byte // '}' or ']'
	state       int
	memberStart int // where the current key (object) or element (array) starts
	valueStart  int
	comma       bool // the last token in it was a comma
}

func kindOf(closer byte) int {
	if closer == '}' {
		return 0
	}
	return 1
}

// lex runs the pre-pass over text, a candidate that is not valid JSON.
func lex(text string, base int) *lexer {
	l := &lexer{text: text, base: base, cut: len(text)}
	l.run()
	return l
}

func (l *lexer) fail(kind ErrorKind, msg string) {
	if l.err == nil {
		l.err = &lexError{kind, msg}
	}
}

func (l *lexer) step(n int) bool {
	l.steps += n
	if l.steps > repairBudget && l.err == nil {
		l.fail(KindTooCostly, "")
	}
	return l.err == nil
}

// charge adds what jsonrepair will copy at text position i: its output so
// far, about as long as the edited text before i.
func (l *lexer) charge(i int) { l.cost += i + l.shift }

// tokenCost is what jsonrepair spends on every key and value whatever the
// text's length (it tries each kind of value in turn, with allocations and
// a regular expression for numbers), in the units of charge: about a byte
// copied per unit.
const tokenCost = 200

func (l *lexer) top() *frame {
	if len(l.stack) == 0 {
		return nil
	}
	return &l.stack[len(l.stack)-1]
}

func (l *lexer) run() {
	t := l.text
	i := skipFence(t, 0, true)
	for i < len(t) && l.step(1) {
		c := t[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '/' && l.comments.end(t, i) > i:
			i = l.comments.end(t, i)
			continue
		case c == '+' && l.afterString:
			l.concat = true
			l.charge(i) // jsonrepair joins the strings by rewriting its output
			l.charge(i)
			i++
			continue
		}
		l.afterString = false
		switch {
		case c == '{' || c == '[':
			l.startValue(i)
			if !l.push(c, i) {
				return
			}
			i++
		case c == '}' || c == ']':
			l.close(c, i)
			i++
		case c == ',':
			if f := l.top(); f != nil {
				f.comma = true
				f.state = stValue
				if f.closer == '}' {
					f.state = stKey
					l.charge(i) // jsonrepair rewrites its output at every member
				}
				f.memberStart = i + 1
			}
			i++
		case c == ':':
			if f := l.top(); f != nil && f.closer == '}' {
				f.state = stValue
			}
			i++
		case c == '\\' && i+1 < len(t) && t[i+1] == '"':
			// {\"a\": 1}: JSON escaped once more, without its outer quotes.
			l.overEscaped = true
			return
		case c == '`' && len(l.stack) == 0 && strings.HasPrefix(t[i:], "```"):
			i = skipFence(t, i, false)
		default:
			if q, _ := quoteAt(t, i); q != qNone {
				i = l.str(i)
			} else if n := specialSpace(t, i); n > 0 {
				i += n
			} else {
				i = l.word(i)
			}
		}
		if l.cut < len(t) {
			break // a member cut in its key: nothing after it is kept
		}
	}
	if l.err == nil {
		l.finish()
	}
}

// push opens the container c at i. It refuses, past maxDepth, text that
// could never decode.
func (l *lexer) push(c byte, i int) bool {
	if len(l.stack) == maxDepth {
		l.fail(KindSyntax, notValidJSON+fmt.Sprintf("nested more than %d levels deep", maxDepth))
		return false
	}
	f := frame{closer: '}', state: stKey, memberStart: i + 1}
	if c == '[' {
		f.closer, f.state = ']', stValue
	}
	l.stack = append(l.stack, f)
	l.open[kindOf(f.closer)]++
	return true
}

// startValue records that a key or value begins at i in the innermost
// container, and charges what jsonrepair pays to insert a missing comma or
// colon.
func (l *lexer) startValue(i int) {
	l.cost += tokenCost
	f := l.top()
	if f == nil {
		if l.roots > 0 {
			l.charge(i) // another top-level value: jsonrepair makes a list of them
		}
		l.roots++
		return
	}
	f.comma = false
	switch f.state {
	case stKey, stAfterValue:
		if f.state == stAfterValue {
			l.charge(i) // missing comma
		}
		if f.closer == '}' {
			f.state, f.memberStart = stInKey, i
		} else {
			f.state, f.memberStart, f.valueStart = stInValue, i, i
		}
	case stColon, stValue:
		if f.state == stColon {
			l.charge(i) // missing colon
		}
		f.state, f.valueStart = stInValue, i
		if f.closer == ']' {
			f.memberStart = i
		}
	}
}

// endValue moves the innermost container past the key or value that ended.
func (l *lexer) endValue() {
	if f := l.top(); f != nil {
		if f.state == stInKey {
			f.state = stColon
		} else {
			f.state = stAfterValue
		}
	}
}

// close handles a closer: it ends the innermost container when it matches,
// else every container up to the nearest one it matches, else (none of its
// kind is open) the innermost one, as jsonrepair reads it. A closer with
// nothing open is dropped. It reports whether the closer matched.
func (l *lexer) close(c byte, i int) bool {
	if len(l.stack) == 0 {
		return false
	}
	matched := l.stack[len(l.stack)-1].closer == c
	if l.stack[len(l.stack)-1].comma {
		l.charge(i) // jsonrepair drops a trailing comma by rewriting its output
	}
	if l.stack[len(l.stack)-1].closer != c {
		l.charge(i) // jsonrepair inserts the closer it expected
		for l.open[kindOf(c)] > 0 && l.stack[len(l.stack)-1].closer != c {
			l.pop()
			l.charge(i)
		}
	}
	l.pop()
	l.endValue()
	return matched
}

func (l *lexer) pop() {
	f := l.stack[len(l.stack)-1]
	l.open[kindOf(f.closer)]--
	l.stack = l.stack[:len(l.stack)-1]
}

// str reads the string opening at i, protects it, and returns where to go on.
func (l *lexer) str(i int) int {
	if l.concat {
		l.concat = false
	} else {
		l.startValue(i)
	}
	f := l.top()
	s := l.scanString(i, true)
	if l.err != nil {
		return len(l.text)
	}
	lit, ok := l.literal(s)
	if !ok {
		return len(l.text)
	}
	end := s.next
	if !s.closed {
		end = s.contentEnd
	}
	ph := `"` + marker + strconv.Itoa(len(l.lits)) + `"`
	l.charge(i)
	l.edits = append(l.edits, edit{i, end, ph})
	l.shift += len(ph) - (end - i)
	l.lits = append(l.lits, lit)
	if s.unclosed {
		// The text ended inside the string: it was cut off. A cut key
		// is dropped with its member; a cut value keeps what arrived.
		l.truncated = true
		if f != nil && f.state == stInKey {
			l.cut = f.memberStart
			return len(l.text)
		}
	}
	l.endValue()
	l.afterString = true
	return s.next
}

// word reads a bare word (number, literal, unquoted key or text) at i.
func (l *lexer) word(i int) int {
	t := l.text
	f := l.top()
	isValue := f == nil || f.state == stValue || f.state == stColon ||
		(f.closer == ']' && f.state == stAfterValue)
	j := i
	if isValue && (strings.HasPrefix(t[i:], "http://") || strings.HasPrefix(t[i:], "https://") || strings.HasPrefix(t[i:], "ftp://")) {
		for j < len(t) && isURLChar(t[j]) {
			j++
		}
	} else {
		j = wordEnd(t, i, &l.comments)
	}
	l.step(j - i)
	l.startValue(i)
	if isValue && wholeValue(t, j) {
		l.number(i, j)
	}
	if j < len(t) && t[j] == '"' {
		j++ // jsonrepair takes a quote right after a bare word as its end: {"a": b"}
	}
	if j < len(t) {
		l.endValue()
	}
	return j
}

// number rewrites or refuses the bare value t[i:j] when it is a number
// written as another language would.
func (l *lexer) number(i, j int) {
	w := l.text[i:j]
	repl, problem := fixNumber(w)
	switch {
	case problem != "":
		l.fail(KindSyntax, notValidJSON+fmt.Sprintf("%s (at byte %d) %s", w, l.base+i, problem))
	case repl != "":
		l.edits = append(l.edits, edit{i, j, repl})
		l.shift += len(repl) - (j - i)
	}
}

// finish decides, at the end of the text, whether it was truncated and what
// to cut, and charges jsonrepair's work for the closers it will add.
func (l *lexer) finish() {
	if len(l.stack) == 0 {
		l.cost += len(l.text) + l.shift // jsonrepair's linear passes
		return
	}
	l.truncated = true
	if l.cut == len(l.text) {
		f := l.top()
		switch {
		case f.closer == '}' && (f.state == stInKey || f.state == stColon || f.state == stValue):
			l.cut = f.memberStart
		case f.state == stInValue && !completeWord(l.text[f.valueStart:]):
			l.cut = f.memberStart
			if f.closer == ']' {
				l.cut = f.valueStart
			}
		}
	}
	for range l.stack {
		l.charge(l.cut)
	}
	l.cost += len(l.text) + l.shift
}

// protected is the text jsonrepair gets: text[:cut] with the edits made.
// It is refused (false) when it holds a marker that is not a placeholder's,
// which restore would take for one.
func (l *lexer) protected() (string, bool) {
	var b strings.Builder
	b.Grow(l.cut + max(l.shift, 0))
	at, placeholders := 0, 0
	for _, e := range l.edits {
		if e.end > l.cut {
			break
		}
		b.WriteString(l.text[at:e.start])
		b.WriteString(e.repl)
		if strings.HasPrefix(e.repl, `"`+marker) {
			placeholders++
		}
		at = e.end
	}
	if at < l.cut {
		b.WriteString(l.text[at:l.cut])
	}
	out := b.String()
	return out, strings.Count(out, marker) == placeholders
}

// restore puts the protected strings back into jsonrepair's output. Every
// placeholder must come back as a whole string token (jsonrepair may join
// two with +); anything else means jsonrepair read the text differently
// from the pre-pass, and restore reports false rather than guess.
func (l *lexer) restore(out string) (string, bool) {
	if len(l.lits) == 0 {
		return out, true
	}
	var b strings.Builder
	b.Grow(len(out))
	for {
		k := strings.Index(out, marker)
		if k < 0 {
			b.WriteString(out)
			return b.String(), true
		}
		if k == 0 || out[k-1] != '"' || escapedAt(out, k-1) {
			return "", false
		}
		b.WriteString(out[:k])
		j := k
		for strings.HasPrefix(out[j:], marker) {
			j += len(marker)
			d := j
			for j < len(out) && isDigit(out[j]) {
				j++
			}
			n, err := strconv.Atoi(out[d:j])
			if err != nil || n >= len(l.lits) {
				return "", false
			}
			b.WriteString(l.lits[n])
		}
		if j == len(out) || out[j] != '"' {
			return "", false
		}
		out = out[j:]
	}
}

// escapedAt reports whether the byte at i is preceded by an odd number of
// backslashes.
func escapedAt(s string, i int) bool {
	n := 0
	for i > 0 && s[i-1] == '\\' {
		n++
		i--
	}
	return n%2 == 1
}

// quote is a quote character as jsonrepair reads it: a string opened with
// one ends at a quote of the same family.
type quote uint8

const (
	qNone       quote = iota
	qDouble           // "  ends only at "
	qSingle           // '  ends only at '
	qDoubleLike       // “ ” end at " “ ”
	qSingleLike       // ‘ ’ ` ´ end at ' ‘ ’ ` ´
)

// quoteAt returns the quote at t[i], if any, and its length in bytes.
func quoteAt(t string, i int) (quote, int) {
	switch c := t[i]; {
	case c == '"':
		return qDouble, 1
	case c == '\'':
		return qSingle, 1
	case c == '`':
		return qSingleLike, 1
	case c < utf8.RuneSelf:
		return qNone, 0
	}
	r, n := utf8.DecodeRuneInString(t[i:])
	switch r {
	case '“', '”':
		return qDoubleLike, n
	case '‘', '’', '´':
		return qSingleLike, n
	}
	return qNone, 0
}

func (q quote) endedBy(e quote) bool {
	switch q {
	case qDouble, qSingle:
		return e == q
	case qDoubleLike:
		return e == qDouble || e == qDoubleLike
	case qSingleLike:
		return e == qSingle || e == qSingleLike
	}
	return false
}

// span is a string as jsonrepair reads it.
type span struct {
	q            quote
	contentStart int
	contentEnd   int
	next         int  // where reading goes on
	closed       bool // ended at a closing quote (next is past it)
	unclosed     bool // the text ended inside it
}

// scanString finds the end of the string opening at i. A quote of its
// family ends it when a delimiter, another quote, a digit or the end
// follows, as jsonrepair reads it; any other quote is taken as unescaped and
// kept, unless a comma comes right before it (the closing quote is missing:
// "a, "b" ends at the comma). When the text ends inside the string and its
// last character is a delimiter, the string ends at its first delimiter
// ({"a": "x} is {"a": "x"}). With retry false (extraction) only the first
// rule is used.
//
// jsonrepair also restarts a string at other delimiters before a quote; the
// pre-pass does not (jsonrepair follows the placeholders), which keeps
// "Note: "x" y" whole and keeps the scan linear: only the end of the text
// sends it back, and once a string found no end before the end of the text,
// later strings of its family skip there (noEnd).
func (l *lexer) scanString(i int, retry bool) span {
	t := l.text
	q, n := quoteAt(t, i)
	s := span{q: q, contentStart: i + n}
	firstStop := -1 // where a string read up to its first delimiter ends
	j := s.contentStart
	if retry && l.noEnd[q] > 0 && l.noEnd[q] <= j {
		for j < len(t) && firstStop < 0 && l.step(1) {
			if t[j] == '\\' {
				j += 2
				continue
			}
			if e, _ := quoteAt(t, j); q.endedBy(e) || isStop(t[j]) {
				firstStop = j
			}
			j++
		}
		j = len(t)
	}
	for {
		if !l.step(1) {
			return s
		}
		if j >= len(t) {
			if retry && (l.noEnd[q] == 0 || s.contentStart < l.noEnd[q]) {
				l.noEnd[q] = s.contentStart
			}
			s.unclosed = true
			if p := lastNonSpace(t, len(t)); retry && p >= s.contentStart && isDelimiter(t[p]) && firstStop >= 0 {
				return l.stopAt(s, firstStop)
			}
			s.contentEnd, s.next = len(t), len(t)
			return s
		}
		c := t[j]
		if c == '\\' {
			j += 2
			continue
		}
		e, en := quoteAt(t, j)
		if q.endedBy(e) {
			if firstStop < 0 {
				firstStop = j
			}
			k := l.comments.skipSpace(t, j+en, false)
			if k >= len(t) || isDelimiter(t[k]) || isDigit(t[k]) {
				s.contentEnd, s.next, s.closed = j, j+en, true
				return s
			}
			if q2, _ := quoteAt(t, k); q2 != qNone {
				s.contentEnd, s.next, s.closed = j, j+en, true
				return s
			}
			// The opening quote is not a space, so p >= i.
			if p := lastNonSpace(t, j); retry && p >= s.contentStart && t[p] == ',' {
				s.contentEnd, s.next = p, p
				return s
			}
			j += en
			continue
		}
		if firstStop < 0 && isStop(c) {
			firstStop = j
		}
		j++
	}
}

// stopAt ends s at stop, the first place a string read up to its first
// delimiter ends: a closing quote, or a delimiter (past it when the string
// opens with a URL scheme and the delimiter is the slash after it).
func (l *lexer) stopAt(s span, stop int) span {
	t := l.text
	if e, en := quoteAt(t, stop); s.q.endedBy(e) {
		s.contentEnd, s.next, s.closed = stop, stop+en, true
		return s
	}
	if t[stop] == '/' && t[stop-1] == ':' && urlScheme(t[s.contentStart:stop]) {
		for stop < len(t) && isURLChar(t[stop]) {
			stop++
		}
	}
	s.contentEnd, s.next = stop, stop
	return s
}

func urlScheme(s string) bool {
	switch s {
	case "http:", "https:", "ftp:", "mailto:", "file:", "data:", "irc:":
		return true
	}
	return false
}

// literal turns the content of s into the inside of a JSON string literal,
// keeping what the model wrote:
//   - JSON escapes (\" \\ \/ \b \f \n \r \t, \u and four hex digits) are copied;
//   - an escaped closing quote of the string's own kind ('it\'s') is that quote;
//   - an escape JSON lacks keeps its backslash (\d becomes \\d, recorded as
//     keep_backslash) when no common string syntax (JavaScript, Python, C)
//     reads it as a different character;
//   - one that some syntax does read as another character (\x41, \101, \0,
//     \a, \v, \u{41}, \U0001F600, \N{...}, a malformed \u12, \' in a double-
//     quoted string, a backslash before a line break) is refused: guessing
//     would risk changing the value;
//   - quotes and control characters are escaped.
//
// An escape cut off by the end of the text is dropped, as the rest of it
// never arrived.
func (l *lexer) literal(s span) (string, bool) {
	t := l.text
	c := t[s.contentStart:s.contentEnd]
	var b strings.Builder
	b.Grow(len(c) + 2)
	for i := 0; i < len(c); {
		ch := c[i]
		switch {
		case ch == '\\':
			n, out, keep, bad := escapeAt(c, i, s.q, s.unclosed && s.contentEnd == len(t))
			if bad != "" {
				l.fail(KindSyntax, notValidJSON+fmt.Sprintf("the escape %s in a string (at byte %d) %s", bad, l.base+s.contentStart+i, ambiguousEscape))
				return "", false
			}
			l.kept = l.kept || keep
			b.WriteString(out)
			i += n
		case ch == '"':
			b.WriteString(`\"`)
			i++
		case ch < 0x20:
			q := appendString(nil, c[i:i+1])
			b.Write(q[1 : len(q)-1])
			i++
		default:
			b.WriteByte(ch)
			i++
		}
	}
	return b.String(), true
}

const ambiguousEscape = "is not a JSON escape, and could mean a character or a backslash; " +
	`write the character itself, or \\ for a backslash`

// escapeAt reads the escape at c[i] == '\\' in a string opened with q. It
// returns how many bytes it takes, what to write, whether a backslash was
// kept, and the escape as written when it is refused. cut is set when c
// ends where the text was cut off.
func escapeAt(c string, i int, q quote, cut bool) (n int, out string, keep bool, bad string) {
	if i+1 == len(c) {
		if cut {
			return 1, "", false, ""
		}
		return 1, `\\`, true, ""
	}
	next := c[i+1]
	hexRun := func(from, max int) int {
		k := 0
		for from+k < len(c) && k < max && isHex(c[from+k]) {
			k++
		}
		return k
	}
	switch next {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, c[i : i+2], false, ""
	case 'u':
		h := hexRun(i+2, 4)
		switch {
		case h == 4:
			return 6, c[i : i+6], false, ""
		case cut && i+2+h == len(c):
			return len(c) - i, "", false, "" // \u12 at the very end: cut off
		case h > 0 || i+2 < len(c) && c[i+2] == '{':
			return 0, "", false, c[i:min(len(c), i+2+max(h, 1))]
		}
	case 'x':
		if hexRun(i+2, 2) == 2 {
			return 0, "", false, c[i : i+4]
		}
	case 'U':
		if hexRun(i+2, 8) == 8 {
			return 0, "", false, c[i : i+10]
		}
	case 'N':
		if i+2 < len(c) && c[i+2] == '{' {
			return 0, "", false, c[i : i+3]
		}
	case '0', '1', '2', '3', '4', '5', '6', '7':
		k := i + 2
		for k < len(c) && k < i+4 && c[k] >= '0' && c[k] <= '7' {
			k++
		}
		return 0, "", false, c[i:k]
	case 'a', 'v':
		return 0, "", false, c[i : i+2]
	case '\n', '\r':
		return 0, "", false, `\ before a line break`
	}
	if e, en := quoteAt(c, i+1); e != qNone {
		if e != qDouble && q.endedBy(e) {
			return 1 + en, c[i+1 : i+1+en], false, "" // the string's own closing quote, escaped
		}
		if e == qSingle {
			return 0, "", false, `\'`
		}
	}
	return 1, `\\`, true, ""
}

// fixNumber reads a bare value. It returns the JSON number to write instead
// (empty when w is JSON already, or no number at all), or why w is refused.
func fixNumber(w string) (repl, problem string) {
	s, sign := w, ""
	plus := false
	switch {
	case s == "":
		return "", ""
	case s[0] == '+':
		s, plus = s[1:], true
	case s[0] == '-':
		s, sign = s[1:], "-"
	}
	switch strings.ToLower(s) {
	case "nan", "inf", "infinity":
		return "", "is not a number JSON can hold; send a finite number instead"
	}
	if len(s) > 2 && s[0] == '0' {
		base := 0
		switch s[1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			for k := 2; k < len(s); k++ {
				if d := digitValue(s[k]); d < 0 || d >= base {
					return "", ""
				}
			}
			n, _ := new(big.Int).SetString(s[2:], base)
			return sign + n.String(), ""
		}
	}
	intPart, frac, exp, dot, ok := splitDecimal(s)
	if !ok {
		return "", ""
	}
	leadZero := len(intPart) > 1 && intPart[0] == '0'
	if !plus && !leadZero && intPart != "" {
		return "", "" // JSON already, or 5. which jsonrepair completes
	}
	digits := strings.TrimLeft(intPart, "0")
	if digits == "" {
		digits = "0"
	}
	if leadZero && !dot && exp == "" && strings.Trim(intPart, "01234567") == "" {
		oct, _ := strconv.ParseUint(intPart, 8, 64)
		if dec, err := strconv.ParseUint(digits, 10, 64); err != nil || oct != dec {
			octal := new(big.Int)
			octal.SetString(intPart, 8)
			return "", fmt.Sprintf("has a leading zero, so it could be octal (%s) or decimal (%s); write it without leading zeros", octal, digits)
		}
	}
	repl = sign + digits
	if dot {
		if frac == "" {
			frac = "0"
		}
		repl += "." + frac
	}
	return repl + exp, ""
}

// splitDecimal splits a decimal number without sign: digits, an optional
// fraction, an optional exponent; at least one digit before the exponent.
func splitDecimal(s string) (intPart, frac, exp string, dot, ok bool) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart = s[:i]
	if i < len(s) && s[i] == '.' {
		dot = true
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		frac, i = s[i+1:j], j
	}
	if intPart == "" && frac == "" {
		return "", "", "", false, false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		k := j
		for k < len(s) && isDigit(s[k]) {
			k++
		}
		if k == j {
			return "", "", "", false, false
		}
		exp, i = s[i:k], k
	}
	return intPart, frac, exp, dot, i == len(s)
}

// completeWord reports whether a bare word at the end of the text is a whole
// value: a JSON number or literal, a number fixNumber rewrites, or a Python
// constant jsonrepair knows.
func completeWord(w string) bool {
	w = strings.TrimRightFunc(w, isSpace)
	switch w {
	case "true", "false", "null", "True", "False", "None":
		return true
	}
	if repl, problem := fixNumber(w); repl != "" || problem != "" {
		return true
	}
	_, err := strconv.ParseFloat(w, 64)
	return err == nil && json.Valid([]byte(w))
}

// wordEnd returns the end of the bare word at i: it runs to whitespace, a
// bracket, a comma or colon, a quote or a comment.
func wordEnd(t string, i int, m *commentMemo) int {
	j := i
	for j < len(t) {
		switch c := t[j]; c {
		case ' ', '\t', '\n', '\r', '{', '}', '[', ']', ',', ':':
			return j
		case '/':
			if m.end(t, j) > j {
				return j
			}
		default:
			if q, _ := quoteAt(t, j); q != qNone {
				return j
			}
			if c >= utf8.RuneSelf && specialSpace(t, j) > 0 {
				return j
			}
		}
		j++
	}
	return j
}

// wholeValue reports whether a bare word ending at j is a whole value: what
// follows it (past spaces) ends a value, rather than continuing unquoted text.
// A double quote right after it makes it a string that lost its opening
// quote, as jsonrepair reads it.
func wholeValue(t string, j int) bool {
	if j < len(t) && t[j] == '"' {
		return false
	}
	for j < len(t) && (t[j] == ' ' || t[j] == '\t' || t[j] == '\r') {
		j++
	}
	if j == len(t) {
		return true
	}
	switch t[j] {
	case ',', '}', ']', '\n':
		return true
	case '/':
		return j+1 < len(t) && (t[j+1] == '/' || t[j+1] == '*')
	}
	q, _ := quoteAt(t, j)
	return q != qNone
}

// skipFence skips a Markdown fence at i (after spaces), as jsonrepair
// drops one before the value ("```", "[```" or "{```", then a language
// name) and after it ("```").
func skipFence(t string, i int, leading bool) int {
	j := i
	for j < len(t) && isSpace(rune(t[j])) {
		j++
	}
	if leading && j < len(t) && (t[j] == '[' || t[j] == '{') && strings.HasPrefix(t[j+1:], "```") {
		j++
	}
	if !strings.HasPrefix(t[j:], "```") {
		return i
	}
	j += 3
	if leading && j < len(t) && isIdentStart(t[j]) {
		for j < len(t) && (isIdentStart(t[j]) || isDigit(t[j])) {
			j++
		}
	}
	return j
}

// commentMemo finds the ends of // and /* comments, remembering the last
// search for each so that text is scanned for a comment's end at most once.
type commentMemo struct {
	block, line lastFind
}

// end returns the index just past the comment starting at i, or i when no
// comment starts there. An unclosed comment runs to the end.
func (m *commentMemo) end(t string, i int) int {
	if i+1 >= len(t) || t[i] != '/' {
		return i
	}
	switch t[i+1] {
	case '*':
		if k := m.block.find(t, i+2, "*/"); k >= 0 {
			return k + 2
		}
		return len(t)
	case '/':
		if k := m.line.find(t, i+2, "\n"); k >= 0 {
			return k
		}
		return len(t)
	}
	return i
}

// lastFind remembers one search: the first match at or after from is at
// at (-1: none). from 0 means no search yet.
type lastFind struct{ from, at int }

// find returns the index of the first sep in t at or after from, or -1,
// reusing the last search when it already answers: searches move forward,
// so each stretch of text is searched once.
func (f *lastFind) find(t string, from int, sep string) int {
	if f.from == 0 || from < f.from || (f.at >= 0 && f.at < from) {
		f.from, f.at = from, -1
		if k := strings.Index(t[from:], sep); k >= 0 {
			f.at = from + k
		}
	}
	return f.at
}

// skipSpace skips spaces, tabs, carriage returns, the special spaces
// jsonrepair knows, comments, and line breaks when newline is set.
func (m *commentMemo) skipSpace(t string, i int, newline bool) int {
	for i < len(t) {
		switch c := t[i]; {
		case c == ' ' || c == '\t' || c == '\r' || (newline && c == '\n'):
			i++
		case c == '/':
			j := m.end(t, i)
			if j == i {
				return i
			}
			i = j
		case c >= utf8.RuneSelf:
			n := specialSpace(t, i)
			if n == 0 {
				return i
			}
			i += n
		default:
			return i
		}
	}
	return i
}

// specialSpace returns the length of the special space at t[i] (no-break
// and typographic spaces, which jsonrepair reads as spaces), or 0.
func specialSpace(t string, i int) int {
	if t[i] < utf8.RuneSelf {
		return 0
	}
	r, n := utf8.DecodeRuneInString(t[i:])
	if r == 0xa0 || (r >= 0x2000 && r <= 0x200a) || r == 0x202f || r == 0x205f || r == 0x3000 {
		return n
	}
	return 0
}

// lastNonSpace returns the index of the last byte before i that is not a
// space, tab or line break, or -1.
func lastNonSpace(t string, i int) int {
	i--
	for i >= 0 && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r') {
		i--
	}
	return i
}

// isDelimiter is jsonrepair's: what may follow a value.
func isDelimiter(c byte) bool { return strings.IndexByte(",:[]/{}()\n+", c) >= 0 }

// isStop is jsonrepair's isUnquotedStringDelimiter: where a string read up
// to its first delimiter ends.
func isStop(c byte) bool { return strings.IndexByte(",[]/{}\n+", c) >= 0 }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return digitValue(c) >= 0 && digitValue(c) < 16 }

// digitValue is the value of c as a digit in bases up to 16, or -1.
func digitValue(c byte) int {
	switch {
	case isDigit(c):
		return int(c - '0')
	case c|0x20 >= 'a' && c|0x20 <= 'f':
		return int(c|0x20-'a') + 10
	}
	return -1
}

func isIdentStart(c byte) bool {
	return c == '_' || c == '$' || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '-' }

// isURLChar is jsonrepair's: what a URL outside quotes may hold.
func isURLChar(c byte) bool {
	return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z') || strings.IndexByte("-._~:/?#@!$&'()*+;=", c) >= 0
}
