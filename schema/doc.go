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
//  2. extract: a ``` code fence (with or without a language tag) and prose
//     before or after are dropped around exactly one balanced top-level
//     object, found with string- and comment-aware brace matching. Two or
//     more objects are refused (KindMultiple) rather than guessed at.
//  3. repair: kaptinlin/jsonrepair fixes trailing commas, single quotes,
//     comments, Python constants, unescaped quotes, raw newlines and missing
//     closers. Before that, the text's own bracket and quote balance is read:
//     if closers are missing the call is marked truncated, and a member cut
//     off in its key or in a literal ({"a":1,"b  or  {"a":tru) is dropped,
//     because jsonrepair would invent "b": null or the string "tru".
//  4. unwrap: a JSON string holding the object (encoded twice, or three
//     times) is decoded; so is a string field where the schema wants an
//     object or array (and no string).
//  5. strip_nulls: with ParseOptions.Strict, nulls at keys the strict
//     projection made nullable are removed, then the object is validated
//     against the original schema.
//
// Empty text or null stands for {} (rung "empty"): fine for a tool without
// required properties, refused with KindEmpty naming them otherwise. Any
// other non-object root is refused (KindNotObject). A truncated call to a
// destructive tool is refused (KindTruncated, errors.Is ErrTruncated) so the
// model re-issues it; a non-destructive one runs, with Args.Truncated set.
//
// Whatever Parse returns validates against the schema, and is re-encoded
// from the decoded value, never passed through from the model.
package schema
