package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus"

	"github.com/toolbus/toolbus/internal/label"
)

// fetchTools are the web tools of a host where "open" may fetch private addresses and
// "closed" may not.
func fetchTools(cfg Config) *toolbus.Tool {
	cfg.Binding = bindings(map[string]*Binding{
		"open":   {Fetch: &FetchBinding{AllowPrivate: true}},
		"closed": {Fetch: &FetchBinding{}},
		"search": {Search: &SearchBinding{Provider: SearXNG, URL: "http://127.0.0.1:1"}},
	})
	for _, tl := range Tools(cfg) {
		if tl.Name == "web_fetch" {
			return tl
		}
	}
	return nil
}

func mustContain(t *testing.T, what, text string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(text, p) {
			t.Errorf("%s lacks %q:\n%s", what, p, text)
		}
	}
}

func TestFetchPrivateAddresses(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "the node's own service")
	}))
	defer srv.Close()
	tl := fetchTools(Config{})
	u, _ := url.Parse(srv.URL)
	port := u.Port()

	// Refused at the connection, by address, whatever name was used.
	for _, target := range []string{srv.URL + "/status", "http://localhost:" + port + "/status"} {
		res := call(t, tl, "closed", map[string]any{"url": target})
		if !res.IsError {
			t.Fatalf("%s: fetched %q", target, res.Text())
		}
		mustContain(t, "refusal", res.Text(), "refused to connect to ", ":"+port+": it is a loopback address",
			"the profile of agent closed does not allow web_fetch to reach loopback, private or link-local addresses",
			"toolbus agent set -web-fetch-private closed")
		if got := tl.CompletedLabel(mustJSON(map[string]any{"url": target}), res); !strings.HasPrefix(got, "Could not read ") {
			t.Errorf("label %q", got)
		}
	}
	res := call(t, tl, "closed", map[string]any{"url": srv.URL})
	mustContain(t, "refusal", res.Text(), "refused to connect to 127.0.0.1:"+port)

	// The profile allows it.
	res = call(t, tl, "open", map[string]any{"url": srv.URL + "/status"})
	if res.IsError {
		t.Fatalf("allow_private: %s", res.Text())
	}
	mustContain(t, "page", res.Text(), "URL: "+srv.URL+"/status", "the node's own service")
	if got := tl.CompletedLabel(mustJSON(map[string]any{"url": srv.URL}), res); got != "Read 22 B from 127.0.0.1:"+port {
		t.Errorf("label %q", got)
	}
}

func TestFetchRedirects(t *testing.T) {
	t.Parallel()
	// Every server here is on loopback: the test's address policy takes the port of
	// "public" for a public address and everything else for private.
	private := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "secret of the node")
	}))
	defer private.Close()
	var public *httptest.Server
	public = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/r/"):
			n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
			if n == 0 {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = io.WriteString(w, "arrived")
				return
			}
			http.Redirect(w, r, fmt.Sprintf("/r/%d", n-1), http.StatusFound)
		case r.URL.Path == "/to-private":
			http.Redirect(w, r, private.URL+"/admin", http.StatusMovedPermanently)
		case r.URL.Path == "/to-localhost":
			u, _ := url.Parse(private.URL)
			http.Redirect(w, r, "http://localhost:"+u.Port()+"/admin", http.StatusTemporaryRedirect)
		case r.URL.Path == "/to-file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		}
	}))
	defer public.Close()
	pu, _ := url.Parse(public.URL)
	publicPort, _ := strconv.Atoi(pu.Port())
	cfg := Config{MaxRedirects: 5, addrReason: func(ap netip.AddrPort) string {
		if int(ap.Port()) == publicPort {
			return ""
		}
		return addrReason(ap.Addr())
	}}
	tl := fetchTools(cfg)

	res := call(t, tl, "closed", map[string]any{"url": public.URL + "/r/5"})
	if res.IsError {
		t.Fatalf("5 redirects: %s", res.Text())
	}
	mustContain(t, "after 5 redirects", res.Text(), "URL: "+public.URL+"/r/0 (redirected from "+public.URL+"/r/5)", "arrived")
	if d, _ := label.DetailsOf[FetchDetails](res.Details); d.Redirects != 5 {
		t.Errorf("redirects %d", d.Redirects)
	}

	res = call(t, tl, "closed", map[string]any{"url": public.URL + "/r/6"})
	if !res.IsError {
		t.Fatalf("6 redirects followed: %s", res.Text())
	}
	mustContain(t, "6 redirects", res.Text(), "stopped after 5 redirects (the most this host follows)")

	for _, path := range []string{"/to-private", "/to-localhost"} {
		res = call(t, tl, "closed", map[string]any{"url": public.URL + path})
		if !res.IsError || strings.Contains(res.Text(), "secret") {
			t.Fatalf("%s: a redirect reached a private address: %s", path, res.Text())
		}
		mustContain(t, path, res.Text(), "/admin: refused to connect to 127.0.0.1:", "it is a loopback address")
	}
	res = call(t, tl, "open", map[string]any{"url": public.URL + "/to-private"})
	mustContain(t, "allowed redirect", res.Text(), "secret of the node")

	res = call(t, tl, "closed", map[string]any{"url": public.URL + "/to-file"})
	mustContain(t, "redirect to file:", res.Text(), "redirect to file:///etc/passwd refused: web_fetch reads http and https URLs, not file:")
}

func TestFetchCaps(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			line := strings.Repeat("x", 99) + "\n"
			for range 10000 { // 1 MB
				if _, err := io.WriteString(w, line); err != nil {
					return
				}
			}
		case "/exact":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(bytes.Repeat([]byte("y"), 64<<10))
		case "/silent":
			select { // never answers
			case <-r.Context().Done():
			case <-release:
			}
		case "/stall":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "a start, then nothing")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	defer srv.Close()
	tl := fetchTools(Config{MaxBytes: 64 << 10, FetchTimeout: 500 * time.Millisecond})

	res := call(t, tl, "open", map[string]any{"url": srv.URL + "/big"})
	d, _ := label.DetailsOf[FetchDetails](res.Details)
	if res.IsError || !d.BodyCut || d.Bytes != 64<<10 {
		t.Fatalf("size cap: %+v %s", d, res.Text())
	}
	mustContain(t, "size cap", res.Text(), "Only the first 65.5 kB of the page were read (this host's size cap).")
	res = call(t, tl, "open", map[string]any{"url": srv.URL + "/exact"})
	if d, _ := label.DetailsOf[FetchDetails](res.Details); d.BodyCut || d.Bytes != 64<<10 {
		t.Errorf("a body of exactly the cap was taken for a longer one: %+v", d)
	}

	res = call(t, tl, "open", map[string]any{"url": srv.URL + "/silent"})
	mustContain(t, "time cap", res.Text(), "fetch "+srv.URL+"/silent: no answer within")
	res = call(t, tl, "open", map[string]any{"url": srv.URL + "/stall"})
	mustContain(t, "stalled body", res.Text(), "did not send the whole page within", "read)")
	if !res.IsError {
		t.Error("a stalled body is not an error")
	}
}

func TestFetchContentTypes(t *testing.T) {
	t.Parallel()
	article, err := os.ReadFile("testdata/article.html")
	if err != nil {
		t.Fatal(err)
	}
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01")
	pages := map[string]struct {
		ct     string
		body   []byte
		status int
	}{
		"/article":  {"text/html; charset=utf-8", article, 200},
		"/plain":    {"text/plain", []byte("line one\nline two\n"), 200},
		"/data":     {"application/json", []byte(`{"a":[1,2,3],"b":"ü"}`), 200},
		"/feed":     {"application/rss+xml", []byte(`<rss><channel><title>T</title></channel></rss>`), 200},
		"/latin1":   {"text/plain; charset=iso-8859-1", []byte("caf\xe9 cr\xe8me"), 200},
		"/meta":     {"text/html", []byte("<html><head><meta charset=\"iso-8859-1\"><title>Caf\xe9</title></head><body><p>Cr\xe8me br\xfbl\xe9e, served cold.</p></body></html>"), 200},
		"/image":    {"image/png", png, 200},
		"/pdf":      {"application/pdf", []byte("%PDF-1.7\n..."), 200},
		"/unmarked": {"", png, 200},
		"/sniffed":  {"", []byte("<!DOCTYPE html><html><head><title>Sniffed</title></head><body><p>found by its bytes</p></body></html>"), 200},
		"/lying":    {"text/plain", []byte("abc\x00\x01\x02def"), 200},
		"/missing":  {"text/html", []byte("<html><head><title>Not here</title></head><body><h1>Page not found</h1><p>Sorry, nothing lives at this address.</p></body></html>"), 404},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := pages[r.URL.Path]
		if p.ct == "" {
			w.Header()["Content-Type"] = nil // no sniffing by the server
		} else {
			w.Header().Set("Content-Type", p.ct)
		}
		w.WriteHeader(p.status)
		_, _ = w.Write(p.body)
	}))
	defer srv.Close()
	tl := fetchTools(Config{})
	for _, tc := range []struct {
		path    string
		isError bool
		format  string
		want    []string
		label   string
	}{
		{"/plain", false, "text", []string{"line one\nline two"}, "Read 18 B from "},
		{"/data", false, "json", []string{`{"a":[1,2,3],"b":"ü"}`}, ""},
		{"/feed", false, "text", []string{"<rss><channel><title>T</title>"}, ""},
		{"/latin1", false, "text", []string{"café crème"}, ""},
		{"/sniffed", false, "markdown", []string{"Title: Sniffed", "found by its bytes"}, ""},
		{"/meta", false, "markdown", []string{"Title: Café", "Crème brûlée, served cold."}, ""},
		{"/image", true, "", []string{"refused 127.0.0.1:", "/image: its content is image/png, not text; web_fetch reads HTML, plain text, JSON and XML"}, "Could not read 127.0.0.1:"},
		{"/pdf", true, "", []string{"its content is application/pdf, not text"}, ""},
		{"/unmarked", true, "", []string{"its content is image/png, not text"}, ""},
		{"/lying", true, "", []string{"it says it is text/plain but holds binary data"}, ""},
		{"/missing", true, "markdown", []string{"/missing answered HTTP 404 Not Found: # Page not found", "Sorry, nothing lives at this address."}, "Could not read 127.0.0.1:"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res := call(t, tl, "open", map[string]any{"url": srv.URL + tc.path})
			if res.IsError != tc.isError {
				t.Fatalf("is_error %v: %s", res.IsError, res.Text())
			}
			mustContain(t, tc.path, res.Text(), tc.want...)
			d, _ := label.DetailsOf[FetchDetails](res.Details)
			if d.Format != tc.format {
				t.Errorf("format %q, want %q", d.Format, tc.format)
			}
			if tc.label != "" {
				if got := tl.CompletedLabel(mustJSON(map[string]any{"url": srv.URL + tc.path}), res); !strings.HasPrefix(got, tc.label) {
					t.Errorf("label %q, want %q...", got, tc.label)
				}
			}
		})
	}
	res := call(t, tl, "open", map[string]any{"url": srv.URL + "/missing"})
	if got := tl.CompletedLabel(mustJSON(map[string]any{"url": srv.URL + "/missing"}), res); !strings.HasSuffix(got, "/missing (HTTP 404)") {
		t.Errorf("label %q", got)
	}
}

// TestFetchArticle reads a realistic article page: its main content comes back as
// Markdown, its navigation, ads, cookie banner, sidebar and footer do not.
func TestFetchArticle(t *testing.T) {
	t.Parallel()
	article, err := os.ReadFile("testdata/article.html")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(article)
	}))
	defer srv.Close()
	tl := fetchTools(Config{})
	res := call(t, tl, "open", map[string]any{"url": srv.URL + "/science/tide-pools"})
	if res.IsError {
		t.Fatal(res.Text())
	}
	text := res.Text()
	mustContain(t, "article", text,
		"Title: How Tide Pools Survive the Winter",
		"URL: "+srv.URL+"/science/tide-pools",
		"the tide pools that teemed with life all summer seem to go quiet",
		"## Slowing down to save energy",
		"## What the survey measured",
		"- Salinity after each heavy rain",
		"> “We expected the pools to empty out in winter.",
		"python plot_pools.py --season winter --pools 1-40",
		"as the climate changes.",
	)
	for _, boiler := range []string{
		"We use cookies", "Accept all cookies", "Subscribe for $1", "Search the site",
		"Advertisement", "SuperBoots", "winter cruises", "Cheap flights",
		"Most read", "Ferry strike", "Get the newsletter",
		"All rights reserved", "Privacy policy", "Terms of use",
		"dataLayer", "comments.js", "min-height",
	} {
		if strings.Contains(text, boiler) {
			t.Errorf("boilerplate %q kept:\n%s", boiler, text)
		}
	}
	d, _ := label.DetailsOf[FetchDetails](res.Details)
	if d.Title != "How Tide Pools Survive the Winter" || d.Format != "markdown" || d.Next != 0 {
		t.Errorf("details %+v", d)
	}
	if got := tl.ActivityLabel(mustJSON(map[string]any{"url": srv.URL + "/science/tide-pools"})); !strings.HasPrefix(got, "Reading 127.0.0.1:") || !strings.HasSuffix(got, "/science/…") {
		t.Errorf("activity label %q", got)
	}
	if got := tl.CompletedLabel(mustJSON(map[string]any{"url": srv.URL}), res); got != fmt.Sprintf("Read %s from %s", formatBytes(int64(len(article))), strings.TrimPrefix(srv.URL, "http://")) {
		t.Errorf("completed label %q", got)
	}
}

func TestFetchReadsOnFromOffset(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&b, "Line %04d of a long plain text page, with some words ü.\n", i)
	}
	page := strings.TrimRight(b.String(), "\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, page)
	}))
	defer srv.Close()
	tl := fetchTools(Config{})
	total := len([]rune(page))
	var got strings.Builder
	offset, calls := 0, 0
	for {
		res := call(t, tl, "open", map[string]any{"url": srv.URL, "offset": offset, "max_chars": 50000})
		if res.IsError {
			t.Fatal(res.Text())
		}
		d, _ := label.DetailsOf[FetchDetails](res.Details)
		if d.Chars != total || d.Offset != offset {
			t.Fatalf("details %+v", d)
		}
		text := res.Text()
		body := text[strings.Index(text, "\n\n")+2:]
		if d.Next > 0 {
			tail := fmt.Sprintf("\n\n... cut at %d of %d characters; call web_fetch with offset %d to read on", d.Next, total, d.Next)
			if !strings.HasSuffix(body, tail) {
				t.Fatalf("no read-on line; ends %q", body[len(body)-120:])
			}
			body = strings.TrimSuffix(body, tail)
			// The cut falls at a line break.
			if !strings.HasSuffix(body, ".") {
				t.Errorf("cut inside a line: %q", body[len(body)-40:])
			}
		}
		if offset > 0 {
			mustContain(t, "later part", text, fmt.Sprintf("Characters %d to %d of %d.", offset, offset+d.Returned, total))
		}
		got.WriteString(body)
		if d.Next > 0 {
			got.WriteString("\n")
		}
		calls++
		if d.Next == 0 {
			break
		}
		offset = d.Next
	}
	if got.String() != page {
		t.Errorf("the parts do not add up to the page (%d of %d characters)", len([]rune(got.String())), total)
	}
	if calls != 4 {
		t.Errorf("%d calls for %d characters in parts of at most 50000", calls, total)
	}
	res := call(t, tl, "open", map[string]any{"url": srv.URL, "offset": total + 5})
	mustContain(t, "past the end", res.Text(), fmt.Sprintf("offset %d is past the end: the page's text has %d characters", total+5, total))
	// The default part is 20000 characters, cut at a line break before it.
	res = call(t, tl, "open", map[string]any{"url": srv.URL})
	d, _ := label.DetailsOf[FetchDetails](res.Details)
	if d.Returned > DefaultMaxChars || d.Returned < DefaultMaxChars*4/5 {
		t.Errorf("a default part of %d characters", d.Returned)
	}
}

func TestFetchRefusals(t *testing.T) {
	t.Parallel()
	tl := fetchTools(Config{})
	for _, tc := range []struct {
		agent, url, want string
	}{
		{"closed", "ftp://example.com/file", "web_fetch reads http and https URLs, not ftp:"},
		{"closed", "example.com/page", "the URL has no scheme: write it in full, as https://example.com/page"},
		{"closed", "https://user:pw@example.com/", "web_fetch does not send credentials"},
		{"closed", "http://[::1]:9/", "refused to connect to [::1]:9: it is a loopback address"},
		{"closed", "http://169.254.169.254/latest/meta-data/", "refused to connect to 169.254.169.254:80: it is a link-local address"},
		{"closed", "http://0.0.0.0:9/", "it is a unspecified address"},
		{"search", "https://example.com/", "the profile of agent search binds no fetch, so web_fetch is not available to it (an operator allows it with: toolbus agent set -web-fetch search)"},
		{"nobody", "https://example.com/", "the profile of agent nobody binds no fetch"},
		{"", "https://example.com/", "this call carries no agent id"},
	} {
		res := call(t, tl, tc.agent, map[string]any{"url": tc.url})
		if !res.IsError || !strings.Contains(res.Text(), tc.want) {
			t.Errorf("%s %s: %s, want %q", tc.agent, tc.url, res.Text(), tc.want)
		}
	}
	res := call(t, toolNamed(t, Tools(Config{Binding: bindings(map[string]*Binding{"f": {Fetch: &FetchBinding{}}})}), "web_search"), "f", map[string]any{"query": "x"})
	mustContain(t, "search unbound", res.Text(), "the profile of agent f binds no search provider, so web_search is not available to it", "toolbus agent set -web-search PROVIDER[=URL] f")
}

func TestAddrReason(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1": "loopback", "127.8.9.1": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"10.1.2.3": "private", "172.16.0.1": "private", "192.168.1.1": "private", "fd00::1": "private",
		"169.254.169.254": "link-local", "fe80::1": "link-local", "0.0.0.0": "unspecified", "::": "unspecified",
		"100.64.0.1": "shared (carrier-grade NAT)", "0.1.2.3": "this-network", "224.0.0.1": "multicast", "ff02::1": "multicast",
		"64:ff9b::7f00:1": "loopback", "64:ff9b::a00:1": "private", "255.255.255.255": "reserved",
		"8.8.8.8": "", "93.184.216.34": "", "2606:4700::6810:84e5": "", "64:ff9b::808:808": "",
	} {
		if got := addrReason(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
}

func TestSpecs(t *testing.T) {
	t.Parallel()
	names := func(specs []*toolbus.Spec) []string {
		var out []string
		for _, s := range specs {
			out = append(out, s.Name)
			if !s.ReadOnly || s.Mode != toolbus.Parallel || s.Category != Category || s.Destructive {
				t.Errorf("%s: read-only %v, mode %s, category %s", s.Name, s.ReadOnly, s.Mode, s.Category)
			}
		}
		return out
	}
	for _, tc := range []struct {
		b    *Binding
		want string
	}{
		{nil, ""},
		{&Binding{}, ""},
		{&Binding{Search: &SearchBinding{Provider: Brave}}, "web_search"},
		{&Binding{Fetch: &FetchBinding{}}, "web_fetch"},
		{&Binding{Search: &SearchBinding{Provider: SearXNG, URL: "http://s"}, Fetch: &FetchBinding{AllowPrivate: true}}, "web_search,web_fetch"},
	} {
		if got := strings.Join(names(Specs(tc.b)), ","); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.b, got, tc.want)
		}
	}
	// The host's tools carry the same specs turns do.
	tools := Tools(Config{})
	all := Specs(&Binding{Search: &SearchBinding{}, Fetch: &FetchBinding{}})
	for i, tl := range tools {
		a, _ := json.Marshal(tl.Spec)
		b, _ := json.Marshal(all[i])
		if !bytes.Equal(a, b) {
			t.Errorf("%s: host spec %s, turn spec %s", tl.Name, a, b)
		}
	}
	for _, bad := range []string{`{"url":"https://x","max_chars":500}`, `{"url":"https://x","max_chars":100001}`, `{"url":"https://x","offset":-1}`, `{}`} {
		if toolNamed(t, tools, "web_fetch").Params.Validate([]byte(bad)) == nil {
			t.Errorf("web_fetch accepts %s", bad)
		}
	}
}

func TestShortURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://www.example.com":                        "example.com",
		"https://example.com/":                           "example.com",
		"https://example.com/docs":                       "example.com/docs",
		"https://example.com/docs/intro?x=1":             "example.com/docs/…",
		"https://example.com/a?b=c":                      "example.com/a/…",
		"not a url":                                      "not a url",
		"https://example.com/" + strings.Repeat("a", 40): "example.com/" + strings.Repeat("a", 29) + "…",
	} {
		if got := shortURL(in); got != want {
			t.Errorf("shortURL(%q) = %q, want %q", in, got, want)
		}
	}
	for n, want := range map[int64]string{812: "812 B", 4200: "4.2 kB", 1_300_000: "1.3 MB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q", n, got)
		}
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
