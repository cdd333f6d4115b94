package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/toolbus/toolbus/internal/redact"
)

// Environment variables read by [ConfigFromEnv] and [ConfigFromEnvFunc].
const (
	// EnvAPIKey is OpenAI's key (Config.OpenAIKey): it goes only to the OpenAI API.
	EnvAPIKey = "OPENAI_API_KEY"
	// EnvModelAPIKey is the key of the endpoint at the base URL, whatever it is
	// (Config.APIKey).
	EnvModelAPIKey = "TOOLBUS_MODEL_API_KEY"
	EnvBaseURL     = "OPENAI_BASE_URL"
	// EnvRequestTimeout is Config.RequestTimeout, in Go's duration syntax (90s, 2m).
	EnvRequestTimeout = "TOOLBUS_REQUEST_TIMEOUT"
	// EnvAnthropicKey is Anthropic's key (Config.AnthropicKey): it goes only to the
	// Anthropic API, or to EnvAnthropicBaseURL of the same environment.
	EnvAnthropicKey = "ANTHROPIC_API_KEY"
	// EnvAnthropicBaseURL is the endpoint of the Anthropic gateway when no base URL is
	// given (Config.AnthropicBaseURL), as the Anthropic SDKs read it.
	EnvAnthropicBaseURL = "ANTHROPIC_BASE_URL"
)

// OpenAIHost is the host of the OpenAI API, the only one OPENAI_API_KEY is sent to
// (regional hosts under it, such as eu.api.openai.com, too).
const OpenAIHost = "api.openai.com"

// DefaultBaseURL is the OpenAI API, used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1/"

// DefaultRequestTimeout bounds one HTTP attempt when Config.RequestTimeout is zero. A
// reasoning model at a high effort may think for minutes before it answers, and an
// attempt cut short is asked again from the start, so this leaves it room; a local server
// that answers fast or not at all is better served by a shorter one.
const DefaultRequestTimeout = 5 * time.Minute

// DefaultMaxResponseBytes caps one response body when Config.MaxResponseBytes is zero.
// The largest answers of the APIs, a long text with encrypted reasoning, are a few
// hundred KiB.
const DefaultMaxResponseBytes int64 = 32 << 20

// DefaultMaxRetries is the number of retries after the first attempt when
// Config.MaxRetries is zero.
const DefaultMaxRetries = 2

// Config configures the OpenAI-protocol gateways ([Responses] and [Chat]).
type Config struct {
	// APIKey is the key of the endpoint at BaseURL, sent to it as a bearer token
	// whatever it is: a key given for that endpoint (TOOLBUS_MODEL_API_KEY, a key file).
	// Both keys are removed from errors, items and logs wherever a server or model
	// echoes them; keys shorter than 8 characters are placeholders for local servers
	// ("ollama", "EMPTY") and are left alone.
	APIKey string
	// OpenAIKey is OpenAI's key (OPENAI_API_KEY). It is sent only when APIKey is empty
	// and BaseURL is the OpenAI API (https on OpenAIHost or a host under it) or
	// OpenAIBaseURL. A local server or a proxy at another base URL never sees it.
	OpenAIKey string
	// OpenAIBaseURL is the base URL OPENAI_API_KEY came with: OPENAI_BASE_URL of the
	// same environment, the pair every OpenAI SDK reads together (a proxy, Azure,
	// OpenRouter, a company gateway). OpenAIKey is sent there too. A BaseURL that a
	// flag or a profile sets to another endpoint gets only its own key (APIKey).
	OpenAIBaseURL string
	// BaseURL is the API root, e.g. "http://localhost:11434/v1". Empty means DefaultBaseURL.
	BaseURL string
	// RequestTimeout bounds one HTTP attempt, from sending the request to the last byte
	// of the answer; zero means DefaultRequestTimeout. An attempt that gets no answer in
	// time is retried like a network error (MaxRetries, with backoff), and the last one
	// ends the call with an error wrapping ErrRequestTimeout: "no answer from URL within
	// 5m0s (3 attempts)". One whose answer stalls after it began is not retried. The
	// context given to Respond bounds the whole call, retries included.
	RequestTimeout time.Duration
	// MaxResponseBytes caps the body of one response; zero means
	// DefaultMaxResponseBytes. A body past it fails the call with a *Error, and the rest
	// is never read.
	MaxResponseBytes int64
	// MaxRetries is how often a request is retried on 408, 409, 429, 5xx and network
	// errors, with exponential backoff or the server's Retry-After. Zero means
	// DefaultMaxRetries; a negative value disables retries.
	MaxRetries int
	// HostedToolSearch lets the provider search deferred tools (Responses only). When
	// false, the gateway answers the model's tool searches itself.
	HostedToolSearch bool
	// HTTPClient, when set, carries the requests (proxies, custom TLS, tests).
	HTTPClient *http.Client
	// Logger receives retries and schema fallbacks; nil discards them.
	Logger *slog.Logger
	// MaxOutputTokens caps each response; zero leaves the provider's default.
	MaxOutputTokens int64
	// ReasoningEffort ("minimal", "low", "medium", "high", ...) is passed to reasoning
	// models; empty leaves the provider's default.
	ReasoningEffort string
	// Store keeps responses on the provider (Responses store: true). By default the
	// gateway is stateless: store is false and reasoning travels as encrypted content.
	Store bool
	// NoStream turns streaming off, for endpoints that do not stream: every step is then
	// one request answered whole, and a turn dispatches its calls once the whole response
	// has arrived. By default a gateway streams each step the turn asks to see as it
	// arrives (Request.Stream): text as the model writes it, each call once it is complete.
	NoStream bool
	// MaxSteps bounds the model calls of one turn. The turn enforces it; the gateways
	// only carry it.
	MaxSteps int

	// AnthropicKey is Anthropic's key (ANTHROPIC_API_KEY), for the [Anthropic] gateway.
	// It is sent only when APIKey is empty and the gateway's endpoint is the Anthropic
	// API (https on AnthropicHost) or AnthropicBaseURL; no other endpoint ever sees it.
	AnthropicKey string
	// AnthropicBaseURL is ANTHROPIC_BASE_URL: the Anthropic gateway's endpoint when
	// BaseURL names none (a proxy, a company gateway), and the one endpoint besides the
	// Anthropic API that AnthropicKey, read from the same environment, is sent to.
	AnthropicBaseURL string
	// NoPromptCache leaves out the cache_control breakpoints the Anthropic gateway puts
	// on the tool list and the instructions, which repeat at every step of a turn.
	NoPromptCache bool

	// envBaseURL is the OPENAI_BASE_URL ConfigFromEnvFunc put in BaseURL: the endpoint of
	// the OpenAI-protocol gateways, which the Anthropic gateway does not take for its own.
	envBaseURL string
}

// ConfigFromEnv returns a Config holding OPENAI_API_KEY (as OpenAIKey),
// TOOLBUS_MODEL_API_KEY (as APIKey), OPENAI_BASE_URL, ANTHROPIC_API_KEY,
// ANTHROPIC_BASE_URL and TOOLBUS_REQUEST_TIMEOUT of the process's environment. When
// OPENAI_API_KEY and OPENAI_BASE_URL are both set, the key is the base URL's
// (OpenAIBaseURL), as every OpenAI SDK reads the pair. It fails only on a request
// timeout that is no duration.
func ConfigFromEnv() (Config, error) { return ConfigFromEnvFunc(os.Getenv) }

// ConfigFromEnvFunc is ConfigFromEnv with the variables read through getenv
// (os.Getenv's contract: "" for one that is unset), for a program that keeps an
// environment of its own: tests that run in parallel cannot share the process's.
func ConfigFromEnvFunc(getenv func(string) string) (Config, error) {
	c := Config{
		OpenAIKey:        getenv(EnvAPIKey),
		APIKey:           getenv(EnvModelAPIKey),
		BaseURL:          getenv(EnvBaseURL),
		AnthropicKey:     getenv(EnvAnthropicKey),
		AnthropicBaseURL: getenv(EnvAnthropicBaseURL),
	}
	c.envBaseURL = c.BaseURL
	if c.OpenAIKey != "" {
		c.OpenAIBaseURL = c.BaseURL
	}
	if v := getenv(EnvRequestTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Config{}, fmt.Errorf("%s=%q: want a positive duration such as 90s or 5m", EnvRequestTimeout, v)
		}
		c.RequestTimeout = d
	}
	return c, nil
}

// SetBaseURL sets the base URL given for the model (a flag, a program's setting),
// whatever its gateway. Unlike OPENAI_BASE_URL, which ConfigFromEnv reads for the
// OpenAI-protocol gateways alone, it is the Anthropic gateway's endpoint too.
func (c *Config) SetBaseURL(u string) { c.BaseURL, c.envBaseURL = u, "" }

// maxKeyFile bounds a key file: a key is a line, not a document.
const maxKeyFile = 64 << 10

// ReadKeyFile reads an API key from a file holding it alone, white space around it
// trimmed. Its errors never show the file's content.
func ReadKeyFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("API key file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("API key file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	switch {
	case len(b) > maxKeyFile:
		return "", fmt.Errorf("API key file %s is larger than %s: want the key alone", path, formatBytes(maxKeyFile))
	case key == "":
		return "", fmt.Errorf("API key file %s is empty", path)
	case strings.ContainsAny(key, " \t\r\n"):
		return "", fmt.Errorf("API key file %s holds more than one word: want the key alone", path)
	}
	return key, nil
}

// IsOpenAIAPI reports whether baseURL is the OpenAI API, the only endpoint OPENAI_API_KEY
// is sent to: https, on OpenAIHost or a host under it, on the default port.
func IsOpenAIAPI(baseURL string) bool {
	u, err := url.Parse(baseURL)
	if err != nil || !strings.EqualFold(u.Scheme, "https") || u.User != nil {
		return false
	}
	if p := u.Port(); p != "" && p != "443" {
		return false
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	return host == OpenAIHost || strings.HasSuffix(host, "."+OpenAIHost)
}

// apiKey is the key sent to the base URL: the endpoint's own, else OpenAI's when the
// endpoint is OpenAI's.
func (c Config) apiKey() string {
	if c.APIKey != "" {
		return c.APIKey
	}
	if c.openAIKeyGoes() {
		return c.OpenAIKey
	}
	return ""
}

// openAIKeyGoes reports whether OPENAI_API_KEY may go to the base URL: the OpenAI API,
// or the base URL the key came with.
func (c Config) openAIKeyGoes() bool {
	return IsOpenAIAPI(c.baseURL()) || c.OpenAIBaseURL != "" && SameEndpoint(c.OpenAIBaseURL, c.baseURL())
}

// SameEndpoint reports whether two base URLs name one endpoint: the same scheme, host
// and port (the default one of the scheme when none is given) and path, whatever the
// case of the scheme and host and a trailing slash. URLs that do not parse are never
// the same.
func SameEndpoint(a, b string) bool {
	ua, err := url.Parse(a)
	if err != nil || ua.Host == "" {
		return false
	}
	ub, err := url.Parse(b)
	if err != nil || ub.Host == "" {
		return false
	}
	hostPort := func(u *url.URL) string {
		p := u.Port()
		if p == "" {
			p = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
		}
		return strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")) + ":" + p
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && hostPort(ua) == hostPort(ub) &&
		ua.User.String() == ub.User.String() &&
		strings.TrimSuffix(ua.EscapedPath(), "/") == strings.TrimSuffix(ub.EscapedPath(), "/")
}

// keyAdvice says where the key for the base URL comes from, for errors about a
// missing or refused key.
func (c Config) keyAdvice() string {
	switch {
	case c.APIKey != "":
		return "check " + EnvModelAPIKey + " or the -api-key-file"
	case c.openAIKeyGoes():
		return "check " + EnvAPIKey
	case c.OpenAIKey != "":
		return fmt.Sprintf("%s is sent only to %s and to %s: give %s its own key in %s or -api-key-file",
			EnvAPIKey, OpenAIHost, EnvBaseURL, redact.URL(c.baseURL()), EnvModelAPIKey)
	}
	return fmt.Sprintf("give %s its key in %s or -api-key-file", redact.URL(c.baseURL()), EnvModelAPIKey)
}

func (c Config) baseURL() string {
	if c.BaseURL == "" {
		return DefaultBaseURL
	}
	return c.BaseURL
}

func (c Config) requestTimeout() time.Duration {
	if c.RequestTimeout <= 0 {
		return DefaultRequestTimeout
	}
	return c.RequestTimeout
}

func (c Config) maxResponseBytes() int64 {
	if c.MaxResponseBytes <= 0 {
		return DefaultMaxResponseBytes
	}
	return c.MaxResponseBytes
}

func (c Config) maxRetries() int {
	switch {
	case c.MaxRetries < 0:
		return 0
	case c.MaxRetries == 0:
		return DefaultMaxRetries
	}
	return c.MaxRetries
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c.Logger
}

// client is what every gateway over an OpenAI-style HTTP API holds beside its SDK
// service: the model name, the config, its logger and redactor, and the log of strict
// fallbacks.
type client struct {
	model  string
	cfg    Config
	log    *slog.Logger
	red    redactor
	strict *fallbackLog
}

func newClient(model string, cfg Config) client {
	log := cfg.logger()
	return client{model: model, cfg: cfg, log: log, red: cfg.redactor(), strict: &fallbackLog{log: log}}
}

// ModelName returns the model name the gateway sends.
func (c *client) ModelName() string { return c.model }

// requestOptions are the SDK options of the gateway's service (Config.requestOptions).
func (c *client) requestOptions(provider string) []option.RequestOption {
	return c.cfg.requestOptions(provider, c.log, c.red)
}

// requestOptions builds the SDK options of one gateway. The services are built from
// these options alone, not with openai.NewClient, so that ambient OPENAI_* variables
// other than the two ConfigFromEnv reads never reach a request unasked.
func (c Config) requestOptions(provider string, log *slog.Logger, red redactor) []option.RequestOption {
	opts := []option.RequestOption{
		option.WithBaseURL(c.baseURL()),
		option.WithAPIKey(c.apiKey()),
		option.WithMaxRetries(c.maxRetries()),
		// No option.WithRequestTimeout: the SDK does not retry an attempt that
		// timed out. boundAttempts times each attempt itself, and bounds its body.
		option.WithMiddleware(logAttempts(provider, log, red), c.boundAttempts(c.baseURL())),
	}
	if c.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(c.HTTPClient))
	}
	return opts
}

// logAttempts logs every HTTP attempt the SDK makes, so retries are visible. It logs the
// method, path, status and retry count, never headers or bodies: the key is in a header.
func logAttempts(provider string, log *slog.Logger, red redactor) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		attempt := req.Header.Get("X-Stainless-Retry-Count")
		res, err := next(req)
		switch {
		case err != nil:
			log.LogAttrs(req.Context(), slog.LevelWarn, "model request failed",
				slog.String("provider", provider), slog.String("path", req.URL.Path),
				slog.String("retry", attempt), slog.String("error", red.string(err.Error())))
		case retriable(res.StatusCode):
			attrs := []slog.Attr{slog.String("provider", provider), slog.String("path", req.URL.Path),
				slog.String("retry", attempt), slog.Int("status", res.StatusCode)}
			// The server's wait, when it gave one: an empty attribute would read as a wait of nothing.
			for _, h := range [...]struct{ header, attr string }{{"Retry-After", "retry_after"}, {"Retry-After-Ms", "retry_after_ms"}} {
				if v := res.Header.Get(h.header); v != "" {
					attrs = append(attrs, slog.String(h.attr, v))
				}
			}
			log.LogAttrs(req.Context(), slog.LevelWarn, "model request refused", attrs...)
		default:
			log.LogAttrs(req.Context(), slog.LevelDebug, "model request",
				slog.String("provider", provider), slog.String("path", req.URL.Path),
				slog.String("retry", attempt), slog.Int("status", res.StatusCode))
		}
		return res, err
	}
}

// retriable mirrors the statuses the SDK retries.
func retriable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= http.StatusInternalServerError
}

// redactor removes the API keys from text that may have echoed them: server error
// messages, transport errors, model output.
type redactor struct{ keys []string }

// minSecretLen is the shortest key treated as a secret. Local servers take placeholder
// keys such as "ollama" or "EMPTY"; redacting those would deface ordinary text ("try
// ollama pull") while hiding nothing.
const minSecretLen = 8

func newRedactor(keys ...string) redactor {
	var r redactor
	for _, k := range keys {
		if len(k) >= minSecretLen {
			r.keys = append(r.keys, k)
		}
	}
	return r
}

// redactor of the keys of c.
func (c Config) redactor() redactor { return newRedactor(c.APIKey, c.OpenAIKey, c.AnthropicKey) }

const redacted = "[redacted]"

// keyStart is how many bytes at the end of s could be the start of a key: text streamed
// in pieces holds them back until the next piece says.
func (r redactor) keyStart(s string) int {
	hold := 0
	for _, k := range r.keys {
		for i := max(0, len(s)-len(k)+1); i < len(s); i++ {
			if s[i] == k[0] && strings.HasPrefix(k, s[i:]) {
				hold = max(hold, len(s)-i)
				break // the earliest start is the longest
			}
		}
	}
	return hold
}

func (r redactor) holds(s string) bool {
	for _, k := range r.keys {
		if strings.Contains(s, k) {
			return true
		}
	}
	return false
}

func (r redactor) string(s string) string {
	for _, k := range r.keys {
		s = strings.ReplaceAll(s, k, redacted)
	}
	return s
}

func (r redactor) bytes(b []byte) []byte {
	if !r.holds(string(b)) {
		return b
	}
	return []byte(r.string(string(b)))
}

// redactedError keeps the chain of err for errors.Is and errors.As while its message
// has the key removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func (r redactor) error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if !r.holds(msg) {
		return err
	}
	return &redactedError{msg: r.string(msg), err: err}
}

// endpoint is where a gateway sends its requests, and with which key: what its errors
// name when a request fails.
type endpoint struct {
	url    string // the base URL
	key    string // the key sent to it, empty for none
	advice string // where that key comes from (keyAdvice)
}

// openAIEndpoint is the endpoint of the OpenAI-protocol gateways.
func (c Config) openAIEndpoint() endpoint {
	return endpoint{url: c.baseURL(), key: c.apiKey(), advice: c.keyAdvice()}
}

// classify turns an SDK error into what Respond returns: the caller's context error when
// it ended the call, a *Error for failures that retrying will not mend, and a wrapped
// error otherwise. Every message is redacted.
func classify(ctx context.Context, provider string, ep endpoint, red redactor, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", provider, ctxErr)
	}
	var large *bodyTooLarge
	if errors.As(err, &large) {
		return &Error{Provider: provider, Message: fmt.Sprintf(
			"response body exceeds %s; stopped reading it (is %s an endpoint of this API? the cap is Config.MaxResponseBytes)",
			formatBytes(large.limit), redact.URL(ep.url))}
	}
	var timeout *attemptTimeout
	if errors.As(err, &timeout) {
		return red.error(fmt.Errorf("%s: %w", provider, timeout))
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return &Error{Provider: provider, Status: apiErr.StatusCode, Message: red.string(statusMessage(apiErr.StatusCode, apiErr.Message, ep))}
	}
	var anthropicErr *anthropic.Error
	if errors.As(err, &anthropicErr) {
		return anthropicError(provider, ep, red, anthropicErr)
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) || strings.Contains(err.Error(), "error parsing response json") {
		return &Error{Provider: provider, Message: red.string("malformed response: " + err.Error())}
	}
	return red.error(fmt.Errorf("%s: %w", provider, err))
}

// statusMessage explains an HTTP failure, naming the likely cause of the common ones.
func statusMessage(status int, msg string, ep endpoint) string {
	if msg == "" {
		msg = http.StatusText(status)
	}
	switch status {
	case http.StatusUnauthorized:
		if ep.key == "" {
			return fmt.Sprintf("the endpoint wants an API key and none was sent (%s): %s", ep.advice, msg)
		}
		return fmt.Sprintf("the API key was refused (%s): %s", ep.advice, msg)
	case http.StatusForbidden:
		return fmt.Sprintf("access denied (the key lacks permission for this model or endpoint): %s", msg)
	case http.StatusNotFound:
		return fmt.Sprintf("not found at %s (unknown model, or the endpoint does not speak this API): %s", redact.URL(ep.url), msg)
	}
	return msg
}

// appendField inserts "key":raw into the JSON object obj, keeping raw byte for byte. The
// SDK's own extra-field mechanism re-encodes values (escaping <, > and &), which would
// change a raw schema. The result is a json.RawMessage because param.Override encodes a
// plain []byte as a base64 string.
func appendField(obj []byte, key string, raw json.RawMessage) json.RawMessage {
	k, _ := json.Marshal(key)
	end := len(obj) - 1 // obj ends with '}'
	out := make([]byte, 0, len(obj)+len(k)+len(raw)+2)
	out = append(out, obj[:end]...)
	if strings.TrimSpace(string(obj[1:end])) != "" {
		out = append(out, ',')
	}
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, raw...)
	return append(out, '}')
}
