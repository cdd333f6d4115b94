package client

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/schema"
)

// A watcher may not start a turn, abort, approve or call: the server refuses each
// publish, and the client says so at once (ErrRefused, the server's words) instead of
// waiting for a reply that cannot come (a start waited out client.StartTimeout). An
// operator's start with no node to run it, or approval of a call nobody holds, is not a
// refusal.
func TestRefusedAtOnce(t *testing.T) {
	t.Parallel()
	perms := func(role server.Role, user string) server.User {
		p, err := server.RolePermissions(role, user, nil)
		if err != nil {
			t.Fatal(err)
		}
		return server.User{Name: user, Password: user + "-pw", Role: role, Permissions: p}
	}
	srv := bustest.Server(t, func(c *server.Config) {
		c.Listen = "127.0.0.1:-1"
		c.Users = []server.User{perms(server.RoleWatcher, "watch"), perms(server.RoleOperator, "ops")}
	})
	ctx := bustest.Context(t)
	dial := func(user string) *Client {
		c, err := Dial(ctx, srv.ClientURL(), "test-"+user, bus.Credentials{User: user, Password: user + "-pw"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	watch, ops := dial("watch"), dial("ops")

	refused := func(what string, err error, subject string) {
		t.Helper()
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `Permissions Violation for Publish to "`+subject+`"`) {
			t.Errorf("%s: %v", what, err)
		}
	}
	_, err := watch.Start(ctx, bus.TurnSpec{ID: "t1", Kind: bus.TurnMain, Agent: "ann", Input: "hello"}, "")
	refused("start", err, bus.AnyNodeStartTurn)
	_, err = watch.Start(ctx, bus.TurnSpec{ID: "t2", Kind: bus.TurnMain, Agent: "ann", Input: "hello"}, "n1")
	refused("start on a node", err, bus.NodeStartTurnSubject("n1"))
	refused("abort", watch.Abort(ctx, "t1", "no"), bus.AbortSubject("t1"))
	_, err = watch.Approve(ctx, "t1", "c1", bus.Approval{})
	refused("approve", err, bus.ApproveSubject("t1", "c1"))
	spec := &toolbus.Spec{Name: "todo_read", Category: "todo", Timeout: 5 * time.Second}
	_, err = watch.Call(ctx, spec, "ann", schema.Args{JSON: []byte(`{}`)})
	refused("call", err, bus.ToolSubject("todo", "todo_read"))

	// Many at once, on different subjects, as the console's pages make them (an abort
	// beside the reads that ask a turn about its held calls): each reads its own refusal,
	// not another's (it once reported a watcher's abort as sent).
	errs := make(chan string, 64)
	var wg sync.WaitGroup
	for i := range 16 {
		turn := fmt.Sprintf("c%d", i)
		wg.Go(func() {
			if err := watch.Abort(ctx, turn, "no"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `"`+bus.AbortSubject(turn)+`"`) {
				errs <- fmt.Sprintf("abort %s: %v", turn, err)
			}
		})
		wg.Go(func() {
			if _, err := watch.Approve(ctx, turn, "c1", bus.Approval{}); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `"`+bus.ApproveSubject(turn, "c1")+`"`) {
				errs <- fmt.Sprintf("approve %s: %v", turn, err)
			}
		})
		wg.Go(func() {
			if err := watch.CancelCall(ctx, turn, "c1", "no"); !errors.Is(err, ErrRefused) {
				errs <- fmt.Sprintf("cancel a call of %s: %v", turn, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}

	if err := ops.Abort(ctx, "t1", "why not"); err != nil {
		t.Errorf("an operator's abort: %v", err)
	}
	if _, err := ops.Approve(ctx, "t1", "c1", bus.Approval{}); errors.Is(err, ErrRefused) || err == nil {
		t.Errorf("an operator's approval of a call nobody holds: %v", err)
	}
	if _, err := ops.Start(ctx, bus.TurnSpec{ID: "t3", Kind: bus.TurnMain, Agent: "ann", Input: "hello"}, ""); errors.Is(err, ErrRefused) ||
		err == nil || !strings.Contains(err.Error(), "no node runs turns") {
		t.Errorf("an operator's start with no node: %v", err)
	}
}

// A user who may call tools but not read a call's result subject (a hand-made role
// with only its inbox) is told at once that the reply's subscription was refused,
// rather than waiting out the call's deadline for a reply that cannot reach it.
func TestCallRefusedItsResultSubject(t *testing.T) {
	t.Parallel()
	perms := server.WithInbox(&natsserver.Permissions{
		Publish: &natsserver.SubjectPermission{Allow: []string{bus.AllTools}},
	}, "caller")
	srv := bustest.Server(t, func(c *server.Config) {
		c.Listen = "127.0.0.1:-1"
		c.Users = []server.User{{Name: "caller", Password: "caller-pw", Role: server.RoleAdmin, Permissions: perms}}
	})
	ctx := bustest.Context(t)
	c, err := Dial(ctx, srv.ClientURL(), "test-caller", bus.Credentials{User: "caller", Password: "caller-pw"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	spec := &toolbus.Spec{Name: "todo_read", Category: "todo", Timeout: time.Minute}
	began := time.Now()
	_, err = c.CallWith(ctx, spec, "ann", schema.Args{JSON: []byte(`{}`)}, CallIDs{Turn: "t1", Call: "c1"})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `Permissions Violation for Subscription to "`+bus.ResultSubject("t1", "c1")+`"`) {
		t.Errorf("call: %v, want the result subject's subscription refused", err)
	}
	if waited := time.Since(began); waited > 30*time.Second {
		t.Errorf("refused after %s: it waited for the call's deadline", waited)
	}
}
