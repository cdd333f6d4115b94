package redact

import "testing"

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"nats://ops:bad@127.0.0.1:4222", "nats://ops:xxxxx@127.0.0.1:4222"},
		{"nats://s3cr3tt0ken@127.0.0.1:4222", "nats://redacted@127.0.0.1:4222"},
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"http://user:pa%40ss@proxy.local/v1", "http://user:xxxxx@proxy.local/v1"},
		{"https://api.example/v1?contact=ops@example.com", "https://api.example/v1?contact=ops@example.com"},
		{"https://u:p@api.example/v1?contact=ops@example.com", "https://u:xxxxx@api.example/v1?contact=ops@example.com"},
		// Not a URL url.Parse accepts: still cut at the last "@".
		{"nats://ops:p/ss#w@host:4222", "nats://ops:xxxxx@host:4222"},
		{"ops:bad@host:4222", "ops:xxxxx@host:4222"},
		{"nats://a:one@h1:4222, nats://b:two@h2:4222,nats://h3:4222", "nats://a:xxxxx@h1:4222, nats://b:xxxxx@h2:4222,nats://h3:4222"},
		{"", ""},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
