package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"
	"github.com/toolbus/toolbus"
)

// ProviderChat names the items the Chat gateway returns.
const ProviderChat = "chat"

// Chat is a Model speaking the Chat Completions API (POST /chat/completions), the
// dialect of local servers such as Ollama, vLLM, llama.cpp and LM Studio. Chat
// Completions knows no namespaces and no tool search: namespaced tools are sent as plain
// functions, and deferred tools are served by a software tool search, a tool_search
// function whose result loads the matching schemas into the next request. Like
// [Responses], it keeps no per-turn state.
type Chat struct {
	client
	service openai.ChatCompletionService
}

// NewChat returns a Chat gateway for model. A local server may need no API key; the
// OpenAI API (an empty BaseURL) does.
func NewChat(model string, cfg Config) (*Chat, error) {
	if model == "" {
		return nil, errors.New("chat gateway: model name is empty")
	}
	if cfg.apiKey() == "" && IsOpenAIAPI(cfg.baseURL()) {
		return nil, fmt.Errorf("chat gateway for %s: no API key for the OpenAI API: set %s, or pass -base-url for a local server", model, EnvAPIKey)
	}
	c := newClient(model, cfg)
	return &Chat{client: c, service: openai.NewChatCompletionService(c.requestOptions(ProviderChat)...)}, nil
}

// chatSearchCall is the Raw of a software tool search call.
type chatSearchCall struct {
	Type      string `json:"type"` // "tool_search_call"
	CallID    string `json:"call_id"`
	Arguments string `json:"arguments"`
}

// chatSearchOutput is the Raw of a software tool search's answer.
type chatSearchOutput struct {
	Type   string   `json:"type"` // "tool_search_output"
	CallID string   `json:"call_id"`
	Loaded []string `json:"loaded"`
	Output string   `json:"output"` // what the model reads
}

// Respond sends one step. Calls of the software tool_search are answered here, not by
// the turn: they come back as KindOpaque items, and a response holding only searches is
// answered and asked again, at most maxSearchRounds times.
func (m *Chat) Respond(ctx context.Context, req *Request) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	deferred := hasDeferred(req.Tools)
	if deferred {
		for _, t := range req.Tools {
			if t.Name == toolSearchName {
				return nil, fmt.Errorf("chat gateway: tool %q clashes with the software tool search for deferred tools", t.Name)
			}
		}
	}
	out := &Response{}
	var em *emitter
	if m.streaming(req) {
		em = &emitter{f: req.Stream, red: m.red}
	}
	for round := 1; ; round++ {
		transcript := append(req.Input[:len(req.Input):len(req.Input)], out.Items...)
		params, err := m.params(req, transcript)
		if err != nil {
			return nil, err
		}
		var r chatRound
		if em != nil {
			r, err = m.streamRound(ctx, params, req, round, len(out.Items), em)
		} else {
			var res *openai.ChatCompletion
			if res, err = m.service.New(ctx, params); err != nil {
				return nil, classify(ctx, ProviderChat, m.cfg.openAIEndpoint(), m.red, err)
			}
			r, err = m.whole(res, req, round)
		}
		if err != nil {
			return nil, err
		}
		out.ID = r.id
		out.Usage.InputTokens += r.usage.PromptTokens
		out.Usage.OutputTokens += r.usage.CompletionTokens
		out.Items = append(out.Items, r.items...)
		// Every search gets its answer, even in a truncated response: a call without
		// one would make the next request invalid.
		for _, s := range r.searches {
			a, err := m.answerSearch(req.Tools, s)
			if err != nil {
				return nil, err
			}
			if em != nil {
				em.item(len(out.Items), a)
			}
			out.Items = append(out.Items, a)
		}
		if r.finish == "length" {
			markTruncated(out, em.whole())
			return out, nil
		}
		if len(r.searches) == 0 || len(out.Calls()) > 0 {
			// Calls go to the turn; tools loaded on the way travel with the transcript.
			return out, nil
		}
		if round == maxSearchRounds {
			return nil, &Error{Provider: ProviderChat, Message: fmt.Sprintf("the model searched for tools %d times without calling one", round)}
		}
	}
}

// chatRound is one answer of the API, translated: its items (text, then calls and
// software searches), the searches to answer, its tokens and why it finished.
type chatRound struct {
	id       string
	items    []toolbus.Item
	searches []chatSearchCall
	usage    openai.CompletionUsage
	finish   string
}

// chatCall is a tool call as a response or a stream's fragments hold it.
type chatCall struct{ id, typ, name, args string }

// chatFragments gathers the fragments of one streamed tool call.
type chatFragments struct {
	id, typ    string
	name, args strings.Builder
}

// whole translates an answer that came in one piece.
func (m *Chat) whole(res *openai.ChatCompletion, req *Request, round int) (chatRound, error) {
	if len(res.Choices) == 0 {
		return chatRound{}, &Error{Provider: ProviderChat, Message: "malformed response: no choices"}
	}
	choice := res.Choices[0]
	r := chatRound{id: res.ID, usage: res.Usage, finish: choice.FinishReason}
	if text := choice.Message.Content + choice.Message.Refusal; text != "" {
		r.items = append(r.items, toolbus.Item{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: m.red.string(text), Provider: ProviderChat})
	}
	for i, tc := range choice.Message.ToolCalls {
		if err := m.addCall(&r, req, round, i, chatCall{id: tc.ID, typ: tc.Type, name: tc.Function.Name, args: tc.Function.Arguments}); err != nil {
			return chatRound{}, err
		}
	}
	return r, nil
}

// addCall translates call i of a round into its item: a function call, or a software
// tool search (KindOpaque, to be answered). It reports whether it added one: a call of
// an unknown type is dropped.
func (m *Chat) addCall(r *chatRound, req *Request, round, i int, tc chatCall) error {
	if tc.typ != "" && tc.typ != "function" {
		m.log.Warn("model made a call of an unknown type; dropped", slog.String("provider", ProviderChat), slog.String("type", tc.typ))
		return nil
	}
	id := tc.id
	if id == "" {
		// Some local servers leave ids out; the transcript needs one to pair
		// the call with its output.
		id = fmt.Sprintf("call_%d_%d_%d", req.Step, round, i)
	}
	args := m.red.string(tc.args)
	if hasDeferred(req.Tools) && tc.name == toolSearchName {
		s := chatSearchCall{Type: "tool_search_call", CallID: id, Arguments: args}
		raw, err := json.Marshal(s)
		if err != nil {
			return fmt.Errorf("encode tool search call: %w", err)
		}
		r.searches = append(r.searches, s)
		r.items = append(r.items, toolbus.Item{Kind: toolbus.KindOpaque, Provider: ProviderChat, Raw: raw})
		return nil
	}
	name, namespace := splitChatName(req.Tools, tc.name)
	r.items = append(r.items, toolbus.Item{
		Kind:      toolbus.KindFunctionCall,
		CallID:    id,
		Name:      name,
		Namespace: namespace,
		Arguments: args,
		Provider:  ProviderChat,
	})
	return nil
}

// streamRound asks for one round of a step as a stream (stream: true, with
// stream_options.include_usage): text deltas and each item once complete go to em,
// numbered from base (the round's first item in the step).
func (m *Chat) streamRound(ctx context.Context, params openai.ChatCompletionNewParams, req *Request, round, base int, em *emitter) (chatRound, error) {
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	return streamRetry(ctx, &m.client, ProviderChat, em, func() (chatRound, error) {
		return m.streamOnce(ctx, params, req, round, base, em)
	})
}

// streamOnce reads one streamed answer. The text before the first tool call is an item
// once that call begins; call i is complete once a fragment of a later call arrives
// (delta.tool_calls[j], j > i) or the answer finishes (finish_reason), unless it finished
// on its output limit ("length"), which cut the last call.
func (m *Chat) streamOnce(ctx context.Context, params openai.ChatCompletionNewParams, req *Request, round, base int, em *emitter) (chatRound, error) {
	var httpRes *http.Response
	s := m.service.NewStreaming(ctx, params, option.WithResponseInto(&httpRes))
	defer s.Close()
	if err := s.Err(); err != nil {
		// No answer at all: the SDK retried it already, as it does any request.
		return chatRound{}, streamAdvice(classify(ctx, ProviderChat, m.cfg.openAIEndpoint(), m.red, err))
	}
	if wholeJSON(httpRes) {
		// The server ignored "stream": the answer is one completion.
		b, err := io.ReadAll(httpRes.Body)
		if err != nil {
			return chatRound{}, classify(ctx, ProviderChat, m.cfg.openAIEndpoint(), m.red, err)
		}
		res := new(openai.ChatCompletion)
		if err := res.UnmarshalJSON(b); err != nil {
			return chatRound{}, classify(ctx, ProviderChat, m.cfg.openAIEndpoint(), m.red, err)
		}
		return m.whole(res, req, round)
	}
	var (
		r     chatRound
		text  strings.Builder  // text not yet in an item
		calls []*chatFragments // by the stream's index
		next  int              // the first call not yet complete
	)
	flushText := func() {
		if text.Len() == 0 {
			return
		}
		it := toolbus.Item{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: m.red.string(text.String()), Provider: ProviderChat}
		text.Reset()
		r.items = append(r.items, it)
		em.item(base+len(r.items)-1, it)
	}
	// complete translates the calls before index end, delivering each.
	complete := func(end int, deliver bool) error {
		for ; next < end; next++ {
			c := calls[next]
			if c == nil {
				continue // an index the stream skipped
			}
			n := len(r.items)
			if err := m.addCall(&r, req, round, next, chatCall{id: c.id, typ: c.typ, name: c.name.String(), args: c.args.String()}); err != nil {
				return err
			}
			if deliver && len(r.items) > n {
				em.item(base+n, r.items[n])
			}
		}
		return nil
	}
	for s.Next() {
		chunk := s.Current()
		if chunk.ID != "" {
			r.id = chunk.ID
		}
		if chunk.JSON.Usage.Valid() {
			r.usage = chunk.Usage // include_usage: the last chunk, without choices
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		choice := chunk.Choices[0]
		if piece := choice.Delta.Content + choice.Delta.Refusal; piece != "" {
			text.WriteString(piece)
			em.text(base+len(r.items), piece)
		}
		for _, tc := range choice.Delta.ToolCalls {
			i := int(tc.Index)
			if !tc.JSON.Index.Valid() {
				// Some local servers leave the index out: a fragment with an id of its
				// own begins a new call, any other goes on with the last one.
				i = max(len(calls)-1, 0)
				if tc.ID != "" && len(calls) > 0 && calls[i] != nil && calls[i].id != "" && calls[i].id != tc.ID {
					i = len(calls)
				}
			}
			if i < 0 || i >= maxStreamItems {
				return chatRound{}, &Error{Provider: ProviderChat, Message: fmt.Sprintf("malformed stream: tool call index %d", i)}
			}
			if i >= len(calls) {
				// A new call: the text before it and every call before it are complete.
				flushText()
				calls = append(calls, make([]*chatFragments, i+1-len(calls))...)
				if err := complete(i, true); err != nil {
					return chatRound{}, err
				}
			}
			c := calls[i]
			if c == nil {
				c = &chatFragments{}
				calls[i] = c
			}
			if tc.ID != "" {
				c.id = tc.ID
			}
			if tc.Type != "" {
				c.typ = tc.Type
			}
			c.name.WriteString(tc.Function.Name)
			c.args.WriteString(tc.Function.Arguments)
			if c.args.Len() > maxStreamArgs {
				return chatRound{}, &Error{Provider: ProviderChat, Message: fmt.Sprintf("malformed stream: the arguments of tool call %d exceed %s", i, formatBytes(maxStreamArgs))}
			}
		}
		if choice.FinishReason != "" {
			r.finish = choice.FinishReason
		}
	}
	if err := s.Err(); err != nil || r.finish == "" {
		return chatRound{}, streamEnded(ctx, ProviderChat, m.cfg.openAIEndpoint(), m.red, err)
	}
	// Finished: the last call is complete too, unless the output limit cut it.
	if err := complete(len(calls), r.finish != "length"); err != nil {
		return chatRound{}, err
	}
	flushText()
	return r, nil
}

// Chat Completions has no namespaces, so a namespaced tool goes out under one flat name:
// "<namespace>__<name>" (toolbus.NamespaceSeparator). A namespace never contains the
// separator, so two namespaced tools never share a flat name. A tool without a namespace
// whose own name looks flattened ("crm__lookup" beside crm.lookup) is the one clash left:
// chatTools refuses the request naming both. A flat name longer than the 64 characters
// providers accept keeps its first 55 and ends in "_" and 8 hex digits of its SHA-256,
// unique in practice and stable across steps.
const maxChatName = 64

// chatName is the flat name a tool is sent and called by on Chat Completions.
func chatName(t *toolbus.Spec) string {
	if t.Namespace == "" {
		return t.Name
	}
	name := t.Namespace + toolbus.NamespaceSeparator + t.Name
	if len(name) <= maxChatName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:maxChatName-9] + "_" + hex.EncodeToString(sum[:4])
}

// splitChatName maps a called flat name back to the tool's name and namespace, so a call
// looks the same to the turn whichever gateway produced it. A name no tool has is passed
// on as it is: the turn answers it as an unknown tool.
func splitChatName(set []*toolbus.Spec, wire string) (name, namespace string) {
	for _, t := range set {
		if chatName(t) == wire {
			return t.Name, t.Namespace
		}
	}
	return wire, ""
}

func (m *Chat) params(req *Request, transcript []toolbus.Item) (openai.ChatCompletionNewParams, error) {
	tools, err := m.tools(req.Tools, loadedTools(transcript))
	if err != nil {
		return openai.ChatCompletionNewParams{}, err
	}
	p := openai.ChatCompletionNewParams{
		Model:    shared.ChatModel(m.model),
		Messages: chatMessages(req.Instructions, transcript),
		Tools:    tools,
	}
	if len(tools) > 0 {
		p.ParallelToolCalls = openai.Bool(req.ParallelToolCalls)
	}
	if m.cfg.MaxOutputTokens > 0 {
		// max_tokens rather than max_completion_tokens: local servers know it.
		p.MaxTokens = openai.Int(m.cfg.MaxOutputTokens)
	}
	if m.cfg.ReasoningEffort != "" {
		p.ReasoningEffort = shared.ReasoningEffort(m.cfg.ReasoningEffort)
	}
	return p, nil
}

// loadedTools lists the deferred tools earlier software searches loaded.
func loadedTools(transcript []toolbus.Item) map[string]bool {
	loaded := make(map[string]bool)
	for _, it := range transcript {
		if it.Kind != toolbus.KindOpaque || it.Provider != ProviderChat {
			continue
		}
		var o chatSearchOutput
		if json.Unmarshal(it.Raw, &o) == nil && o.Type == "tool_search_output" {
			for _, name := range o.Loaded {
				loaded[name] = true
			}
		}
	}
	return loaded
}

// ChatToolDefinitions returns the "tools" array of the first Chat Completions request
// of a turn with tools, byte for byte as the gateway sends it: every tool as a plain
// function (Chat Completions has no namespaces), and when any tool is deferred, not the
// deferred tools but the software tool_search function whose description lists them.
// Later requests add the deferred tools that searches loaded. Like
// [ResponsesToolDefinitions], it logs nothing.
func ChatToolDefinitions(tools []*toolbus.Spec) (json.RawMessage, error) {
	defs, err := chatTools(tools, nil, nil)
	if err != nil {
		return nil, err
	}
	body, err := openai.ChatCompletionNewParams{Tools: defs}.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode tool definitions: %w", err)
	}
	return requestField(body, "tools")
}

// tools translates the tool set of one request.
func (m *Chat) tools(set []*toolbus.Spec, loaded map[string]bool) ([]openai.ChatCompletionToolUnionParam, error) {
	return chatTools(set, loaded, m.strict)
}

// chatTools sends every tool that is not deferred or was loaded, in tool-set order, and
// the software tool_search when any tool is deferred.
func chatTools(set []*toolbus.Spec, loaded map[string]bool, warn *fallbackLog) ([]openai.ChatCompletionToolUnionParam, error) {
	var out []openai.ChatCompletionToolUnionParam
	var deferred []*toolbus.Spec
	seen := make(map[string]*toolbus.Spec, len(set))
	for _, t := range set {
		name := chatName(t)
		if other, dup := seen[name]; dup {
			return nil, fmt.Errorf("chat gateway: tools %s and %s both go out as %q", other.QualifiedName(), t.QualifiedName(), name)
		}
		seen[name] = t
		if t.DeferLoading {
			deferred = append(deferred, t)
			if !loaded[name] {
				continue
			}
		}
		params, strict := toolParams(t, warn)
		tool, err := chatFunction(name, t.Description, params, strict)
		if err != nil {
			return nil, err
		}
		out = append(out, tool)
	}
	if len(deferred) > 0 {
		tool, err := chatFunction(toolSearchName, searchCatalog(deferred), toolSearchParams, false)
		if err != nil {
			return nil, err
		}
		out = append(out, tool)
	}
	return out, nil
}

// chatFunction is one function tool: the SDK's typed fields, then the parameter schema
// spliced in byte for byte. strict is sent only when true: local servers may not know it.
func chatFunction(name, description string, params json.RawMessage, strict bool) (openai.ChatCompletionToolUnionParam, error) {
	def := shared.FunctionDefinitionParam{Name: name}
	if description != "" {
		def.Description = openai.String(description)
	}
	if strict {
		def.Strict = openai.Bool(true)
	}
	b, err := def.MarshalJSON()
	if err != nil {
		return openai.ChatCompletionToolUnionParam{}, fmt.Errorf("encode tool %s: %w", name, err)
	}
	fn := param.Override[shared.FunctionDefinitionParam](appendField(b, "parameters", params))
	return openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: fn}}, nil
}

// searchCatalog describes the software tool search and lists what it can load, since the
// model sees no deferred tool until it is loaded.
func searchCatalog(deferred []*toolbus.Spec) string {
	var b strings.Builder
	b.WriteString(toolSearchDescription)
	b.WriteString("\nTools that can be loaded:")
	for _, t := range deferred {
		b.WriteString("\n- ")
		b.WriteString(chatName(t))
		if t.Namespace != "" {
			b.WriteString(" (" + t.Namespace + ")")
		}
		if d := firstLine(t.Description); d != "" {
			b.WriteString(": " + d)
		}
	}
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// answerSearch runs a software tool search and returns its output item.
func (m *Chat) answerSearch(set []*toolbus.Spec, s chatSearchCall) (toolbus.Item, error) {
	query := searchQuery(json.RawMessage(s.Arguments))
	found := searchDeferred(set, query)
	o := chatSearchOutput{Type: "tool_search_output", CallID: s.CallID, Loaded: make([]string, 0, len(found))}
	var b strings.Builder
	if len(found) == 0 {
		fmt.Fprintf(&b, "No deferred tool matches %q. Search again with a tool name from the tool_search description.", query)
	} else {
		b.WriteString("Loaded; these tools can be called now:")
		for _, t := range found {
			o.Loaded = append(o.Loaded, chatName(t))
			b.WriteString("\n- " + chatName(t))
			if d := firstLine(t.Description); d != "" {
				b.WriteString(": " + d)
			}
		}
	}
	o.Output = b.String()
	raw, err := json.Marshal(o)
	if err != nil {
		return toolbus.Item{}, fmt.Errorf("encode tool search output: %w", err)
	}
	m.log.Debug("tool search answered", slog.String("provider", ProviderChat),
		slog.String("query", query), slog.Any("loaded", o.Loaded))
	return toolbus.Item{Kind: toolbus.KindOpaque, Provider: ProviderChat, Raw: raw}, nil
}

// chatMessages translates the transcript. Consecutive assistant items (text, calls,
// software searches) form one assistant message, as the API wants; each output becomes a
// tool message. Reasoning and opaque items of other providers are skipped.
func chatMessages(instructions string, transcript []toolbus.Item) []openai.ChatCompletionMessageParamUnion {
	var out []openai.ChatCompletionMessageParamUnion
	if instructions != "" {
		out = append(out, openai.SystemMessage(instructions))
	}
	var (
		asst *openai.ChatCompletionAssistantMessageParam
		text strings.Builder
	)
	flush := func() {
		if asst == nil {
			return
		}
		if text.Len() > 0 {
			asst.Content.OfString = openai.String(text.String())
		}
		out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: asst})
		asst = nil
		text.Reset()
	}
	assistant := func() *openai.ChatCompletionAssistantMessageParam {
		if asst == nil {
			asst = &openai.ChatCompletionAssistantMessageParam{}
		}
		return asst
	}
	call := func(id, name, args string) {
		a := assistant()
		a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID:       id,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: name, Arguments: args},
			},
		})
	}
	for _, it := range transcript {
		switch it.Kind {
		case toolbus.KindMessage:
			switch it.Role {
			case toolbus.RoleAssistant:
				if it.Text != "" {
					assistant()
					if text.Len() > 0 {
						text.WriteByte('\n')
					}
					text.WriteString(it.Text)
				}
			case toolbus.RoleUser:
				flush()
				out = append(out, openai.UserMessage(it.Text))
			default:
				// Developer and system text: "system" is the role every local server knows.
				flush()
				out = append(out, openai.SystemMessage(it.Text))
			}
		case toolbus.KindFunctionCall:
			call(it.CallID, chatCallName(it), it.Arguments)
		case toolbus.KindCallOutput:
			flush()
			out = append(out, openai.ToolMessage(outputText(it.Output), it.CallID))
		case toolbus.KindOpaque:
			if it.Provider != ProviderChat {
				continue
			}
			var head struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(it.Raw, &head) != nil {
				continue
			}
			switch head.Type {
			case "tool_search_call":
				var c chatSearchCall
				if json.Unmarshal(it.Raw, &c) == nil {
					call(c.CallID, toolSearchName, c.Arguments)
				}
			case "tool_search_output":
				var o chatSearchOutput
				if json.Unmarshal(it.Raw, &o) == nil {
					flush()
					out = append(out, openai.ToolMessage(o.Output, o.CallID))
				}
			}
		}
	}
	flush()
	return out
}

// chatCallName is the flat name of a call in the transcript, as the model called it.
func chatCallName(it toolbus.Item) string {
	if it.Namespace == "" {
		return it.Name
	}
	return chatName(&toolbus.Spec{Name: it.Name, Namespace: it.Namespace})
}
