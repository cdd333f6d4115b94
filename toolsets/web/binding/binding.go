// Package binding holds an agent's web providers as its profile names them: which
// search provider web_search uses and where, and how web_fetch may reach the web. It is
// apart from package web, which runs the tools (and links an HTML extractor), so that
// what reads profiles links none of that.
package binding

// Binding is an agent's web providers, from its profile (the profile's web section). It holds
// no secret: a provider's key is the web host's own configuration.
type Binding struct {
	Search *SearchBinding `json:"search,omitempty"`
	Fetch  *FetchBinding  `json:"fetch,omitempty"`
}

// SearchBinding names the search provider of web_search.
type SearchBinding struct {
	// Provider is SearXNG, Brave or Tavily.
	Provider string `json:"provider"`
	// URL is the provider's endpoint; empty means the provider's public API (required
	// for SearXNG, which has none).
	URL string `json:"url,omitempty"`
}

// Search providers.
const (
	SearXNG = "searxng"
	Brave   = "brave"
	Tavily  = "tavily"
)

// FetchBinding is how web_fetch may reach the web.
type FetchBinding struct {
	// AllowPrivate lets fetch reach loopback, private and link-local addresses (the
	// node's own services among them). Off unless the profile says so.
	AllowPrivate bool `json:"allow_private,omitempty"`
}
