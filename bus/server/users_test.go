package server

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/bus"
)

// opsHash is bcrypt("ops-pw") at cost 4.
const opsHash = "$2a$04$IFv54VJt2aG980QaKeF0H.IxN6gIaA62.Yg530O1.Q4WqBthna/kC"

// usersServer starts a listening server whose users come from a users file
// with one user per role, and creates the buckets and streams a bus has once
// a turn node has started. It returns the server, an unrestricted
// in-process observer, and the seed of the nkey watcher.
func usersServer(t *testing.T) (*Server, *nats.Conn, nkeys.KeyPair) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	doc := fmt.Sprintf(`[
	  {"user": "turn", "password": "pw", "role": "turn"},
	  {"user": "fs", "password": "pw", "role": "tool", "categories": ["fs"]},
	  {"user": "todo", "password": "pw", "role": "tool", "categories": ["todo"]},
	  {"user": "web", "password": "pw", "role": "tool", "categories": ["web"]},
	  {"user": "bg", "password": "pw", "role": "tool", "categories": ["jobs", "schedule"]},
	  {"user": "wf", "password": "pw", "role": "tool", "categories": ["workflow"]},
	  {"user": "computer", "password": "pw", "role": "tool", "categories": ["computer"]},
	  {"user": "crm", "password": "pw", "role": "tool", "categories": ["crm"]},
	  {"user": "ops", "password_hash": %q, "role": "operator"},
	  {"user": "watch", "password": "pw", "role": "watcher"},
	  {"nkey": %q, "role": "watcher"},
	  {"user": "admin", "password": "pw", "role": "admin"}
	]`, opsHash, pub)
	path := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := ReadUsersFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := startServer(t, Config{Listen: "127.0.0.1:-1", Users: users})
	observer, err := s.Connect("observer")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	js, err := jetstream.New(observer)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{bus.BucketTurns, bus.BucketAgents, bus.BucketTodos, bus.BucketJobs, bus.BucketSchedules, bus.BucketWorkflows} {
		kv, err := bus.KeyValue(ctx, js, b, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "k1", []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	// The transcripts and the intake as far as permissions go: their names and
	// subjects (package durable owns their configuration, and cannot be imported here).
	for _, c := range []jetstream.StreamConfig{
		{Name: bus.StreamTranscripts, Subjects: []string{bus.AllTranscripts}, Storage: jetstream.FileStorage, AllowDirect: true},
		{Name: bus.StreamIntake, Subjects: []string{bus.AllIntake}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
			AllowMsgSchedules: true, AllowRollup: true},
	} {
		if _, err := bus.Stream(ctx, js, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, bus.TranscriptSubject("t1"), []byte(`{"type":"message"}`)); err != nil {
		t.Fatal(err)
	}
	return s, observer, kp
}

// login is how a user of the users file connects: its password, and its own
// inbox prefix, the one it may read (bus.Dial sets it from the user).
func login(user, pass string) nats.Option {
	return func(o *nats.Options) error {
		o.User, o.Password, o.InboxPrefix = user, pass, bus.InboxPrefix(user)
		return nil
	}
}

// nkeyLogin is login for an nkey user: its inbox prefix is its public key's.
func nkeyLogin(kp nkeys.KeyPair) nats.Option {
	pub := must(kp.PublicKey())
	return func(o *nats.Options) error {
		if err := nats.Nkey(pub, kp.Sign)(o); err != nil {
			return err
		}
		o.InboxPrefix = bus.InboxPrefix(pub)
		return nil
	}
}

// userConn connects to url with opts; asynchronous errors arrive on the
// returned channel.
func userConn(t *testing.T, url, name string, opts ...nats.Option) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 64)
	opts = append([]nats.Option{nats.Name(name), nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		})}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// Only a turn node may publish a turn's status: a tool host, an operator or
// a watcher that tries is refused, so none can forge a turn's end.
func TestOnlyTurnRolePublishesStatus(t *testing.T) {
	t.Parallel()
	s, observer, _ := usersServer(t)
	subject := bus.TurnStatusSubject("t1", bus.StatusDone)
	got, err := observer.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := observer.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user, pass string
		allowed    bool
	}{
		{"fs", "pw", false}, {"todo", "pw", false}, {"ops", "ops-pw", false}, {"watch", "pw", false},
		{"turn", "pw", true}, {"admin", "pw", true},
	} {
		t.Run(tc.user, func(t *testing.T) {
			ctx := testContext(t)
			nc, errs := userConn(t, s.ClientURL(), tc.user, login(tc.user, tc.pass))
			if err := nc.Publish(subject, []byte(`{"state":"completed"}`)); err != nil {
				t.Fatal(err)
			}
			if !tc.allowed {
				if err := waitViolation(ctx, errs, subject); err != nil {
					t.Fatal(err)
				}
				// The publish was dropped: what the observer sees next is the
				// turn role's message, never this one.
				return
			}
			m, err := got.NextMsgWithContext(ctx)
			if err != nil {
				t.Fatalf("status not delivered: %v", err)
			}
			if string(m.Data) != `{"state":"completed"}` {
				t.Errorf("got %s", m.Data)
			}
		})
	}
	// Nothing but the two allowed publishes reached the observer.
	if n, _, _ := got.Pending(); n != 0 {
		t.Errorf("%d unexpected status messages delivered", n)
	}
}

// TestRolesFromUsersFile checks each role's documented rights against the
// real server: subjects, and JetStream reads and writes.
func TestRolesFromUsersFile(t *testing.T) {
	t.Parallel()
	s, observer, kp := usersServer(t)
	url := s.ClientURL()
	creds := map[string]nats.Option{
		"turn":     login("turn", "pw"),
		"fs":       login("fs", "pw"),
		"todo":     login("todo", "pw"),
		"web":      login("web", "pw"),
		"bg":       login("bg", "pw"),
		"wf":       login("wf", "pw"),
		"ops":      login("ops", "ops-pw"),
		"watch":    login("watch", "pw"),
		"computer": login("computer", "pw"),
		"nkey":     nkeyLogin(kp),
	}

	subjects := []permissionCase{
		// A host answers the calls it received (TestHostAnswersOnlyItsCalls), and
		// publishes on no result subject otherwise.
		{"fs", true, bus.ResultSubject("t1", "c1"), "", false},
		{"turn", true, bus.ResultSubject("t1", "c1"), "", false},
		{"fs", true, bus.EventSubject("t1", "c1", bus.EventStarted), "", true},
		{"fs", true, bus.AbortSubject("t1"), "", false},
		// Each user reads its own inbox and no other (TestInboxIsPrivate).
		{"fs", false, bus.UserInbox("fs"), bus.InboxPrefix("fs") + ".x", true},
		{"fs", false, "_INBOX.>", "_INBOX.x", false},
		{"fs", false, bus.UserInbox("ops"), bus.InboxPrefix("ops") + ".x", false},
		{"turn", false, bus.UserInbox("turn"), bus.InboxPrefix("turn") + ".x", true},
		{"turn", false, "_INBOX.>", "_INBOX.x", false},
		{"turn", false, bus.UserInbox("ops"), bus.InboxPrefix("ops") + ".x", false},
		{"ops", false, bus.UserInbox("ops"), bus.InboxPrefix("ops") + ".x", true},
		{"ops", false, bus.UserInbox("watch"), bus.InboxPrefix("watch") + ".x", false},
		{"watch", false, "_INBOX.>", "_INBOX.x", false},
		{"watch", false, bus.UserInbox("ops"), bus.InboxPrefix("ops") + ".x", false},
		{"nkey", false, bus.UserInbox(must(kp.PublicKey())), bus.InboxPrefix(must(kp.PublicKey())) + ".x", true},
		{"nkey", false, bus.UserInbox("watch"), bus.InboxPrefix("watch") + ".x", false},
		{"wf", true, bus.AbortSubject("t1"), "", true},
		{"wf", true, bus.AnyNodeStartTurn, "", true},
		{"wf", true, bus.IntakeAny("t1"), "", false},
		{"fs", true, bus.IntakeAny("t1"), "", false},
		{"fs", false, bus.CategorySubjects("fs"), bus.ToolSubject("fs", "read"), true},
		{"fs", false, bus.CategorySubjects("web"), bus.ToolSubject("web", "x"), false},
		{"bg", true, bus.AnyNodeStartTurn, "", true},
		{"bg", true, bus.AbortSubject("t1"), "", true},
		{"bg", true, bus.IntakeSchedule("s1"), "", true},
		{"bg", true, bus.IntakeAny("t1"), "", false},
		{"bg", true, bus.TurnStatusSubject("t1", bus.StatusDone), "", false},
		{"bg", false, bus.AllStatuses, bus.TurnStatusSubject("t1", bus.StatusDone), true},
		{"bg", false, bus.CategorySubjects("jobs"), bus.ToolSubject("jobs", "job_start"), true},
		{"turn", true, bus.IntakeAny("t1"), "", true},
		{"turn", true, bus.TranscriptSubject("t1"), "", true},
		{"ops", true, bus.AnyNodeStartTurn, "", true},
		{"ops", true, bus.AbortSubject("t1"), "", true},
		{"ops", true, bus.IntakeAny("t1"), "", true},
		{"ops", true, bus.TranscriptSubject("t1"), "", false},
		{"ops", true, bus.ResultSubject("t1", "c1"), "", false},
		{"ops", false, bus.AllTurns, bus.EventSubject("t1", "c1", bus.EventStarted), true},
		{"watch", true, bus.AbortSubject("t1"), "", false},
		{"watch", true, bus.AnyNodeStartTurn, "", false},
		{"watch", true, bus.ToolSubject("fs", "read"), "", false},
		{"watch", true, bus.IntakeAny("t1"), "", false},
		{"watch", true, "$SRV.INFO", "", true},
		{"watch", false, bus.AllTurns, bus.ResultSubject("t1", "c1"), true},
		{"watch", false, bus.AllTools, bus.ToolSubject("fs", "read"), false},
		{"nkey", false, bus.AllTurns, bus.AbortSubject("t1"), true},
		{"nkey", true, bus.AbortSubject("t1"), "", false},
	}
	for _, tt := range subjects {
		t.Run(tt.String(), func(t *testing.T) {
			nc, errs := userConn(t, url, tt.user, creds[tt.user])
			tt.check(t, nc, errs, observer)
		})
	}

	// JetStream: reads through the key-value and stream APIs the command
	// line uses, and writes.
	jsCases := []struct {
		user, bucket string
		write        bool
		allowed      bool
	}{
		{"ops", bus.BucketTurns, false, true},
		{"ops", bus.BucketAgents, false, true},
		{"ops", bus.BucketAgents, true, true},
		{"ops", bus.BucketTurns, true, false},
		{"ops", bus.BucketTodos, true, false},
		{"watch", bus.BucketTurns, false, true},
		{"watch", bus.BucketAgents, false, true},
		{"watch", bus.BucketTodos, false, true},
		{"watch", bus.BucketTurns, true, false},
		{"watch", bus.BucketAgents, true, false},
		{"nkey", bus.BucketTurns, false, true},
		{"todo", bus.BucketTodos, true, true},
		{"todo", bus.BucketTodos, false, true},
		{"todo", bus.BucketAgents, false, false},
		{"todo", bus.BucketTurns, true, false},
		{"fs", bus.BucketTodos, false, false},
		{"fs", bus.BucketAgents, false, false},
		{"web", bus.BucketAgents, false, true},
		{"web", bus.BucketAgents, true, false},
		{"web", bus.BucketTodos, false, false},
		// run_command reads each caller's command limits from its profile.
		{"computer", bus.BucketAgents, false, true},
		{"computer", bus.BucketAgents, true, false},
		{"computer", bus.BucketTodos, false, false},
		{"turn", bus.BucketTurns, true, true},
		{"bg", bus.BucketJobs, true, true},
		{"bg", bus.BucketSchedules, true, true},
		{"ops", bus.BucketJobs, false, true},
		{"ops", bus.BucketSchedules, false, true},
		{"ops", bus.BucketJobs, true, false},
		{"watch", bus.BucketSchedules, false, true},
		// A host of the workflow category keeps workflows and reads turn records.
		{"wf", bus.BucketWorkflows, true, true},
		{"wf", bus.BucketWorkflows, false, true},
		{"wf", bus.BucketTurns, false, true},
		{"wf", bus.BucketTurns, true, false},
		{"wf", bus.BucketTodos, false, false},
		{"ops", bus.BucketWorkflows, false, true},
		{"ops", bus.BucketWorkflows, true, false},
	}
	for _, tc := range jsCases {
		op := map[bool]string{true: "write", false: "read"}[tc.write]
		want := map[bool]string{true: "allowed", false: "denied"}[tc.allowed]
		t.Run(fmt.Sprintf("%s %s %s %s", tc.user, op, tc.bucket, want), func(t *testing.T) {
			nc, errs := userConn(t, url, tc.user, creds[tc.user])
			use := func(ctx context.Context) error { return kvUse(ctx, nc, tc.bucket, tc.write) }
			if !tc.allowed {
				if err := refused(testContext(t), errs, jsRefused, use); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err := use(testContext(t)); err != nil {
				t.Fatal(err)
			}
		})
	}

	for _, user := range []string{"ops", "watch"} {
		t.Run(user+" reads a transcript", func(t *testing.T) {
			nc, _ := userConn(t, url, user, creds[user])
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx := testContext(t)
			stream, err := js.Stream(ctx, bus.StreamTranscripts)
			if err != nil {
				t.Fatal(err)
			}
			cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.TranscriptSubject("t1")}})
			if err != nil {
				t.Fatal(err)
			}
			m, err := cons.Next(jetstream.FetchMaxWait(testTimeout))
			if err != nil || !strings.Contains(string(m.Data()), "message") {
				t.Fatalf("read transcript: %v", err)
			}
		})
	}
	t.Run("watch may not take turns from the intake", func(t *testing.T) {
		nc, errs := userConn(t, url, "watch", creds["watch"])
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		err = refused(testContext(t), errs, jsRefused, func(ctx context.Context) error {
			_, err := js.Stream(ctx, bus.StreamIntake)
			return err
		})
		if err != nil {
			t.Fatalf("the intake stream is readable by a watcher: %v", err)
		}
	})
}

// jsRefused are the texts of the violation of a refused JetStream request: one of the
// JetStream API, or a key-value write (a publish to the bucket's subject).
var jsRefused = []string{`Publish to "$JS.API.`, `Publish to "$KV.`}

// refused runs use, which makes requests, and checks that it fails because the server
// refused one of them: it reports a permission violation whose text holds one of what. A
// refused request is never answered: the server drops it (or the reply) and reports
// the violation to the connection at once, on errs. So use is stopped (its context
// cancelled) when that violation arrives, instead of waiting for its request to time
// out. It returns an error if use succeeded or no such violation came within ctx.
func refused(ctx context.Context, errs <-chan error, what []string, use func(context.Context) error) error {
	useCtx, stop := context.WithCancel(ctx)
	defer stop()
	violation := make(chan error, 1)
	go func() {
		err := waitViolationOf(ctx, errs, what)
		if err == nil {
			stop()
		}
		violation <- err
	}()
	if err := use(useCtx); err == nil {
		return errors.New("succeeded, want refused")
	}
	return <-violation
}

// kvUse reads (Get and Keys) or writes (Put) the bucket.
func kvUse(ctx context.Context, nc *nats.Conn, bucket string, write bool) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return err
	}
	if write {
		_, err = kv.Put(ctx, "k2", []byte("v2"))
		return err
	}
	e, err := kv.Get(ctx, "k1")
	if err != nil {
		return err
	}
	if string(e.Value()) != "v1" {
		return fmt.Errorf("got %q", e.Value())
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	if n == 0 {
		return errors.New("no keys listed")
	}
	return nil
}

// waitViolationOf waits for a permission violation whose text holds one of what.
func waitViolationOf(ctx context.Context, errs <-chan error, what []string) error {
	for {
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				continue
			}
			for _, w := range what {
				if strings.Contains(err.Error(), w) {
					return nil
				}
			}
		case <-ctx.Done():
			return fmt.Errorf("no permission violation for any of %q", what)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestParseUsersErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ doc, want string }{
		{`[]`, ErrNoUsers.Error()},
		{`[{"user":"a","role":"admin"}]`, "exactly one of password"},
		{`[{"user":"a","password":"p","password_hash":"$2a$x","role":"admin"}]`, "exactly one of password"},
		{`[{"user":"a","password_hash":"plain","role":"admin"}]`, "not a bcrypt hash"},
		{`[{"nkey":"SUAAA","role":"admin"}]`, "public key"},
		{`[{"user":"a","password":"p","role":"root"}]`, `unknown role "root"`},
		{`[{"user":"a","password":"p","role":"tool"}]`, "needs categories"},
		{`[{"user":"a","password":"p","role":"watcher","categories":["fs"]}]`, "takes no categories"},
		{`[{"user":"a","password":"p","role":"tool","categories":["a.b"]}]`, "not a valid token"},
		{`[{"user":"a","pasword":"p","role":"admin"}]`, "unknown field"},
		// A user's name is its inbox prefix's last token: "a.b" would read the
		// replies of a user "a".
		{`[{"user":"a.b","password":"p","role":"operator"}]`, "not one subject token"},
		{`[{"user":"a b","password":"p","role":"tool","categories":["fs"]}]`, "not one subject token"},
	} {
		_, err := ParseUsers([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.doc, err, tc.want)
		}
	}
}

// writeTestCA writes a self-signed CA and a certificate it signed for
// 127.0.0.1 and localhost (for servers and clients, as routes need) into
// dir, and returns their paths.
func writeTestCA(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolbus test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER := must(x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey))
	ca := must(x509.ParseCertificate(caDER))
	key := must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "toolbus test node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der := must(x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey))
	keyDER := must(x509.MarshalECPrivateKey(key))
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", der), write("key.pem", "EC PRIVATE KEY", keyDER)
}

func TestTLSListener(t *testing.T) {
	t.Parallel()
	caFile, certFile, keyFile := writeTestCA(t, t.TempDir())
	s, _ := startServer(t, Config{
		Listen: "127.0.0.1:-1", Users: []User{{Name: "u", Password: "pw", Permissions: AdminPermissions()}},
		TLS: &TLSConfig{Cert: certFile, Key: keyFile, CA: caFile},
	})
	url := s.ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Errorf("ClientURL() = %q, want tls://", url)
	}
	// Dial with the CA: connected over TLS.
	nc, err := bus.Dial(testContext(t), url, "tls-client", bus.Credentials{User: "u", Password: "pw", CAFile: caFile})
	if err != nil {
		t.Fatalf("dial with the CA: %v", err)
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Errorf("not a TLS connection: %v", err)
	}
	nc.Close()
	// Without it the server's certificate is not trusted.
	nc, err = bus.Dial(testContext(t), url, "no-ca", bus.Credentials{User: "u", Password: "pw"})
	if err == nil {
		nc.Close()
		t.Fatal("connected without the CA")
	}
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) && !strings.Contains(err.Error(), "certificate") {
		t.Errorf("err = %v, want an unknown authority", err)
	}
	// A plain client is refused.
	nc, err = nats.Connect(strings.Replace(url, "tls://", "nats://", 1), nats.UserInfo("u", "pw"), nats.MaxReconnects(0))
	if err == nil {
		if _, terr := nc.TLSConnectionState(); terr != nil {
			t.Error("a plain connection was accepted")
		}
		nc.Close()
	}
	// In-process clients still connect (TLS is not forced on them).
	if _, err := s.Connect("in-process"); err != nil {
		t.Fatal(err)
	}
}

// Three nodes route to each other over TLS, each verifying the others'
// certificates against the CA: the cluster forms and elects a JetStream
// meta leader, and the route listener asks for TLS.
func TestTLSRoutes(t *testing.T) {
	t.Parallel()
	caFile, certFile, keyFile := writeTestCA(t, t.TempDir())
	nodes := startClusterWith(t, 3, func(c *Config) {
		c.TLS = &TLSConfig{Cert: certFile, Key: keyFile, CA: caFile}
	})
	ctx := testContext(t)
	for _, s := range nodes {
		eventually(ctx, t, s.Name()+" routes to both others", func() bool { return s.NATS().NumRemotes() == 2 })
	}
	addr := nodes[0].NATS().ClusterAddr().String()
	// A plain connection gets no INFO: the route listener starts with a
	// TLS handshake.
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Write([]byte("CONNECT {}\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(plain).ReadString('\n'); err == nil && strings.HasPrefix(line, "INFO") {
		t.Errorf("plain route connection got %q", line)
	}
	// A peer with a certificate of the CA completes the handshake and gets
	// the route INFO.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(must(os.ReadFile(caFile)))
	cert := must(tls.LoadX509KeyPair(certFile, keyFile))
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatalf("TLS handshake with the route listener: %v", err)
	}
	defer conn.Close()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO") || !strings.Contains(line, `"tls_required":true`) {
		t.Errorf("route INFO over TLS: %q, %v", line, err)
	}
}

func TestRouteTLSNeedsCA(t *testing.T) {
	t.Parallel()
	_, certFile, keyFile := writeTestCA(t, t.TempDir())
	s, err := Start(testContext(t), Config{
		TLS:     &TLSConfig{Cert: certFile, Key: keyFile},
		Cluster: &ClusterConfig{Name: "c", Listen: "127.0.0.1:-1"},
	})
	if err == nil {
		s.Close()
		t.Fatal("started routes over TLS without a CA")
	}
	if !strings.Contains(err.Error(), "needs a CA") {
		t.Errorf("err = %v", err)
	}
}
