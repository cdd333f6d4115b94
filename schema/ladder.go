package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/kaptinlin/jsonrepair"

	"github.com/toolbus/toolbus/internal/jsonfast"
)

// ParseOptions tell Parse what it knows about the call beyond its text.
type ParseOptions struct {
	// Strict: the model saw Strict().JSON, so a null at a key the projection
	// made nullable means "absent" and is removed before validation against
	// the original schema.
	Strict bool
	// Truncated: the provider said the output was cut (max tokens). The call
	// is treated as truncated whatever the repair did.
	Truncated bool
	// Destructive: the tool changes things; a truncated call is refused with
	// KindTruncated so the model re-issues it, instead of running on guessed
	// arguments.
	Destructive bool
}

// Rung names one step of the ladder, as recorded in Args.Rungs and in
// ArgumentError.Rungs.
type Rung string

const (
	RungEmpty      Rung = "empty"       // no text, or null, taken as {}
	RungAsIs       Rung = "as_is"       // the text was valid JSON as received
	RungExtract    Rung = "extract"     // code fence and/or prose around one balanced object removed
	RungRepair     Rung = "repair"      // syntax repaired (jsonrepair, and the ladder's own reading of strings and numbers)
	RungUnwrap     Rung = "unwrap"      // double-encoded JSON, or stringified JSON in object/array fields, decoded
	RungStripNulls Rung = "strip_nulls" // strict-mode nulls removed (only when something was removed)

	// RungKeepBackslash: an escape JSON lacks (\d, \.) was read as a
	// backslash and the character after it (\\d), as the model meant;
	// recorded with RungRepair.
	RungKeepBackslash Rung = "keep_backslash"
)

// MaxRepairBytes is the longest argument text the ladder tries to extract
// and repair. Longer text that is not valid JSON is refused (KindTooLarge);
// valid JSON of any length passes rung 1 untouched.
const MaxRepairBytes = 64 << 10

// Args are arguments that passed the ladder.
type Args struct {
	// JSON is the validated object, compact, keys sorted, re-encoded from
	// the decoded value: never the model's own text, so every reader of it
	// sees the same value (no duplicate keys, no comments, no tricks).
	// Where the schema says integer, an integer written with a fraction or
	// an exponent (2.0, 1e2) is written plainly (2, 100), so that a tool
	// with an int field can decode it.
	JSON json.RawMessage
	// Rungs are the rungs used, in ladder order; [as_is] for clean input.
	Rungs []Rung
	// Truncated is set when closing brackets or quotes had to be invented,
	// a cut-off key was dropped, or ParseOptions.Truncated was set.
	Truncated bool
}

// Repaired reports arguments the ladder had to change the model's text to make: a rung
// past as_is (empty text taken as {} is not a repair), or brackets it invented.
func (a Args) Repaired() bool {
	if a.Truncated {
		return true
	}
	for _, r := range a.Rungs {
		if r != RungAsIs && r != RungEmpty {
			return true
		}
	}
	return false
}

// Parse turns a model's raw argument text into validated arguments, climbing
// the repair ladder described in the package documentation only as far as
// needed. It returns an *ArgumentError when the text cannot be made into an
// object that validates.
func (s *Schema) Parse(raw string, opts ParseOptions) (Args, error) {
	p := parse{s: s, opts: opts, truncated: opts.Truncated}
	return p.run(raw)
}

type parse struct {
	s         *Schema
	opts      ParseOptions
	used      [len(rungOrder)]bool
	truncated bool
	unescaped bool // the text was escaped once too often, and was unescaped
}

var rungOrder = [...]Rung{RungEmpty, RungAsIs, RungExtract, RungRepair, RungKeepBackslash, RungUnwrap, RungStripNulls}

func (p *parse) mark(r Rung) {
	for i, o := range rungOrder {
		if o == r {
			p.used[i] = true
		}
	}
}

func (p *parse) usedRung(r Rung) bool {
	for i, o := range rungOrder {
		if o == r {
			return p.used[i]
		}
	}
	return false
}

func (p *parse) rungs() []Rung {
	var out []Rung
	for i, u := range p.used {
		if u {
			out = append(out, rungOrder[i])
		}
	}
	return out
}

func (p *parse) fail(kind ErrorKind, msg string, cause error) *ArgumentError {
	return &ArgumentError{Kind: kind, Msg: msg, Rungs: p.rungs(), Truncated: p.truncated, err: cause}
}

func (p *parse) refuseTruncated() *ArgumentError {
	return p.fail(KindTruncated, "arguments were cut off (truncated); re-issue the call with the complete arguments", ErrTruncated)
}

func (p *parse) run(raw string) (Args, error) {
	text := strings.TrimSpace(raw)
	if text == "" || text == "null" {
		return p.empty()
	}
	if textTooDeep(text) {
		return Args{}, p.fail(KindTooDeep, tooDeepMsg, ErrTooDeep)
	}
	v, err := decodeArgs([]byte(text))
	if err == nil {
		p.mark(RungAsIs)
	} else {
		if len(text) > MaxRepairBytes {
			return Args{}, p.fail(KindTooLarge, fmt.Sprintf("arguments are not valid JSON and too long to repair: %d bytes, over the limit of %d; send them as valid JSON", len(text), MaxRepairBytes), err)
		}
		lead := len(raw) - len(strings.TrimLeftFunc(raw, unicode.IsSpace))
		if v, err = p.climb(text, lead, err); err != nil {
			return Args{}, err
		}
	}
	if p.truncated && p.opts.Destructive {
		return Args{}, p.refuseTruncated()
	}
	// A string holding an object: the arguments were JSON-encoded twice
	// (or three times). Decode at most twice, then give up.
	for range 2 {
		str, ok := v.(string)
		if !ok {
			break
		}
		inner, err := decodeArgs([]byte(strings.TrimSpace(str)))
		if err != nil {
			break
		}
		v = inner
		p.mark(RungUnwrap)
	}
	switch v.(type) {
	case map[string]any:
	case nil:
		return p.empty()
	case string:
		if !p.usedRung(RungAsIs) {
			// The repair rung made a string of prose: what was sent is no JSON at all,
			// and "got a string" would send its writer looking for quotes it never typed.
			return Args{}, p.fail(KindNotObject, p.notObject("text that is not JSON"), nil)
		}
		return Args{}, p.fail(KindNotObject, p.notObject("a string"), nil)
	default:
		return Args{}, p.fail(KindNotObject, "arguments must be a JSON object, got "+describeJSON(v), nil)
	}
	// Text decoded out of a string (unwrap) was not in the scan above.
	if p.usedRung(RungUnwrap) && valueTooDeep(v) {
		return Args{}, p.fail(KindTooDeep, tooDeepMsg, ErrTooDeep)
	}
	p.stripNulls(v)
	verr := p.s.validate(v)
	if verr != nil && p.s.plan().shape.unwrapFields(v) {
		p.mark(RungUnwrap)
		if valueTooDeep(v) {
			return Args{}, p.fail(KindTooDeep, tooDeepMsg, ErrTooDeep)
		}
		p.stripNulls(v)
		verr = p.s.validate(v)
	}
	if verr != nil {
		return Args{}, p.schemaError(verr.(*ValidationError), v)
	}
	// An integer written 2.0 is valid, but would break a tool decoding it
	// into an int: it goes out as 2 (integral.go).
	p.s.plan().shape.integralize(v)
	out, err := canonical(v)
	if err != nil {
		return Args{}, fmt.Errorf("encode arguments: %w", err)
	}
	return Args{JSON: out, Rungs: p.rungs(), Truncated: p.truncated}, nil
}

// climb runs the extract and repair rungs on text that is not JSON as is.
// lead is text's offset in the raw arguments, for error positions; textErr
// is why text does not decode, when known.
func (p *parse) climb(text string, lead int, textErr error) (any, error) {
	cand, offset, changed, count := extract(text)
	offset += lead
	if count > 1 {
		n := "two"
		if count > 2 {
			n = strconv.Itoa(count)
		}
		return nil, p.fail(KindMultiple, "arguments hold "+n+" JSON objects; send exactly one object", nil)
	}
	if changed {
		p.mark(RungExtract)
	}
	syntaxErr := textErr
	if changed || textErr == nil {
		v, err := decodeArgs([]byte(cand))
		if err == nil {
			return v, nil
		}
		syntaxErr = err
	}
	notRepaired := func() error {
		return p.fail(KindSyntax, notValidJSON+describeSyntaxError(syntaxErr, offset), syntaxErr)
	}

	l := lex(cand, offset)
	switch {
	case l.err != nil && l.err.kind == KindTooCostly:
		return nil, p.tooCostly(syntaxErr, offset)
	case l.err != nil:
		return nil, p.fail(l.err.kind, l.err.msg, syntaxErr)
	case l.overEscaped:
		s, ok := unescapeOnce(cand)
		if !ok || p.unescaped {
			return nil, notRepaired()
		}
		p.unescaped = true
		p.mark(RungUnwrap)
		return p.climb(s, offset, nil)
	}
	if l.truncated {
		p.truncated = true
	}
	if p.truncated && p.opts.Destructive {
		return nil, p.refuseTruncated()
	}
	in, ok := l.protected()
	if !ok {
		return nil, notRepaired()
	}
	out := in
	if !json.Valid([]byte(in)) {
		if l.steps+l.cost > repairBudget {
			return nil, p.tooCostly(syntaxErr, offset)
		}
		var err error
		if out, err = jsonrepair.Repair(in); err != nil {
			return nil, notRepaired()
		}
	}
	if out, ok = l.restore(out); !ok {
		return nil, notRepaired()
	}
	v, err := decodeArgs([]byte(out))
	if err != nil {
		return nil, notRepaired()
	}
	p.mark(RungRepair)
	if l.kept {
		p.mark(RungKeepBackslash)
	}
	return v, nil
}

const notValidJSON = "arguments are not valid JSON: "

func (p *parse) tooCostly(syntaxErr error, offset int) *ArgumentError {
	return p.fail(KindTooCostly, notValidJSON+describeSyntaxError(syntaxErr, offset)+
		", and repairing them would take more work than the ladder allows; send them as valid JSON", syntaxErr)
}

// unescapeOnce reads text as the inside of a JSON string: {\"a\": 1} is
// JSON escaped once more than it should be, its outer quotes missing.
// Line breaks and tabs in it are taken as written.
func unescapeOnce(text string) (string, bool) {
	b := make([]byte, 0, len(text)+2)
	b = append(b, '"')
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c == '\\' && i+1 < len(text) && text[i+1] >= 0x20:
			b = append(b, c, text[i+1])
			i++
		case c == '"':
			return "", false // a quote left unescaped: not escaped JSON
		case c < 0x20:
			q := appendString(nil, text[i:i+1])
			b = append(b, q[1:len(q)-1]...)
		default:
			b = append(b, c)
		}
	}
	var s string
	if json.Unmarshal(append(b, '"'), &s) != nil {
		return "", false
	}
	return s, true
}

func (p *parse) empty() (Args, error) {
	p.mark(RungEmpty)
	if p.truncated && p.opts.Destructive {
		return Args{}, p.refuseTruncated()
	}
	if len(p.s.required) > 0 {
		return Args{}, p.fail(KindEmpty, "arguments are empty; this tool requires: "+strings.Join(p.s.required, ", "), nil)
	}
	v := map[string]any{}
	if err := p.s.validate(v); err != nil {
		return Args{}, p.schemaError(err.(*ValidationError), v)
	}
	return Args{JSON: json.RawMessage(`{}`), Rungs: p.rungs(), Truncated: p.truncated}, nil
}

// notObject refuses arguments that are got instead of an object, saying, when the
// schema requires fields, what the object looks like and holds (as empty arguments are
// told what the tool requires).
func (p *parse) notObject(got string) string {
	if len(p.s.required) == 0 {
		return "arguments must be a JSON object, got " + got
	}
	return "arguments must be a JSON object such as {\"" + p.s.required[0] + "\": …}, got " + got +
		"; this tool requires: " + strings.Join(p.s.required, ", ")
}

func (p *parse) stripNulls(v any) {
	if !p.opts.Strict {
		return
	}
	if t := p.s.Strict().nulls; t != nil && t.strip(v, nil) {
		p.mark(RungStripNulls)
	}
}

// schemaError is rung 5's refusal of v, the arguments as the ladder read them.
func (p *parse) schemaError(verr *ValidationError, v any) *ArgumentError {
	msg := verr.Error()
	if p.truncated {
		msg = "arguments were cut off (truncated) and do not match the schema; re-issue the call with complete arguments:" + leafLines(verr.Leaves)
	}
	e := p.fail(KindSchema, msg, verr)
	e.Leaves = verr.Leaves
	e.Value, _ = canonical(v) // v was decoded from JSON, so it encodes
	return e
}

// decodeArgs decodes exactly one JSON value, keeping numbers exact.
// Decoding checks validity as it goes, so no separate json.Valid pass is
// made over the (usually valid) input first.
func decodeArgs(b []byte) (any, error) {
	// By hand when jsonfast reads it exactly as the decoder below would (FuzzDecodeValue):
	// a turn parses every call's arguments, and the decoder's reflection was most of
	// what a call's parsing cost.
	if v, ok := jsonfast.DecodeValue(b); ok {
		return v, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// canonical encodes a decoded value compactly with sorted keys and without
// HTML escaping.
func canonical(v any) (json.RawMessage, error) {
	// By hand when jsonfast writes it (the bytes the encoder below writes, FuzzDecodeValue).
	if b, ok := jsonfast.AppendValue(nil, v); ok {
		return b, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func describeJSON(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

func describeSyntaxError(err error, offset int) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (after byte %d)", se.Error(), int(se.Offset)+offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "unexpected end of input"
	}
	return err.Error()
}

// bom is a UTF-8 byte-order mark, which some models' output starts with.
const bom = "\uFEFF"

// extract finds the single balanced top-level object in text, dropping a
// byte-order mark, a code fence, an XML-ish wrapper (<args>…</args>,
// <tool_call>…) and prose around it. It returns the object's text, its byte
// offset in text, whether anything was dropped, and how many objects it saw
// (more than one is an error the caller reports: jsonrepair would turn
// "{..}\n{..}" into an array, and guessing which object was meant is wrong).
// Without an object it returns text (less a byte-order mark) for the repair
// rung to read.
//
// An object that never closes runs to the end of text (minus a closing
// fence or tag); the repair rung then closes it. Every step moves forward,
// so extraction takes time linear in the text.
func extract(text string) (cand string, offset int, changed bool, count int) {
	start := 0
	if strings.HasPrefix(text, bom) {
		start = len(bom)
	}
	if start == len(text) || text[start] != '{' {
		next := nextObject(text, start)
		if next < 0 {
			rest := strings.TrimLeftFunc(text[start:], unicode.IsSpace)
			return rest, len(text) - len(rest), start > 0, 0
		}
		start = next
	}
	end, complete, clean := scanObject(text, start)
	if complete && !clean && strings.TrimSpace(text[end:]) != "" {
		// It closed only by a closer that did not match its opener, with
		// text after it: the guess of where it ends is not good enough to
		// drop that text. Code with unescaped quotes ("f("x")\n}") reads
		// like this.
		complete = false
	}
	if !complete {
		cand = trimWrapper(text, start)
		return cand, start, start > 0 || len(cand) < len(text)-start, 1
	}
	count = 1
	for at := end; ; {
		next := nextObject(text, at)
		if next < 0 {
			break
		}
		count++
		e, ok, _ := scanObject(text, next)
		if !ok || count > 9 {
			break
		}
		at = e
	}
	cand = text[start:end]
	return cand, start, start > 0 || strings.TrimSpace(text[end:]) != "", count
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }

// nextObject returns the index of the next '{' at or after from that opens
// something object-like: followed (after spaces) by a quote of any kind,
// '}', or a bare key and a colon ({name: "x"}). A brace in prose ("use
// {name} here") is not mistaken for arguments.
func nextObject(text string, from int) int {
	for i := from; i < len(text); i++ {
		k := strings.IndexByte(text[i:], '{')
		if k < 0 {
			return -1
		}
		if i += k; opensObject(text, i+1) {
			return i
		}
	}
	return -1
}

// opensObject reports whether text[j:] can follow the '{' of an object. It
// reads at most up to the next brace, so nextObject stays linear.
func opensObject(text string, j int) bool {
	for j < len(text) && isSpace(rune(text[j])) {
		j++
	}
	if j == len(text) {
		return false
	}
	switch c := text[j]; {
	case c == '}':
		return true
	case isIdentStart(c):
		for j < len(text) && isIdentChar(text[j]) {
			j++
		}
		for j < len(text) && (text[j] == ' ' || text[j] == '\t') {
			j++
		}
		return j < len(text) && text[j] == ':'
	}
	q, _ := quoteAt(text, j)
	// Backticks and acute accents open strings for jsonrepair, but after a
	// brace they are more likely prose ("{```") than a key.
	return q == qDouble || q == qSingle || q == qDoubleLike || (q == qSingleLike && text[j] == 0xE2)
}

// scanObject matches the brace at start, reading strings and comments as
// the repair rung does and closers as they close (a closer that does not
// match its opener closes the one it matches, as jsonrepair reads it). It
// returns the index just past the closing brace, or len(text), false when
// the object does not close; clean is false when a closer did not match.
func scanObject(text string, start int) (end int, complete, clean bool) {
	l := &lexer{text: text}
	clean = true
	for i := start; i < len(text); {
		switch c := text[i]; {
		case c == '{' || c == '[':
			l.push(c, i)
			i++
		case c == '}' || c == ']':
			clean = l.close(c, i) && clean
			if i++; len(l.stack) == 0 {
				return i, true, clean
			}
		case c == '/' && l.comments.end(text, i) > i:
			i = l.comments.end(text, i)
		default:
			if q, _ := quoteAt(text, i); q != qNone {
				i = l.scanString(i, false).next
			} else {
				i++
			}
		}
	}
	return len(text), false, clean
}

// trimWrapper returns text[start:], an object that does not close, without
// trailing spaces and without the closing fences and tags (</args>) of
// wrappers opened before start.
func trimWrapper(text string, start int) string {
	cand := strings.TrimRightFunc(text[start:], isSpace)
	before := text[:start]
	for {
		k := strings.LastIndex(cand, "</")
		switch {
		case strings.HasSuffix(cand, "```") && strings.Contains(before, "```"):
			cand = cand[:len(cand)-3]
		case k >= 0 && strings.HasSuffix(cand, ">") && isTagName(cand[k+2:len(cand)-1]) && strings.Contains(before, "<"+cand[k+2:len(cand)-1]):
			cand = cand[:k]
		default:
			return cand
		}
		cand = strings.TrimRightFunc(cand, isSpace)
	}
}

func isTagName(s string) bool {
	for i := range len(s) {
		if !isIdentChar(s[i]) && s[i] != ':' && s[i] != '.' {
			return false
		}
	}
	return s != ""
}
