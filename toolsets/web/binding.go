// Package web holds the web category: web_search through a configured provider and
// web_fetch of readable pages, each present in an agent's turns only when its profile binds
// it.
package web

// Category is the web tools' category.
const Category = "web"

// Binding is an agent's web providers, from its profile (toolsets.Profile.Web). It holds
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
