package schema

import (
	"errors"
	"testing"
)

// FuzzParse drives the ladder with arbitrary text. Whatever it returns
// without error must validate against the schema; a destructive call must
// never come back marked truncated; every failure is an *ArgumentError.
func FuzzParse(f *testing.F) {
	for _, tc := range ladderCases {
		var flags uint8
		if tc.opts.Strict {
			flags |= 1
		}
		if tc.opts.Truncated {
			flags |= 2
		}
		if tc.opts.Destructive {
			flags |= 4
		}
		which := uint8(0)
		if tc.schema != nil {
			which = 1
		}
		f.Add(tc.in, which, flags)
	}
	schemas := []*Schema{MustFromJSON(fileSchema), MustFromJSON(noArgsSchema), MustFromJSON(richSchema)}
	f.Fuzz(func(t *testing.T, in string, which, flags uint8) {
		s := schemas[int(which)%len(schemas)]
		opts := ParseOptions{Strict: flags&1 != 0, Truncated: flags&2 != 0, Destructive: flags&4 != 0}
		args, err := s.Parse(in, opts)
		if err != nil {
			var ae *ArgumentError
			if !errors.As(err, &ae) || ae.Error() == "" {
				t.Fatalf("Parse(%q) error %T %v is not a described *ArgumentError", in, err, err)
			}
			return
		}
		if err := s.Validate(args.JSON); err != nil {
			t.Fatalf("Parse(%q) = %s, which does not validate: %v", in, args.JSON, err)
		}
		if args.JSON[0] != '{' {
			t.Fatalf("Parse(%q) = %s, not an object", in, args.JSON)
		}
		if opts.Destructive && args.Truncated {
			t.Fatalf("Parse(%q) accepted a truncated call to a destructive tool", in)
		}
		if len(args.Rungs) == 0 {
			t.Fatalf("Parse(%q) recorded no rung", in)
		}
	})
}
