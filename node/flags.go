package node

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/redact"
)

// GatewayFlags are the flags that configure a node's model gateway: the one set that
// `toolbus node` and the commands that start an embedded node (run, workflow run)
// register, so that each flag means the same everywhere.
type GatewayFlags struct {
	BaseURL, KeyFile string
	RequestTimeout   time.Duration
	HostedSearch     bool
	// NoStream is -stream=false (gateway.Config.NoStream); the zero value streams.
	NoStream bool
}

// notFlag is a boolean flag that sets the negation of its variable: -stream=false
// sets NoStream.
type notFlag bool

func (f *notFlag) String() string {
	if f == nil || !*f {
		return "true"
	}
	return "false"
}

func (f *notFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*f = notFlag(!v)
	return nil
}

func (f *notFlag) IsBoolFlag() bool { return true }

// Register adds -base-url, -api-key-file, -request-timeout, -stream and, with hostedSearch,
// -hosted-tool-search to fs. prefix starts each usage line ("embedded node: " where a
// command also works against a remote node, which uses its own).
func (g *GatewayFlags) Register(fs *flag.FlagSet, prefix string, hostedSearch bool) {
	fs.StringVar(&g.BaseURL, "base-url", "", prefix+"the model API's base URL (default env OPENAI_BASE_URL, else OpenAI). OPENAI_API_KEY is sent only to https://api.openai.com and to OPENAI_BASE_URL; any other base URL gets only the key of -api-key-file or TOOLBUS_MODEL_API_KEY, or none")
	fs.StringVar(&g.KeyFile, "api-key-file", "", prefix+"a file holding the API key of the -base-url endpoint, whatever it is (default env TOOLBUS_MODEL_API_KEY)")
	fs.DurationVar(&g.RequestTimeout, "request-timeout", 0, fmt.Sprintf(prefix+"how long one model request may wait for its answer; it is retried %d times, then the turn fails (default env TOOLBUS_REQUEST_TIMEOUT, else %s)", gateway.DefaultMaxRetries, gateway.DefaultRequestTimeout))
	fs.Var((*notFlag)(&g.NoStream), "stream", prefix+"stream each model step: text as the model writes it, each call dispatched once it is complete; -stream=false for endpoints that do not stream")
	if hostedSearch {
		fs.BoolVar(&g.HostedSearch, "hosted-tool-search", false, prefix+"openai: models: let the provider search the deferred tools (default: toolbus answers the model's tool searches)")
	}
}

// Check refuses values the flag package lets through; the caller reports them as a
// usage error.
func (g *GatewayFlags) Check() error {
	if g.RequestTimeout < 0 {
		return fmt.Errorf("-request-timeout %s: want a positive duration", g.RequestTimeout)
	}
	return nil
}

// Config is the gateway configuration: the environment's (gateway.ConfigFromEnv), then
// the flags. The key of -api-key-file is registered for redaction.
func (g *GatewayFlags) Config() (gateway.Config, error) {
	gw, err := gateway.ConfigFromEnv()
	if err != nil {
		return gateway.Config{}, err
	}
	if g.BaseURL != "" {
		gw.BaseURL = g.BaseURL
	}
	if g.KeyFile != "" {
		if gw.APIKey, err = gateway.ReadKeyFile(g.KeyFile); err != nil {
			return gateway.Config{}, err
		}
		redact.AddSecrets(gw.APIKey)
	}
	if g.RequestTimeout > 0 {
		gw.RequestTimeout = g.RequestTimeout
	}
	gw.HostedToolSearch = g.HostedSearch
	gw.NoStream = g.NoStream
	return gw, nil
}
