package node

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/console"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/internal/secretflag"
)

// GatewayFlags are the flags that configure a node's model gateway: the one set that
// `toolbus node` and the commands that start an embedded node (run, workflow run)
// register, so that each flag means the same everywhere.
type GatewayFlags struct {
	BaseURL, KeyFile string
	RequestTimeout   time.Duration
	HostedSearch     bool
	NoPromptCache    bool
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

// Register adds -base-url, -api-key-file, -request-timeout, -no-prompt-cache, -stream
// and, with hostedSearch, -hosted-tool-search to fs. prefix starts each usage line ("embedded node: " where a
// command also works against a remote node, which uses its own).
func (g *GatewayFlags) Register(fs *flag.FlagSet, prefix string, hostedSearch bool) {
	fs.StringVar(&g.BaseURL, "base-url", "", prefix+"the model API's base URL (default env OPENAI_BASE_URL, else OpenAI; for anthropic: models env ANTHROPIC_BASE_URL, else Anthropic). OPENAI_API_KEY is sent only to https://api.openai.com and to OPENAI_BASE_URL, ANTHROPIC_API_KEY only to https://api.anthropic.com and to ANTHROPIC_BASE_URL; any other base URL gets only the key of -api-key-file or TOOLBUS_MODEL_API_KEY, or none")
	fs.StringVar(&g.KeyFile, "api-key-file", "", prefix+"a file holding the API key of the -base-url endpoint, whatever it is (default env TOOLBUS_MODEL_API_KEY)")
	fs.DurationVar(&g.RequestTimeout, "request-timeout", 0, fmt.Sprintf(prefix+"how long one model request may wait for its answer; it is retried %d times, then the turn fails (default env TOOLBUS_REQUEST_TIMEOUT, else %s)", gateway.DefaultMaxRetries, gateway.DefaultRequestTimeout))
	fs.BoolVar(&g.NoPromptCache, "no-prompt-cache", false, prefix+"anthropic: models: send no cache_control breakpoints (default: on the tool list and the instructions, which repeat at every step)")
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
func (g *GatewayFlags) Config() (gateway.Config, error) { return g.ConfigFrom(os.Getenv) }

// ConfigFrom is Config with the environment read through getenv
// (gateway.ConfigFromEnvFunc): the command line's own, which its tests set per run.
func (g *GatewayFlags) ConfigFrom(getenv func(string) string) (gateway.Config, error) {
	gw, err := gateway.ConfigFromEnvFunc(getenv)
	if err != nil {
		return gateway.Config{}, err
	}
	if g.BaseURL != "" {
		gw.SetBaseURL(g.BaseURL)
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
	gw.NoPromptCache = g.NoPromptCache
	gw.NoStream = g.NoStream
	return gw, nil
}

// ConsoleFlags are the flags of a web console (package console): where it listens and
// the file of its password. `toolbus node -console ADDR` and `toolbus console` register
// them under their own names.
type ConsoleFlags struct {
	Addr, PasswordFile string
	addrFlag, passFlag string
	password           string
}

// Register adds the address flag (default addr; "" serves no console) and
// the password file flag under the given names.
func (c *ConsoleFlags) Register(fs *flag.FlagSet, addrFlag, addr, passFlag string) {
	c.addrFlag, c.passFlag = addrFlag, passFlag
	fs.StringVar(&c.Addr, addrFlag, addr, "serve the web console on this host:port (loopback only unless it has a password)")
	fs.StringVar(&c.PasswordFile, passFlag, "", "file holding the web console's password, asked by basic authentication; required off loopback (default env TOOLBUS_CONSOLE_PASSWORD)")
}

// Check reads the password (after parsing, so that -h never prints it; it is
// registered for redaction) and refuses an address other hosts reach without one,
// before anything starts.
func (c *ConsoleFlags) Check() error {
	if c.Addr == "" {
		return nil
	}
	var err error
	if c.password, err = secretflag.Read(c.PasswordFile, "TOOLBUS_CONSOLE_PASSWORD"); err != nil {
		return fmt.Errorf("-%s: %w", c.passFlag, err)
	}
	redact.AddSecrets(c.password)
	err = console.CheckAddr(c.Addr, c.password != "")
	if errors.Is(err, console.ErrNeedsPassword) {
		return usagef("-%s %s is reachable from other hosts: give the console a password with -%s FILE (or the environment variable TOOLBUS_CONSOLE_PASSWORD), or listen on 127.0.0.1", c.addrFlag, c.Addr, c.passFlag)
	}
	if err != nil {
		return usagef("-%s: %v", c.addrFlag, err)
	}
	return nil
}

// Start serves the console on cl, acting as cl's user; call Check first. by names
// who decides the approvals made on its pages.
func (c *ConsoleFlags) Start(cl *client.Client, by string, log *slog.Logger) (*console.Server, error) {
	return console.Start(console.Config{Addr: c.Addr, Password: c.password, Client: cl, By: by, Logger: log})
}
