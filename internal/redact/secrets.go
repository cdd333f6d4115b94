package redact

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Replacement is what a known secret becomes in text the process stores.
const Replacement = "[redacted]"

// MinSecretLen is the shortest value treated as a secret: a shorter one
// would redact ordinary words (and could break the JSON it is removed from).
const MinSecretLen = 6

// SecretEnv are the environment variables whose values the process keeps
// out of what it stores (AddEnvSecrets).
var SecretEnv = []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TOOLBUS_MODEL_API_KEY", "NATS_PASSWORD", "TOOLBUS_ROUTE_PASSWORD",
	"TOOLBUS_BRAVE_API_KEY", "TOOLBUS_TAVILY_API_KEY"}

var (
	secretsMu sync.Mutex
	secrets   []string                         // registered values
	replacer  atomic.Pointer[strings.Replacer] // nil until a secret is registered
)

// AddSecrets registers values the process knows as secrets (passwords,
// API keys): Secrets replaces them, and their standard and URL-safe base64,
// URL-escaped and JSON-escaped forms, with Replacement. Values shorter than
// MinSecretLen are ignored, surrounding white space is trimmed (as from a
// file).
func AddSecrets(values ...string) {
	secretsMu.Lock()
	defer secretsMu.Unlock()
	for _, v := range values {
		v = strings.TrimSpace(v)
		if len(v) < MinSecretLen || slices.Contains(secrets, v) {
			continue
		}
		secrets = append(secrets, v)
	}
	var forms []string
	for _, v := range secrets {
		forms = append(forms, v,
			base64.StdEncoding.EncodeToString([]byte(v)),
			base64.RawStdEncoding.EncodeToString([]byte(v)),
			base64.URLEncoding.EncodeToString([]byte(v)),
			base64.RawURLEncoding.EncodeToString([]byte(v)),
			url.QueryEscape(v), url.PathEscape(v))
		if b, err := json.Marshal(v); err == nil {
			forms = append(forms, string(b[1:len(b)-1]))
		}
	}
	// Longest first, so a form is replaced whole rather than a shorter one
	// inside it (strings.Replacer tries the old strings in argument order).
	slices.SortFunc(forms, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	forms = slices.Compact(forms)
	pairs := make([]string, 0, 2*len(forms))
	for _, f := range forms {
		pairs = append(pairs, f, Replacement)
	}
	replacer.Store(strings.NewReplacer(pairs...))
}

// AddEnvSecrets registers the values of the SecretEnv variables that are set.
func AddEnvSecrets() {
	for _, name := range SecretEnv {
		AddSecrets(os.Getenv(name))
	}
}

// Secrets returns b with every registered secret, in any of its forms,
// replaced by Replacement; b itself when there is none (no copy).
func Secrets(b []byte) []byte {
	r := replacer.Load()
	if r == nil {
		return b
	}
	s := string(b)
	out := r.Replace(s)
	if out == s {
		return b
	}
	return []byte(out)
}

// forgetSecrets is for tests.
func forgetSecrets() {
	secretsMu.Lock()
	defer secretsMu.Unlock()
	secrets = nil
	replacer.Store(nil)
}
