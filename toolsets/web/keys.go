package web

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Key is a search provider's API key, as the web host holds it.
//
// A key goes to its provider's official API (OfficialURL, over https) and to the API
// roots listed in Endpoints, which the host's operator configured, and nowhere else. A
// profile names the endpoint of its agent's search binding, and whoever may write
// profiles is not trusted with the keys: a profile that points Brave at another URL gets
// its searches sent there without the key.
type Key struct {
	Secret string
	// Endpoints are API roots besides the official one that may receive the key: a
	// proxy or a compatible service the operator chose (-web-key-endpoint).
	Endpoints []string
}

// OfficialURL is the API root of each provider that has a public API. SearXNG has none:
// every binding names its instance.
var OfficialURL = map[string]string{
	Brave:  "https://api.search.brave.com",
	Tavily: "https://api.tavily.com",
}

// KeyEnv is the environment variable each provider's key is read from by default.
var KeyEnv = map[string]string{
	Brave:  "TOOLBUS_BRAVE_API_KEY",
	Tavily: "TOOLBUS_TAVILY_API_KEY",
}

// keyedProviders are the providers that take a key, in the order messages list them.
var keyedProviders = []string{Brave, Tavily}

// KeysFromEnv returns the keys set in the KeyEnv variables.
func KeysFromEnv() map[string]Key {
	keys := map[string]Key{}
	for _, p := range keyedProviders {
		if v := strings.TrimSpace(os.Getenv(KeyEnv[p])); v != "" {
			keys[p] = Key{Secret: v}
		}
	}
	return keys
}

// SplitProviderValue splits a flag value of the form provider=value, checking the
// provider takes a key.
func SplitProviderValue(flagValue string) (provider, value string, err error) {
	provider, value, ok := strings.Cut(flagValue, "=")
	provider = strings.ToLower(strings.TrimSpace(provider))
	switch {
	case !ok || value == "":
		return "", "", fmt.Errorf("%q: want provider=value (brave or tavily)", flagValue)
	case provider == SearXNG:
		return "", "", errors.New("searxng takes no key: a SearXNG binding sends its searches to the instance its profile names")
	case OfficialURL[provider] == "":
		return "", "", fmt.Errorf("unknown search provider %q: want brave or tavily", provider)
	}
	return provider, value, nil
}

// CheckEndpoint checks an API root an operator allows a key to be sent to.
func CheckEndpoint(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %v", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q is not an http or https URL", raw)
	case u.Host == "":
		return fmt.Errorf("%q has no host", raw)
	case u.User != nil:
		return fmt.Errorf("%q holds credentials", raw)
	}
	return nil
}

// keyFor returns the key the host may send to root, the API root a search goes to, for
// provider; "" when it has none or root is not a place that key may go.
func (c Config) keyFor(provider, root string) string {
	k, ok := c.Keys[provider]
	if !ok || k.Secret == "" {
		return ""
	}
	if sameRoot(root, OfficialURL[provider]) {
		return k.Secret
	}
	for _, e := range k.Endpoints {
		if sameRoot(root, e) {
			return k.Secret
		}
	}
	return ""
}

// sameRoot reports whether two API roots are the same place: scheme, host and port equal
// (default ports made explicit, case folded), paths equal but for a final slash.
func sameRoot(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil || a == "" || b == "" || ua.User != nil || ub.User != nil {
		return false
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && hostPort(ua) == hostPort(ub) &&
		strings.TrimSuffix(ua.EscapedPath(), "/") == strings.TrimSuffix(ub.EscapedPath(), "/")
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")) + ":" + port
}

// keyAdvice says how the operator gives provider's key to the web host.
func keyAdvice(provider string) string {
	return fmt.Sprintf("set %s or -web-key-file %s=FILE on the node that hosts the web category", KeyEnv[provider], provider)
}
