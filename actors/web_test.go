package actors

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/toolsets/web"
)

// TestWebToolsInATurn: a scripted model searches through a SearXNG instance and reads a
// page, through a real bus and a real web host that reads the agent's binding from the
// profile store; an agent whose profile binds nothing has no web tools at all.
func TestWebToolsInATurn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var (
		mu       sync.Mutex
		searches []url.Values
	)
	seen := func() []url.Values {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(searches)
	}
	searxng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/search" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		searches = append(searches, r.URL.Query())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"query":"tide pools","number_of_results":2,"results":[
		  {"url":"https://en.wikipedia.org/wiki/Tide_pool","title":"Tide pool - Wikipedia","content":"A tide pool is a shallow pool of seawater.","engine":"wikipedia"},
		  {"url":"https://example.org/rocky","title":"Rocky shores","content":"Life between the tides.","engine":"bing"}],
		  "answers":[],"suggestions":[],"unresponsive_engines":[]}`)
	}))
	defer searxng.Close()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<!DOCTYPE html><html><head><title>Winter in the pools</title></head><body>
		<nav><a href="/">Home</a> <a href="/shop">Shop</a></nav>
		<article><h1>Winter in the pools</h1>
		<p>Anemones retract their tentacles and limpets clamp down against the rock when the storms come, and the same individuals stay in the same cracks month after month.</p>
		<p>Periwinkles seal their shells with an operculum, keeping a little seawater inside to keep their gills moist until the spring tides return.</p></article>
		<footer>© The Coastal Review</footer></body></html>`)
	}))
	defer page.Close()

	srv, err := server.Start(ctx, server.Config{StoreDir: t.TempDir(), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	n, err := StartNode(ctx, NodeConfig{
		Name:       "n1",
		Connect:    func(name string) (*nats.Conn, error) { return srv.Connect(name) },
		Categories: []string{web.Category},
		Logger:     DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	profiles, err := n.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The pages are on loopback: this agent's profile allows private addresses.
	doc := fmt.Sprintf(`{"version":3,"agent":"ann","web":{"search":{"provider":"searxng","url":%q},"fetch":{"allow_private":true}}}`, searxng.URL)
	if _, err := profiles.Put(ctx, []byte(doc)); err != nil {
		t.Fatal(err)
	}

	script := []gateway.ScriptStep{
		{Calls: []gateway.ScriptCall{
			{ID: "s1", Name: "web_search", Arguments: `{"query":"tide pools","count":2}`},
			{ID: "f1", Name: "web_fetch", Arguments: fmt.Sprintf(`{"url":%q}`, page.URL+"/winter")},
		}},
		{Text: "Tide pool animals slow down in winter."},
	}
	model, err := gateway.NewScripted(gateway.Script{Responses: script})
	if err != nil {
		t.Fatal(err)
	}
	res, err := n.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Agent: "ann", Input: "How do tide pools survive winter?"}, Model: model})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bus.TurnCompleted {
		t.Fatalf("turn %s: %s", res.State, res.ErrorText())
	}
	if got := outcomes(res); !slices.Equal(got, []string{"web_search:ok", "web_fetch:ok"}) {
		t.Fatalf("outcomes %v", got)
	}
	out := outputs(res)
	search := outputText(out["s1"])
	for _, want := range []string{`Search results for "tide pools" (SearXNG, 2 results):`, "1. Tide pool - Wikipedia", "https://en.wikipedia.org/wiki/Tide_pool", "A tide pool is a shallow pool of seawater.", "2. Rocky shores"} {
		if !strings.Contains(search, want) {
			t.Errorf("search output lacks %q:\n%s", want, search)
		}
	}
	fetched := outputText(out["f1"])
	for _, want := range []string{"Title: Winter in the pools", "URL: " + page.URL + "/winter", "# Winter in the pools", "limpets clamp down against the rock", "keep their gills moist"} {
		if !strings.Contains(fetched, want) {
			t.Errorf("fetch output lacks %q:\n%s", want, fetched)
		}
	}
	for _, boiler := range []string{"Shop", "The Coastal Review"} {
		if strings.Contains(fetched, boiler) {
			t.Errorf("fetch output keeps %q:\n%s", boiler, fetched)
		}
	}
	if s := seen(); len(s) != 1 || s[0].Get("q") != "tide pools" || s[0].Get("format") != "json" {
		t.Errorf("SearXNG got %v", s)
	}
	host := strings.TrimPrefix(page.URL, "http://")
	if got := []string{res.Calls[0].Label, res.Calls[1].Label}; got[0] != "Found 2 results for “tide pools”" || !strings.HasPrefix(got[1], "Read ") || !strings.HasSuffix(got[1], " from "+host) {
		t.Errorf("labels %q", got)
	}

	// Another agent, without a profile: its turn has no web tools, so the same calls
	// are unknown tools that never reach the host.
	model, err = gateway.NewScripted(gateway.Script{Responses: script})
	if err != nil {
		t.Fatal(err)
	}
	res, err = n.Run(ctx, TurnConfig{Spec: bus.TurnSpec{Agent: "bob", Input: "go"}, Model: model})
	if err != nil {
		t.Fatal(err)
	}
	out = outputs(res)
	if got := outputText(out["s1"]); !strings.Contains(got, `unknown tool "web_search"`) {
		t.Errorf("bob's web_search: %s", got)
	}
	if len(seen()) != 1 {
		t.Errorf("bob's turn reached SearXNG")
	}
}
