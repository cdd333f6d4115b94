package schema

import (
	"strings"
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

// Pathological arguments from the differential run, each far above
// MaxRepairBytes: both cost quadratic time inside jsonrepair (26 s for the
// brackets and 3.3 s for the prose here, before the cap). They are now
// refused at once.
var (
	benchBrackets = strings.Repeat("[", 100_000)
	benchProse    = repeatTo(`I will call it with {"path" set to the file, then read it. `, 200_000)
)

func repeatTo(s string, n int) string {
	return strings.Repeat(s, n/len(s)+1)[:n]
}

func BenchmarkParseBrackets100k(b *testing.B) { benchRefused(b, benchBrackets) }

func BenchmarkParseProse200k(b *testing.B) { benchRefused(b, benchProse) }

func benchRefused(b *testing.B, in string) {
	s := MustFromJSON(benchSchema)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Parse(in, ParseOptions{}); err == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkParseProseAtCap is prose with `{"` just under MaxRepairBytes,
// which the ladder does extract and repair.
func BenchmarkParseProseAtCap(b *testing.B) { benchRefused(b, benchProse[:MaxRepairBytes]) }

// BenchmarkParseLargeStringRepair is a typical large call that needs
// repair: 55 kB of file content in one string (64 kB escaped, just under
// MaxRepairBytes), then a trailing comma. jsonrepair sees a placeholder for
// the string.
func BenchmarkParseLargeStringRepair(b *testing.B) {
	s := MustFromJSON(fileSchema)
	content := appendString(nil, repeatTo("func main() {\n\tfmt.Println(\"hello\")\n}\n", 55_000))
	in := `{"path":"main.go","mode":"write","tags":[` + string(content) + `],}`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Parse(in, ParseOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRepairAtBudget is the slowest repair the ladder lets jsonrepair
// do: an object of unquoted keys (among the costliest shapes per unit of
// the estimate) grown to just under repairBudget.
func BenchmarkRepairAtBudget(b *testing.B) {
	object := func(n int) string { return "{" + strings.Repeat("a:1,", n) + "}" }
	lo, hi := 1, MaxRepairBytes/4
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if l := lex(object(mid), 0); l.err == nil && l.steps+l.cost <= repairBudget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	in := object(lo)
	s := MustFromJSON(noArgsSchema)
	b.ReportMetric(float64(len(in)), "bytes")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Parse(in, ParseOptions{}); err != nil {
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
