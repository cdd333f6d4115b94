package toolsets

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets/web"
)

// busWithForeignHosts is an embedded server on which two categories are served by plain
// micro services, and a catalog that has read them: crm (namespace crm: a read-only and a
// destructive tool) and billing (published without a namespace).
func busWithForeignHosts(t *testing.T) (*server.Server, *catalog.Catalog) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := bustest.Server(t, nil)
	params := schema.MustFromJSON([]byte(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`))
	for _, c := range []struct {
		category string
		specs    []*toolbus.Spec
	}{
		{"crm", []*toolbus.Spec{
			{Name: "lookup", Description: "Look a customer up.", Category: "crm", Namespace: "crm", NamespaceDescription: "CRM.", ReadOnly: true, Params: params},
			{Name: "erase", Description: "Erase a customer.", Category: "crm", Namespace: "crm", Destructive: true, Mode: toolbus.Sequential, Params: params},
		}},
		{"billing", []*toolbus.Spec{
			{Name: "invoice", Description: "Send an invoice.", Category: "billing", DeferLoading: true, Params: params},
		}},
	} {
		nc, err := srv.Connect("host-" + c.category)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		svc, err := catalog.Serve(nc, catalog.Service{Category: c.category, Node: "elsewhere", Specs: c.specs,
			Handle: func(*toolbus.Spec, micro.Request) {}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
	}
	nc, err := srv.Connect("catalog")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cat := catalog.New(nc, catalog.Options{FirstReply: 500 * time.Millisecond, Quiet: 100 * time.Millisecond})
	if err := cat.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	return srv, cat
}

// builtins are the built-in tools of a main turn; jobBuiltins, a job's (no workflow tools).
var (
	jobBuiltins = []string{"todo_read", "todo_write", "list_files", "read_file", "write_file", "run_command"}
	builtins    = append(slices.Clone(jobBuiltins), "workflow_start", "workflow_view", "workflow_list", "workflow_cancel")
)

// withWeb puts web tools where assembly does, after computer's (the first six of base),
// and then the rest after base.
func withWeb(base []string, webTools ...string) []string {
	var w, rest []string
	for _, n := range webTools {
		if strings.HasPrefix(n, "web_") {
			w = append(w, n)
		} else {
			rest = append(rest, n)
		}
	}
	out := append(slices.Clone(base[:len(jobBuiltins)]), w...)
	return append(append(out, base[len(jobBuiltins):]...), rest...)
}

func TestAssemblePerKind(t *testing.T) {
	t.Parallel()
	_, cat := busWithForeignHosts(t)
	profile := &Profile{Version: 1, Agent: "ann", Namespaces: []NamespaceRef{
		{Name: "billing", Load: LoadUpfront}, {Name: "ghost"}, {Name: "crm"},
	}}
	searxng := &web.SearchBinding{Provider: web.SearXNG, URL: "http://127.0.0.1:8888"}
	webBoth := &Profile{Version: 3, Agent: "ann", Namespaces: []NamespaceRef{{Name: "billing", Load: LoadUpfront}},
		Web: &web.Binding{Search: searxng, Fetch: &web.FetchBinding{}}}
	webSearch := &Profile{Version: 3, Agent: "ann", Web: &web.Binding{Search: searxng}}
	webFetch := &Profile{Version: 3, Agent: "ann", Web: &web.Binding{Fetch: &web.FetchBinding{AllowPrivate: true}}}
	webNone := &Profile{Version: 3, Agent: "ann", Web: &web.Binding{}}
	for _, tc := range []struct {
		name     string
		kind     bus.TurnKind
		profile  *Profile
		cat      Catalog
		names    []string
		deferred []string
		notes    []string
		text     TextRule
	}{
		{
			name: "main, no profile", kind: bus.TurnMain, cat: cat,
			names: builtins, text: TextEnds,
		},
		{
			name: "main with profile", kind: bus.TurnMain, profile: profile, cat: cat,
			names:    append(slices.Clone(builtins), "billing.invoice", "crm.lookup", "crm.erase"),
			deferred: []string{"crm.lookup", "crm.erase"},
			notes:    []string{"namespace ghost is left out: no host on the bus serves it"},
			text:     TextEnds,
		},
		{
			name: "main without a catalog", kind: bus.TurnMain, profile: profile,
			names: builtins,
			notes: []string{"namespace billing is left out: this node has no catalog of the bus", "namespace ghost is left out", "namespace crm is left out"},
			text:  TextEnds,
		},
		{
			name: "empty kind is main", kind: "", profile: profile, cat: cat,
			names:    append(slices.Clone(builtins), "billing.invoice", "crm.lookup", "crm.erase"),
			deferred: []string{"crm.lookup", "crm.erase"},
			notes:    []string{"namespace ghost"},
			text:     TextEnds,
		},
		{
			name: "job", kind: bus.TurnJob, profile: profile, cat: cat,
			names:    append(slices.Clone(jobBuiltins), "billing.invoice", "crm.lookup", "crm.erase"),
			deferred: []string{"crm.lookup", "crm.erase"},
			notes:    []string{"namespace ghost"},
			text:     TextEnds,
		},
		{
			// A task turn has its own fixed catalog: no computer, todo, workflow or
			// namespace tools, whatever the profile names; its submit_result.
			name: "task", kind: bus.TurnTask, profile: profile, cat: cat,
			names: []string{"submit_result"}, text: TextRepairOnce,
		},
		// Web tools: each where the profile binds it, after computer and before the
		// namespaces, in turns of every kind.
		{
			name: "main with web search and fetch", kind: bus.TurnMain, profile: webBoth, cat: cat,
			names: withWeb(builtins, "web_search", "web_fetch", "billing.invoice"), text: TextEnds,
		},
		{
			name: "main with web search only", kind: bus.TurnMain, profile: webSearch,
			names: withWeb(builtins, "web_search"), text: TextEnds,
		},
		{
			name: "job with web fetch only", kind: bus.TurnJob, profile: webFetch,
			names: withWeb(jobBuiltins, "web_fetch"), text: TextEnds,
		},
		{
			name: "main with an empty web binding", kind: bus.TurnMain, profile: webNone,
			names: builtins, text: TextEnds,
		},
		{
			name: "task with web search and fetch", kind: bus.TurnTask, profile: webBoth, cat: cat,
			names: []string{"web_search", "web_fetch", "submit_result"}, text: TextRepairOnce,
		},
		{
			name: "task with web fetch only", kind: bus.TurnTask, profile: webFetch,
			names: []string{"web_fetch", "submit_result"}, text: TextRepairOnce,
		},
		{
			name: "task without a profile", kind: bus.TurnTask,
			names: []string{"submit_result"}, text: TextRepairOnce,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := bus.TurnSpec{Kind: tc.kind, Agent: "ann"}
			if tc.kind == bus.TurnTask {
				spec.Workflow, spec.Task, spec.ResultSchema = "w1", "t1", []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
			}
			kit, err := Assemble(spec, tc.profile, tc.cat, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := kit.Tools.Names(); !slices.Equal(got, tc.names) {
				t.Errorf("tools %v, want %v", got, tc.names)
			}
			var deferred []string
			for _, s := range kit.Tools.Specs() {
				if s.DeferLoading {
					deferred = append(deferred, s.QualifiedName())
				}
			}
			if !slices.Equal(deferred, tc.deferred) {
				t.Errorf("deferred %v, want %v", deferred, tc.deferred)
			}
			if len(kit.Notes) != len(tc.notes) {
				t.Fatalf("notes %q, want %d like %q", kit.Notes, len(tc.notes), tc.notes)
			}
			for i, want := range tc.notes {
				if !strings.Contains(kit.Notes[i], want) {
					t.Errorf("note %d %q lacks %q", i, kit.Notes[i], want)
				}
			}
			if kit.Policy.Text != tc.text {
				t.Errorf("text rule %d, want %d", kit.Policy.Text, tc.text)
			}
		})
	}
	// Assembly copies what it changes: the catalog's own specs keep their loading.
	crm, err := cat.Namespace("billing")
	if err != nil || !crm[0].DeferLoading {
		t.Errorf("the catalog's billing.invoice changed: %+v %v", crm, err)
	}
}

func TestTaskPolicyAdmitsOnlyReadsAndLocalTools(t *testing.T) {
	t.Parallel()
	p, err := PolicyFor(bus.TurnTask)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec toolbus.Spec
		want Decision
	}{
		{toolbus.Spec{Name: "get_page", Category: "brain", ReadOnly: true}, Run},
		{toolbus.Spec{Name: "submit_result", Category: LocalCategory}, Run},
		{toolbus.Spec{Name: "run_command", Category: "computer", Destructive: true}, Refuse},
		{toolbus.Spec{Name: "write_note", Namespace: "crm", Category: "crm"}, Refuse},
	} {
		d, why := p.Admit(&tc.spec)
		if d != tc.want {
			t.Errorf("%s: %d (%s), want %d", tc.spec.QualifiedName(), d, why, tc.want)
		}
		if d == Refuse && !strings.Contains(why, tc.spec.QualifiedName()) {
			t.Errorf("%s: reason %q does not name the tool", tc.spec.QualifiedName(), why)
		}
	}
	for _, k := range []bus.TurnKind{bus.TurnMain, bus.TurnJob, ""} {
		if p, err := PolicyFor(k); err != nil || p.Admit != nil || p.Text != TextEnds {
			t.Errorf("policy of %q: %+v %v", k, p, err)
		}
	}
	if _, err := PolicyFor("chat"); err == nil {
		t.Error("an unknown kind has a policy")
	}
}

func TestAssembleRefusesClashes(t *testing.T) {
	t.Parallel()
	params := schema.MustFromJSON([]byte(`{"type":"object"}`))
	dup := &toolbus.Spec{Name: "lookup", Category: "crm2", Namespace: "crm", Params: params}
	builtinClaim := &toolbus.Spec{Name: "shell", Category: "computer", Namespace: "ops", Params: params}
	cat := fakeCatalog{
		"crm": {{Name: "lookup", Category: "crm", Namespace: "crm", Params: params}, dup},
		"ops": {builtinClaim},
	}
	kit, err := Assemble(bus.TurnSpec{}, &Profile{Version: 1, Agent: "a", Namespaces: []NamespaceRef{{Name: "crm"}}}, cat, Options{})
	if err != nil || kit.Tools.Len() != len(builtins)+1 || len(kit.Notes) != 1 ||
		kit.Notes[0] != "tool crm.lookup of category crm2 is left out: category crm serves it already" {
		t.Errorf("a tool two categories publish in one namespace: %v %v", kit, err)
	}
	kit, err = Assemble(bus.TurnSpec{}, &Profile{Version: 1, Agent: "a", Namespaces: []NamespaceRef{{Name: "ops"}}}, cat, Options{})
	if err != nil || kit.Tools.Len() != len(builtins) || len(kit.Notes) != 1 || !strings.Contains(kit.Notes[0], "claims the built-in category computer") {
		t.Errorf("a tool claiming a built-in category: %v %v", kit, err)
	}
}

// fakeCatalog serves assembly from a map, for the rules that need no bus.
type fakeCatalog map[string][]*toolbus.Spec

func (c fakeCatalog) Tools(name string, _ bool) ([]*toolbus.Spec, error) {
	if s, ok := c[name]; ok {
		return s, nil
	}
	return nil, catalog.ErrNotServed
}

func TestParseProfile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		doc   string
		paths []string // the problems' paths; none means valid
	}{
		{"minimal", `{"version":1,"agent":"ann"}`, nil},
		{"namespaces", `{"version":1,"agent":"ann","namespaces":[{"name":"crm"},{"name":"billing","load":"upfront"}]}`, nil},
		{"not an object", `[1]`, []string{"/"}},
		{"not JSON", `{"version":`, []string{"/"}},
		{"no version", `{"agent":"ann"}`, []string{"/version"}},
		{"version as text", `{"version":"1","agent":"ann"}`, []string{"/version"}},
		{"future version", `{"version":6,"agent":"ann","sandbox":{}}`, []string{"/version"}},
		{"computer in version 3", `{"version":3,"agent":"ann","computer":{"limits":{"pids":64}}}`, []string{"/computer"}},
		{"computer limits", `{"version":4,"agent":"ann","computer":{"limits":{"pids":64,"memory_bytes":268435456,"cpu_seconds":-1}}}`, nil},
		{"computer limits too small", `{"version":4,"agent":"ann","computer":{"limits":{"pids":2}}}`, []string{"/computer/limits"}},
		{"call bounds", `{"version":5,"agent":"ann","calls":{"max_in_flight":4,"max_per_category":2}}`, nil},
		{"call bounds negative", `{"version":5,"agent":"ann","calls":{"max_in_flight":-1}}`, []string{"/calls/max_in_flight"}},
		{"call bounds in a version 4 document", `{"version":4,"agent":"ann","calls":{"max_in_flight":4}}`, []string{"/calls"}},
		{"skills in version 2", `{"version":2,"agent":"ann","skills":["notes"]}`, []string{"/skills"}},
		{"version 3", `{"version":3,"agent":"ann","web":{"search":{"provider":"brave"},"fetch":{}},"skills":["notes","mcp-everything"],"brain":true,"jobs":{"spawn":true,"max_running":2,"keep":"24h"},"schedules":{"enabled":true,"overlap":"queue"}}`, nil},
		{"searxng without a URL", `{"version":3,"agent":"ann","web":{"search":{"provider":"searxng"}}}`, []string{"/web/search/url"}},
		{"provider URL with a key", `{"version":3,"agent":"ann","web":{"search":{"provider":"searxng","url":"https://u:key@searx.example"}}}`, []string{"/web/search/url"}},
		{"unknown provider", `{"version":3,"agent":"ann","web":{"search":{"provider":"bing"}}}`, []string{"/web/search/provider"}},
		{"skill twice", `{"version":3,"agent":"ann","skills":["a","b","a"]}`, []string{"/skills/2"}},
		{"skill path", `{"version":3,"agent":"ann","skills":["../etc"]}`, []string{"/skills/0"}},
		{"short keep", `{"version":3,"agent":"ann","jobs":{"spawn":true,"keep":"5s"}}`, []string{"/jobs/keep"}},
		{"approvals in version 1", `{"version":1,"agent":"ann","approvals":"destructive"}`, []string{"/approvals"}},
		{"approvals", `{"version":2,"agent":"ann","approvals":"writes"}`, nil},
		{"bad approvals", `{"version":2,"agent":"ann","approvals":"sometimes"}`, []string{"/approvals"}},
		{"no agent", `{"version":1}`, []string{"/"}},
		{"bad agent", `{"version":1,"agent":"a.b"}`, []string{"/agent"}},
		{"unknown field", `{"version":1,"agent":"ann","skills":[]}`, []string{"/skills"}},
		{"bad load", `{"version":1,"agent":"ann","namespaces":[{"name":"crm","load":"lazy"}]}`, []string{"/namespaces/0/load"}},
		{"namespace not a token", `{"version":1,"agent":"ann","namespaces":[{"name":"crm"},{"name":"my crm"}]}`, []string{"/namespaces/1/name"}},
		{"separator in namespace", `{"version":1,"agent":"ann","namespaces":[{"name":"a__b"}]}`, []string{"/namespaces/0/name"}},
		{"built-in", `{"version":1,"agent":"ann","namespaces":[{"name":"computer"}]}`, []string{"/namespaces/0/name"}},
		{"twice", `{"version":1,"agent":"ann","namespaces":[{"name":"crm"},{"name":"x"},{"name":"crm"}]}`, []string{"/namespaces/2/name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseProfile([]byte(tc.doc))
			if len(tc.paths) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				b, err := p.Encode()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ParseProfile(b); err != nil {
					t.Errorf("the encoded profile %s does not parse: %v", b, err)
				}
				return
			}
			var pe *ProfileError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v (%T), want a *ProfileError", err, err)
			}
			var paths []string
			for _, pr := range pe.Problems {
				paths = append(paths, pr.Path)
			}
			if !slices.Equal(paths, tc.paths) {
				t.Errorf("paths %v, want %v (%v)", paths, tc.paths, err)
			}
		})
	}
}

func TestProfilesStore(t *testing.T) {
	t.Parallel()
	srv, _ := busWithForeignHosts(t)
	nc, err := srv.Connect("profiles")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	store, err := OpenProfiles(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if list, err := store.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("empty store: %v %v", list, err)
	}
	if _, err := store.Get(ctx, "ann"); !errors.Is(err, ErrNoProfile) {
		t.Fatalf("missing profile: %v", err)
	}
	doc := []byte(`{
  "version": 1,
  "agent": "ann",
  "namespaces": [{"name": "crm"}]
}`)
	if _, err := store.Put(ctx, doc); err != nil {
		t.Fatal(err)
	}
	p, err := store.Get(ctx, "ann")
	if err != nil || p.Agent != "ann" || len(p.Namespaces) != 1 || !p.Namespaces[0].Deferred() {
		t.Fatalf("get: %+v %v", p, err)
	}
	raw, err := store.Raw(ctx, "ann")
	if err != nil || string(raw) != `{"version":1,"agent":"ann","namespaces":[{"name":"crm"}]}` {
		t.Errorf("stored document %s %v", raw, err)
	}
	// A refused document stores nothing: the old profile stays.
	if _, err := store.Put(ctx, []byte(`{"version":1,"agent":"ann","namespaces":[{"name":"crm","load":"soon"}]}`)); err == nil {
		t.Fatal("a bad document was stored")
	}
	if p, err := store.Get(ctx, "ann"); err != nil || p.Namespaces[0].Load != "" {
		t.Errorf("after a refused put: %+v %v", p, err)
	}
	if _, err := store.Put(ctx, []byte(`{"version":1,"agent":"bob"}`)); err != nil {
		t.Fatal(err)
	}
	list, err := store.List(ctx)
	if err != nil || len(list) != 2 || list[0].Agent != "ann" || list[1].Agent != "bob" {
		t.Fatalf("list %+v %v", list, err)
	}
	// A stored document this build cannot read (written around the CLI) is reported
	// with its agent, and the rest still list.
	kv, err := js.KeyValue(ctx, bus.BucketAgents)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "cid", []byte(`{"version":7,"agent":"cid"}`)); err != nil {
		t.Fatal(err)
	}
	list, err = store.List(ctx)
	if len(list) != 2 || err == nil || !strings.Contains(err.Error(), "stored profile of cid") || !strings.Contains(err.Error(), "version 7 is newer") {
		t.Errorf("list with an unreadable document: %d profiles, %v", len(list), err)
	}
	if err := store.Delete(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, "bob"); !errors.Is(err, ErrNoProfile) {
		t.Errorf("delete twice: %v", err)
	}
	if _, err := store.Get(ctx, "a/b"); !errors.Is(err, bus.ErrBadAgent) {
		t.Errorf("bad agent id: %v", err)
	}
}

// FuzzParseProfile: any document is either refused with a *ProfileError or parses into a
// profile that encodes to a document that parses back the same.
func FuzzParseProfile(f *testing.F) {
	for _, seed := range []string{
		`{"version":1,"agent":"ann"}`,
		`{"version":1,"agent":"ann","namespaces":[{"name":"crm"},{"name":"billing","load":"upfront"}]}`,
		`{"version":2,"agent":"ann"}`, `{"version":"1"}`, `[]`, `{"version":1,"agent":"a.b"}`,
		`{"version":1,"agent":"ann","namespaces":[{"name":"a__b"},{"name":"a__b"}]}`, `{"version":1e400}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, err := ParseProfile(doc)
		if err != nil {
			var pe *ProfileError
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("error %v (%T) is not a ProfileError with problems", err, err)
			}
			return
		}
		b, err := p.Encode()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseProfile(b)
		if err != nil {
			t.Fatalf("re-encoded %s does not parse: %v", b, err)
		}
		if back.Agent != p.Agent || !slices.Equal(back.Namespaces, p.Namespaces) {
			t.Fatalf("round trip changed %+v into %+v", p, back)
		}
	})
}

// TestBrainFollowsProfile includes recall and get_page exactly in the turns of agents
// whose profile enables the brain: main, job and task turns alike (they only read).
func TestBrainFollowsProfile(t *testing.T) {
	t.Parallel()
	on := &Profile{Version: ProfileVersion, Agent: "ann", Brain: true}
	off := &Profile{Version: ProfileVersion, Agent: "ann"}
	brainTools := []string{"recall", "get_page"}
	for _, tc := range []struct {
		kind    bus.TurnKind
		profile *Profile
		names   []string
	}{
		{bus.TurnMain, nil, builtins},
		{bus.TurnMain, off, builtins},
		{bus.TurnMain, on, append(slices.Clone(builtins), brainTools...)},
		{bus.TurnJob, off, jobBuiltins},
		{bus.TurnJob, on, append(slices.Clone(jobBuiltins), brainTools...)},
		{bus.TurnTask, nil, []string{"submit_result"}},
		{bus.TurnTask, off, []string{"submit_result"}},
		{bus.TurnTask, on, append(slices.Clone(brainTools), "submit_result")},
	} {
		spec := bus.TurnSpec{Kind: tc.kind, Agent: "ann"}
		if tc.kind == bus.TurnTask {
			spec.Workflow, spec.Task, spec.ResultSchema = "w1", "t1", []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
		}
		kit, err := Assemble(spec, tc.profile, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := kit.Tools.Names(); !slices.Equal(got, tc.names) {
			t.Errorf("%s turn, brain %v: tools %v, want %v", tc.kind, tc.profile != nil && tc.profile.Brain, got, tc.names)
		}
		for _, s := range kit.Tools.Specs() {
			if s.Category != "brain" || kit.Policy.Admit == nil {
				continue
			}
			if d, why := kit.Policy.Admit(s); d != Run {
				t.Errorf("%s turn refuses %s: %s", tc.kind, s.Name, why)
			}
		}
	}
}

// TestTaskTurnTakesReadOnlyToolsOfItsCategories: a task turn's catalog is the read-only
// tools of the categories whose rule includes task turns (the web tools the profile binds,
// the brain's recall and get_page), then its submit_result; a category's other tools stay
// in main turns. A stand-in category with a read-only and a writing tool shows the filter.
func TestTaskTurnTakesReadOnlyToolsOfItsCategories(t *testing.T) {
	params := schema.MustFromJSON([]byte(`{"type":"object","properties":{"q":{"type":"string"}}}`))
	spec := func(name, category string, readOnly bool) *toolbus.Spec {
		return &toolbus.Spec{Name: name, Category: category, ReadOnly: readOnly, Params: params}
	}
	saved := categories
	t.Cleanup(func() { categories = saved })
	categories = append(slices.Clone(saved),
		category{name: "probe", in: func(bus.TurnKind, *Profile) bool { return true },
			specs: func(Handles, *Profile) []*toolbus.Spec {
				return []*toolbus.Spec{spec("probe_read", "probe", true), spec("probe_write", "probe", false)}
			}},
	)
	profile := &Profile{Version: ProfileVersion, Agent: "a", Brain: true, Web: &web.Binding{Search: &web.SearchBinding{Provider: web.Brave}, Fetch: &web.FetchBinding{}}}
	task := bus.TurnSpec{Kind: bus.TurnTask, Agent: "a", Workflow: "w", Task: "t",
		ResultSchema: []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}
	kit, err := Assemble(task, profile, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kit.Tools.Names(), []string{"web_search", "web_fetch", "recall", "get_page", "probe_read", "submit_result"}; !slices.Equal(got, want) {
		t.Errorf("task turn %v, want %v", got, want)
	}
	if kit, err = Assemble(task, &Profile{Version: ProfileVersion, Agent: "a"}, nil, Options{}); err != nil || !slices.Equal(kit.Tools.Names(), []string{"probe_read", "submit_result"}) {
		t.Errorf("task turn without web or brain: %v %v", kit.Tools.Names(), err)
	}
	main, err := Assemble(bus.TurnSpec{Kind: bus.TurnMain, Agent: "a"}, profile, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(main.Tools.Names(), "probe_write") || !slices.Contains(main.Tools.Names(), "workflow_start") {
		t.Errorf("main turn %v", main.Tools.Names())
	}
}

// TestIncludesAgreesWithAssemble: Includes, which a direct call asks to say that it skips
// the profile's gating, answers for every built-in tool as Assemble decides, per kind and
// profile; an external tool is included where the profile names its namespace.
func TestIncludesAgreesWithAssemble(t *testing.T) {
	all := &Profile{Version: ProfileVersion, Agent: "ann", Brain: true, Jobs: &JobsPolicy{Spawn: true},
		Schedules: &SchedulesPolicy{Enabled: true}, Web: &web.Binding{Search: &web.SearchBinding{Provider: "brave"}}}
	var every []*toolbus.Spec
	for _, c := range categories {
		every = append(every, c.specs(Handles{}, &Profile{Web: &web.Binding{Search: &web.SearchBinding{}, Fetch: &web.FetchBinding{}}})...)
	}
	for _, kind := range []bus.TurnKind{bus.TurnMain, bus.TurnJob, bus.TurnTask} {
		for _, p := range []*Profile{nil, {Version: ProfileVersion, Agent: "ann"}, all} {
			spec := bus.TurnSpec{Kind: kind, Agent: "ann", Workflow: "w1", Task: "t1", ResultSchema: []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}
			kit, err := Assemble(spec, p, nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range every {
				if got, want := Includes(kind, p, s), slices.Contains(kit.Tools.Names(), s.Name); got != want {
					t.Errorf("%s turn, profile %+v: Includes(%s) = %v, Assemble says %v", kind, p, s.Name, got, want)
				}
			}
		}
	}
	ext := &toolbus.Spec{Name: "issue_get", Namespace: "github", Category: "gh"}
	named := &Profile{Version: ProfileVersion, Agent: "ann", Namespaces: []NamespaceRef{{Name: "github"}}}
	if !Includes(bus.TurnMain, named, ext) || Includes(bus.TurnMain, all, ext) || Includes(bus.TurnTask, named, ext) || Includes(bus.TurnMain, nil, ext) {
		t.Error("an external tool: included wherever the profile names its namespace, except in task turns")
	}
}
