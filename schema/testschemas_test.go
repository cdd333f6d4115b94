package schema

// fileSchema is the schema most ladder tests run against: two required
// properties, optional scalars, an array and a closed nested object.
var fileSchema = []byte(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1},
    "mode": {"type": "string", "enum": ["read", "write"]},
    "limit": {"type": "integer", "minimum": 1},
    "tags": {"type": "array", "items": {"type": "string"}},
    "options": {
      "type": "object",
      "properties": {
        "recursive": {"type": "boolean"},
        "depth": {"type": "integer"}
      },
      "additionalProperties": false
    }
  },
  "required": ["path", "mode"],
  "additionalProperties": false
}`)

// noArgsSchema is a tool with nothing required.
var noArgsSchema = []byte(`{"type":"object","properties":{"verbose":{"type":"boolean"}}}`)

// numberSchema has one number, for the ladder's number repairs.
var numberSchema = []byte(`{"type":"object","properties":{"n":{"type":"number"}},"required":["n"]}`)
