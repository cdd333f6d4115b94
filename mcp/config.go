package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
)

// Defaults of a server hosted as a category.
const (
	// DefaultInitTimeout bounds the start of a server: the process (or the HTTP
	// connection) and its answer to initialize and tools/list. A server that never
	// answers is refused after it, and tried again later.
	DefaultInitTimeout = 20 * time.Second
	// DefaultRestartMin and DefaultRestartMax bound the wait before a server that
	// ended, or never started, is started again; it doubles from one to the other.
	DefaultRestartMin = 500 * time.Millisecond
	DefaultRestartMax = 30 * time.Second
	// CategoryPrefix starts the category of every MCP server: "mcp-NAME".
	CategoryPrefix = "mcp-"
)

// ServerConfig is one MCP server to host as a category: Name is its namespace and
// "mcp-"+Name its category; Command (argv, stdio) or URL (streamable HTTP) says how
// to reach it.
type ServerConfig struct {
	Name    string
	Command []string
	// Env is added to the node's environment for Command ("KEY=VALUE"); Dir is its
	// working directory ("" is the node's).
	Env []string
	Dir string
	URL string
	// Headers are sent with every request to URL ("Authorization: Bearer …").
	Headers map[string]string

	// InitTimeout bounds connecting, initialize and tools/list (DefaultInitTimeout).
	InitTimeout time.Duration
	// CallTimeout is the Timeout of the server's tools (0: the bus's default).
	CallTimeout time.Duration
	// RestartMin and RestartMax bound the wait between starts (DefaultRestartMin,
	// DefaultRestartMax).
	RestartMin, RestartMax time.Duration
	Logger                 *slog.Logger
}

// Category is the toolbus category of the server: "mcp-NAME".
func (c ServerConfig) Category() string { return CategoryPrefix + c.Name }

func (c ServerConfig) withDefaults() ServerConfig {
	if c.InitTimeout <= 0 {
		c.InitTimeout = DefaultInitTimeout
	}
	if c.RestartMin <= 0 {
		c.RestartMin = DefaultRestartMin
	}
	if c.RestartMax < c.RestartMin {
		c.RestartMax = max(DefaultRestartMax, c.RestartMin)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c ServerConfig) validate() error {
	if err := toolbus.CheckNamespace(c.Name); err != nil {
		return fmt.Errorf("mcp server %q: the name is its namespace: %w", c.Name, err)
	}
	if len(c.Category()) > 64 {
		return fmt.Errorf("mcp server %q: the name is too long for its category %s (at most %d characters)", c.Name, c.Category(), 64-len(CategoryPrefix))
	}
	switch {
	case len(c.Command) == 0 && c.URL == "":
		return fmt.Errorf("mcp server %s: give a command or a URL", c.Name)
	case len(c.Command) > 0 && c.URL != "":
		return fmt.Errorf("mcp server %s: give a command or a URL, not both", c.Name)
	case c.URL != "":
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("mcp server %s: URL %q: want http://HOST/PATH or https://…", c.Name, c.URL)
		}
	}
	if len(c.Headers) > 0 && c.URL == "" {
		return fmt.Errorf("mcp server %s: headers go with a URL", c.Name)
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("mcp server %s: environment entry %q: want KEY=VALUE", c.Name, kv)
		}
	}
	return nil
}

// ParseServerFlag reads a -mcp flag's value: NAME=URL (http or https) or
// NAME=COMMAND ARGS… (split at blanks; no quoting: put a longer command line in a
// script, or use a config file).
func ParseServerFlag(v string) (ServerConfig, error) {
	name, rest, ok := strings.Cut(v, "=")
	rest = strings.TrimSpace(rest)
	if !ok || name == "" || rest == "" {
		return ServerConfig{}, fmt.Errorf("-mcp %q: want NAME=COMMAND [ARGS…] or NAME=URL", v)
	}
	c := ServerConfig{Name: name}
	if strings.HasPrefix(rest, "http://") || strings.HasPrefix(rest, "https://") {
		c.URL = rest
	} else {
		c.Command = strings.Fields(rest)
	}
	return c, c.validate()
}

// ParseConfigFile reads MCP servers from a file in the common "mcpServers" shape
// (Claude Desktop, Cursor, mcporter): {"mcpServers": {"NAME": {"command": "…",
// "args": […], "env": {…}, "cwd": "…"} or {"url": "…", "headers": {…}}}}. Servers
// come in name order.
func ParseConfigFile(path string) ([]ServerConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Servers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
			Cwd     string            `json:"cwd"`
			URL     string            `json:"url"`
			BaseURL string            `json:"baseUrl"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", path, err)
	}
	if len(doc.Servers) == 0 {
		return nil, fmt.Errorf("mcp config %s: no servers under \"mcpServers\"", path)
	}
	names := make([]string, 0, len(doc.Servers))
	for n := range doc.Servers {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []ServerConfig
	var errs []error
	for _, n := range names {
		s := doc.Servers[n]
		c := ServerConfig{Name: n, URL: s.URL, Dir: s.Cwd, Headers: s.Headers}
		if c.URL == "" {
			c.URL = s.BaseURL
		}
		if s.Command != "" {
			c.Command = append([]string{s.Command}, s.Args...)
		}
		for k, v := range s.Env {
			c.Env = append(c.Env, k+"="+v)
		}
		sort.Strings(c.Env)
		if err := c.validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", path, err)
	}
	return out, nil
}
