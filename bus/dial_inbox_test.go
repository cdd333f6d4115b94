package bus

import "testing"

// A user that is not one token, or one with a credentials file, keeps nats.go's
// inbox prefix.
func TestInboxPrefixDefault(t *testing.T) {
	t.Parallel()
	for _, c := range []Credentials{{}, {User: "a.b"}, {User: "ops", CredsFile: "x.creds"}} {
		if p := c.inboxPrefix("nats://127.0.0.1:4222"); p != "" {
			t.Errorf("%+v: inbox prefix %q, want nats.go's default", c, p)
		}
	}
}
