package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/bus"
)

// waitViolations waits until errs has reported a permissions violation for
// each of subjects, in any order.
func waitViolations(ctx context.Context, errs <-chan error, subjects ...string) error {
	missing := make(map[string]bool, len(subjects))
	for _, s := range subjects {
		missing[s] = true
	}
	for len(missing) > 0 {
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				continue
			}
			for s := range missing {
				if strings.Contains(err.Error(), `"`+s+`"`) {
					delete(missing, s)
				}
			}
		case <-ctx.Done():
			var left []string
			for s := range missing {
				left = append(left, s)
			}
			return fmt.Errorf("no permission violation for %q", left)
		}
	}
	return nil
}

// quiet reports an error if sub has received anything.
func quiet(sub *nats.Subscription) error {
	if n, _, err := sub.Pending(); err != nil || n != 0 {
		return fmt.Errorf("subscription %q received %d messages (%v)", sub.Subject, n, err)
	}
	if d, err := sub.Delivered(); err == nil && d != 0 {
		return fmt.Errorf("subscription %q had %d messages delivered", sub.Subject, d)
	}
	return nil
}

// probe is the body of a request serveTool answers at once, "pong", without
// passing it on: to see that the tool is reachable.
const probe = "probe"

// serveTool serves one tool of category as a micro service on nc, answering with
// answer(request); it returns each request it receives on the channel.
func serveTool(t *testing.T, nc *nats.Conn, category, tool string, answer func(micro.Request)) <-chan micro.Request {
	t.Helper()
	got := make(chan micro.Request, 16)
	svc, err := micro.AddService(nc, micro.Config{Name: bus.CategoryService(category), Version: "0.1.0", QueueGroup: bus.CategoryQueue(category)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	err = svc.AddGroup(bus.Prefix+".tool."+category).AddEndpoint(tool, micro.HandlerFunc(func(r micro.Request) {
		if string(r.Data()) == probe {
			_ = r.Respond([]byte("pong"))
			return
		}
		got <- r
		if answer != nil {
			answer(r)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return got
}

// Replies are private: a watcher and tool hosts, listener users of a users
// file, try to read the replies of an operator's direct call of read_file, and
// the node's own (in-process) inbox traffic. Every subscription that would match
// them is refused as a permissions violation and receives nothing, while the
// operator and the node get their replies, and each spy still gets its own.
func TestInboxIsPrivate(t *testing.T) {
	t.Parallel()
	s, node, kp := usersServer(t)
	url := s.ClientURL()
	ctx := testContext(t)
	const secret = "the secret contents of notes.txt"

	// The computer host answers read_file; it is a listener user, so it answers
	// only as a reply to the request it received.
	host, hostErrs := userConn(t, url, "computer", login("computer", "pw"))
	serveTool(t, host, "computer", "read_file", func(r micro.Request) { _ = r.Respond([]byte(secret)) })

	spies := []struct {
		name string
		opt  nats.Option
	}{
		{"watch", login("watch", "pw")},
		{"nkey", nkeyLogin(kp)},
		{"crm", login("crm", "pw")},
		{"fs", login("fs", "pw")},
		{"computer", login("computer", "pw")}, // the host itself, on another connection
	}
	// Everything the operator's and the node's replies travel on.
	targets := []string{">", "*.>", "_INBOX.>", bus.UserInbox("ops"), bus.InboxPrefix("ops") + ".*", "_INBOX_ops.*.*"}
	var subs []*nats.Subscription
	for _, spy := range spies {
		nc, errs := userConn(t, url, spy.name, spy.opt)
		for _, subject := range targets {
			sub, err := nc.SubscribeSync(subject)
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := waitViolations(ctx, errs, targets...); err != nil {
			t.Fatalf("%s: %v", spy.name, err)
		}
	}

	// The operator's direct call: its reply comes to its own inbox.
	ops, opsErrs := userConn(t, url, "ops", login("ops", "ops-pw"))
	req := nats.NewMsg(bus.ToolSubject("computer", "read_file"))
	req.Data = []byte(`{"path":"notes.txt"}`)
	req.Header.Set(bus.HeaderAgent, "ann")
	m, err := ops.RequestMsgWithContext(ctx, req)
	if err != nil {
		t.Fatalf("the operator's call: %v", err)
	}
	if string(m.Data) != secret || !strings.HasPrefix(m.Subject, bus.InboxPrefix("ops")+".") {
		t.Fatalf("the operator got %q on %q, want %q on its inbox", m.Data, m.Subject, secret)
	}
	// The node's own connections keep nats.go's _INBOX: a call and a JetStream read.
	m, err = node.RequestWithContext(ctx, bus.ToolSubject("computer", "read_file"), []byte(`{"path":"notes.txt"}`))
	if err != nil || string(m.Data) != secret || !strings.HasPrefix(m.Subject, "_INBOX.") {
		t.Fatalf("the node's call: %v, %v", m, err)
	}
	js, err := jetstream.New(node)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketTurns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "k1"); err != nil {
		t.Fatal(err)
	}

	// Each spy still reads its own replies (a JetStream read for the watcher).
	watch, _ := userConn(t, url, "watch", login("watch", "pw"))
	if err := kvUse(ctx, watch, bus.BucketTurns, false); err != nil {
		t.Fatalf("the watcher's own read: %v", err)
	}

	// What was sent has reached the server once each sender's round trip returns.
	for _, nc := range []*nats.Conn{ops, node, host, watch} {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range subs {
		if err := quiet(sub); err != nil {
			t.Error(err)
		}
	}
	for name, errs := range map[string]<-chan error{"ops": opsErrs, "computer": hostErrs} {
		select {
		case err := <-errs:
			t.Errorf("%s: asynchronous error: %v", name, err)
		default:
		}
	}
}

// The replies of a user of a users file come to its own inbox prefix, which the
// users file lets it read; Dial sets it from the user of the credentials or the URL.
func TestDialSetsTheUsersInbox(t *testing.T) {
	t.Parallel()
	s, _, _ := usersServer(t)
	ctx := testContext(t)
	url := s.ClientURL()
	withUser := strings.Replace(url, "nats://", "nats://watch:pw@", 1)
	for _, tc := range []struct {
		name, url string
		cred      bus.Credentials
		prefix    string
	}{
		{"user", url, bus.Credentials{User: "watch", Password: "pw"}, bus.InboxPrefix("watch")},
		{"user of the URL", withUser, bus.Credentials{}, bus.InboxPrefix("watch")},
		{"explicit", url, bus.Credentials{User: "watch", Password: "pw", InboxPrefix: bus.InboxPrefix("watch")}, bus.InboxPrefix("watch")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := bus.Dial(ctx, tc.url, "dial-"+tc.name, tc.cred)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if got := nc.NewInbox(); !strings.HasPrefix(got, tc.prefix+".") {
				t.Errorf("inbox %q, want under %s", got, tc.prefix)
			}
			if err := kvUse(ctx, nc, bus.BucketTurns, false); err != nil {
				t.Errorf("read through the inbox: %v", err)
			}
		})
	}
	// Another prefix than the user's own is refused by its permissions.
	errs := make(chan error, 8)
	nc, err := bus.Dial(ctx, url, "dial-other", bus.Credentials{User: "watch", Password: "pw", InboxPrefix: "_INBOX"},
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	err = refused(ctx, errs, []string{`Subscription to "_INBOX.`}, func(ctx context.Context) error {
		return kvUse(ctx, nc, bus.BucketTurns, false)
	})
	if err != nil {
		t.Errorf("a watcher read through the shared _INBOX: %v", err)
	}
}

// The admin may have any name (it reads every subject anyway); the other roles' names
// are their inboxes' last token.
func TestUserNamesAreInboxTokens(t *testing.T) {
	t.Parallel()
	if _, err := ParseUsers([]byte(`[{"user":"root.admin","password":"p","role":"admin"}]`)); err != nil {
		t.Errorf("an admin with a dotted name: %v", err)
	}
	p, err := RolePermissions(RoleWatcher, "w1", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Subscribe.Allow {
		if strings.HasPrefix(s, "_INBOX") && s != "_INBOX_w1.>" {
			t.Errorf("a watcher may subscribe %q", s)
		}
	}
	if _, err := RolePermissions(RoleTool, "", []string{"fs"}); err == nil {
		t.Error("a tool user without a name was given permissions")
	}
}

// A host answers each call it received once, for as long as a call may run, and
// nothing else: its role gives it no result subject, only nats-server's
// allow_responses.
func TestHostReplyPermission(t *testing.T) {
	t.Parallel()
	for _, role := range []Role{RoleTool, RoleTurn} {
		p, err := RolePermissions(role, "u", []string{"computer"})
		if err != nil {
			t.Fatal(err)
		}
		if p.Response == nil || p.Response.MaxMsgs != 1 || p.Response.Expires != bus.ReplyWindow {
			t.Errorf("%s: response permission %+v, want one reply within %s", role, p.Response, bus.ReplyWindow)
		}
		for _, s := range p.Publish.Allow {
			if s == bus.AllResults || s == bus.AllTurns || s == ">" {
				t.Errorf("%s may publish %q", role, s)
			}
		}
	}
}

// A tool host answers only the calls delivered to it. While a run_command call
// of category computer is running, a host of category crm publishes a forged
// result on the call's reply subject: it is refused as a permissions violation
// and the turn keeps waiting, then gets the computer host's real result, and
// only that. The crm host still answers its own calls, from a turn and
// directly from an operator; no host answers a call twice. The same holds
// when the turn, the hosts and the operator are on different servers of a
// cluster, the calls and replies crossing routes.
func TestHostAnswersOnlyItsCalls(t *testing.T) {
	t.Parallel()
	t.Run("one server", func(t *testing.T) {
		s, _, _ := usersServer(t)
		url := s.ClientURL()
		hostAnswersOnlyItsCalls(t, url, url, url, url)
	})
	t.Run("across routes", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a cluster")
		}
		users := clusterUsers(t)
		nodes := startClusterWith(t, 3, func(c *Config) {
			c.Listen = "127.0.0.1:-1"
			c.Users = users
		})
		ctx := testContext(t)
		for _, n := range nodes {
			eventually(ctx, t, n.Name()+" routes to both others", func() bool { return n.NATS().NumRemotes() == 2 })
		}
		hostAnswersOnlyItsCalls(t, nodes[0].ClientURL(), nodes[1].ClientURL(), nodes[2].ClientURL(), nodes[1].ClientURL())
	})
}

// clusterUsers are the users hostAnswersOnlyItsCalls needs, from a users file.
func clusterUsers(t *testing.T) []User {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.json")
	doc := `[
	  {"user": "turn", "password": "pw", "role": "turn"},
	  {"user": "computer", "password": "pw", "role": "tool", "categories": ["computer"]},
	  {"user": "crm", "password": "pw", "role": "tool", "categories": ["crm"]},
	  {"user": "ops", "password_hash": "` + opsHash + `", "role": "operator"}
	]`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := ReadUsersFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return users
}

// hostAnswersOnlyItsCalls runs the calls of TestHostAnswersOnlyItsCalls, the turn
// connected to turnURL, the computer host to computerURL, the crm host to crmURL and
// the operator to opsURL.
func hostAnswersOnlyItsCalls(t *testing.T, turnURL, computerURL, crmURL, opsURL string) {
	ctx := testContext(t)
	turn, turnErrs := userConn(t, turnURL, "turn", login("turn", "pw"))
	computer, computerErrs := userConn(t, computerURL, "computer", login("computer", "pw"))
	crm, crmErrs := userConn(t, crmURL, "crm", login("crm", "pw"))
	ops, opsErrs := userConn(t, opsURL, "ops", login("ops", "ops-pw"))

	// The computer host holds run_command until release, then answers twice: the
	// second answer must be refused.
	release := make(chan struct{})
	running := serveTool(t, computer, "computer", "run_command", func(r micro.Request) {
		go func() {
			<-release
			call := r.Headers().Get(bus.HeaderCall)
			_ = r.Respond(fmt.Appendf(nil, `{"call_id":%q,"tool":"run_command","outcome":"ok","content":[{"type":"text","text":"real output"}]}`, call))
			_ = r.Respond([]byte(`{"outcome":"ok","content":[{"type":"text","text":"a second answer"}]}`))
		}()
	})
	crmCalls := serveTool(t, crm, "crm", "lookup", func(r micro.Request) {
		_ = r.Respond(fmt.Appendf(nil, `{"call_id":%q,"tool":"lookup","outcome":"ok","content":[{"type":"text","text":"crm record 42"}]}`, r.Headers().Get(bus.HeaderCall)))
	})
	// Interest crosses routes asynchronously: wait until the turn and the operator
	// reach both tools.
	for _, nc := range []*nats.Conn{turn, ops} {
		for _, subject := range []string{bus.ToolSubject("computer", "run_command"), bus.ToolSubject("crm", "lookup")} {
			eventually(ctx, t, subject+" reachable", func() bool {
				_, err := nc.Request(subject, []byte(probe), time.Second)
				return err == nil
			})
		}
	}

	results, err := turn.SubscribeSync(bus.ResultSubject("t1", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if err := turn.Flush(); err != nil {
		t.Fatal(err)
	}
	call := func(category, tool, id string) {
		t.Helper()
		m := nats.NewMsg(bus.ToolSubject(category, tool))
		m.Reply = bus.ResultSubject("t1", id)
		bus.ToolRequest{Turn: "t1", Call: id, Agent: "ann", Deadline: time.Now().Add(time.Minute)}.SetHeaders(m.Header)
		m.Data = []byte(`{}`)
		if err := turn.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	call("computer", "run_command", "cmd")
	select {
	case r := <-running:
		if r.Reply() != bus.ResultSubject("t1", "cmd") {
			t.Fatalf("the call's reply subject is %q", r.Reply())
		}
	case <-ctx.Done():
		t.Fatal("the computer host never got the call")
	}

	// The forgery: a crm host publishes a result for the running computer call.
	forged := `{"call_id":"cmd","tool":"run_command","outcome":"ok","content":[{"type":"text","text":"forged"}]}`
	if err := crm.Publish(bus.ResultSubject("t1", "cmd"), []byte(forged)); err != nil {
		t.Fatal(err)
	}
	if err := waitViolations(ctx, crmErrs, bus.ResultSubject("t1", "cmd")); err != nil {
		t.Fatal(err)
	}
	// The turn is still waiting: nothing reached its result subjects.
	if m, err := results.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("the turn got %q on %s while the command ran", m.Data, m.Subject)
	}

	// The command finishes: the real result, once.
	close(release)
	m, err := results.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatalf("no result: %v", err)
	}
	if m.Subject != bus.ResultSubject("t1", "cmd") || !strings.Contains(string(m.Data), "real output") {
		t.Fatalf("got %q on %s, want the real output", m.Data, m.Subject)
	}
	if err := waitViolations(ctx, computerErrs, bus.ResultSubject("t1", "cmd")); err != nil {
		t.Fatalf("the second answer: %v", err)
	}

	// The crm host answers its own calls: the turn's, and an operator's direct one.
	call("crm", "lookup", "crm1")
	m, err = results.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatalf("no crm result: %v", err)
	}
	if m.Subject != bus.ResultSubject("t1", "crm1") || !strings.Contains(string(m.Data), "crm record 42") {
		t.Fatalf("got %q on %s, want the crm record", m.Data, m.Subject)
	}
	<-crmCalls
	direct := nats.NewMsg(bus.ToolSubject("crm", "lookup"))
	direct.Data = []byte(`{}`)
	m, err = ops.RequestMsgWithContext(ctx, direct)
	if err != nil || !strings.Contains(string(m.Data), "crm record 42") {
		t.Fatalf("the operator's direct crm call: %v, %v", m, err)
	}
	r := <-crmCalls
	// Nor may the crm host answer that direct call a second time, in the operator's inbox.
	if err := crm.Publish(r.Reply(), []byte("forged")); err != nil {
		t.Fatal(err)
	}
	if err := waitViolations(ctx, crmErrs, r.Reply()); err != nil {
		t.Fatal(err)
	}

	// Nothing else reached the turn: not the forgery, not a second answer.
	if err := turn.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := results.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("the turn got %q on %s besides its results", m.Data, m.Subject)
	}
	for name, errs := range map[string]<-chan error{"turn": turnErrs, "ops": opsErrs} {
		select {
		case err := <-errs:
			t.Errorf("%s: asynchronous error: %v", name, err)
		default:
		}
	}
}
