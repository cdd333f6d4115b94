package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus"

	"github.com/toolbus/toolbus/internal/label"
)

// bindings is a Config.Binding over a fixed map.
func bindings(m map[string]*Binding) func(context.Context, string) (*Binding, error) {
	return func(_ context.Context, agent string) (*Binding, error) { return m[agent], nil }
}

// toolNamed returns the tool of that name.
func toolNamed(t *testing.T, tools []*toolbus.Tool, name string) *toolbus.Tool {
	t.Helper()
	for _, tl := range tools {
		if tl.Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

// call runs a tool as its host does: the arguments validated first, then Execute; a
// returned error becomes an error result.
func call(t *testing.T, tl *toolbus.Tool, agent string, args any) toolbus.Result {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.Params.Validate(raw); err != nil {
		t.Fatalf("%s: arguments %s refused by the schema: %v", tl.Name, raw, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := tl.Execute(ctx, toolbus.Call{Turn: "t1", ID: "c1", Tool: tl.Name, Agent: agent, Args: raw, Progress: func(string) {}})
	if err != nil {
		r := toolbus.ErrorResult(err.Error())
		r.Details = res.Details
		return r
	}
	return res
}

// seen records what a fake provider received.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
	body []string
}

func (s *seen) add(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r)
	s.body = append(s.body, string(b))
}

func (s *seen) last(t *testing.T) (*http.Request, string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("the provider got no request")
	}
	return s.reqs[len(s.reqs)-1], s.body[len(s.body)-1]
}

// Answers in each provider's wire format (fields as their APIs document them, with some
// of the extra fields they carry).
const (
	searxngAnswer = `{"query":"tide pools","number_of_results":0,"results":[
 {"url":"https://en.wikipedia.org/wiki/Tide_pool","title":"Tide pool - Wikipedia","content":"A tide pool or rock pool is a shallow pool of seawater that forms on the rocky intertidal shore.","engine":"wikipedia","parsed_url":["https","en.wikipedia.org","/wiki/Tide_pool","","",""],"template":"default.html","engines":["wikipedia","duckduckgo"],"positions":[1,3],"score":4.5,"category":"general"},
 {"url":"https://oceanservice.noaa.gov/facts/tidepool.html","title":"What is a tide pool?","content":"Tide pools are home to hardy organisms.","engine":"duckduckgo","score":1.2,"category":"general"},
 {"url":"https://example.org/three","title":"Third","content":"","engine":"bing"}
],"answers":[],"corrections":[],"infoboxes":[],"suggestions":["tide pool animals"],"unresponsive_engines":[]}`
	braveAnswer = `{"type":"search","query":{"original":"tide pools","more_results_available":true},"mixed":{"type":"mixed","main":[]},
 "web":{"type":"search","results":[
  {"title":"Tide pool - Wikipedia","url":"https://en.wikipedia.org/wiki/Tide_pool","is_source_local":false,"description":"A <strong>tide pool</strong> or rock pool is a shallow pool of seawater &amp; more.","page_age":"2024-11-02T00:00:00","profile":{"name":"Wikipedia"},"language":"en","family_friendly":true,"type":"search_result"},
  {"title":"Rocky shores","url":"https://example.org/rocky","description":"Life between the tides.","type":"search_result"}
 ],"family_friendly":true}}`
	tavilyAnswer = `{"query":"tide pools","follow_up_questions":null,"answer":null,"images":[],
 "results":[{"title":"Tide pool - Wikipedia","url":"https://en.wikipedia.org/wiki/Tide_pool","content":"A tide pool or rock pool is a shallow pool of seawater.","score":0.81,"raw_content":null}],
 "response_time":"1.67","request_id":"123e4567-e89b-12d3-a456-426614174111"}`
)

func TestSearchProviders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		provider  string
		answer    string
		count     int
		wantTitle []string
		wantFirst string // first snippet
		check     func(t *testing.T, r *http.Request, body string)
	}{
		{
			provider: SearXNG, answer: searxngAnswer, count: 2,
			wantTitle: []string{"Tide pool - Wikipedia", "What is a tide pool?"},
			wantFirst: "A tide pool or rock pool is a shallow pool of seawater that forms on the rocky intertidal shore.",
			check: func(t *testing.T, r *http.Request, _ string) {
				if r.Method != http.MethodGet || r.URL.Path != "/search" || r.URL.Query().Get("q") != "tide pools" || r.URL.Query().Get("format") != "json" {
					t.Errorf("request %s %s", r.Method, r.URL)
				}
			},
		},
		{
			provider: Brave, answer: braveAnswer, count: 7,
			wantTitle: []string{"Tide pool - Wikipedia", "Rocky shores"},
			wantFirst: "A tide pool or rock pool is a shallow pool of seawater & more.",
			check: func(t *testing.T, r *http.Request, _ string) {
				q := r.URL.Query()
				if r.Method != http.MethodGet || r.URL.Path != "/res/v1/web/search" || q.Get("q") != "tide pools" || q.Get("count") != "7" {
					t.Errorf("request %s %s", r.Method, r.URL)
				}
				if got := r.Header.Get("X-Subscription-Token"); got != "brave-secret-key" {
					t.Errorf("X-Subscription-Token %q", got)
				}
				if r.Header.Get("Accept") != "application/json" {
					t.Errorf("Accept %q", r.Header.Get("Accept"))
				}
			},
		},
		{
			provider: Tavily, answer: tavilyAnswer, count: 3,
			wantTitle: []string{"Tide pool - Wikipedia"},
			wantFirst: "A tide pool or rock pool is a shallow pool of seawater.",
			check: func(t *testing.T, r *http.Request, body string) {
				if r.Method != http.MethodPost || r.URL.Path != "/search" || r.Header.Get("Content-Type") != "application/json" {
					t.Errorf("request %s %s %s", r.Method, r.URL, r.Header.Get("Content-Type"))
				}
				if got := r.Header.Get("Authorization"); got != "Bearer tvly-secret-key" {
					t.Errorf("Authorization %q", got)
				}
				var b struct {
					Query      string `json:"query"`
					MaxResults int    `json:"max_results"`
				}
				if err := json.Unmarshal([]byte(body), &b); err != nil || b.Query != "tide pools" || b.MaxResults != 3 {
					t.Errorf("body %s (%v)", body, err)
				}
			},
		},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			var s seen
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s.add(r)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, tc.answer)
			}))
			defer srv.Close()
			tools := Tools(Config{
				Binding: bindings(map[string]*Binding{"ann": {Search: &SearchBinding{Provider: tc.provider, URL: srv.URL}}}),
				// The operator allows the keys to go to this endpoint.
				Keys: map[string]Key{
					Brave:  {Secret: "brave-secret-key", Endpoints: []string{srv.URL}},
					Tavily: {Secret: "tvly-secret-key", Endpoints: []string{srv.URL + "/"}},
				},
			})
			tl := toolNamed(t, tools, "web_search")
			res := call(t, tl, "ann", map[string]any{"query": "tide pools", "count": tc.count})
			if res.IsError {
				t.Fatalf("error: %s", res.Text())
			}
			r, body := s.last(t)
			tc.check(t, r, body)
			d, ok := label.DetailsOf[SearchDetails](res.Details)
			if !ok {
				t.Fatalf("no details: %s", res.Details)
			}
			var titles []string
			for _, x := range d.Results {
				titles = append(titles, x.Title)
			}
			if !slices.Equal(titles, tc.wantTitle) {
				t.Errorf("titles %q, want %q", titles, tc.wantTitle)
			}
			if d.Results[0].Snippet != tc.wantFirst || d.Results[0].URL != "https://en.wikipedia.org/wiki/Tide_pool" {
				t.Errorf("first result %+v", d.Results[0])
			}
			text := res.Text()
			for _, want := range []string{`Search results for "tide pools"`, "1. Tide pool - Wikipedia", "   https://en.wikipedia.org/wiki/Tide_pool", "   " + tc.wantFirst} {
				if !strings.Contains(text, want) {
					t.Errorf("text lacks %q:\n%s", want, text)
				}
			}
			if want := "Searching the web for “tide pools”"; tl.ActivityLabel(json.RawMessage(`{"query":"tide pools"}`)) != want {
				t.Errorf("activity label %q", tl.ActivityLabel(json.RawMessage(`{"query":"tide pools"}`)))
			}
			want := "Found " + label.Plural(len(tc.wantTitle), "result") + " for “tide pools”"
			if got := tl.CompletedLabel(json.RawMessage(`{"query":"tide pools"}`), res); got != want {
				t.Errorf("completed label %q, want %q", got, want)
			}
		})
	}
}

func TestSearchCountIsBounded(t *testing.T) {
	t.Parallel()
	tl := toolNamed(t, Tools(Config{}), "web_search")
	for _, args := range []string{`{"query":"x","count":0}`, `{"query":"x","count":21}`, `{"query":""}`, `{"count":3}`} {
		if err := tl.Params.Validate([]byte(args)); err == nil {
			t.Errorf("%s: the schema accepts it", args)
		}
	}
	var results []string
	for i := range 30 {
		results = append(results, `{"url":"https://example.org/`+string(rune('a'+i%26))+`","title":"r","content":"c"}`)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"results":[`+strings.Join(results, ",")+`]}`)
	}))
	defer srv.Close()
	tools := Tools(Config{Binding: bindings(map[string]*Binding{"ann": {Search: &SearchBinding{Provider: SearXNG, URL: srv.URL}}})})
	for _, tc := range []struct {
		args any
		want int
	}{
		{map[string]any{"query": "x"}, DefaultCount},
		{map[string]any{"query": "x", "count": 20}, 20},
		{map[string]any{"query": "x", "count": 1}, 1},
	} {
		res := call(t, toolNamed(t, tools, "web_search"), "ann", tc.args)
		d, _ := label.DetailsOf[SearchDetails](res.Details)
		if res.IsError || len(d.Results) != tc.want {
			t.Errorf("%v: %d results, want %d (%s)", tc.args, len(d.Results), tc.want, res.Text())
		}
	}
}

func TestSearchProviderErrors(t *testing.T) {
	t.Parallel()
	type answer struct {
		status int
		header map[string]string
		body   string
	}
	for _, tc := range []struct {
		name     string
		provider string
		answer   answer
		want     []string
	}{
		{"brave 401", Brave, answer{401, nil, `{"type":"ErrorResponse","error":{"id":"c1","status":401,"code":"SUBSCRIPTION_TOKEN_INVALID","detail":"The provided subscription token is invalid."},"time":1700000000}`},
			[]string{"refused this host's API key (HTTP 401: SUBSCRIPTION_TOKEN_INVALID: The provided subscription token is invalid.)", "TOOLBUS_BRAVE_API_KEY", "-web-key-file brave=FILE"}},
		{"brave 429", Brave, answer{429, map[string]string{"Retry-After": "2"}, `{"type":"ErrorResponse","error":{"status":429,"code":"RATE_LIMITED","detail":"Request rate limit exceeded for plan."}}`},
			[]string{"is limiting the rate of searches (HTTP 429: RATE_LIMITED: Request rate limit exceeded for plan.)", "try again later (it asks to wait 2s)"}},
		{"brave bad JSON", Brave, answer{200, map[string]string{"Content-Type": "text/html"}, `<html><body>Gateway says hello</body></html>`},
			[]string{"answered HTTP 200 with a body that is not its JSON search format", `content type "text/html"`, "Gateway says hello"}},
		{"tavily 401", Tavily, answer{401, nil, `{"detail":{"error":"Unauthorized: missing or invalid API key."}}`},
			[]string{"refused this host's API key (HTTP 401: Unauthorized: missing or invalid API key.)", "TOOLBUS_TAVILY_API_KEY"}},
		{"tavily 432", Tavily, answer{432, nil, `{"detail":{"error":"This request exceeds your plan's set usage limit."}}`},
			[]string{"refused the search (HTTP 432: This request exceeds your plan's set usage limit.)"}},
		{"tavily wrong shape", Tavily, answer{200, nil, `{"answer":"42"}`},
			[]string{"not its JSON search format (no results field"}},
		{"searxng 403", SearXNG, answer{403, nil, `<html>403 Forbidden</html>`},
			[]string{"refused the search (HTTP 403: 403 Forbidden)", "settings.yml lists json under search.formats"}},
		{"searxng 500", SearXNG, answer{502, nil, ``},
			[]string{"failed (HTTP 502: (empty body)): the provider has trouble"}},
		{"searxng redirect", SearXNG, answer{302, map[string]string{"Location": "https://elsewhere.example/search"}, ``},
			[]string{"a redirect to https://elsewhere.example/search", "point the binding at the final URL"}},
		{"searxng truncated JSON", SearXNG, answer{200, nil, `{"results":[{"url":"https://a"`},
			[]string{"not its JSON search format (unexpected end of JSON input"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.answer.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.answer.status)
				_, _ = io.WriteString(w, tc.answer.body)
			}))
			defer srv.Close()
			tools := Tools(Config{
				Binding: bindings(map[string]*Binding{"ann": {Search: &SearchBinding{Provider: tc.provider, URL: srv.URL}}}),
				Keys: map[string]Key{
					Brave:  {Secret: "brave-secret-key", Endpoints: []string{srv.URL}},
					Tavily: {Secret: "tvly-secret-key", Endpoints: []string{srv.URL}},
				},
			})
			tl := toolNamed(t, tools, "web_search")
			res := call(t, tl, "ann", map[string]any{"query": "tide pools"})
			if !res.IsError {
				t.Fatalf("no error: %s", res.Text())
			}
			for _, want := range tc.want {
				if !strings.Contains(res.Text(), want) {
					t.Errorf("error lacks %q:\n%s", want, res.Text())
				}
			}
			if strings.Contains(res.Text(), "secret-key") {
				t.Errorf("the error shows the key: %s", res.Text())
			}
			if got := tl.CompletedLabel(json.RawMessage(`{"query":"tide pools"}`), res); got != "Could not search the web for “tide pools”" {
				t.Errorf("completed label %q", got)
			}
		})
	}
}

// TestSearchKeyScoping: a key goes to its provider's official API and to the endpoints
// the operator allowed, never to a URL a profile names on its own.
func TestSearchKeyScoping(t *testing.T) {
	t.Parallel()
	var s seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.add(r)
		if r.Header.Get("X-Subscription-Token") == "" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"type":"ErrorResponse","error":{"code":"SUBSCRIPTION_TOKEN_INVALID","detail":"Missing token."}}`)
			return
		}
		_, _ = io.WriteString(w, braveAnswer)
	}))
	defer srv.Close()
	profile := map[string]*Binding{
		"ann": {Search: &SearchBinding{Provider: Brave, URL: srv.URL}},
		"bob": {Search: &SearchBinding{Provider: Brave}},
		"cid": {Search: &SearchBinding{Provider: Tavily}},
	}

	// The key is the host's, but the profile's URL is not where the operator allows it.
	tools := Tools(Config{Binding: bindings(profile), Keys: map[string]Key{Brave: {Secret: "brave-secret-key"}}})
	res := call(t, toolNamed(t, tools, "web_search"), "ann", map[string]any{"query": "q"})
	r, _ := s.last(t)
	if got := r.Header.Get("X-Subscription-Token"); got != "" {
		t.Fatalf("the key went to a URL the profile named: %q", got)
	}
	for _, want := range []string{"wants an API key and none was sent (HTTP 401", "only to https://api.search.brave.com", "-web-key-endpoint brave=URL"} {
		if !res.IsError || !strings.Contains(res.Text(), want) {
			t.Errorf("error lacks %q: %s", want, res.Text())
		}
	}

	// Allowed by the operator, with the URL written differently (final slash, case).
	tools = Tools(Config{Binding: bindings(profile), Keys: map[string]Key{Brave: {Secret: "brave-secret-key", Endpoints: []string{strings.ToUpper(srv.URL[:4]) + srv.URL[4:] + "/"}}}})
	res = call(t, toolNamed(t, tools, "web_search"), "ann", map[string]any{"query": "q"})
	if r, _ = s.last(t); res.IsError || r.Header.Get("X-Subscription-Token") != "brave-secret-key" {
		t.Errorf("the allowed endpoint did not get the key: %s", res.Text())
	}

	// The official API without a key: refused before anything is sent.
	n := len(s.reqs)
	tools = Tools(Config{Binding: bindings(profile)})
	for agent, want := range map[string]string{
		"bob": "this web host has no Brave Search API key: set TOOLBUS_BRAVE_API_KEY or -web-key-file brave=FILE",
		"cid": "this web host has no Tavily API key: set TOOLBUS_TAVILY_API_KEY",
	} {
		res = call(t, toolNamed(t, tools, "web_search"), agent, map[string]any{"query": "q"})
		if !res.IsError || !strings.Contains(res.Text(), want) {
			t.Errorf("%s: %s, want %q", agent, res.Text(), want)
		}
	}
	if len(s.reqs) != n {
		t.Error("a request was sent without a key")
	}

	for _, tc := range []struct {
		root, allowed string
		want          bool
	}{
		{"https://api.search.brave.com", "https://api.search.brave.com/", true},
		{"https://api.search.brave.com:443/", "https://API.search.brave.com", true},
		{"http://api.search.brave.com", "https://api.search.brave.com", false},
		{"https://api.search.brave.com.evil.example", "https://api.search.brave.com", false},
		{"https://api.search.brave.com:8443", "https://api.search.brave.com", false},
		{"https://user@api.search.brave.com", "https://api.search.brave.com", false},
		{"https://proxy.internal/brave", "https://proxy.internal/brave/", true},
		{"https://proxy.internal/brave/x", "https://proxy.internal/brave", false},
	} {
		if got := sameRoot(tc.root, tc.allowed); got != tc.want {
			t.Errorf("sameRoot(%q, %q) = %v", tc.root, tc.allowed, got)
		}
	}
}

func TestSplitProviderValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, provider, value, err string }{
		{"brave=/etc/k", Brave, "/etc/k", ""},
		{"Tavily=https://p/x", Tavily, "https://p/x", ""},
		{"brave", "", "", "want provider=value"},
		{"searxng=/k", "", "", "searxng takes no key"},
		{"google=/k", "", "", `unknown search provider "google"`},
	} {
		p, v, err := SplitProviderValue(tc.in)
		if p != tc.provider || v != tc.value || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %q %q %v", tc.in, p, v, err)
		}
	}
}
