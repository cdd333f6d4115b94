package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Environment variables read by [ConfigFromEnv].
const (
	EnvAPIKey  = "OPENAI_API_KEY"
	EnvBaseURL = "OPENAI_BASE_URL"
)

// DefaultBaseURL is the OpenAI API, used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1/"

// DefaultRequestTimeout bounds one HTTP attempt when Config.RequestTimeout is zero. It is
// long because a reasoning model may think for minutes before it answers.
const DefaultRequestTimeout = 10 * time.Minute

// DefaultMaxRetries is the number of retries after the first attempt when
// Config.MaxRetries is zero.
const DefaultMaxRetries = 2

// Config configures the OpenAI-protocol gateways ([Responses] and [Chat]).
type Config struct {
	// APIKey is sent as a bearer token. It is removed from errors, items and logs
	// wherever a server or model echoes it; keys shorter than 8 characters are
	// placeholders for local servers ("ollama", "EMPTY") and are left alone.
	APIKey string
	// BaseURL is the API root, e.g. "http://localhost:11434/v1". Empty means DefaultBaseURL.
	BaseURL string
	// RequestTimeout bounds one HTTP attempt; zero means DefaultRequestTimeout. An
	// attempt that times out is not retried. The context given to Respond bounds the
	// whole call, retries included.
	RequestTimeout time.Duration
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
	// MaxSteps bounds the model calls of one turn. The turn enforces it; the gateways
	// only carry it.
	MaxSteps int
}

// ConfigFromEnv returns a Config holding OPENAI_API_KEY and OPENAI_BASE_URL.
func ConfigFromEnv() Config {
	return Config{
		APIKey:  os.Getenv(EnvAPIKey),
		BaseURL: os.Getenv(EnvBaseURL),
	}
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

// requestOptions builds the SDK options of one gateway. The services are built from
// these options alone, not with openai.NewClient, so that ambient OPENAI_* variables
// other than the two ConfigFromEnv reads never reach a request unasked.
func (c Config) requestOptions(provider string, log *slog.Logger, red redactor) []option.RequestOption {
	opts := []option.RequestOption{
		option.WithBaseURL(c.baseURL()),
		option.WithAPIKey(c.APIKey),
		option.WithMaxRetries(c.maxRetries()),
		option.WithRequestTimeout(c.requestTimeout()),
		option.WithMiddleware(logAttempts(provider, log, red)),
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
			log.LogAttrs(req.Context(), slog.LevelWarn, "model request refused",
				slog.String("provider", provider), slog.String("path", req.URL.Path),
				slog.String("retry", attempt), slog.Int("status", res.StatusCode),
				slog.String("retry_after", res.Header.Get("Retry-After")))
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

// redactor removes the API key from text that may have echoed it: server error messages,
// transport errors, model output.
type redactor struct{ key string }

// minSecretLen is the shortest key treated as a secret. Local servers take placeholder
// keys such as "ollama" or "EMPTY"; redacting those would deface ordinary text ("try
// ollama pull") while hiding nothing.
const minSecretLen = 8

func newRedactor(key string) redactor {
	if len(key) < minSecretLen {
		return redactor{}
	}
	return redactor{key: key}
}

const redacted = "[redacted]"

func (r redactor) string(s string) string {
	if r.key == "" || !strings.Contains(s, r.key) {
		return s
	}
	return strings.ReplaceAll(s, r.key, redacted)
}

func (r redactor) bytes(b []byte) []byte {
	if r.key == "" || !strings.Contains(string(b), r.key) {
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
	if r.key == "" || !strings.Contains(msg, r.key) {
		return err
	}
	return &redactedError{msg: r.string(msg), err: err}
}

// classify turns an SDK error into what Respond returns: the caller's context error when
// it ended the call, a *Error for failures that retrying will not mend, and a wrapped
// error otherwise. Every message is redacted.
func classify(ctx context.Context, provider string, cfg Config, red redactor, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", provider, ctxErr)
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return &Error{Provider: provider, Status: apiErr.StatusCode, Message: red.string(statusMessage(apiErr, cfg))}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The caller's context is alive, so the SDK's per-attempt timeout fired.
		return red.error(fmt.Errorf("%s: no answer from %s within the request timeout (%s): %w",
			provider, cfg.baseURL(), cfg.requestTimeout(), err))
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) || strings.Contains(err.Error(), "error parsing response json") {
		return &Error{Provider: provider, Message: red.string("malformed response: " + err.Error())}
	}
	return red.error(fmt.Errorf("%s: %w", provider, err))
}

// statusMessage explains an HTTP failure, naming the likely cause of the common ones.
func statusMessage(apiErr *openai.Error, cfg Config) string {
	msg := apiErr.Message
	if msg == "" {
		msg = http.StatusText(apiErr.StatusCode)
	}
	switch apiErr.StatusCode {
	case http.StatusUnauthorized:
		return fmt.Sprintf("the API key was refused (check %s): %s", EnvAPIKey, msg)
	case http.StatusForbidden:
		return fmt.Sprintf("access denied (the key lacks permission for this model or endpoint): %s", msg)
	case http.StatusNotFound:
		return fmt.Sprintf("not found at %s (unknown model, or the endpoint does not speak this API): %s", cfg.baseURL(), msg)
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
