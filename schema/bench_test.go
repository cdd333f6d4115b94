package schema

import (
	"testing"
)

// benchSchema is a typical tool schema: five properties, one nested object.
var benchSchema = []byte(`{"type":"object","properties":{"path":{"type":"string","minLength":1,"description":"file path to read"},"mode":{"type":"string","enum":["read","write"]},"limit":{"type":["integer","null"],"minimum":1,"maximum":1000},"tags":{"type":"array","items":{"type":"string"},"maxItems":3},"options":{"type":"object","properties":{"recursive":{"type":"boolean"}},"required":["recursive"],"additionalProperties":false}},"required":["path","mode","options"],"additionalProperties":false}`)

const benchValidArgs = `{"path":"src/main.go","mode":"read","limit":200,"tags":["go","main"],"options":{"recursive":false}}`

const benchFencedArgs = "```json\n{\"path\":\"src/main.go\",\"mode\":\"read\",\"limit\":200,\"tags\":[\"go\",\"main\",],\"options\":{\"recursive\":false},}\n```"

// BenchmarkValidateBare is the baseline: kaptinlin's ValidateJSON on valid
// bytes, with the validator already compiled.
func BenchmarkValidateBare(b *testing.B) {
	s := MustFromJSON(benchSchema)
	data := []byte(benchValidArgs)
	b.ReportAllocs()
	for b.Loop() {
		if !s.validator.ValidateJSON(data).IsValid() {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkParseValid is the ladder's fast path on the same bytes; the
// target is at most 1.2x BenchmarkValidateBare.
func BenchmarkParseValid(b *testing.B) {
	s := MustFromJSON(benchSchema)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Parse(benchValidArgs, ParseOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseFencedTrailingComma(b *testing.B) {
	s := MustFromJSON(benchSchema)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Parse(benchFencedArgs, ParseOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompile is what every Schema would cost without the cache:
// meta-schema check and compilation.
func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := compileValidator(benchSchema); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCachedLookup is what a Schema with already-seen bytes costs.
func BenchmarkCachedLookup(b *testing.B) {
	if _, err := cachedValidator(benchSchema); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cachedValidator(benchSchema); err != nil {
			b.Fatal(err)
		}
	}
}
