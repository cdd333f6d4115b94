package pages

import (
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ title, want string }{
		{"How we deploy", "how-we-deploy"},
		{"  NATS: KV & object store!  ", "nats-kv-object-store"},
		{"Grüße aus Köln", "gr-e-aus-k-ln"},
		{"東京", ""},
		{strings.Repeat("ab ", 40), strings.Repeat("ab-", 22)[:MaxIDLen]}, // cut at the longest id
	} {
		got := Slug(tc.title)
		if got != tc.want {
			t.Errorf("Slug(%q) = %q, want %q", tc.title, got, tc.want)
		}
		if got != "" {
			if err := CheckID(got); err != nil {
				t.Errorf("Slug(%q) = %q, not an id: %v", tc.title, got, err)
			}
		}
	}
}
