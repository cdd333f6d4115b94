package host

import (
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
)

// TestTurnRecordsOpenRemembersOnlyARefusal: a host whose user may not read the turn
// records (no JetStream in its permissions: the server refuses its requests) is
// refused at once, for a while, after its first failure to open them; a host whose
// JetStream does not answer in time, with no refusal (a slow server; here an API prefix
// whose responder never answers), fails that call alone, and the next one asks again.
// Remembered, a slow answer refused the host's next calls too (CI, under load).
func TestTurnRecordsOpenRemembersOnlyARefusal(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		ctx := bustest.Context(t)
		// A user that may publish to one subject of its own, and read its inbox.
		perms := server.WithInbox(&natsserver.Permissions{
			Publish:   &natsserver.SubjectPermission{Allow: []string{"toolbus.none"}},
			Subscribe: &natsserver.SubjectPermission{Allow: []string{"toolbus.none"}},
		}, "w")
		srv := bustest.Server(t, func(c *server.Config) {
			c.Listen = "127.0.0.1:-1"
			c.Users = []server.User{{Name: "w", Password: "w-pw", Role: server.RoleWatcher, Permissions: perms}}
		})
		nc, err := bus.Dial(ctx, srv.ClientURL(), "watcher-host", bus.Credentials{User: "w", Password: "w-pw"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		a := newTurnAgents(nc)
		if _, err := a.bucket(ctx); err == nil || !strings.Contains(err.Error(), "the tool role's read of the turn records") {
			t.Fatalf("first open: %v", err)
		}
		began := time.Now()
		_, err = a.bucket(ctx)
		if took := time.Since(began); err == nil || took > openPatience/2 {
			t.Errorf("second open: %v after %s, want the remembered refusal at once", err, took)
		}
	})
	t.Run("unanswered", func(t *testing.T) {
		t.Parallel()
		ctx := bustest.Context(t)
		nc, err := bustest.Server(t, nil).Connect("slow-host")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		if _, err := nc.Subscribe("silent.>", func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.NewWithAPIPrefix(nc, "silent")
		if err != nil {
			t.Fatal(err)
		}
		a := &turnAgents{js: js, known: map[string]turnAgent{}, looking: map[string]*lookup{}}
		if _, err := a.bucket(ctx); err == nil || !strings.Contains(err.Error(), "JetStream did not answer within 3s") {
			t.Fatalf("open: %v", err)
		}
		a.mu.Lock()
		failed := a.failed
		a.mu.Unlock()
		if !failed.IsZero() {
			t.Errorf("a slow answer was remembered as a failure: the next calls would be refused")
		}
	})
}
