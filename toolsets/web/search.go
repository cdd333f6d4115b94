package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/html"

	"github.com/toolbus/toolbus"

	"github.com/toolbus/toolbus/internal/label"
)

// maxSearchBody bounds a provider's answer: twenty results with snippets are a few
// dozen kB; SearXNG's answers, with every engine's fields, a few hundred.
const maxSearchBody = 4 << 20

// maxSnippet bounds one result's snippet, in characters.
const maxSnippet = 600

// SearchResult is one result of web_search.
type SearchResult struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet,omitempty"`
}

// SearchDetails are the details of a web_search result.
type SearchDetails struct {
	Provider string `json:"provider"`
	// Endpoint is the URL the search went to, without its query.
	Endpoint string         `json:"endpoint"`
	Query    string         `json:"query"`
	Count    int            `json:"count"`
	Results  []SearchResult `json:"results"`
	// Keyed says whether the request carried the host's key for the provider.
	Keyed bool `json:"keyed,omitempty"`
}

// providerName is how messages name a provider.
func providerName(p string) string {
	switch p {
	case SearXNG:
		return "SearXNG"
	case Brave:
		return "Brave Search"
	case Tavily:
		return "Tavily"
	}
	return p
}

// providerPath is the path of each provider's search endpoint under its API root.
var providerPath = map[string]string{
	SearXNG: "/search",
	Brave:   "/res/v1/web/search",
	Tavily:  "/search",
}

func (h *host) search(ctx context.Context, call toolbus.Call, a searchArgs) (toolbus.Result, error) {
	b, err := h.binding(ctx, call.Agent)
	if err != nil {
		return toolbus.Result{}, err
	}
	if b.Search == nil {
		return toolbus.Result{}, fmt.Errorf("the profile of agent %s binds no search provider, so web_search is not available to it "+
			"(an operator binds one with: toolbus agent set -web-search PROVIDER[=URL] %s)", call.Agent, call.Agent)
	}
	query := strings.TrimSpace(a.Query)
	if query == "" {
		return toolbus.Result{}, errors.New("the query is empty: say what to search for")
	}
	count := a.Count
	if count <= 0 {
		count = DefaultCount
	}
	count = min(count, MaxCount)
	ctx, cancel := context.WithTimeout(ctx, h.cfg.SearchTimeout)
	defer cancel()
	d, err := h.cfg.searchWith(ctx, b.Search, query, count)
	if err != nil {
		return toolbus.Result{}, err
	}
	return toolbus.TextResult(formatResults(d)).WithDetails(d), nil
}

// searchWith sends one search to the bound provider and reads its results.
func (c Config) searchWith(ctx context.Context, sb *SearchBinding, query string, count int) (SearchDetails, error) {
	name := providerName(sb.Provider)
	path, ok := providerPath[sb.Provider]
	if !ok {
		return SearchDetails{}, fmt.Errorf("unknown search provider %q in the agent's profile: want searxng, brave or tavily", sb.Provider)
	}
	root := sb.URL
	if root == "" {
		root = OfficialURL[sb.Provider]
	}
	if root == "" {
		return SearchDetails{}, fmt.Errorf("the agent's %s binding names no URL: a SearXNG binding needs its instance's URL", name)
	}
	key := c.keyFor(sb.Provider, root)
	if key == "" && sameRoot(root, OfficialURL[sb.Provider]) {
		return SearchDetails{}, fmt.Errorf("this web host has no %s API key: %s", name, keyAdvice(sb.Provider))
	}
	endpoint, err := endpointURL(root, path)
	if err != nil {
		return SearchDetails{}, fmt.Errorf("the agent's %s binding: %w", name, err)
	}
	req, err := c.searchRequest(ctx, sb.Provider, endpoint, key, query, count)
	if err != nil {
		return SearchDetails{}, err
	}
	d := SearchDetails{Provider: sb.Provider, Endpoint: endpoint.String(), Query: query, Count: count, Keyed: key != ""}
	where := name
	if sb.Provider == SearXNG || !sameRoot(root, OfficialURL[sb.Provider]) {
		where = fmt.Sprintf("%s at %s", name, endpoint.Redacted())
	}
	redact := func(s string) string {
		if key != "" {
			s = strings.ReplaceAll(s, key, "[redacted]")
		}
		return s
	}
	resp, err := searchClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return d, fmt.Errorf("%s did not answer within %s", where, c.SearchTimeout)
		}
		return d, errors.New(redact(fmt.Sprintf("could not reach %s: %v", where, unwrapURLError(err))))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSearchBody+1))
	if err != nil {
		return d, errors.New(redact(fmt.Sprintf("%s: reading the answer: %v", where, err)))
	}
	if len(body) > maxSearchBody {
		return d, fmt.Errorf("%s answered with more than %s: not a search result this host reads", where, formatBytes(maxSearchBody))
	}
	if resp.StatusCode != http.StatusOK {
		return d, errors.New(redact(statusError(where, sb.Provider, key != "", resp, body)))
	}
	results, err := decodeResults(sb.Provider, body)
	if err != nil {
		ct := resp.Header.Get("Content-Type")
		return d, errors.New(redact(fmt.Sprintf("%s answered HTTP 200 with a body that is not its JSON search format (%v; content type %q): %s",
			where, err, ct, excerpt(body))))
	}
	d.Results = make([]SearchResult, 0, min(count, len(results)))
	for _, r := range results {
		if len(d.Results) == count {
			break
		}
		r.Title = cleanSnippet(r.Title, 300)
		r.Snippet = cleanSnippet(r.Snippet, maxSnippet)
		r.URL = strings.TrimSpace(r.URL)
		if r.URL == "" {
			continue
		}
		if r.Title == "" {
			r.Title = r.URL
		}
		d.Results = append(d.Results, r)
	}
	return d, nil
}

// searchClient sends searches. It follows no redirect: a redirect would carry the key's
// header to wherever it points (Go keeps custom headers on redirects), and a search API
// that moved is configured anew.
var searchClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// endpointURL is the search endpoint under root: root itself when it already ends with
// the provider's path.
func endpointURL(root, path string) (*url.URL, error) {
	u, err := url.Parse(root)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %v", root, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http or https URL", root)
	}
	if !strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), path) {
		u.Path = strings.TrimSuffix(u.Path, "/") + path
		u.RawPath = ""
	}
	u.Fragment = ""
	return u, nil
}

// searchRequest builds the provider's request.
func (c Config) searchRequest(ctx context.Context, provider string, endpoint *url.URL, key, query string, count int) (*http.Request, error) {
	u := *endpoint
	q := u.Query()
	var (
		method = http.MethodGet
		body   io.Reader
	)
	switch provider {
	case SearXNG:
		// GET /search?q=...&format=json; the instance must list json in its
		// search.formats (settings.yml), or it answers 403.
		q.Set("q", query)
		q.Set("format", "json")
	case Brave:
		// GET /res/v1/web/search?q=...&count=N (N at most 20).
		q.Set("q", query)
		q.Set("count", strconv.Itoa(count))
	case Tavily:
		// POST /search {"query": ..., "max_results": N}.
		b, err := json.Marshal(map[string]any{"query": query, "max_results": count, "search_depth": "basic"})
		if err != nil {
			return nil, err
		}
		method, body = http.MethodPost, bytes.NewReader(b)
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("build %s request: %w", providerName(provider), err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.UserAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		switch provider {
		case Brave:
			req.Header.Set("X-Subscription-Token", key)
		case Tavily:
			req.Header.Set("Authorization", "Bearer "+key)
		}
	}
	return req, nil
}

// decodeResults reads the provider's JSON answer.
func decodeResults(provider string, body []byte) ([]SearchResult, error) {
	var out []SearchResult
	switch provider {
	case SearXNG, Tavily: // both answer {"results": [{"title", "url", "content"}]}
		var r struct {
			Results *[]struct {
				Title   string `json:"title"`
				URL     string `json:"url"`
				Content string `json:"content"`
			} `json:"results"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, err
		}
		if r.Results == nil {
			return nil, errors.New("no results field")
		}
		for _, x := range *r.Results {
			out = append(out, SearchResult{Title: x.Title, URL: x.URL, Snippet: x.Content})
		}
	case Brave:
		// A search with no web results has no "web" object at all.
		var r struct {
			Type string `json:"type"`
			Web  *struct {
				Results []struct {
					Title       string `json:"title"`
					URL         string `json:"url"`
					Description string `json:"description"`
				} `json:"results"`
			} `json:"web"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, err
		}
		if r.Type != "search" && r.Web == nil {
			return nil, errors.New(`no "web" results and not a search answer`)
		}
		if r.Web != nil {
			for _, x := range r.Web.Results {
				out = append(out, SearchResult{Title: x.Title, URL: x.URL, Snippet: x.Description})
			}
		}
	}
	return out, nil
}

// statusError says what a provider's non-200 answer means and what to do about it.
func statusError(where, provider string, keyed bool, resp *http.Response, body []byte) string {
	msg := providerMessage(body)
	if msg != "" {
		msg = ": " + msg
	}
	code := fmt.Sprintf("HTTP %d", resp.StatusCode)
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Sprintf("%s answered %s, a redirect to %s: this host follows no redirect of a search API; point the binding at the final URL",
			where, code, resp.Header.Get("Location"))
	case provider == SearXNG && resp.StatusCode == http.StatusForbidden:
		return fmt.Sprintf("%s refused the search (%s%s): a SearXNG instance answers JSON only when its settings.yml lists json under search.formats", where, code, msg)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if !keyed && provider != SearXNG {
			return fmt.Sprintf("%s wants an API key and none was sent (%s%s): this host sends its %s key only to %s and the endpoints its operator allows (-web-key-endpoint %s=URL)",
				where, code, msg, providerName(provider), OfficialURL[provider], provider)
		}
		if provider == SearXNG {
			return fmt.Sprintf("%s refused the search (%s%s)", where, code, msg)
		}
		return fmt.Sprintf("%s refused this host's API key (%s%s): check the key (%s)", where, code, msg, keyAdvice(provider))
	case resp.StatusCode == http.StatusTooManyRequests:
		wait := ""
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			if s, err := strconv.Atoi(ra); err == nil {
				wait = fmt.Sprintf(" (it asks to wait %s)", time.Duration(s)*time.Second)
			}
		}
		return fmt.Sprintf("%s is limiting the rate of searches (%s%s): try again later%s, or search less often", where, code, msg, wait)
	case resp.StatusCode >= 500:
		return fmt.Sprintf("%s failed (%s%s): the provider has trouble; try again later", where, code, msg)
	}
	return fmt.Sprintf("%s refused the search (%s%s)", where, code, msg)
}

// providerMessage finds the human message in an error body: Brave's
// {"error":{"detail":...}}, Tavily's {"detail":{"error":...}}, or a plain message field;
// else a short excerpt of the body.
func providerMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Detail  json.RawMessage `json:"detail"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &v) != nil {
		return excerpt(body)
	}
	for _, raw := range []json.RawMessage{v.Error, v.Detail} {
		if len(raw) == 0 {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return cleanSnippet(s, 300)
		}
		var o struct {
			Detail  string `json:"detail"`
			Error   string `json:"error"`
			Message string `json:"message"`
			Code    string `json:"code"`
		}
		if json.Unmarshal(raw, &o) == nil {
			for _, m := range []string{o.Detail, o.Error, o.Message} {
				if m != "" {
					if o.Code != "" {
						m = o.Code + ": " + m
					}
					return cleanSnippet(m, 300)
				}
			}
			if o.Code != "" {
				return o.Code
			}
		}
	}
	if v.Message != "" {
		return cleanSnippet(v.Message, 300)
	}
	return excerpt(body)
}

// excerpt is the start of a body, as text on one line.
func excerpt(body []byte) string {
	s := cleanSnippet(string(body[:min(len(body), 4096)]), 200)
	if s == "" {
		return "(empty body)"
	}
	return s
}

// formatResults is web_search's text for the model.
func formatResults(d SearchDetails) string {
	var b strings.Builder
	if len(d.Results) == 0 {
		fmt.Fprintf(&b, "No results for %q (%s).", d.Query, providerName(d.Provider))
		return b.String()
	}
	fmt.Fprintf(&b, "Search results for %q (%s, %s):\n", d.Query, providerName(d.Provider), label.Plural(len(d.Results), "result"))
	for i, r := range d.Results {
		fmt.Fprintf(&b, "\n%d. %s\n   %s\n", i+1, r.Title, r.URL)
		if r.Snippet != "" {
			fmt.Fprintf(&b, "   %s\n", r.Snippet)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// cleanSnippet turns a provider's snippet, which may hold HTML (Brave marks matches with
// <strong>) and entities, into one line of plain text of at most max characters.
func cleanSnippet(s string, max int) string {
	var b strings.Builder
	if strings.ContainsAny(s, "<&") {
		z := html.NewTokenizer(strings.NewReader(s))
		for {
			tt := z.Next()
			if tt == html.ErrorToken {
				break
			}
			if tt == html.TextToken {
				b.Write(z.Text())
			}
		}
		s = b.String()
	}
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		s = strings.TrimSpace(string(r[:max-1])) + "…"
	}
	return s
}

// unwrapURLError drops the "Get "URL": " that net/http puts before a transport error.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// mediaType is the media type of a Content-Type header, lower case; "" when unset or
// unreadable.
func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return strings.ToLower(mt)
}
