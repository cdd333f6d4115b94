package web

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/internal/label"
	"github.com/toolbus/toolbus/schema"
)

// Defaults applied to zero fields of [Config].
const (
	DefaultSearchTimeout = 20 * time.Second
	DefaultFetchTimeout  = 30 * time.Second
	// DefaultMaxBytes is the most of a page's body web_fetch reads.
	DefaultMaxBytes = 5 << 20
	// DefaultMaxRedirects is the most redirects web_fetch follows.
	DefaultMaxRedirects = 5
	// DefaultMaxChars is the most characters of a page one web_fetch call returns,
	// unless its max_chars says otherwise (up to MaxMaxChars).
	DefaultMaxChars = 20000
	MaxMaxChars     = 100000
	// DefaultCount and MaxCount bound web_search's count.
	DefaultCount = 5
	MaxCount     = 20
	// DefaultUserAgent is the User-Agent of the web host's requests.
	DefaultUserAgent = "toolbus-web/1 (+https://github.com/toolbus/toolbus)"
)

// Config configures the web category's host. The zero value of every field but Binding
// takes its default.
type Config struct {
	// Binding returns the calling agent's web binding, from its profile (nil when the
	// agent has no profile or its profile binds no web tool). In a node it reads the agent
	// profile store for every call, so a changed profile takes effect at the next call.
	Binding func(ctx context.Context, agent string) (*Binding, error)
	// Keys are the search providers' API keys, by provider (Brave, Tavily): the host's
	// own configuration, never a profile's. See [Key] for where each may be sent.
	Keys map[string]Key
	// SearchTimeout bounds one search request.
	SearchTimeout time.Duration
	// FetchTimeout bounds one fetch, redirects and body included.
	FetchTimeout time.Duration
	// MaxBytes is the most of a body fetch reads; the rest is never read.
	MaxBytes int64
	// MaxRedirects is the most redirects one fetch follows.
	MaxRedirects int
	// UserAgent is sent with every request.
	UserAgent string

	// addrReason replaces addrReason in tests, where every server listens on loopback:
	// it lets one port stand for a public address.
	addrReason func(netip.AddrPort) string
}

func (c Config) withDefaults() Config {
	if c.SearchTimeout <= 0 {
		c.SearchTimeout = DefaultSearchTimeout
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxRedirects <= 0 {
		c.MaxRedirects = DefaultMaxRedirects
	}
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
	return c
}

// searchArgs are web_search's arguments.
type searchArgs struct {
	Query string `json:"query" jsonschema:"minLength=1,maxLength=400" jsonschema_description:"What to search for, as you would type it into a search engine."`
	Count int    `json:"count,omitempty" jsonschema:"minimum=1,maximum=20,default=5" jsonschema_description:"How many results to return, 1 to 20 (default 5)."`
}

// fetchArgs are web_fetch's arguments.
type fetchArgs struct {
	URL      string `json:"url" jsonschema:"minLength=1,maxLength=4096" jsonschema_description:"The http or https URL to read."`
	Offset   int    `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Where to start reading, in characters of the page's text (default 0). A page too long for one call ends with the offset to read on from."`
	MaxChars int    `json:"max_chars,omitempty" jsonschema:"minimum=1000,maximum=100000,default=20000" jsonschema_description:"The most characters to return (1000 to 100000, default 20000)."`
}

// Specs returns the specs of the web tools b binds, in the order the model sees them:
// web_search only when b binds a search provider, web_fetch only when it binds fetch.
// A nil b binds neither.
func Specs(b *Binding) []*toolbus.Spec {
	if b == nil {
		return nil
	}
	all := specs()
	var out []*toolbus.Spec
	if b.Search != nil {
		out = append(out, &all[0])
	}
	if b.Fetch != nil {
		out = append(out, &all[1])
	}
	return out
}

// specs are both tools' specs; Tools adds the functions. They do not depend on the
// binding, so the host's published specs are the ones turns carry.
func specs() []toolbus.Spec {
	return []toolbus.Spec{
		{
			Name: "web_search",
			Description: "Search the web. Returns up to count results (default 5), each with its title, URL and a snippet. " +
				"Use it to find pages about current events, documentation or facts you are unsure of; " +
				"read a result in full with web_fetch when the snippet is not enough.",
			Mode:     toolbus.Parallel,
			ReadOnly: true,
			Category: Category,
			Timeout:  DefaultSearchTimeout + 5*time.Second,
			Params:   schema.MustFor[searchArgs](),
		},
		{
			Name: "web_fetch",
			Description: "Read a web page (http or https) as text: HTML comes back as Markdown of the page's main content " +
				"(navigation, ads and footers left out), plain text and JSON as they are. Other content (images, PDFs, archives) is refused. " +
				"A long page is cut: the result then ends with the offset to pass to read on.",
			Mode:     toolbus.Parallel,
			ReadOnly: true,
			Category: Category,
			Timeout:  DefaultFetchTimeout + 5*time.Second,
			Params:   schema.MustFor[fetchArgs](),
		},
	}
}

// Tools returns web_search and web_fetch, configured by cfg, for the web category's host.
// Each call finds the calling agent's binding through cfg.Binding; an agent whose profile
// binds no search provider (or no fetch) gets an error result saying so.
func Tools(cfg Config) []*toolbus.Tool {
	c := cfg.withDefaults()
	s := specs()
	h := &host{cfg: c, fetcher: newFetcher(c)}
	return []*toolbus.Tool{
		toolbus.MustDefine(toolbus.Def[searchArgs]{
			Spec: s[0],
			DescribeActivity: func(a searchArgs) string {
				return "Searching the web for " + quote(a.Query)
			},
			DescribeCompletedActivity: func(a searchArgs, res toolbus.Result) string {
				d, ok := label.DetailsOf[SearchDetails](res.Details)
				if !ok {
					return "Could not search the web for " + quote(a.Query)
				}
				return fmt.Sprintf("Found %s for %s", label.Plural(len(d.Results), "result"), quote(a.Query))
			},
			Execute: h.search,
		}),
		toolbus.MustDefine(toolbus.Def[fetchArgs]{
			Spec: s[1],
			DescribeActivity: func(a fetchArgs) string {
				return "Reading " + shortURL(a.URL)
			},
			DescribeCompletedActivity: func(a fetchArgs, res toolbus.Result) string {
				d, ok := label.DetailsOf[FetchDetails](res.Details)
				switch {
				case !ok:
					return "Could not read " + shortURL(a.URL)
				case res.IsError && d.Status >= 400:
					return fmt.Sprintf("Could not read %s (HTTP %d)", shortURL(d.FinalURL), d.Status)
				case res.IsError:
					return "Could not read " + shortURL(d.FinalURL)
				}
				return fmt.Sprintf("Read %s from %s", formatBytes(d.Bytes), hostOf(d.FinalURL))
			},
			Execute: h.fetch,
		}),
	}
}

// host executes the web tools.
type host struct {
	cfg     Config
	fetcher *fetcher
}

// binding returns the calling agent's binding, or why there is none.
func (h *host) binding(ctx context.Context, agent string) (*Binding, error) {
	if agent == "" {
		return nil, errors.New("this call carries no agent id, so no agent profile binds a web provider for it")
	}
	if h.cfg.Binding == nil {
		return nil, errors.New("this web host has no agent profile store to read the agent's web binding from")
	}
	b, err := h.cfg.Binding(ctx, agent)
	if err != nil {
		return nil, fmt.Errorf("read the web binding of agent %s: %w", agent, err)
	}
	if b == nil {
		b = &Binding{}
	}
	return b, nil
}

// quote is a query as labels show it: quoted, and cut at 60 characters.
func quote(s string) string {
	r := []rune(s)
	if len(r) > 60 {
		s = string(r[:59]) + "…"
	}
	return "“" + s + "”"
}

// formatBytes writes a size as people read it: 812 B, 4.2 kB, 1.3 MB.
func formatBytes(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000*1000:
		return fmt.Sprintf("%.1f kB", float64(n)/1000)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/(1000*1000))
}
