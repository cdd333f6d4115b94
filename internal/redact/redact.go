// Package redact removes credentials from text meant for people (error
// messages and logs) and from what the process stores (transcripts): URL
// credentials, and the secrets the process registered (AddSecrets).
package redact

import (
	"net/url"
	"strings"
)

// URL returns s, a URL or a comma-separated list of URLs (a NATS cluster),
// with the credentials of each URL masked: "nats://ops:secret@host" becomes
// "nats://ops:xxxxx@host", and a user without a password, which for NATS is a
// token, becomes "redacted", as nats.go's ConnectedUrlRedacted has it. Text
// that does not parse as a URL is still cut at its last "@", so a password
// holding "/" or "#" does not slip through. Anything without "@" comes back
// unchanged.
func URL(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = one(p)
	}
	return strings.Join(parts, ",")
}

// one masks the user info of a single URL.
func one(s string) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	end := len(s)
	if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.Host != "" {
		// A well-formed URL: its authority ends at the path, query or
		// fragment, and an "@" past it (a query's e-mail address) is no
		// credential.
		if i := strings.IndexAny(s[start:], "/?#"); i >= 0 {
			end = start + i
		}
	}
	at := strings.LastIndex(s[start:end], "@")
	if at < 0 {
		return s
	}
	masked := "redacted"
	if user, _, ok := strings.Cut(s[start:start+at], ":"); ok {
		masked = user + ":xxxxx"
	}
	return s[:start] + masked + s[start+at:]
}
