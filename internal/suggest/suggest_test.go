package suggest

import (
	"errors"
	"flag"
	"io"
	"testing"
)

func TestClosest(t *testing.T) {
	t.Parallel()
	names := []string{"read_file", "write_file", "list_files", "run_command", "model", "node", "v"}
	for _, c := range []struct {
		typed, want string
	}{
		{"read_fil", "read_file"},
		{"raed_file", "read_file"}, // a swap is one edit
		{"modle", "model"},
		{"Model", "model"},
		{"list_file", "list_files"},
		{"read_file", ""}, // a name already
		{"weather", ""},   // nothing near
		{"nod", "node"},
		{"x", "v"}, // one substitution from v, two or more from the rest
	} {
		got, ok := Closest(c.typed, names)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("Closest(%q) = %q, %v, want %q", c.typed, got, ok, c.want)
		}
	}
	// Two names as near: neither is suggested.
	if got, ok := Closest("ab", []string{"aa", "bb"}); ok {
		t.Errorf("a tie suggested %q", got)
	}
}

func TestFlag(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("model", "", "")
	fs.Bool("json", false, "")
	err := fs.Parse([]string{"-modle", "x"})
	if got := Flag(fs, err); got != "did you mean -model?" {
		t.Errorf("Flag(-modle) = %q", got)
	}
	err = fs.Parse([]string{"--jsno"})
	if got := Flag(fs, err); got != "did you mean -json?" {
		t.Errorf("Flag(--jsno) = %q", got)
	}
	if got := Flag(fs, fs.Parse([]string{"-zzzzzz"})); got != "" {
		t.Errorf("Flag(-zzzzzz) = %q", got)
	}
	if got := Flag(fs, errors.New("invalid value")); got != "" {
		t.Errorf("Flag(other error) = %q", got)
	}
}
