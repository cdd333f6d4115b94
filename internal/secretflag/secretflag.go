// Package secretflag keeps passwords off command lines, where every user of
// the host can read them (ps, /proc/<pid>/cmdline): a password comes from a
// file or from the environment, and the old flags refuse any value.
package secretflag

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/toolbus/toolbus/internal/redact"
)

// refused is a flag that refuses every value.
type refused struct{ name, instead string }

func (r refused) String() string { return "" }
func (r refused) Set(string) error {
	return fmt.Errorf("a password on the command line is readable by every user of the host: use %s", r.instead)
}

// Refuse defines -name as a flag that fails the parse, whatever its value,
// saying to use instead.
func Refuse(fs *flag.FlagSet, name, instead string) {
	fs.Var(refused{name, instead}, name, "refused: use "+instead)
}

// Read returns the secret in file, when file is set (its content without
// the final line break), else the value of the environment variable env.
// The value is registered with redact.AddSecrets.
func Read(file, env string) (string, error) {
	v := os.Getenv(env)
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("password file: %w", err)
		}
		v = strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", errors.New("password file " + file + " is empty")
		}
	}
	redact.AddSecrets(v)
	return v, nil
}
