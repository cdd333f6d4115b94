package brain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
)

// TestRolesUseTheStore uses the store as the roles of a listening node's users do
// (server.RolePermissions): an operator writes pages, small and large; a host of the brain
// category creates the bucket, recalls and reads them but cannot write; a watcher
// reads; a host of another category cannot even read.
func TestRolesUseTheStore(t *testing.T) {
	t.Parallel()
	users := []server.User{}
	for _, u := range []struct {
		name       string
		role       server.Role
		categories []string
	}{
		{"ops", server.RoleOperator, nil},
		{"host", server.RoleTool, []string{"brain"}},
		{"watch", server.RoleWatcher, nil},
		{"fs", server.RoleTool, []string{"fs"}},
	} {
		p, err := server.RolePermissions(u.role, u.name, u.categories)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, server.User{Name: u.name, Password: "pw-" + u.name, Role: u.role, Permissions: p})
	}
	srv := bustest.Server(t, func(c *server.Config) { c.Listen, c.Users = "127.0.0.1:-1", users })
	// Each user's asynchronous errors (the refusals below) arrive on its channel.
	errs := map[string]chan error{}
	storeAs := func(user string) *Store {
		t.Helper()
		ch := make(chan error, 64)
		errs[user] = ch
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, "pw-"+user), nats.Name(user), nats.CustomInboxPrefix(bus.InboxPrefix(user)),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				select {
				case ch <- err:
				default:
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		s := NewStore(js, Options{})
		t.Cleanup(s.Close)
		return s
	}
	// A refused request is never answered: the server drops it and reports a permission
	// violation of a JetStream subject to the user's connection at once. f is stopped then,
	// instead of waiting out its context; it must fail, and the violation must come.
	refused := func(what, user string, f func(ctx context.Context) error) {
		t.Helper()
		for drained := false; !drained; {
			select {
			case err := <-errs[user]:
				t.Logf("%s: an earlier asynchronous error: %v", user, err)
			default:
				drained = true
			}
		}
		ctx, cancel := context.WithCancel(testContext(t))
		defer cancel()
		seen := make(chan error, 1)
		go func() {
			for {
				select {
				case err := <-errs[user]:
					if errors.Is(err, nats.ErrPermissionViolation) && (strings.Contains(err.Error(), `Publish to "$JS.`) ||
						strings.Contains(err.Error(), `Publish to "$KV.`) || strings.Contains(err.Error(), `Publish to "$O.`)) {
						cancel()
						seen <- nil
						return
					}
				case <-ctx.Done():
					seen <- errors.New("no permission violation of a JetStream subject")
					return
				}
			}
		}()
		if err := f(ctx); err == nil {
			t.Errorf("%s: allowed, want refused", what)
			cancel()
		}
		if err := <-seen; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	ctx := testContext(t)
	ops, host, watch, fs := storeAs("ops"), storeAs("host"), storeAs("watch"), storeAs("fs")

	// The host is first: it creates the bucket, and finds nothing yet.
	if r, err := host.Recall(ctx, "ann", Query{Text: "gondola"}); err != nil || len(r.Hits) != 0 {
		t.Fatalf("host recall on a new bucket: %+v, %v", r, err)
	}
	big := "gondola " + largeText(2*InlineMax)
	for _, p := range []Page{{ID: "small", Title: "Small", Text: "A gondola is a boat."}, {ID: "big", Title: "Big", Text: big}} {
		if _, err := ops.Create(ctx, "ann", p); err != nil {
			t.Fatalf("operator creates %s: %v", p.ID, err)
		}
	}
	if _, err := ops.Put(ctx, "ann", Page{ID: "big", Title: "Big", Text: big + "more"}); err != nil {
		t.Fatalf("operator replaces a large page: %v", err)
	}
	if list, err := ops.List(ctx, "ann"); err != nil || len(list) != 2 {
		t.Fatalf("operator lists: %+v, %v", list, err)
	}

	// The host's index follows the operator's writes.
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		r, err := host.Recall(ctx, "ann", Query{Text: "gondola"})
		if err == nil && len(r.Hits) != 2 {
			err = fmt.Errorf("host recall: %d hits, want 2", len(r.Hits))
		}
		return err
	})
	if ex, err := host.Read(ctx, "ann", "big", PageChunk); err != nil || ex.Offset != PageChunk {
		t.Fatalf("host reads a large page: %+v, %v", ex.Offset, err)
	}
	refused("host writes", "host", func(ctx context.Context) error {
		_, err := host.Put(ctx, "ann", Page{ID: "x", Title: "x"})
		return err
	})
	if p, err := watch.Get(ctx, "ann", "big"); err != nil || p.Text != big+"more" {
		t.Fatalf("watcher reads a large page: %d bytes, %v", len(p.Text), err)
	}
	refused("watcher writes", "watch", func(ctx context.Context) error {
		_, err := watch.Put(ctx, "ann", Page{ID: "x", Title: "x"})
		return err
	})
	refused("host of another category reads", "fs", func(ctx context.Context) error {
		_, err := fs.Get(ctx, "ann", "small")
		return err
	})
	if err := ops.Delete(ctx, "ann", "big"); err != nil {
		t.Fatalf("operator deletes a large page: %v", err)
	}
}
