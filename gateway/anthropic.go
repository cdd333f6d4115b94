package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/internal/redact"
)

// ProviderAnthropic names the items the Anthropic gateway returns; it sends the blocks
// it carries in Raw (thinking, and any it does not interpret) back verbatim and skips
// reasoning and opaque items of other providers.
const ProviderAnthropic = "anthropic"

// AnthropicHost is the host of the Anthropic API, the one ANTHROPIC_API_KEY is sent to
// (besides ANTHROPIC_BASE_URL of the same environment).
const AnthropicHost = "api.anthropic.com"

// DefaultAnthropicBaseURL is the Anthropic API, the Anthropic gateway's endpoint when
// neither Config.BaseURL nor Config.AnthropicBaseURL names one.
const DefaultAnthropicBaseURL = "https://api.anthropic.com/"

// DefaultAnthropicMaxTokens is the max_tokens of a request when Config.MaxOutputTokens
// is zero. The API requires the field; every current Claude model writes at least this
// many tokens in one response.
const DefaultAnthropicMaxTokens = 8192

// anthropicSearchTool is the name of the API's hosted tool search, offered when any
// tool is deferred; the deferred tools go out with defer_loading and the API loads
// them as the model searches.
const anthropicSearchTool = "tool_search_tool_bm25"

// maxAnthropicName is the longest tool name the API accepts (^[a-zA-Z0-9_-]{1,64}$):
// a flattened namespace__name longer than that is shortened as for Chat (chatName).
const maxAnthropicName = maxChatName

// maxPauseRounds bounds how often one Respond continues a response the API paused
// (stop_reason pause_turn, in a long run of hosted tools).
const maxPauseRounds = maxSearchRounds

// Anthropic is a Model speaking the Anthropic Messages API (POST /v1/messages) through
// the official SDK. The Messages API knows no namespaces: a namespaced tool goes out as
// "namespace__name", as on Chat Completions, and its calls are mapped back. Each content
// block of a response is one item: text and tool_use blocks become messages and calls;
// thinking blocks (with their signatures) and blocks toolbus does not interpret (server
// tools, tool search) are carried in Raw and sent back verbatim. When Request.Stream is
// set, the response is streamed. Like [Responses], it keeps no per-turn state.
type Anthropic struct {
	client
	ep      endpoint
	service anthropic.MessageService
}

// NewAnthropic returns an Anthropic gateway for model. The Anthropic API needs a key
// (ANTHROPIC_API_KEY, or the one given for it); another endpoint gets only the key given
// for it, if any.
func NewAnthropic(model string, cfg Config) (*Anthropic, error) {
	if model == "" {
		return nil, errors.New("anthropic gateway: model name is empty")
	}
	ep := cfg.anthropicEndpoint()
	if _, err := url.Parse(ep.url); err != nil {
		return nil, fmt.Errorf("anthropic gateway: base URL: %w", err)
	}
	if ep.key == "" && IsAnthropicAPI(ep.url) {
		return nil, fmt.Errorf("anthropic gateway for %s: no API key: set %s", model, EnvAnthropicKey)
	}
	c := newClient(model, cfg)
	opts := []option.RequestOption{
		option.WithBaseURL(ep.url),
		option.WithMaxRetries(cfg.maxRetries()),
		// No option.WithRequestTimeout, as for the OpenAI gateways: boundAttempts times
		// each attempt itself, its body (the whole stream) included, and caps the body.
		option.WithMiddleware(logAttempts(ProviderAnthropic, c.log, c.red), cfg.boundAttempts(ep.url), capRetryAfter(c.log)),
		// An environment variable of the SDK would put the requests' content (tool
		// outputs, which may hold secrets) into its spans; toolbus says what it records.
		option.WithOpenTelemetryTracesContentMode(option.OpenTelemetryContentModeMetadataOnly),
	}
	if ep.key != "" {
		// x-api-key alone: the SDK's WithAPIKey sends the key as a bearer token.
		opts = append(opts, option.WithHeader("X-Api-Key", ep.key))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	// Built from these options alone, not with anthropic.NewClient, so that ambient
	// ANTHROPIC_* variables other than the two ConfigFromEnv reads (profiles, auth
	// tokens, custom headers) never reach a request unasked.
	return &Anthropic{client: c, ep: ep, service: anthropic.NewMessageService(opts...)}, nil
}

// maxRetryAfter is the longest wait a server's retry-after may ask for and be retried,
// as the OpenAI SDK has it; the Anthropic SDK would wait as long as it is told.
const maxRetryAfter = 2 * time.Minute

// capRetryAfter ends the call on a retriable answer whose retry-after (or
// retry-after-ms) asks for a wait over maxRetryAfter, through the SDK's own
// x-should-retry header, so that the three wires wait alike.
func capRetryAfter(log *slog.Logger) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(req)
		if err != nil || !retriable(res.StatusCode) {
			return res, err
		}
		if wait, ok := retryAfter(res.Header); ok && wait > maxRetryAfter {
			log.LogAttrs(req.Context(), slog.LevelWarn, "the server asks for a wait longer than toolbus retries after; not retried",
				slog.String("provider", ProviderAnthropic), slog.Int("status", res.StatusCode), slog.Duration("wait", wait), slog.Duration("max", maxRetryAfter))
			res.Header.Set("X-Should-Retry", "false")
		}
		return res, nil
	}
}

// retryAfter reads the wait a server asks for as the SDK does: retry-after-ms, else
// retry-after in seconds or as an HTTP date.
func retryAfter(h http.Header) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t), true
	}
	return 0, false
}

// IsAnthropicAPI reports whether baseURL is the Anthropic API: https on AnthropicHost,
// on the default port.
func IsAnthropicAPI(baseURL string) bool {
	u, err := url.Parse(baseURL)
	if err != nil || !strings.EqualFold(u.Scheme, "https") || u.User != nil {
		return false
	}
	if p := u.Port(); p != "" && p != "443" {
		return false
	}
	return strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")) == AnthropicHost
}

// anthropicBaseURL is the Anthropic gateway's endpoint: BaseURL when it was given for
// the model (a flag, a Go program), not when it is OPENAI_BASE_URL of the environment;
// else ANTHROPIC_BASE_URL; else the Anthropic API.
func (c Config) anthropicBaseURL() string {
	switch {
	case c.BaseURL != "" && c.BaseURL != c.envBaseURL:
		return c.BaseURL
	case c.AnthropicBaseURL != "":
		return c.AnthropicBaseURL
	}
	return DefaultAnthropicBaseURL
}

// anthropicEndpoint is the Anthropic gateway's endpoint and key: the key given for the
// endpoint (APIKey), else ANTHROPIC_API_KEY when the endpoint is the Anthropic API or
// ANTHROPIC_BASE_URL of the same environment, else none.
func (c Config) anthropicEndpoint() endpoint {
	ep := endpoint{url: c.anthropicBaseURL()}
	goes := IsAnthropicAPI(ep.url) || c.AnthropicBaseURL != "" && SameEndpoint(c.AnthropicBaseURL, ep.url)
	switch {
	case c.APIKey != "":
		ep.key, ep.advice = c.APIKey, "check "+EnvModelAPIKey+" or the -api-key-file"
	case goes && c.AnthropicKey != "":
		ep.key, ep.advice = c.AnthropicKey, "check "+EnvAnthropicKey
	case goes:
		ep.advice = "set " + EnvAnthropicKey
	case c.AnthropicKey != "":
		ep.advice = fmt.Sprintf("%s is sent only to %s and to %s: give %s its own key in %s or -api-key-file",
			EnvAnthropicKey, AnthropicHost, EnvAnthropicBaseURL, redact.URL(ep.url), EnvModelAPIKey)
	default:
		ep.advice = fmt.Sprintf("give %s its key in %s or -api-key-file", redact.URL(ep.url), EnvModelAPIKey)
	}
	return ep
}

// anthropicError is the error of an API error: a *Error with the API's message for an
// HTTP failure (the SDK has retried what it retries: 408, 409, 429, 5xx and 529
// overloaded_error, honouring retry-after), a plain error for an error event in the
// middle of a stream, which is not retried: its calls may already have been dispatched.
func anthropicError(provider string, ep endpoint, red redactor, e *anthropic.Error) error {
	msg := e.Message
	if t := string(e.Type()); t != "" && msg != "" {
		msg = t + ": " + msg
	}
	if e.StatusCode < 400 {
		if msg == "" {
			msg = e.RawJSON()
		}
		return fmt.Errorf("%s: the response stream failed: %s", provider, red.string(msg))
	}
	return &Error{Provider: provider, Status: e.StatusCode, Message: red.string(statusMessage(e.StatusCode, msg, ep))}
}

// CheckTools checks a turn's tools against the API's rules before the turn's first
// request: every tool's name on the wire (namespace__name) matches ^[a-zA-Z0-9_-]{1,64}$
// and is unique, and none takes the name of the hosted tool search.
func (m *Anthropic) CheckTools(tools []*toolbus.Spec) error {
	_, err := anthropicTools(tools, false, nil, nil)
	return err
}

// Respond sends one step; with req.Stream, as a stream. A response the API paused
// (pause_turn) is continued, at most maxPauseRounds times, its items kept.
func (m *Anthropic) Respond(ctx context.Context, req *Request) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := &Response{}
	var em *emitter
	if m.streaming(req) {
		em = &emitter{f: req.Stream, red: m.red}
	}
	for round := 1; ; round++ {
		transcript := append(req.Input[:len(req.Input):len(req.Input)], out.Items...)
		params, body, err := m.params(req, transcript)
		if err != nil {
			return nil, err
		}
		var (
			step   *Response
			paused bool
		)
		if em != nil {
			step, paused, err = m.stream(ctx, params, body, req, len(out.Items), em)
		} else {
			var msg *anthropic.Message
			if msg, err = m.service.New(ctx, params, body); err != nil {
				return nil, m.classify(ctx, err)
			}
			step, paused, err = m.response(msg, req.Tools, nil)
		}
		if err != nil {
			return nil, err
		}
		out.ID = step.ID
		out.Usage.Add(step.Usage)
		out.Items = append(out.Items, step.Items...)
		out.Truncated = step.Truncated
		if !paused || len(out.Calls()) > 0 {
			return out, nil
		}
		if round == maxPauseRounds {
			return nil, &Error{Provider: ProviderAnthropic, Message: fmt.Sprintf("the API paused the response %d times", round)}
		}
	}
}

func (m *Anthropic) classify(ctx context.Context, err error) error {
	var local *Error
	if errors.As(err, &local) {
		return err
	}
	return classify(ctx, ProviderAnthropic, m.ep, m.red, err)
}

// params builds one request: its params, and the body they encode to with every raw
// value (schemas, carried blocks) spliced in verbatim.
func (m *Anthropic) params(req *Request, transcript []toolbus.Item) (anthropic.MessageNewParams, option.RequestOption, error) {
	v := newVerbatim()
	tools, err := anthropicTools(req.Tools, !m.cfg.NoPromptCache, m.strict, v)
	if err != nil {
		return anthropic.MessageNewParams{}, nil, err
	}
	p := anthropic.MessageNewParams{
		Model:     m.model,
		MaxTokens: DefaultAnthropicMaxTokens,
		Messages:  anthropicMessages(transcript, v),
		Tools:     tools,
	}
	if m.cfg.MaxOutputTokens > 0 {
		p.MaxTokens = m.cfg.MaxOutputTokens
	}
	if req.Instructions != "" {
		sys := anthropic.TextBlockParam{Text: req.Instructions}
		if !m.cfg.NoPromptCache {
			// The instructions repeat at every step: with the tools before them, the
			// prefix every step of a turn shares.
			sys.CacheControl = cacheBreakpoint()
		}
		p.System = []anthropic.TextBlockParam{sys}
	}
	if len(tools) > 0 && !req.ParallelToolCalls {
		p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAuto: &anthropic.ToolChoiceAutoParam{DisableParallelToolUse: anthropic.Bool(true)}}
	}
	if m.cfg.ReasoningEffort != "" {
		// Anthropic's own word for it: the model thinks as much as the effort asks.
		p.Thinking = anthropic.ThinkingConfigParamUnion{OfAdaptive: &anthropic.ThinkingConfigAdaptiveParam{}}
		p.OutputConfig = anthropic.OutputConfigParam{Effort: anthropic.OutputConfigEffort(m.cfg.ReasoningEffort)}
	}
	body, err := v.encode(p)
	if err != nil {
		return anthropic.MessageNewParams{}, nil, err
	}
	return p, option.WithRequestBody("application/json", body), nil
}

// verbatim keeps raw JSON (a tool's schema, a carried block) away from the SDK's
// encoder, which escapes <, > and & and puts the keys of a raw block in its own order:
// each raw value goes into the params as a placeholder string, and the encoded body
// gets the raw value back in its place. A nil *verbatim passes values through.
type verbatim struct {
	tag  string // "toolbus-verbatim-<random>-", never in a model's text by chance
	raws []json.RawMessage
}

func newVerbatim() *verbatim {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &verbatim{tag: "toolbus-verbatim-" + hex.EncodeToString(b) + "-"}
}

// hold returns the placeholder of raw, compacted as every encoder leaves a raw value.
func (v *verbatim) hold(raw json.RawMessage) json.RawMessage {
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		// Not JSON: the encoder refuses it, saying so.
		return raw
	}
	if v == nil {
		return c.Bytes()
	}
	v.raws = append(v.raws, c.Bytes())
	return json.RawMessage(`"` + v.tag + strconv.Itoa(len(v.raws)-1) + `"`)
}

// encode marshals params and splices the raw values in.
func (v *verbatim) encode(params interface{ MarshalJSON() ([]byte, error) }) ([]byte, error) {
	body, err := params.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("anthropic gateway: encode request: %w", err)
	}
	if v == nil || len(v.raws) == 0 {
		return body, nil
	}
	marker := []byte(`"` + v.tag)
	out := make([]byte, 0, len(body))
	for {
		i := bytes.Index(body, marker)
		if i < 0 {
			return append(out, body...), nil
		}
		rest := body[i+len(marker):]
		j := bytes.IndexByte(rest, '"')
		n, err := strconv.Atoi(string(rest[:max(j, 0)]))
		if j < 0 || err != nil || n >= len(v.raws) {
			return nil, errors.New("anthropic gateway: encode request: a raw value lost its place")
		}
		out = append(append(out, body[:i]...), v.raws[n]...)
		body = rest[j+1:]
	}
}

// cacheBreakpoint is a cache_control breakpoint of the default lifetime.
func cacheBreakpoint() anthropic.CacheControlEphemeralParam {
	return anthropic.CacheControlEphemeralParam{Type: "ephemeral"}
}

// AnthropicToolDefinitions returns the "tools" array of a Messages request for tools,
// byte for byte as the gateway sends it by default: every tool as a custom tool (a
// namespaced one as namespace__name), deferred ones with defer_loading and the hosted
// tool search after them, a cache_control breakpoint on the last. Like
// [ResponsesToolDefinitions], it logs nothing.
func AnthropicToolDefinitions(tools []*toolbus.Spec) (json.RawMessage, error) {
	v := newVerbatim()
	defs, err := anthropicTools(tools, true, nil, v)
	if err != nil {
		return nil, err
	}
	body, err := v.encode(anthropic.MessageNewParams{Tools: defs})
	if err != nil {
		return nil, err
	}
	return requestField(body, "tools")
}

// anthropicTools translates a tool set, in its order, checking the API's name rules.
// With cache, the last tool carries a cache_control breakpoint: the tool list repeats
// at every step of a turn.
func anthropicTools(set []*toolbus.Spec, cache bool, warn *fallbackLog, v *verbatim) ([]anthropic.ToolUnionParam, error) {
	deferred := hasDeferred(set)
	out := make([]anthropic.ToolUnionParam, 0, len(set)+1)
	seen := make(map[string]*toolbus.Spec, len(set))
	for i, t := range set {
		name := chatName(t)
		if err := checkAnthropicName(name); err != nil {
			return nil, fmt.Errorf("anthropic gateway: tool %s: %w", t.QualifiedName(), err)
		}
		if other, dup := seen[name]; dup {
			return nil, fmt.Errorf("anthropic gateway: tools %s and %s both go out as %q", other.QualifiedName(), t.QualifiedName(), name)
		}
		if deferred && name == anthropicSearchTool {
			return nil, fmt.Errorf("anthropic gateway: tool %q clashes with the API's tool search for deferred tools", name)
		}
		seen[name] = t
		params, strict := toolParams(t, warn)
		tp := anthropic.ToolParam{Name: name}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		if strict {
			tp.Strict = anthropic.Bool(true)
		}
		if t.DeferLoading {
			tp.DeferLoading = anthropic.Bool(true)
		}
		if cache && !deferred && i == len(set)-1 {
			tp.CacheControl = cacheBreakpoint()
		}
		b, err := tp.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("encode tool %s: %w", name, err)
		}
		// The schema spliced in byte for byte, as on the other wires.
		tool := param.Override[anthropic.ToolParam](appendField(b, "input_schema", v.hold(params)))
		out = append(out, anthropic.ToolUnionParam{OfTool: &tool})
	}
	if deferred {
		search := &anthropic.ToolSearchToolBm25_20251119Param{Type: anthropic.ToolSearchToolBm25_20251119TypeToolSearchToolBm25_20251119}
		if cache {
			// Deferred tools are not in the prompt; the breakpoint goes on the last tool that is.
			search.CacheControl = cacheBreakpoint()
		}
		out = append(out, anthropic.ToolUnionParam{OfToolSearchToolBm25_20251119: search})
	}
	return out, nil
}

// checkAnthropicName applies the API's rule for tool names, ^[a-zA-Z0-9_-]{1,64}$.
// toolbus's own names keep it; a tool from elsewhere (a catalog) may not.
func checkAnthropicName(name string) error {
	if name == "" || len(name) > maxAnthropicName {
		return fmt.Errorf("name %q: the Messages API takes names of 1 to %d characters", name, maxAnthropicName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("name %q: the Messages API takes only letters, digits, '_' and '-' in tool names", name)
		}
	}
	return nil
}

// anthropicMessages translates the transcript into alternating user and assistant
// messages. Consecutive assistant items (thinking, text, calls, carried blocks) form one
// assistant message in their order; the outputs that answer it open the next user
// message, one tool_result per tool_use id, before any text. Reasoning and opaque items
// of other providers, and notes, are skipped.
func anthropicMessages(transcript []toolbus.Item, v *verbatim) []anthropic.MessageParam {
	var (
		out           []anthropic.MessageParam
		role          string
		results, rest []anthropic.ContentBlockParamUnion
	)
	flush := func() {
		blocks := append(results, rest...)
		results, rest = nil, nil
		switch {
		case len(blocks) == 0:
		case role == toolbus.RoleAssistant:
			out = append(out, anthropic.MessageParam{OfAssistant: &anthropic.AssistantMessageParam{Content: blocks}})
		default:
			out = append(out, anthropic.MessageParam{OfUser: &anthropic.UserMessageParam{Content: blocks}})
		}
	}
	add := func(r string, b anthropic.ContentBlockParamUnion, result bool) {
		if r != role {
			flush()
			role = r
		}
		if result {
			results = append(results, b)
		} else {
			rest = append(rest, b)
		}
	}
	for _, it := range transcript {
		switch it.Kind {
		case toolbus.KindMessage:
			if it.Text == "" {
				continue
			}
			r := toolbus.RoleUser // developer text too: the API has no such role mid-conversation
			if it.Role == toolbus.RoleAssistant {
				r = toolbus.RoleAssistant
			}
			add(r, anthropic.NewTextBlock(it.Text), false)
		case toolbus.KindFunctionCall:
			add(toolbus.RoleAssistant, anthropic.ContentBlockParamUnion{OfToolUse: &anthropic.ToolUseBlockParam{
				ID: it.CallID, Name: chatCallName(it), Input: v.hold(toolInput(it.Arguments)),
			}}, false)
		case toolbus.KindCallOutput:
			res := &anthropic.ToolResultBlockParam{ToolUseID: it.CallID, Content: toolResultContent(it.Output)}
			if it.IsError {
				res.IsError = anthropic.Bool(true)
			}
			add(toolbus.RoleUser, anthropic.ContentBlockParamUnion{OfToolResult: res}, true)
		case toolbus.KindReasoning, toolbus.KindOpaque:
			if it.Provider != ProviderAnthropic || len(it.Raw) == 0 {
				continue
			}
			add(toolbus.RoleAssistant, param.Override[anthropic.ContentBlockParamUnion](v.hold(it.Raw)), false)
		}
	}
	flush()
	return out
}

// toolInput is a call's arguments as the object tool_use.input must be. Arguments that
// are not one (a call cut by the output limit, refused by the turn) go back as {}: the
// call's output says why it did not run.
func toolInput(args string) json.RawMessage {
	raw := json.RawMessage(strings.TrimSpace(args))
	if isObject(raw) {
		return raw
	}
	return json.RawMessage(`{}`)
}

// isObject reports whether raw is one whole JSON object.
func isObject(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// toolResultContent is a call's output as tool_result content: text blocks, and images
// as image blocks (bytes as base64, or by URL).
func toolResultContent(parts []toolbus.ContentPart) []anthropic.ToolResultBlockParamContentUnion {
	out := make([]anthropic.ToolResultBlockParamContentUnion, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case toolbus.ContentText:
			if p.Text != "" {
				out = append(out, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: p.Text}})
			}
		case toolbus.ContentImage:
			src := anthropic.ImageBlockParamSourceUnion{}
			if p.URL != "" && len(p.Data) == 0 {
				src.OfURL = &anthropic.URLImageSourceParam{URL: p.URL}
			} else {
				src.OfBase64 = &anthropic.Base64ImageSourceParam{
					MediaType: anthropic.Base64ImageSourceMediaType(p.MediaType),
					Data:      base64.StdEncoding.EncodeToString(p.Data),
				}
			}
			out = append(out, anthropic.ToolResultBlockParamContentUnion{OfImage: &anthropic.ImageBlockParam{Source: src}})
		}
	}
	return out
}

// response translates a complete message; paused reports stop_reason pause_turn, which
// asks to be continued. stream is what a stream left (nil for a plain request, whose
// tool_use inputs are taken as the API parsed them).
func (m *Anthropic) response(msg *anthropic.Message, set []*toolbus.Spec, stream *streamState) (_ *Response, paused bool, _ error) {
	if !msg.JSON.Content.Valid() && stream == nil {
		return nil, false, &Error{Provider: ProviderAnthropic, Message: "malformed response: no content list"}
	}
	out := &Response{ID: msg.ID}
	last := -1 // the item of the last block, when it is a call
	for i, b := range msg.Content {
		var args string
		if stream != nil {
			args = stream.arguments(i, b)
		}
		it, ok := m.blockItem(b, set, args)
		if !ok {
			continue
		}
		out.Items = append(out.Items, it)
		last = -1
		if it.Kind == toolbus.KindFunctionCall && i == len(msg.Content)-1 && (stream == nil || !stream.emitted[i]) {
			last = len(out.Items) - 1
		}
	}
	u := msg.Usage
	out.Usage = Usage{
		// Read in all: the API counts the tokens it read from and wrote to its cache
		// apart from the rest.
		InputTokens:              u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens:             u.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens,
		CacheReadInputTokens:     u.CacheReadInputTokens,
	}
	switch msg.StopReason {
	case anthropic.StopReasonMaxTokens, anthropic.StopReasonModelContextWindowExceeded:
		// Only the last block can have been cut: a call there did not arrive whole
		// (a streamed one whose input closed did), so no destructive tool runs on it.
		out.Truncated = true
		if last >= 0 {
			out.Items[last].Truncated = true
		}
	case anthropic.StopReasonPauseTurn:
		paused = true
	case anthropic.StopReasonRefusal:
		m.log.Warn("model refused to answer", slog.String("provider", ProviderAnthropic), slog.String("message", msg.ID))
	}
	return out, paused, nil
}

// blockItem translates one content block; ok is false for a block that holds nothing
// (an empty text). args, when not empty, are the call's arguments as streamed.
func (m *Anthropic) blockItem(b anthropic.ContentBlockUnion, set []*toolbus.Spec, args string) (toolbus.Item, bool) {
	it := toolbus.Item{Provider: ProviderAnthropic}
	switch b.Type {
	case "text":
		if b.Text == "" {
			return toolbus.Item{}, false
		}
		it.Kind, it.Role, it.Text = toolbus.KindMessage, toolbus.RoleAssistant, m.red.string(b.Text)
	case "tool_use":
		if args == "" {
			args = string(b.Input)
		}
		it.Kind, it.CallID = toolbus.KindFunctionCall, b.ID
		it.Name, it.Namespace = splitChatName(set, b.Name)
		it.Arguments = m.red.string(args)
	case "thinking", "redacted_thinking":
		it.Kind, it.Text = toolbus.KindReasoning, m.red.string(b.Thinking)
		it.Raw = json.RawMessage(m.red.bytes([]byte(b.RawJSON())))
	default:
		// Server tools, tool search and anything newer: carried through.
		it.Kind = toolbus.KindOpaque
		it.Raw = json.RawMessage(m.red.bytes([]byte(b.RawJSON())))
	}
	return it, true
}

// streamState is what a stream leaves beside the accumulated message: each tool_use
// block's input as it arrived (the SDK's accumulator empties an input cut short), which
// blocks came whole, and the item each block is (blocks that hold nothing, an empty
// text, are no item).
type streamState struct {
	partial map[int]*strings.Builder
	emitted map[int]bool
	item    map[int]int
	skipped int // blocks stopped that are no item
}

func (s *streamState) arguments(i int, b anthropic.ContentBlockUnion) string {
	if p, ok := s.partial[i]; ok && p.Len() > 0 {
		return p.String()
	}
	return string(b.Input)
}

// stream asks for one round of a step as a stream: text pieces and each block whole
// go to em, numbered from offset (the items of earlier rounds of the same Respond). A
// stream that breaks before em delivered anything of it is asked again, as on the other
// wires (streamRetry).
func (m *Anthropic) stream(ctx context.Context, params anthropic.MessageNewParams, body option.RequestOption, req *Request, offset int, em *emitter) (*Response, bool, error) {
	type round struct {
		res    *Response
		paused bool
	}
	r, err := streamRetry(ctx, &m.client, ProviderAnthropic, em, func() (round, error) {
		res, paused, err := m.streamOnce(ctx, params, body, req, offset, em)
		return round{res, paused}, err
	})
	return r.res, r.paused, err
}

// streamOnce sends a streaming request and reports the response to em as it arrives:
// text pieces, and each block whole at its content_block_stop, a tool_use block once its
// input_json_delta pieces make one whole object. A block that never becomes whole (cut
// by max_tokens) is only in the Response, marked truncated. A stream that ends before
// message_stop, or breaks, is a streamBroken (streamEnded); an error event is the API's
// error, not asked again.
func (m *Anthropic) streamOnce(ctx context.Context, params anthropic.MessageNewParams, body option.RequestOption, req *Request, offset int, em *emitter) (*Response, bool, error) {
	s := m.service.NewStreaming(ctx, params, body)
	defer s.Close()
	if err := s.Err(); err != nil {
		// No answer at all: the SDK retried it already, as it does any request.
		return nil, false, m.classify(ctx, err)
	}
	var (
		msg     anthropic.Message
		state   = &streamState{partial: map[int]*strings.Builder{}, emitted: map[int]bool{}, item: map[int]int{}}
		stopped bool
	)
	for s.Next() {
		ev := s.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, false, &Error{Provider: ProviderAnthropic, Message: "malformed stream: " + m.red.string(err.Error())}
		}
		i := int(ev.Index) // the accumulator checked it: a block it holds
		switch ev.Type {
		case "content_block_start":
			state.item[i] = offset + i - state.skipped
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				em.text(state.item[i], ev.Delta.Text)
			case "input_json_delta":
				p := state.partial[i]
				if p == nil {
					p = &strings.Builder{}
					state.partial[i] = p
				}
				p.WriteString(ev.Delta.PartialJSON)
				if p.Len() > maxStreamArgs {
					return nil, false, &Error{Provider: ProviderAnthropic, Message: fmt.Sprintf("malformed stream: the input of tool_use block %d exceeds %s", i, formatBytes(maxStreamArgs))}
				}
			}
		case "content_block_stop":
			it, ok := m.blockItem(msg.Content[i], req.Tools, state.arguments(i, msg.Content[i]))
			if !ok {
				state.skipped++
				continue
			}
			if it.Kind == toolbus.KindFunctionCall && !isObject([]byte(it.Arguments)) {
				continue // cut short: the Response has it, truncated
			}
			state.emitted[i] = true
			em.item(state.item[i], it)
		case "message_stop":
			stopped = true
		}
	}
	if err := s.Err(); err != nil || !stopped {
		return nil, false, streamEnded(ctx, ProviderAnthropic, m.ep, m.red, err)
	}
	return m.response(&msg, req.Tools, state)
}
