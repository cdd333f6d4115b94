package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// A refused login says what to pass, not only the server's "Authorization Violation".
func TestDialAuthAdvice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := Start(ctx, Config{Listen: "127.0.0.1:-1", Users: []User{{Name: "ops", Password: "right-password"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, c := range []struct {
		cred bus.Credentials
		want string
	}{
		{bus.Credentials{}, "pass -user NAME, or set NATS_USER"},
		{bus.Credentials{User: "ops"}, "user ops sent no password: set NATS_PASSWORD or pass -pass-file FILE"},
		{bus.Credentials{User: "ops", Password: "wrong"}, "the server refused user ops and its password"},
	} {
		_, err := bus.Dial(ctx, srv.ClientURL(), "t", c.cred)
		if err == nil || !strings.Contains(err.Error(), "Authorization Violation") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Dial(%+v) = %v, want %q", c.cred.User, err, c.want)
		}
	}
}
