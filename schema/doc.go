// Package schema holds tool parameter schemas: built from Go types or taken
// from raw JSON Schema, checked to have an object root, projected for
// providers' strict mode, compiled once per distinct document, and used to
// turn a model's raw argument text into validated arguments.
//
// # Schemas
//
// FromJSON keeps a raw schema byte for byte (JSON returns it unchanged). For
// reflects a Go struct, reading invopop-compatible tags:
//
//	json:"name,omitempty"           name; omitempty, omitzero or a pointer type make it optional; "-" skips it
//	jsonschema:"required"           required even if omitempty
//	jsonschema:"enum=a,enum=b"      allowed values, typed like the field
//	jsonschema:"minimum=1,maximum=9,exclusiveMinimum=0,exclusiveMaximum=10,multipleOf=2"
//	jsonschema:"minLength=1,maxLength=5,pattern=^a,format=email"
//	jsonschema:"minItems=1,maxItems=3,uniqueItems"
//	jsonschema:"title=T,description=D,default=x,nullable"
//	jsonschema_description:"free text, commas allowed" (or description:"...")
//	jsonschema:"free text, commas allowed"   the github.com/google/jsonschema-go form (MCP go-sdk, ADK)
//
// A jsonschema tag is read as keywords when its first word holds '=' or it
// starts with required, nullable or uniqueItems; otherwise the whole tag is
// the description, as google/jsonschema-go reads it (which refuses a tag that
// starts with "WORD="), so argument structs written for the MCP go-sdk define
// tools unchanged.
//
// A literal comma inside a jsonschema tag value is written "\,". On a slice
// field, item keywords (enum, bounds, pattern, ...) apply to the elements and
// minItems/maxItems/uniqueItems to the slice. Structs are inlined as closed
// objects with properties in field order; embedded structs are promoted as
// encoding/json does; pointers stand for their element; slices and arrays
// become arrays; maps become objects with additionalProperties; time.Time is
// a date-time string; json.RawMessage and interfaces accept any value.
// Recursive types are an error.
//
// Compiled validators (kaptinlin/jsonschema, with HTTP loading removed so a
// $ref never fetches anything) are cached by the SHA-256 of the schema bytes:
// equal documents share one validator and nothing is compiled twice.
//
// # The argument ladder
//
// Schema.Parse takes the model's raw argument text and climbs only as far
// as needed, recording each rung it used:
//
//  1. as_is: the text is one JSON value.
//  2. extract: a byte-order mark, a ``` code fence (with or without a
//     language tag), an XML-ish wrapper (<args>…</args>, <tool_call>…) and
//     prose before or after are dropped around exactly one balanced
//     top-level object, found with string- and comment-aware brace matching
//     in one linear pass. An object may have quoted, curly-quoted or bare
//     keys ({name: "x"}); a brace in prose ("use {name} here") is not one.
//     Two or more objects are refused (KindMultiple) rather than guessed at.
//  3. repair: kaptinlin/jsonrepair fixes trailing commas, single quotes,
//     comments, Python constants, unescaped quotes, raw newlines and missing
//     closers. It never sees a string: the ladder reads every string itself
//     and hands jsonrepair a placeholder, so no value is changed on the way.
//     An escape JSON lacks keeps its backslash (^\d stays ^\d, recorded as
//     keep_backslash) unless JavaScript, Python or C read it as another
//     character (\x41, \101, \v, \' in double quotes), which is refused.
//     Numbers as other languages write them become the JSON number they are
//     (0x10 is 16, 007 is 7, +5 is 5, .5 is 0.5); NaN, Infinity and a leading
//     zero that could be octal (010) are refused, never made strings.
//     Before repair, the text's own bracket and quote balance is read: if it
//     ends inside a string or with containers open the call is marked
//     truncated, and a member cut off in its key or in a literal
//     ({"a":1,"b  or  {"a":tru) is dropped, because jsonrepair would invent
//     "b": null or the string "tru". A closer that does not match its
//     opener (["a","b"}) is repaired, not taken for truncation. Text over
//     MaxRepairBytes that is not JSON is refused (KindTooLarge), and so is a
//     repair whose estimated work exceeds a budget of about 0.1 s
//     (KindTooCostly), before jsonrepair starts.
//  4. unwrap: a JSON string holding the object (encoded twice, or three
//     times) is decoded; so is text escaped once more without its quotes
//     ({\"a\": 1}), and a string field where the schema wants an object or
//     array (and no string).
//  5. strip_nulls: with ParseOptions.Strict, nulls at keys the strict
//     projection made nullable are removed, then the object is validated
//     against the original schema.
//
// Arguments that nest objects and arrays more than MaxDepth (64) levels deep are
// refused first (KindTooDeep, errors.Is ErrTooDeep), by a scan of the text that
// decodes nothing, and again after unwrapping decodes a string; Validate refuses them
// too. The validator's work grows with depth times the branches of a recursive anyOf.
//
// Empty text or null stands for {} (rung "empty"): fine for a tool without
// required properties, refused with KindEmpty naming them otherwise. Any
// other non-object root is refused (KindNotObject). A truncated call to a
// destructive tool is refused (KindTruncated, errors.Is ErrTruncated) so the
// model re-issues it; a non-destructive one runs, with Args.Truncated set.
//
// Whatever Parse returns validates against the schema, and is re-encoded
// from the decoded value, never passed through from the model. Where the
// schema certainly says integer, an integer the model wrote with a fraction
// or an exponent (2.0, 1e2; JSON Schema counts both as integers) is
// re-encoded as the plain integer (2, 100), so that a tool decoding it into
// an int does not fail; this is a normalization of valid text, not a rung.
// When rung 5 refuses, ArgumentError.Value holds the value it refused.
package schema
