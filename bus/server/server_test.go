package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/bus"
)

func TestStartInProcessOpensNoPort(t *testing.T) {
	t.Parallel()
	s, rec := startServer(t, Config{})

	if got := s.ClientURL(); got != "" {
		t.Errorf("ClientURL() = %q, want empty", got)
	}
	ns := s.NATS()
	if ns.Addr() != nil || ns.ClusterAddr() != nil || ns.MonitorAddr() != nil {
		t.Errorf("listeners: client %v, cluster %v, monitor %v; want none", ns.Addr(), ns.ClusterAddr(), ns.MonitorAddr())
	}
	if !strings.HasPrefix(s.Name(), "toolbus-") {
		t.Errorf("Name() = %q, want toolbus-<random>", s.Name())
	}

	sub, err := s.Connect("sub")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := s.Connect("pub")
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := sub.SubscribeSync("greeting")
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("greeting", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	m, err := msgs.NextMsgWithContext(testContext(t))
	if err != nil {
		t.Fatalf("receive in-process: %v", err)
	}
	if string(m.Data) != "hello" {
		t.Errorf("received %q, want hello", m.Data)
	}
	// The in-process user is an nkey: the server has no plain text password
	// to warn about.
	if w := rec.Find(slog.LevelWarn, "Plaintext"); len(w) != 0 {
		t.Errorf("unexpected warning %q", w)
	}
}

func TestOwnedStoreDirRemovedOnClose(t *testing.T) {
	t.Parallel()
	s, err := Start(testContext(t), Config{Logger: slog.New(&logRecorder{})})
	if err != nil {
		t.Fatal(err)
	}
	dir := s.StoreDir()
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		t.Fatalf("JetStream store: %v", err)
	}
	s.Close()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("store dir after Close: %v, want it removed", err)
	}
}

func TestCloseIsIdempotentAndClosesConnections(t *testing.T) {
	t.Parallel()
	s, err := Start(testContext(t), Config{Logger: slog.New(&logRecorder{})})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := s.Connect("client")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if !nc.IsClosed() {
		t.Error("connection from Connect still open after Close")
	}
	if _, err := s.Connect("late"); !errors.Is(err, ErrClosed) {
		t.Errorf("Connect after Close: %v, want ErrClosed", err)
	}
}

func TestStoreDirSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func() (*Server, jetstream.KeyValue) {
		s, err := Start(testContext(t), Config{StoreDir: dir, Logger: slog.New(&logRecorder{})})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := s.Connect("restart")
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := bus.KeyValue(testContext(t), js, bus.BucketTodos, 1)
		if err != nil {
			t.Fatal(err)
		}
		return s, kv
	}

	s, kv := start()
	rev, err := kv.Put(testContext(t), "agent1.list", []byte("buy milk"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		t.Fatalf("given store dir after Close: %v, want it kept", err)
	}

	s, kv = start()
	defer s.Close()
	e, err := kv.Get(testContext(t), "agent1.list")
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if string(e.Value()) != "buy milk" || e.Revision() != rev {
		t.Errorf("after restart: %q rev %d, want %q rev %d", e.Value(), e.Revision(), "buy milk", rev)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	user := []User{{Name: "u", Password: "p"}}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"listen without users", Config{Listen: "127.0.0.1:-1"}, ErrNoUsers.Error()},
		{"bad listen address", Config{Listen: "127.0.0.1", Users: user}, "client listener"},
		{"bad listen port", Config{Listen: "127.0.0.1:http", Users: user}, "bad port"},
		{"user without password", Config{Listen: "127.0.0.1:-1", Users: []User{{Name: "u"}}}, "name and password are required"},
		{"user twice", Config{Listen: "127.0.0.1:-1", Users: append(user, user...)}, "defined twice"},
		{"cluster without name", Config{Cluster: &ClusterConfig{Listen: "127.0.0.1:-1"}}, "cluster name is required"},
		{"cluster on open address without credentials", Config{Cluster: &ClusterConfig{Name: "c", Listen: "0.0.0.0:6222"}}, "route credentials are required"},
		{"cluster with half the credentials", Config{Cluster: &ClusterConfig{Name: "c", Listen: "127.0.0.1:-1", Username: "r"}}, "go together"},
		{"cluster with bad route", Config{Cluster: &ClusterConfig{Name: "c", Listen: "127.0.0.1:-1", Routes: []string{"nats://"}}}, "no host"},
		{"route with credentials and a bad port", Config{Cluster: &ClusterConfig{Name: "c", Listen: "127.0.0.1:-1", Routes: []string{"nats://r:routesecret@127.0.0.1:port"}}},
			`route "nats://r:xxxxx@127.0.0.1:port": invalid port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Start(testContext(t), tt.cfg)
			if err == nil {
				s.Close()
				t.Fatal("Start succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "routesecret") {
				t.Errorf("error %q shows the route password", err)
			}
		})
	}
	_, err := Start(testContext(t), Config{Listen: "127.0.0.1:-1"})
	if !errors.Is(err, ErrNoUsers) {
		t.Errorf("listen without users: %v, want ErrNoUsers", err)
	}
}

func TestListenerAuthentication(t *testing.T) {
	t.Parallel()
	s, rec := startServer(t, Config{Listen: "127.0.0.1:0", Users: []User{{Name: "alice", Password: "right"}}})
	url := s.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":0") || strings.HasSuffix(url, ":-1") {
		t.Fatalf("ClientURL() = %q, want nats://127.0.0.1:<port>", url)
	}

	tests := []struct {
		name string
		opts []nats.Option
		ok   bool
	}{
		{"right password", []nats.Option{nats.UserInfo("alice", "right")}, true},
		{"wrong password", []nats.Option{nats.UserInfo("alice", "wrong")}, false},
		{"no credentials", nil, false},
		// The in-process user's key is accepted only in-process.
		{"in-process key over TCP", []nats.Option{nats.Nkey(s.userPub, s.userKey.Sign)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := append([]nats.Option{nats.Name(tt.name), nats.MaxReconnects(0)}, tt.opts...)
			nc, err := nats.Connect(url, opts...)
			if tt.ok {
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				nc.Close()
				return
			}
			if err == nil {
				nc.Close()
				t.Fatal("connected, want refused")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Errorf("connect: %v, want %v", err, nats.ErrAuthorization)
			}
		})
	}
	if w := rec.Find(slog.LevelWarn, "Plaintext passwords"); len(w) == 0 {
		t.Error("no plaintext password warning reached the logger")
	}
}

// roleServer is a listening server with one user per role, and an
// unrestricted in-process observer.
func roleServer(t *testing.T) (*Server, *nats.Conn) {
	t.Helper()
	s, _ := startServer(t, Config{Listen: "127.0.0.1:-1", Users: []User{
		{Name: "turn", Password: "pw", Permissions: WithInbox(TurnPermissions(), "turn")},
		{Name: "fs", Password: "pw", Permissions: WithInbox(ToolPermissions("fs"), "fs")},
		{Name: "todo", Password: "pw", Permissions: WithInbox(WithJetStream(ToolPermissions("todo")), "todo")},
		{Name: "control", Password: "pw", Permissions: WithInbox(ControlPermissions(), "control")},
		{Name: "admin", Password: "pw", Permissions: AdminPermissions()},
	}})
	observer, err := s.Connect("observer")
	if err != nil {
		t.Fatal(err)
	}
	return s, observer
}

// roleConn connects as user over TCP; asynchronous errors (permission
// violations) arrive on the returned channel.
func roleConn(t *testing.T, s *Server, user string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, "pw"), nats.Name(user), nats.CustomInboxPrefix(bus.InboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

func waitViolation(ctx context.Context, errs <-chan error, subject string) error {
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("no permission violation for %q", subject)
		}
	}
}

func TestRolePermissions(t *testing.T) {
	t.Parallel()
	s, observer := roleServer(t)
	const turn, call = "t1", "c1"

	tests := []permissionCase{
		{"fs", true, bus.ToolSubject("web", "search"), "", false},
		{"fs", true, bus.ToolSubject("fs", "read"), "", false},
		{"fs", true, bus.ResultSubject(turn, call), "", false}, // only as the answer to a call it received
		{"fs", false, "_INBOX.>", "_INBOX.x", false},
		{"fs", false, bus.UserInbox("fs"), bus.InboxPrefix("fs") + ".x", true},
		{"fs", true, bus.EventSubject(turn, call, bus.EventStarted), "", true},
		{"fs", true, bus.AbortSubject(turn), "", false},
		{"fs", true, "$JS.API.INFO", "", false},
		{"fs", true, "$JS.API.STREAM.INFO.KV_" + bus.BucketTurns, "", true},
		{"fs", true, "$JS.API.DIRECT.GET.KV_" + bus.BucketTurns + ".$KV." + bus.BucketTurns + ".t1", "", true},
		{"fs", true, "$JS.API.STREAM.INFO.KV_" + bus.BucketAgents, "", false},
		{"fs", true, "$JS.API.CONSUMER.CREATE.KV_" + bus.BucketTurns, "", false},
		{"fs", true, "$KV." + bus.BucketTurns + ".t1", "", false},
		{"fs", false, bus.CategorySubjects("fs"), bus.ToolSubject("fs", "read"), true},
		{"fs", false, bus.ToolSubject("fs", "read"), bus.ToolSubject("fs", "read"), true},
		{"fs", false, bus.CategorySubjects("web"), bus.ToolSubject("web", "search"), false},
		{"fs", false, bus.ToolSubject("web", "search"), bus.ToolSubject("web", "search"), false},
		{"fs", false, bus.AbortSubject(turn), bus.AbortSubject(turn), true},
		{"fs", false, "$SRV.PING.toolbus-fs", "$SRV.PING.toolbus-fs", true},
		{"fs", false, "$SRV.PING.toolbus-web", "$SRV.PING.toolbus-web", false},
		{"fs", false, bus.AllTurns, bus.ResultSubject(turn, call), false},
		{"todo", true, "$JS.API.INFO", "", true},
		{"todo", false, bus.CategorySubjects("fs"), bus.ToolSubject("fs", "read"), false},
		{"turn", true, bus.ToolSubject("web", "search"), "", true},
		{"turn", true, bus.AbortSubject(turn), "", true},
		{"turn", true, bus.TurnStatusSubject(turn, bus.StatusDone), "", true},
		{"turn", true, bus.TranscriptSubject(turn), "", true},
		{"turn", true, bus.ResultSubject(turn, call), "", false},
		{"turn", false, bus.TurnSubjects(turn), bus.EventSubject(turn, call, bus.EventProgress), true},
		{"turn", false, bus.AnyNodeStartTurn, bus.AnyNodeStartTurn, true},
		{"turn", false, bus.AllTools, bus.ToolSubject("fs", "read"), false},
		{"control", true, bus.AnyNodeStartTurn, "", true},
		{"control", true, bus.NodeStartTurnSubject("n1"), "", true},
		{"control", true, bus.ResultSubject(turn, call), "", false},
		{"control", false, bus.AllTurns, bus.AbortSubject(turn), true},
		{"control", false, bus.AllTools, bus.ToolSubject("fs", "read"), false},
		{"admin", true, bus.ResultSubject(turn, call), "", true},
		{"admin", false, bus.AllTools, bus.ToolSubject("fs", "read"), true},
	}
	for _, tt := range tests {
		t.Run(tt.String(), func(t *testing.T) {
			nc, errs := roleConn(t, s, tt.user)
			tt.check(t, nc, errs, observer)
		})
	}
}

// permissionCase is one permission of a user to check: a publication to subject, or a
// subscription to it that a message on sample reaches, allowed or denied.
type permissionCase struct {
	user    string
	publish bool   // publish to subject, or subscribe to it
	subject string // what is published or subscribed
	sample  string // for subscriptions: a concrete subject the subscription matches
	allowed bool
}

func (tt permissionCase) String() string {
	op, want := "subscribe", "denied"
	if tt.publish {
		op = "publish"
	}
	if tt.allowed {
		want = "allowed"
	}
	return fmt.Sprintf("%s %s %s %s", tt.user, op, tt.subject, want)
}

// check checks the case on nc, the user's connection (errs its asynchronous errors),
// with observer, a connection allowed everything, on the other end: an allowed message
// is delivered, a denied one is a permissions violation of nc.
func (tt permissionCase) check(t *testing.T, nc *nats.Conn, errs <-chan error, observer *nats.Conn) {
	t.Helper()
	ctx := testContext(t)
	sender, receiver, sample := nc, observer, tt.subject
	if !tt.publish {
		sender, receiver, sample = observer, nc, tt.sample
	}
	msgs, err := receiver.SubscribeSync(tt.subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := receiver.Flush(); err != nil {
		t.Fatal(err)
	}
	if !tt.allowed {
		if tt.publish {
			if err := sender.Publish(sample, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		if err := waitViolation(ctx, errs, tt.subject); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := sender.Publish(sample, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := msgs.NextMsgWithContext(ctx); err != nil {
		t.Fatalf("message on %q not delivered: %v", sample, err)
	}
}

// TestRolesRunAToolCall runs one call the way the protocol does, each side
// with its role: a micro service hosts the fs category, the turn discovers
// it and calls a tool with its result subject as the reply subject.
func TestRolesRunAToolCall(t *testing.T) {
	t.Parallel()
	s, _ := roleServer(t)
	ctx := testContext(t)
	host, hostErrs := roleConn(t, s, "fs")
	turnConn, turnErrs := roleConn(t, s, "turn")

	svc, err := micro.AddService(host, micro.Config{Name: bus.CategoryService("fs"), Version: "0.1.0", QueueGroup: bus.CategoryQueue("fs")})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	err = svc.AddGroup(bus.Prefix+".tool.fs").AddEndpoint("read", micro.HandlerFunc(func(r micro.Request) {
		_ = r.Respond([]byte("contents of " + r.Headers().Get(bus.HeaderCall)))
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Flush(); err != nil {
		t.Fatal(err)
	}

	// Discovery through micro works under the tool role.
	ping, err := turnConn.RequestWithContext(ctx, "$SRV.PING."+bus.CategoryService("fs"), nil)
	if err != nil {
		t.Fatalf("micro ping: %v", err)
	}
	if !strings.Contains(string(ping.Data), bus.CategoryService("fs")) {
		t.Errorf("ping reply %s does not name the service", ping.Data)
	}

	results, err := turnConn.SubscribeSync(bus.TurnSubjects("t1"))
	if err != nil {
		t.Fatal(err)
	}
	req := nats.NewMsg(bus.ToolSubject("fs", "read"))
	req.Reply = bus.ResultSubject("t1", "c1")
	req.Header.Set(bus.HeaderTurn, "t1")
	req.Header.Set(bus.HeaderCall, "c1")
	if err := turnConn.PublishMsg(req); err != nil {
		t.Fatal(err)
	}
	m, err := results.NextMsgWithContext(ctx)
	if err != nil {
		t.Fatalf("no result: %v", err)
	}
	ts, ok := bus.ParseTurnSubject(m.Subject)
	if !ok || ts.Kind != bus.KindResult || ts.Call != "c1" || string(m.Data) != "contents of c1" {
		t.Errorf("result %q on %q (%+v), want \"contents of c1\" on %s", m.Data, m.Subject, ts, bus.ResultSubject("t1", "c1"))
	}
	for _, errs := range []<-chan error{hostErrs, turnErrs} {
		select {
		case err := <-errs:
			t.Errorf("asynchronous error: %v", err)
		default:
		}
	}
}

func TestJetStreamRoleUsesKeyValue(t *testing.T) {
	t.Parallel()
	s, _ := roleServer(t)
	ctx := testContext(t)
	nc, _ := roleConn(t, s, "todo")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := bus.KeyValue(ctx, js, bus.BucketTodos, 1)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "agent1.>")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := kv.Put(ctx, "agent1.list", []byte("[]")); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "agent1.list")
	if err != nil || string(e.Value()) != "[]" {
		t.Fatalf("get: %v, %v", e, err)
	}
	for {
		select {
		case u := <-w.Updates():
			if u != nil && u.Key() == "agent1.list" {
				return
			}
		case <-ctx.Done():
			t.Fatal("watch delivered no update")
		}
	}
}

func TestServerFatalErrorReachesLoggerAndStart(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	rec := &logRecorder{}
	s, err := Start(testContext(t), Config{
		Listen: busy.Addr().String(),
		Users:  []User{{Name: "u", Password: "p"}},
		Logger: slog.New(rec),
	})
	if err == nil {
		s.Close()
		t.Fatal("Start on a busy port succeeded")
	}
	// The process is still here: the server's Fatalf did not exit it.
	if !strings.Contains(err.Error(), "Error listening on port") {
		t.Errorf("Start error %q does not give the server's reason", err)
	}
	if got := rec.Find(slog.LevelError, "Error listening on port"); len(got) == 0 {
		t.Error("the fatal error did not reach the logger")
	}
}

func TestServerLoggerLevels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		min      slog.Level
		wantMsgs []string
	}{
		{"default: warnings and errors", slog.LevelWarn, []string{"warn", "error", "fatal"}},
		{"debug", slog.LevelDebug, []string{"notice", "warn", "error", "fatal", "debug"}},
		{"handler decides", slog.Level(math.MinInt), []string{"notice", "warn", "error", "fatal", "debug", "trace"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &logRecorder{}
			l := newServerLogger(slog.New(rec), tt.min)
			l.Noticef("notice")
			l.Warnf("warn")
			l.Errorf("error")
			l.Fatalf("%s", "fatal")
			l.Debugf("debug")
			l.Tracef("trace")
			got := rec.Messages()
			if strings.Join(got, ",") != strings.Join(tt.wantMsgs, ",") {
				t.Errorf("logged %v, want %v", got, tt.wantMsgs)
			}
			if msg := <-l.fatal; msg != "fatal" {
				t.Errorf("fatal message %q, want fatal", msg)
			}
		})
	}
}

// A refused connection names the server without the password of its URL.
func TestDialErrorHidesURLCredentials(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, Config{Listen: "127.0.0.1:0", Users: []User{{Name: "ops", Password: "right"}}})
	url := strings.Replace(s.ClientURL(), "nats://", "nats://ops:wrongsecret@", 1)
	nc, err := bus.Dial(testContext(t), url, "dial-test", bus.Credentials{})
	if err == nil {
		nc.Close()
		t.Fatal("connected with a wrong password")
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("err = %v, want %v", err, nats.ErrAuthorization)
	}
	if strings.Contains(err.Error(), "wrongsecret") || !strings.Contains(err.Error(), "nats://ops:xxxxx@127.0.0.1:") {
		t.Errorf("error %q: want the URL with its password masked", err)
	}
}
