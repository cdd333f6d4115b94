package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/internal/testmain"
	"github.com/toolbus/toolbus/schema"
)

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{})
}

// oddSchema keeps key order, spacing and number spellings that must survive byte for byte.
const oddSchema = `{ "type": "object",  "properties": {"max": {"type": "number", "minimum": 1.50, "maximum": 1e3},` +
	` "id": {"type": "string", "pattern": "^<[a-z]+&>$"}}, "required": ["id"] }`

func specs(t testing.TB) []*toolbus.Spec {
	t.Helper()
	params := schema.MustFromJSON([]byte(oddSchema))
	plain := schema.MustFromJSON([]byte(`{"type":"object","properties":{}}`))
	return []*toolbus.Spec{
		{Name: "plain", Category: "c", Params: plain},
		{Name: "everything", Description: "Does it all.\nSecond line, \"quoted\".", Params: params, Strict: true,
			Namespace: "crm", NamespaceDescription: "CRM tools.", DeferLoading: true, Mode: toolbus.Sequential,
			ReadOnly: false, Destructive: true, Timeout: 90 * time.Second, Category: "c"},
		{Name: "reader", Description: "Reads.", Params: params, Mode: toolbus.Parallel, ReadOnly: true,
			Timeout: 1500 * time.Millisecond, Category: "c", Namespace: "crm"},
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range specs(t) {
		t.Run(s.Name, func(t *testing.T) {
			md := Metadata(s)
			back, err := FromEndpoint(s.Category, s.Name, bus.ToolSubject(s.Category, s.Name), md)
			if err != nil {
				t.Fatal(err)
			}
			assertSameSpec(t, back, s)

			// The Spec's own JSON encoding round-trips too; encoding/json compacts the
			// schema (the metadata above keeps its bytes), so it compares as JSON.
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			var decoded toolbus.Spec
			if err := json.Unmarshal(b, &decoded); err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			if !sameSpec(&decoded, s) {
				t.Errorf("JSON round trip\n got %s", b)
			}
		})
	}
}

// assertSameSpec compares every field; the schema byte for byte.
func assertSameSpec(t *testing.T, got, want *toolbus.Spec) {
	t.Helper()
	if g, w := string(got.Params.JSON()), string(want.Params.JSON()); g != w {
		t.Errorf("schema\n got %s\nwant %s", g, w)
	}
	g, w := *got, *want
	g.Params, w.Params = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Errorf("spec\n got %+v\nwant %+v", g, w)
	}
}

func TestFromEndpointRefusals(t *testing.T) {
	t.Parallel()
	good := Metadata(specs(t)[1])
	with := func(key, value string) map[string]string {
		md := make(map[string]string, len(good))
		for k, v := range good {
			md[k] = v
		}
		if value == "<delete>" {
			delete(md, key)
		} else {
			md[key] = value
		}
		return md
	}
	subject := bus.ToolSubject("c", "everything")
	for _, tc := range []struct {
		name    string
		tool    string
		subject string
		md      map[string]string
		want    string
	}{
		{"bad bool", "everything", subject, with(KeyStrict, "yes"), `metadata "strict": "yes" is not true or false`},
		{"bad mode", "everything", subject, with(KeyMode, "eventually"), `metadata "mode": invalid mode "eventually"`},
		{"bad timeout", "everything", subject, with(KeyTimeout, "90"), `metadata "timeout": "90" is not a Go duration of zero or more`},
		{"negative timeout", "everything", subject, with(KeyTimeout, "-1s"), `"-1s" is not a Go duration of zero or more`},
		{"no schema", "everything", subject, with(KeySchema, "<delete>"), `no "schema" metadata`},
		// Empty is absent, for every key (docs/protocol.md §2).
		{"empty schema", "everything", subject, with(KeySchema, ""), `endpoint everything: no "schema" metadata`},
		// Booleans are exactly true or false: no other case is guessed at (§2, §15).
		{"capital False", "everything", subject, with(KeyDestructive, "False"), `endpoint everything: metadata "destructive": "False" is not true or false`},
		{"upper TRUE", "everything", subject, with(KeyReadOnly, "TRUE"), `metadata "read_only": "TRUE" is not true or false`},
		{"array root", "everything", subject, with(KeySchema, `{"type":"array"}`), "function tool parameters must use a root object schema"},
		{"remote ref", "everything", subject, with(KeySchema, `{"type":"object","properties":{"a":{"$ref":"https://example.com/x.json"}}}`), "schema"},
		{"wrong subject", "everything", "toolbus.tool.other.everything", good, `subject "toolbus.tool.other.everything", want "toolbus.tool.c.everything"`},
		{"bad namespace", "everything", subject, with(KeyNamespace, "a__b"), `namespace "a__b" may not contain "__"`},
		{"bad name", "every.thing", "toolbus.tool.c.every.thing", good, `name "every.thing" may hold only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromEndpoint("c", tc.tool, tc.subject, tc.md)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// testBus is an embedded server with a connection for the catalog.
func testBus(t *testing.T) (*server.Server, *nats.Conn) {
	t.Helper()
	srv := bustest.Server(t, nil)
	return srv, bustest.Conn(t, srv, "catalog")
}

// serve runs a category as a plain micro service on a connection of its own, answering
// every call "ok"; stop undoes it.
func serve(t *testing.T, srv *server.Server, node string, specs ...*toolbus.Spec) (stop func()) {
	t.Helper()
	nc, err := srv.Connect(node)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := Serve(nc, Service{Category: specs[0].Category, Node: node, Specs: specs,
		Handle: func(s *toolbus.Spec, r micro.Request) {
			b, _ := json.Marshal(bus.ToolReply{Tool: s.Name, Outcome: bus.OutcomeOK})
			_ = r.Respond(b)
		}})
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = svc.Stop()
			nc.Close()
		}
	}
	t.Cleanup(stop)
	return stop
}

func spec(name, category, namespace, description string) *toolbus.Spec {
	return &toolbus.Spec{Name: name, Category: category, Namespace: namespace, Description: description,
		Params: schema.MustFromJSON([]byte(`{"type":"object","properties":{"id":{"type":"string"}}}`))}
}

func quick() Options {
	return Options{FirstReply: 300 * time.Millisecond, Quiet: 100 * time.Millisecond}
}

func TestCatalogFollowsHostsComingAndGoing(t *testing.T) {
	t.Parallel()
	srv, nc := testBus(t)
	cat := New(nc, quick())
	ctx := t.Context()

	if err := cat.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cat.Categories(); len(got) != 0 {
		t.Fatalf("empty bus: categories %v", got)
	}
	if _, err := cat.Namespace("crm"); !errors.Is(err, ErrNotServed) {
		t.Fatalf("namespace on an empty bus: %v", err)
	}

	crm := []*toolbus.Spec{spec("lookup", "crm", "crm", "Look up."), spec("update", "crm", "crm", "Update.")}
	stopA := serve(t, srv, "node-a", crm...)
	stopB := serve(t, srv, "node-b", crm...)
	serve(t, srv, "node-a", spec("invoice", "billing", "", "Invoices."))
	if err := cat.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	cats := cat.Categories()
	if len(cats) != 2 || cats[0].Name != "billing" || cats[1].Name != "crm" || len(cats[1].Hosts) != 2 {
		t.Fatalf("categories %+v", cats)
	}
	if hosts := cats[1].Hosts[0].Node + " " + cats[1].Hosts[1].Node; hosts != "node-a node-b" && hosts != "node-b node-a" {
		t.Errorf("crm hosts %s", hosts)
	}
	got, err := cat.Namespace("crm")
	if err != nil || len(got) != 2 || got[0].Name != "lookup" || got[1].Name != "update" {
		t.Fatalf("namespace crm: %v %v", got, err)
	}
	// A category published without a namespace is the namespace of its name.
	bill, err := cat.Namespace("billing")
	if err != nil || len(bill) != 1 || bill[0].Namespace != "billing" || bill[0].QualifiedName() != "billing.invoice" {
		t.Fatalf("namespace billing: %v %v", bill, err)
	}
	for name, want := range map[string]string{"crm.lookup": "crm.lookup", "lookup": "crm.lookup", "invoice": "invoice", "billing.invoice": "billing.invoice"} {
		s, err := cat.Lookup(name)
		if err != nil || s.QualifiedName() != want {
			t.Errorf("Lookup(%q) = %v, %v; want %s", name, s, err, want)
		}
	}
	if _, err := cat.Lookup("crm.delete"); !errors.Is(err, ErrNotServed) || !strings.Contains(err.Error(), "has no tool delete (it has lookup, update)") {
		t.Errorf("Lookup of a missing tool: %v", err)
	}

	stopB()
	if err := cat.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if cats := cat.Categories(); len(cats[1].Hosts) != 1 || cats[1].Hosts[0].Node != "node-a" {
		t.Fatalf("after node-b left: %+v", cats[1].Hosts)
	}
	stopA()
	if err := cat.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Namespace("crm"); !errors.Is(err, ErrNotServed) {
		t.Fatalf("after every crm host left: %v", err)
	}
}

func TestCatalogRefusesDisagreeingHosts(t *testing.T) {
	t.Parallel()
	srv, nc := testBus(t)
	cat := New(nc, quick())
	for _, tc := range []struct {
		name string
		a, b []*toolbus.Spec
		tool string
	}{
		{"description", []*toolbus.Spec{spec("lookup", "crm", "crm", "Look up.")}, []*toolbus.Spec{spec("lookup", "crm", "crm", "Look it up.")}, "lookup"},
		{"missing tool", []*toolbus.Spec{spec("lookup", "crm", "crm", "L."), spec("update", "crm", "crm", "U.")}, []*toolbus.Spec{spec("lookup", "crm", "crm", "L.")}, "update"},
		{"extra tool", []*toolbus.Spec{spec("lookup", "crm", "crm", "L.")}, []*toolbus.Spec{spec("lookup", "crm", "crm", "L."), spec("zap", "crm", "crm", "Z.")}, "zap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stopA := serve(t, srv, "alpha", tc.a...)
			defer stopA()
			stopB := serve(t, srv, "beta", tc.b...)
			defer stopB()
			if err := cat.Refresh(t.Context()); err != nil {
				t.Fatal(err)
			}
			_, err := cat.Namespace("crm")
			var ce *ConflictError
			if !errors.As(err, &ce) || ce.Tool != tc.tool {
				t.Fatalf("err = %v, want a conflict on %s", err, tc.tool)
			}
			for _, want := range []string{"hosts of category crm disagree on tool " + tc.tool, "alpha (instance ", "beta (instance "} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q lacks %q", err, want)
				}
			}
			if _, err := cat.Lookup("crm.lookup"); !errors.As(err, &ce) {
				t.Errorf("Lookup in a refused category: %v", err)
			}
		})
	}
	// Hosts that format one schema differently still agree.
	a := spec("lookup", "crm", "crm", "L.")
	b := *a
	b.Params = schema.MustFromJSON([]byte(`{ "properties": {"id": {"type": "string"}}, "type": "object" }`))
	serve(t, srv, "alpha", a)
	serve(t, srv, "beta", &b)
	if err := cat.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Namespace("crm"); err != nil {
		t.Fatalf("same schema, other formatting: %v", err)
	}
}

func TestCatalogSkipsUnusableEndpoints(t *testing.T) {
	t.Parallel()
	srv, nc := testBus(t)
	hostConn, err := srv.Connect("raw")
	if err != nil {
		t.Fatal(err)
	}
	defer hostConn.Close()
	svc, err := micro.AddService(hostConn, micro.Config{Name: "toolbus-odd", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	noop := micro.HandlerFunc(func(micro.Request) {})
	good := Metadata(spec("fine", "odd", "", "Fine."))
	if err := svc.AddEndpoint("fine", noop, micro.WithEndpointSubject("toolbus.tool.odd.fine"), micro.WithEndpointMetadata(good)); err != nil {
		t.Fatal(err)
	}
	if err := svc.AddEndpoint("broken", noop, micro.WithEndpointSubject("toolbus.tool.odd.broken"),
		micro.WithEndpointMetadata(map[string]string{KeySchema: `{"type":"string"}`})); err != nil {
		t.Fatal(err)
	}
	if err := hostConn.Flush(); err != nil {
		t.Fatal(err)
	}
	cat := New(nc, quick())
	if err := cat.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	cats := cat.Categories()
	if len(cats) != 1 || len(cats[0].Specs) != 1 || cats[0].Specs[0].Name != "fine" || len(cats[0].Skipped) != 1 ||
		!strings.Contains(cats[0].Skipped[0], "broken on") || !strings.Contains(cats[0].Skipped[0], "root object schema") {
		t.Fatalf("categories %+v", cats)
	}
}

func TestCatalogWatchHearsAnnouncements(t *testing.T) {
	t.Parallel()
	srv, nc := testBus(t)
	// No periodic refresh: only the announcements can tell the catalog.
	o := quick()
	o.Refresh = -1
	cat := New(nc, o)
	if err := cat.Watch(); err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !cat.Refreshed() {
			return errors.New("no first refresh")
		}
		return nil
	})
	stop := serve(t, srv, "node-a", spec("lookup", "crm", "crm", "L."))
	announce := func(state string) {
		b, _ := json.Marshal(bus.CatalogChange{Category: "crm", Node: "node-a", State: state})
		if err := nc.Publish(bus.CatalogChanged, b); err != nil {
			t.Fatal(err)
		}
	}
	announce(bus.CatalogUp)
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := cat.Namespace("crm")
		return err
	})
	stop()
	announce(bus.CatalogDown)
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if _, err := cat.Namespace("crm"); !errors.Is(err, ErrNotServed) {
			return fmt.Errorf("crm still in the catalog: %v", err)
		}
		return nil
	})
}

func BenchmarkNamespaceLookup(b *testing.B) {
	c := &Catalog{categories: map[string]*Category{}, namespaces: map[string][]*toolbus.Spec{}}
	for i := range 20 {
		ns := fmt.Sprintf("ns%02d", i)
		cat := &Category{Name: "cat" + ns}
		for j := range 25 {
			cat.Specs = append(cat.Specs, spec(fmt.Sprintf("tool_%d", j), cat.Name, ns, "A tool."))
		}
		c.categories[cat.Name] = cat
	}
	c.namespaces = indexNamespaces(c.categories)
	for b.Loop() {
		if _, err := c.Namespace("ns07"); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzFromEndpoint: whatever metadata a host publishes is refused with an error or gives
// a spec that passes Check and survives a second round trip unchanged.
func FuzzFromEndpoint(f *testing.F) {
	f.Add("t", "{}", "parallel", "true", "30s", "crm", `{"type":"object","properties":{"a":{"type":"string"}}}`)
	f.Add("t", "x", "sequential", "false", "", "", `{"type":"object"}`)
	f.Add("a.b", "", "eventually", "yes", "-1s", "a__b", `{"type":"array"}`)
	f.Fuzz(func(t *testing.T, name, description, mode, flag, timeout, namespace, sch string) {
		md := map[string]string{KeyDescription: description, KeyMode: mode, KeyStrict: flag, KeyReadOnly: flag,
			KeyTimeout: timeout, KeyNamespace: namespace, KeySchema: sch}
		s, err := FromEndpoint("c", name, bus.ToolSubject("c", name), md)
		if err != nil {
			return
		}
		if err := s.Check(); err != nil {
			t.Fatalf("accepted a spec that fails Check: %v", err)
		}
		back, err := FromEndpoint("c", name, bus.ToolSubject("c", name), Metadata(s))
		if err != nil {
			t.Fatalf("its own metadata is refused: %v", err)
		}
		if !sameSpec(s, back) || string(s.Params.JSON()) != string(back.Params.JSON()) {
			t.Fatalf("round trip changed %+v into %+v", s, back)
		}
	})
}

// TestCatalogLooksAgainForAnAnnouncedHost: a host whose answer to $SRV.INFO misses the
// refresh its announcement started (here it announces before it serves) is found by
// the catalog's next looks, without another announcement; and a turn's Ensure looks
// again at once while an announced host is missing, whatever the catalog's age.
func TestCatalogLooksAgainForAnAnnouncedHost(t *testing.T) {
	t.Parallel()
	srv, nc := testBus(t)
	o := quick()
	o.Refresh = -1
	cat := New(nc, o)
	if err := cat.Watch(); err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !cat.Refreshed() {
			return errors.New("no first refresh")
		}
		return nil
	})
	b, _ := json.Marshal(bus.CatalogChange{Category: "late", Node: "node-l", State: bus.CatalogUp})
	if err := nc.Publish(bus.CatalogChanged, b); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !cat.awaiting() {
			return errors.New("the announcement is not heard yet")
		}
		return nil
	})
	// The catalog is fresh, and still it looks for the announced host.
	serve(t, srv, "node-l", spec("wait", "late", "late", "W."))
	if err := cat.Ensure(t.Context(), time.Hour, "late"); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Namespace("late"); err != nil {
		t.Errorf("Ensure did not look again for an announced host: %v", err)
	}

	// Announced, then serving a little later, with no one asking: the watch looks again.
	b, _ = json.Marshal(bus.CatalogChange{Category: "later", Node: "node-m", State: bus.CatalogUp})
	if err := nc.Publish(bus.CatalogChanged, b); err != nil {
		t.Fatal(err)
	}
	bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !cat.awaiting() {
			return errors.New("the announcement is not heard yet")
		}
		return nil
	})
	serve(t, srv, "node-m", spec("idle", "later", "later", "I."))
	bustest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := cat.Namespace("later")
		return err
	})
}
