// Package web holds the web category: web_search through a configured provider and
// web_fetch of readable pages, each present in an agent's turns only when its profile binds
// it.
package web

import "github.com/toolbus/toolbus/toolsets/web/binding"

// Category is the web tools' category.
const Category = "web"

// Binding is an agent's web providers, from its profile (package binding, where the
// profile reads them).
type (
	Binding       = binding.Binding
	SearchBinding = binding.SearchBinding
	FetchBinding  = binding.FetchBinding
)

// Search providers (package binding).
const (
	SearXNG = binding.SearXNG
	Brave   = binding.Brave
	Tavily  = binding.Tavily
)
