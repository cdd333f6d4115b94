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
	RungRepair     Rung = "repair"      // syntax repaired by jsonrepair
	RungUnwrap     Rung = "unwrap"      // double-encoded JSON, or stringified JSON in object/array fields, decoded
	RungStripNulls Rung = "strip_nulls" // strict-mode nulls removed (only when something was removed)
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
	JSON json.RawMessage
	// Rungs are the rungs used, in ladder order; [as_is] for clean input.
	Rungs []Rung
	// Truncated is set when closing brackets or quotes had to be invented,
	// a cut-off key was dropped, or ParseOptions.Truncated was set.
	Truncated bool
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
}

var rungOrder = [...]Rung{RungEmpty, RungAsIs, RungExtract, RungRepair, RungUnwrap, RungStripNulls}

func (p *parse) mark(r Rung) {
	for i, o := range rungOrder {
		if o == r {
			p.used[i] = true
		}
	}
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
	v, err := decodeArgs([]byte(text))
	if err == nil {
		p.mark(RungAsIs)
	} else {
		if len(text) > MaxRepairBytes {
			return Args{}, p.fail(KindTooLarge, fmt.Sprintf("arguments are not valid JSON and too long to repair: %d bytes, over the limit of %d; send them as valid JSON", len(text), MaxRepairBytes), err)
		}
		lead := len(raw) - len(strings.TrimLeftFunc(raw, unicode.IsSpace))
		if v, err = p.climb(text, lead); err != nil {
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
	default:
		return Args{}, p.fail(KindNotObject, "arguments must be a JSON object, got "+describeJSON(v), nil)
	}
	p.stripNulls(v)
	verr := p.s.validate(v)
	if verr != nil && p.s.plan().shape.unwrapFields(v) {
		p.mark(RungUnwrap)
		p.stripNulls(v)
		verr = p.s.validate(v)
	}
	if verr != nil {
		return Args{}, p.schemaError(verr.(*ValidationError), v)
	}
	out, err := canonical(v)
	if err != nil {
		return Args{}, fmt.Errorf("encode arguments: %w", err)
	}
	return Args{JSON: out, Rungs: p.rungs(), Truncated: p.truncated}, nil
}

// climb runs the extract and repair rungs on text that is not JSON as is.
// lead is text's offset in the raw arguments, for error positions.
func (p *parse) climb(text string, lead int) (any, error) {
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
	v, err := decodeArgs([]byte(cand))
	if err == nil {
		return v, nil
	}
	syntaxErr := err

	t := scanTail(cand)
	if t.truncated {
		p.truncated = true
		cand = cand[:t.cut]
	}
	if p.truncated && p.opts.Destructive {
		return nil, p.refuseTruncated()
	}
	repaired, err := jsonrepair.Repair(cand)
	if err == nil {
		v, err = decodeArgs([]byte(repaired))
	}
	if err != nil {
		return nil, p.fail(KindSyntax, "arguments are not valid JSON: "+describeSyntaxError(syntaxErr, offset), syntaxErr)
	}
	p.mark(RungRepair)
	return v, nil
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

// extract finds the single balanced top-level object in text, dropping a
// code fence and prose around it. It returns the object's text, its byte
// offset in text, whether anything was dropped, and how many objects it saw
// (more than one is an error the caller reports: jsonrepair would turn
// "{..}\n{..}" into an array, and guessing which object was meant is wrong).
//
// An object that never closes runs to the end of text (minus a closing
// fence); the repair rung then closes it.
func extract(text string) (cand string, offset int, changed bool, count int) {
	start := 0
	if text[0] != '{' {
		start = nextObject(text, 0)
		if start < 0 {
			return text, 0, false, 0
		}
	}
	end, complete := scanObject(text, start)
	if !complete {
		cand = strings.TrimRightFunc(text[start:], isSpace)
		if strings.Contains(text[:start], "```") {
			cand = strings.TrimRightFunc(strings.TrimSuffix(cand, "```"), isSpace)
		}
		return cand, start, start > 0 || len(cand) < len(text)-start, 1
	}
	count = 1
	for at := end; ; {
		next := nextObject(text, at)
		if next < 0 {
			break
		}
		count++
		e, ok := scanObject(text, next)
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
// something object-like: followed (after spaces) by a quote or '}'. A brace
// in prose ("use {name} here") is not mistaken for arguments.
func nextObject(text string, from int) int {
	for i := from; i < len(text); i++ {
		if text[i] != '{' {
			continue
		}
		j := i + 1
		for j < len(text) && isSpace(rune(text[j])) {
			j++
		}
		if j < len(text) && (text[j] == '"' || text[j] == '\'' || text[j] == '}') {
			return i
		}
	}
	return -1
}

// scanObject matches the brace at start, skipping strings (double or single
// quoted) and comments. It returns the index just past the closing brace,
// or len(text), false when the object does not close.
func scanObject(text string, start int) (end int, complete bool) {
	depth := 0
	for i := start; i < len(text); i++ {
		switch c := text[i]; c {
		case '"', '\'':
			i = skipString(text, i)
		case '/':
			i = skipComment(text, i)
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return len(text), false
}

// skipString returns the index of the quote closing the string opened at i,
// or len(text)-1 when it does not close.
func skipString(text string, i int) int {
	q := text[i]
	for j := i + 1; j < len(text); j++ {
		switch text[j] {
		case '\\':
			j++
		case q:
			return j
		}
	}
	return len(text) - 1
}

// skipComment returns the index of the last byte of a // or /* comment
// starting at i, or i when no comment starts there.
func skipComment(text string, i int) int {
	if i+1 >= len(text) {
		return i
	}
	switch text[i+1] {
	case '/':
		if n := strings.IndexByte(text[i:], '\n'); n >= 0 {
			return i + n
		}
		return len(text) - 1
	case '*':
		if n := strings.Index(text[i+2:], "*/"); n >= 0 {
			return i + 2 + n + 1
		}
		return len(text) - 1
	}
	return i
}

// tail is what scanTail learned about the end of a candidate.
type tail struct {
	truncated bool // closing brackets or a closing quote are missing
	cut       int  // keep text[:cut]: a dangling key or partial literal dropped
}

// Scanner states for the innermost container.
const (
	stKey        = iota // object: expecting a key or '}'
	stInKey             // object: inside a key
	stColon             // object: key read, expecting ':'
	stValue             // expecting a value
	stInValue           // inside a value (string or bare word)
	stAfterValue        // expecting ',' or a closer
)

type frame struct {
	closer      byte // '}' or ']'
	state       int
	memberStart int // where the current key (object) or element (array) starts
	valueStart  int
	bare        bool // the value being read is a bare word (number, literal)
}

// scanTail reads a JSON-ish candidate the way jsonrepair will and decides
// whether it was cut off. jsonrepair closes what is open, which is fine for a
// cut-off string, number or container, but for a cut-off key it invents
// "key": null, and for a cut-off literal ("tru") a string. Those members are
// dropped instead: cut says where the text should end.
func scanTail(text string) tail {
	var stack []frame
	top := func() *frame {
		if len(stack) == 0 {
			return nil
		}
		return &stack[len(stack)-1]
	}
	endBare := func(f *frame) {
		if f != nil && f.state == stInValue && f.bare {
			f.state = stAfterValue
			f.bare = false
		} else if f != nil && f.state == stInKey && f.bare {
			f.state = stColon
			f.bare = false
		}
	}
	inString := false
	var quote byte
	for i := 0; i < len(text); i++ {
		c := text[i]
		f := top()
		if inString {
			switch c {
			case '\\':
				i++
			case quote:
				inString = false
				if f != nil {
					if f.state == stInKey {
						f.state = stColon
					} else {
						f.state = stAfterValue
					}
				}
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			endBare(f)
		case '/':
			if j := skipComment(text, i); j != i {
				endBare(f)
				i = j
			} else {
				startBare(f, i)
			}
		case '"', '\'':
			endBare(f)
			inString, quote = true, c
			startMember(f, i, false)
		case '{', '[':
			endBare(f)
			startMember(f, i, false)
			closer := byte('}')
			state := stKey
			if c == '[' {
				closer, state = ']', stValue
			}
			stack = append(stack, frame{closer: closer, state: state, memberStart: i + 1})
		case '}', ']':
			if f == nil {
				continue // a stray closer; jsonrepair drops it
			}
			stack = stack[:len(stack)-1]
			if p := top(); p != nil {
				p.state = stAfterValue
			}
		case ',':
			endBare(f)
			if f != nil {
				f.state = stValue
				if f.closer == '}' {
					f.state = stKey
				}
				f.memberStart = i + 1
			}
		case ':':
			endBare(f)
			if f != nil && f.closer == '}' {
				f.state = stValue
			}
		default:
			startBare(f, i)
		}
	}
	t := tail{cut: len(text)}
	if !inString && len(stack) == 0 {
		return t
	}
	if inString && closesAfterStrayQuote(text, stack) {
		// {"a": "it"s"} ends in a well-formed quote and closers: an
		// unescaped quote made the scan think a string was left open.
		return t
	}
	t.truncated = true
	f := top()
	switch {
	case f == nil:
		// A cut-off string at the top level ("{\"a\": 1}" double-encoded
		// and cut): nothing to drop.
	case f.closer == '}' && (f.state == stInKey || f.state == stColon || f.state == stValue):
		t.cut = f.memberStart
	case f.state == stInValue && f.bare && !completeWord(text[f.valueStart:]):
		t.cut = f.memberStart
		if f.closer == ']' {
			t.cut = f.valueStart
		}
	}
	return t
}

// startMember records where a key or value begins in the innermost frame.
func startMember(f *frame, i int, bare bool) {
	if f == nil {
		return
	}
	switch f.state {
	case stKey, stAfterValue:
		if f.closer == '}' {
			f.state = stInKey
			f.memberStart = i
		} else {
			f.state = stInValue
			f.memberStart, f.valueStart = i, i
		}
	case stColon, stValue:
		f.state = stInValue
		f.valueStart = i
		if f.closer == ']' {
			f.memberStart = i
		}
	default:
		return
	}
	f.bare = bare
}

func startBare(f *frame, i int) {
	if f == nil || f.state == stInValue || f.state == stInKey {
		return
	}
	startMember(f, i, true)
}

// completeWord reports whether a bare word at the end of the text is a whole
// value: a JSON number or literal, or a Python constant jsonrepair knows.
func completeWord(w string) bool {
	w = strings.TrimRightFunc(w, isSpace)
	switch w {
	case "true", "false", "null", "True", "False", "None":
		return true
	}
	_, err := strconv.ParseFloat(w, 64)
	return err == nil && json.Valid([]byte(w))
}

// closesAfterStrayQuote reports whether text, which the scan ended inside a
// string, ends with a quote followed by exactly the closers of the open
// containers: the sign of an unescaped quote rather than a cut.
func closesAfterStrayQuote(text string, stack []frame) bool {
	i := len(text) - 1
	for n := range stack { // the last byte closes the outermost container
		for i >= 0 && isSpace(rune(text[i])) {
			i--
		}
		if i < 0 || text[i] != stack[n].closer {
			return false
		}
		i--
	}
	for i >= 0 && isSpace(rune(text[i])) {
		i--
	}
	return i >= 0 && (text[i] == '"' || text[i] == '\'')
}
