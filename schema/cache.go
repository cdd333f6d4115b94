package schema

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kaptinlin/jsonschema"
)

// maxCachedValidators bounds the validator cache. Schemas can come from
// untrusted workers; past this many distinct schemas a new one is compiled
// for its Schema alone instead of being kept for the life of the process.
const maxCachedValidators = 4096

// validatorEntry is one cache slot. The sync.Once makes concurrent first uses
// of the same bytes compile once; later uses only read.
type validatorEntry struct {
	once      sync.Once
	validator *jsonschema.Schema
	err       error
}

var (
	validators      sync.Map // validatorKey -> *validatorEntry
	validatorsCount atomic.Int64
)

// validatorKey names a compiled validator: the schema's bytes, and whether it asserts
// "format" (the same bytes compile to two validators that accept different values).
type validatorKey struct {
	sum     [sha256.Size]byte
	formats bool
}

// cachedValidator returns the compiled validator for raw, compiling it on the
// first use of these exact bytes. Two schemas with the same bytes share one
// validator; nothing is recompiled.
func cachedValidator(raw []byte) (*jsonschema.Schema, error) {
	return cachedValidatorOf(raw, false)
}

// cachedValidatorOf is cachedValidator for a validator that asserts "format" or not.
func cachedValidatorOf(raw []byte, formats bool) (*jsonschema.Schema, error) {
	key := validatorKey{sum: sha256.Sum256(raw), formats: formats}
	if e, ok := validators.Load(key); ok {
		return e.(*validatorEntry).get(raw, formats)
	}
	if validatorsCount.Load() >= maxCachedValidators {
		return compileValidatorOf(raw, formats)
	}
	e, loaded := validators.LoadOrStore(key, &validatorEntry{})
	if !loaded {
		validatorsCount.Add(1)
	}
	return e.(*validatorEntry).get(raw, formats)
}

func (e *validatorEntry) get(raw []byte, formats bool) (*jsonschema.Schema, error) {
	e.once.Do(func() { e.validator, e.err = compileValidatorOf(raw, formats) })
	return e.validator, e.err
}

// newCompiler returns a kaptinlin compiler that never loads anything over
// the network: schemas can come from untrusted workers, and a remote $ref
// would let them make this process fetch any URL.
func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	delete(c.Loaders, "http")
	delete(c.Loaders, "https")
	return c
}

// compileValidator checks raw against its meta-schema and compiles it, with
// no cache. Each schema gets its own compiler: a compiler keeps schemas by
// $id, and one worker's schema must never stand in for another's.
func compileValidator(raw []byte) (*jsonschema.Schema, error) {
	return compileValidatorOf(raw, false)
}

// compileValidatorOf is compileValidator for a validator that asserts "format" (the
// formats kaptinlin knows; a name it does not know stays an annotation) or not.
func compileValidatorOf(raw []byte, formats bool) (*jsonschema.Schema, error) {
	// Readers disagree on which of two equal keys counts; a schema must
	// mean one thing to the validator, the projection and the model.
	if _, err := decodeOrdered(raw); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	if err := checkMetaSchema(raw); err != nil {
		return nil, err
	}
	c := newCompiler()
	if formats {
		c.SetAssertFormat(true)
		// Asserting, kaptinlin refuses every value at a format it has no check for
		// ("Unknown format"): a schema naming its own format ("phone", "sku") would
		// accept nothing. Such a name stays what the draft says it is, an annotation.
		for _, name := range formatNames(raw) {
			if _, known := jsonschema.Formats[name]; !known {
				c.RegisterFormat(name, func(any) bool { return true })
			}
		}
	}
	v, err := c.Compile(raw)
	if err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	// kaptinlin accepts every instance at a $ref it could not resolve, so an
	// unresolved reference would silently switch validation off there.
	if refs := v.UnresolvedReferenceURIs(); len(refs) > 0 {
		return nil, fmt.Errorf("compile schema: unresolved $ref %q (only references inside the schema are followed; remote ones are never loaded)", refs[0])
	}
	return v, nil
}

// metaCompiler holds the meta-schemas. kaptinlin embeds the draft-04, -06 and
// -07 meta-schemas but would fetch 2019-09 and 2020-12 over the network, which
// is switched off; schemas of those drafts (and those naming none) are checked
// against draft-07, which covers the keywords the drafts share: types, bounds,
// enum, required, properties, items given as a schema.
var metaCompiler = sync.OnceValue(func() *jsonschema.Compiler {
	c := newCompiler()
	c.SetDefaultDialect(jsonschema.Draft7)
	return c
})

func checkMetaSchema(raw []byte) error {
	doc := raw
	var head map[string]json.RawMessage
	if err := json.Unmarshal(raw, &head); err == nil {
		if dialect, ok := head["$schema"]; ok {
			var uri string
			_ = json.Unmarshal(dialect, &uri)
			switch strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(uri, "https://"), "http://"), "#") {
			case "json-schema.org/draft/2020-12/schema", "json-schema.org/draft/2019-09/schema":
				delete(head, "$schema")
				doc, _ = json.Marshal(head)
			case "json-schema.org/draft-07/schema", "json-schema.org/draft-06/schema", "json-schema.org/draft-04/schema":
			default:
				return fmt.Errorf("unknown $schema %s: only drafts 04, 06, 07, 2019-09 and 2020-12 are known, and no meta-schema is fetched", dialect)
			}
		}
	}
	res, err := metaCompiler().ValidateSchema(doc)
	if err != nil {
		return fmt.Errorf("check schema against its meta-schema: %w", err)
	}
	if !res.IsValid() {
		instance, _ := decodeArgs(doc)
		leaves := newValidationError(res, instance).Leaves
		var b strings.Builder
		for i, l := range leaves {
			if i == 3 {
				fmt.Fprintf(&b, "; ... and %d more", len(leaves)-i)
				break
			}
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%s: %s", l.Path, l.Message)
		}
		return fmt.Errorf("schema does not conform to the JSON Schema meta-schema: %s", b.String())
	}
	return nil
}

// formatNames lists the values of every "format" member of a schema document, once
// each. A member named "format" that is not a keyword (a property's name, a default's
// member) may be listed too: the list only says which names need a check.
func formatNames(raw []byte) []string {
	var doc any
	if json.Unmarshal(raw, &doc) != nil {
		return nil
	}
	seen := map[string]bool{}
	var names []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if f, ok := v["format"].(string); ok && !seen[f] {
				seen[f] = true
				names = append(names, f)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	return names
}

// validateLocks serialize kaptinlin's Validate per compiled validator. It compiles a
// "pattern" (and a patternProperties key) on first use and keeps it in the schema node
// without a lock, so two goroutines validating against one validator race: a data race
// on the node, a concurrent map write for patternProperties. Validators are shared
// (the cache gives equal documents one), so the lock is the validator's, not the
// Schema's: one of a fixed set, chosen by the validator's address. The fast path, which
// answers most valid arguments, takes none.
var (
	validateLocks    [64]sync.Mutex
	validateLockSeed = maphash.MakeSeed()
)

// validateWith validates instance with v under v's lock.
func validateWith(v *jsonschema.Schema, instance any) *jsonschema.EvaluationResult {
	mu := &validateLocks[maphash.Comparable(validateLockSeed, v)%uint64(len(validateLocks))]
	mu.Lock()
	defer mu.Unlock()
	return v.Validate(instance)
}
