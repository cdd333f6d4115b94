package redact

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

func TestSecrets(t *testing.T) {
	t.Cleanup(forgetSecrets)
	const key = "sk-test/abc+def=ghi" // '/', '+' and '=' make every encoding differ
	AddSecrets(key, "  file-secret-1\n", "short")
	for _, form := range []string{
		key,
		base64.StdEncoding.EncodeToString([]byte(key)),
		base64.RawURLEncoding.EncodeToString([]byte(key)),
		url.QueryEscape(key),
		url.PathEscape(key),
		"file-secret-1",
	} {
		in := "before " + form + " after"
		got := string(Secrets([]byte(in)))
		if strings.Contains(got, form) || got != "before "+Replacement+" after" {
			t.Errorf("Secrets(%q) = %q", in, got)
		}
	}
	if got := string(Secrets([]byte("a short word"))); got != "a short word" {
		t.Errorf("a value under MinSecretLen was redacted: %q", got)
	}
	// JSON text: the secret inside a string is replaced and the JSON stays valid.
	if got := string(Secrets([]byte(`{"out":"key=sk-test/abc+def=ghi"}`))); got != `{"out":"key=[redacted]"}` {
		t.Errorf("json: %s", got)
	}
}

func TestSecretsWithoutAnyIsIdentity(t *testing.T) {
	forgetSecrets()
	b := []byte("nothing to hide")
	if got := Secrets(b); &got[0] != &b[0] {
		t.Error("copied")
	}
}
