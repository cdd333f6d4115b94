package schema

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kaptinlin/jsonschema"
)

// ErrTruncated is matched (errors.Is) by the error Parse returns when it
// refuses a truncated call to a destructive tool.
var ErrTruncated = errors.New("arguments were truncated")

// ErrorKind says which rule arguments broke. The values are stable and fit
// for logs and metrics.
type ErrorKind string

const (
	KindSyntax    ErrorKind = "syntax"           // not JSON, even after repair
	KindMultiple  ErrorKind = "multiple_objects" // two or more objects where one was expected
	KindNotObject ErrorKind = "not_object"       // an array, number, string, ... at the root
	KindEmpty     ErrorKind = "empty"            // nothing (or null) for a tool with required fields
	KindTruncated ErrorKind = "truncated"        // cut off, and the tool is destructive
	KindSchema    ErrorKind = "schema"           // JSON object that does not match the schema
	KindTooLarge  ErrorKind = "too_large"        // not JSON, and longer than MaxRepairBytes
	KindTooCostly ErrorKind = "too_costly"       // not JSON, and its repair would exceed the ladder's work budget
	KindTooDeep   ErrorKind = "too_deep"         // objects and arrays nested deeper than MaxDepth
)

// ArgumentError is the error Parse returns. Its Error text is written for
// the model: a sentence it can act on to re-issue the call.
type ArgumentError struct {
	Kind      ErrorKind
	Msg       string
	Rungs     []Rung // the ladder rungs that ran before the failure
	Truncated bool   // the arguments were cut off (or the provider said so)
	Leaves    []Leaf // for KindSchema: every failing leaf, sorted
	// Value is, for KindSchema, the arguments that failed validation as the
	// ladder read them (canonical JSON, after every repair rung that ran).
	Value json.RawMessage
	err   error
}

func (e *ArgumentError) Error() string { return e.Msg }

// Unwrap gives ErrTruncated for KindTruncated and the *ValidationError for
// KindSchema.
func (e *ArgumentError) Unwrap() error { return e.err }

// Leaf is one failed check at one place in the arguments. Path is a JSON
// pointer into the arguments; the root is "/".
type Leaf struct {
	Path    string
	Message string
}

// maxLeaves is how many failures an error lists before summing up the rest:
// enough to fix a call in one go, short enough for a model to read.
const maxLeaves = 10

// ValidationError lists where arguments break the schema. Its Error text has
// one "path: message" line per leaf failure (at most maxLeaves, then a count
// of the rest); summaries such as "properties 'a', 'b' do not match" are left
// out because the leaves below them say more.
type ValidationError struct {
	Leaves []Leaf // all leaves, sorted by path then message
	err    error  // ErrTooDeep, for arguments refused before validation
}

func (e *ValidationError) Error() string {
	return "arguments do not match the schema:" + leafLines(e.Leaves)
}

// Unwrap gives ErrTooDeep for arguments nested deeper than MaxDepth.
func (e *ValidationError) Unwrap() error { return e.err }

func leafLines(leaves []Leaf) string {
	var b strings.Builder
	for i, l := range leaves {
		if i == maxLeaves {
			fmt.Fprintf(&b, "\n... and %d more", len(leaves)-maxLeaves)
			break
		}
		fmt.Fprintf(&b, "\n- %s: %s", l.Path, l.Message)
	}
	return b.String()
}

// summaryKeywords report that something below them failed; the failure
// itself is a leaf further down the result tree.
var summaryKeywords = map[string]bool{
	"properties":            true,
	"patternProperties":     true,
	"additionalProperties":  true,
	"unevaluatedProperties": true,
	"items":                 true,
	"prefixItems":           true,
	"unevaluatedItems":      true,
	"dependentSchemas":      true,
	"allOf":                 true,
	"$ref":                  true,
	"$dynamicRef":           true,
}

// newValidationError lists the leaf failures of res, the result of
// validating instance.
func newValidationError(res *jsonschema.EvaluationResult, instance any) *ValidationError {
	var leaves []Leaf
	collectLeaves(res, "", instance, &leaves)
	slices.SortFunc(leaves, func(a, b Leaf) int {
		return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Message, b.Message))
	})
	leaves = slices.Compact(leaves)
	if len(leaves) == 0 {
		// Every error was a summary; keep something to show.
		leaves = []Leaf{{Path: "/", Message: "value does not match the schema"}}
	}
	return &ValidationError{Leaves: leaves}
}

// collectLeaves walks the result tree along the instance. kaptinlin also
// evaluates a missing required property as if it were null; those results
// describe a value that is not there (the "required" error already says it
// is missing), so subtrees whose instance does not exist are skipped.
func collectLeaves(res *jsonschema.EvaluationResult, base string, instance any, out *[]Leaf) {
	path := base
	if loc := res.InstanceLocation; loc != "" {
		// A child result's location is "/" plus one unescaped key or index
		// relative to its parent.
		seg := loc[1:]
		var ok bool
		if instance, ok = childValue(instance, seg); !ok {
			return
		}
		path = base + "/" + escapePointer(seg)
	}
	for keyword, e := range res.Errors {
		if summaryKeywords[keyword] {
			continue
		}
		msg := strings.ReplaceAll(e.Error(), "<nil>", "null")
		if e.Code == "false_schema_mismatch" {
			msg = "value is not allowed here"
			if strings.Contains(res.EvaluationPath, "Properties/") {
				msg = "property is not allowed (not declared in the schema)"
			}
		}
		if e.Code == "format_mismatch" {
			if f, _ := e.Params["format"].(string); formatHints[f] != "" {
				msg += " (" + formatHints[f] + ")"
			}
		}
		p := path
		if p == "" {
			p = "/"
		}
		*out = append(*out, Leaf{Path: p, Message: lowerFirst(msg)})
	}
	for _, d := range res.Details {
		if !d.Valid {
			collectLeaves(d, path, instance, out)
		}
	}
}

// formatHints say what an asserted format looks like, so that a model refused one can
// write it at the next try.
var formatHints = map[string]string{
	"date-time": "RFC 3339, such as 2025-01-31T09:30:00Z",
	"date":      "RFC 3339 full-date, such as 2025-01-31",
	"time":      "RFC 3339 full-time with an offset, such as 09:30:00Z",
	"duration":  "ISO 8601, such as P3DT4H or PT15M",
	"email":     "an address such as name@example.com",
	"hostname":  "a DNS name such as api.example.com",
	"ipv4":      "dotted quad, such as 192.0.2.1",
	"ipv6":      "such as 2001:db8::1",
	"uri":       "absolute, with a scheme, such as https://example.com/a",
	"uuid":      "such as 123e4567-e89b-12d3-a456-426614174000",
}

func childValue(v any, seg string) (any, bool) {
	switch v := v.(type) {
	case map[string]any:
		x, ok := v[seg]
		return x, ok
	case []any:
		i, err := strconv.Atoi(seg)
		if err != nil || i < 0 || i >= len(v) {
			return nil, false
		}
		return v[i], true
	}
	return nil, false
}

func lowerFirst(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError || !unicode.IsUpper(r) {
		return s
	}
	// Keep acronyms such as "JSON" as they are.
	if next, _ := utf8.DecodeRuneInString(s[size:]); unicode.IsUpper(next) {
		return s
	}
	return string(unicode.ToLower(r)) + s[size:]
}
