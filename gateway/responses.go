package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
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
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/internal/jsonfast"
	"github.com/toolbus/toolbus/internal/redact"
)

// ProviderResponses names the items the Responses gateway returns; it sends their Raw
// back verbatim and skips reasoning and opaque items of other providers.
const ProviderResponses = "openai"

// Responses is a Model speaking the OpenAI Responses API (POST /responses). It holds no
// per-turn state: everything a step needs, loaded tools included, is derived from the
// request's transcript, so one value serves many turns at once.
type Responses struct {
	client
	service responses.ResponseService
}

// NewResponses returns a Responses gateway for model. It needs an API key: OpenAI's for
// the OpenAI API, the endpoint's own (Config.APIKey) for any other.
func NewResponses(model string, cfg Config) (*Responses, error) {
	if model == "" {
		return nil, errors.New("responses gateway: model name is empty")
	}
	switch {
	case cfg.apiKey() != "":
	case IsOpenAIAPI(cfg.baseURL()):
		return nil, fmt.Errorf("responses gateway for %s: no API key: set %s", model, EnvAPIKey)
	default:
		return nil, fmt.Errorf("responses gateway for %s: no API key for %s (%s)", model, redact.URL(cfg.baseURL()), cfg.keyAdvice())
	}
	c := newClient(model, cfg)
	return &Responses{client: c, service: responses.NewResponseService(c.requestOptions(ProviderResponses)...)}, nil
}

// Respond sends one step. When the model searches for deferred tools and tool search is
// client-executed, Respond answers each search with the matching definitions and asks
// again, at most maxSearchRounds times; the searches and their answers come back among
// the response's items (KindOpaque), so the loaded tools stay loaded for the rest of the
// turn.
func (m *Responses) Respond(ctx context.Context, req *Request) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tools, err := m.tools(req.Tools)
	if err != nil {
		return nil, err
	}
	input := m.input(req.Input)
	out := &Response{}
	var em *emitter
	if m.streaming(req) {
		em = &emitter{f: req.Stream, red: m.red}
	}
	for round := 1; ; round++ {
		var (
			res      *responses.Response
			items    []toolbus.Item
			searches []search
		)
		if em != nil {
			res, items, searches, err = m.streamRound(ctx, m.params(req, input, tools), req.Tools, len(out.Items), em)
		} else {
			res, err = m.service.New(ctx, m.params(req, input, tools))
			if err != nil {
				return nil, classify(ctx, ProviderResponses, m.cfg.openAIEndpoint(), m.red, err)
			}
			items, searches, err = m.output(res, req.Tools)
		}
		if err != nil {
			return nil, err
		}
		out.ID = res.ID
		out.Usage.InputTokens += res.Usage.InputTokens
		out.Usage.OutputTokens += res.Usage.OutputTokens
		out.Items = append(out.Items, items...)

		if res.Status == responses.ResponseStatusFailed {
			msg := res.Error.Message
			if msg == "" {
				msg = "the response failed without a message"
			}
			return nil, &Error{Provider: ProviderResponses, Message: m.red.string(fmt.Sprintf("response %s failed: %s", res.ID, msg))}
		}

		// Every search gets its answer, even in a truncated response: a call without
		// one would make the next request invalid.
		answers := make([]toolbus.Item, 0, len(searches))
		for _, s := range searches {
			a, err := m.answerSearch(req.Tools, s)
			if err != nil {
				return nil, err
			}
			answers = append(answers, a)
			if em != nil {
				em.item(len(out.Items)+len(answers)-1, a)
			}
		}
		out.Items = append(out.Items, answers...)

		if res.Status == responses.ResponseStatusIncomplete {
			if res.IncompleteDetails.Reason == "max_output_tokens" {
				markTruncated(out, em.whole())
				return out, nil
			}
			m.log.Warn("model response incomplete", slog.String("provider", ProviderResponses),
				slog.String("reason", res.IncompleteDetails.Reason))
		}
		if len(searches) == 0 || len(out.Calls()) > 0 {
			// Calls go to the turn; tools loaded on the way travel with the transcript.
			return out, nil
		}
		if round == maxSearchRounds {
			return nil, &Error{Provider: ProviderResponses, Message: fmt.Sprintf("the model searched for tools %d times without calling one", round)}
		}
		input = append(input, m.input(append(items, answers...))...)
	}
}

// markTruncated marks a response cut by its output limit and every call in it from
// item whole on: a streamed response's calls that were delivered whole before the cut
// (StreamItem) are not; an unstreamed response's are all suspect (whole is 0).
func markTruncated(r *Response, whole int) {
	r.Truncated = true
	for i := whole; i < len(r.Items); i++ {
		if r.Items[i].Kind == toolbus.KindFunctionCall {
			r.Items[i].Truncated = true
		}
	}
}

func (m *Responses) params(req *Request, input []responses.ResponseInputItemUnionParam, tools []responses.ToolUnionParam) responses.ResponseNewParams {
	p := responses.ResponseNewParams{
		Model: shared.ResponsesModel(m.model),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		Tools: tools,
	}
	if req.Instructions != "" {
		p.Instructions = openai.String(req.Instructions)
	}
	if len(tools) > 0 {
		p.ParallelToolCalls = openai.Bool(req.ParallelToolCalls)
	}
	if m.cfg.MaxOutputTokens > 0 {
		p.MaxOutputTokens = openai.Int(m.cfg.MaxOutputTokens)
	}
	if m.cfg.ReasoningEffort != "" {
		p.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffort(m.cfg.ReasoningEffort)}
	}
	if m.cfg.Store {
		p.Store = openai.Bool(true)
	} else {
		// Stateless: nothing is kept on the provider, so reasoning must travel with
		// the transcript, encrypted.
		p.Store = openai.Bool(false)
		p.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	}
	return p
}

// ResponsesToolDefinitions returns the "tools" array a Responses request carries for
// tools, byte for byte as the gateway sends it: plain functions at the top level,
// namespaced tools grouped into `type: namespace` tools, deferred ones marked
// defer_loading, and a tool_search tool when any is deferred (hosted by the provider
// when hostedSearch is set, as with Config.HostedToolSearch). A Strict tool whose schema
// cannot be made strict goes out non-strict; unlike the gateway, this logs nothing.
func ResponsesToolDefinitions(tools []*toolbus.Spec, hostedSearch bool) (json.RawMessage, error) {
	defs, err := responsesTools(tools, hostedSearch, nil)
	if err != nil {
		return nil, err
	}
	// Encoded inside a request, by the SDK's own encoder, and cut out again, so the
	// bytes are those of a request body.
	body, err := responses.ResponseNewParams{Tools: defs}.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode tool definitions: %w", err)
	}
	return requestField(body, "tools")
}

// requestField returns the raw value of key in the JSON object body, or an empty array
// when the SDK left the key out (no tools).
func requestField(body []byte, key string) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("decode encoded request: %w", err)
	}
	if v, ok := fields[key]; ok {
		return v, nil
	}
	return json.RawMessage("[]"), nil
}

// tools translates the tool set of one request.
func (m *Responses) tools(set []*toolbus.Spec) ([]responses.ToolUnionParam, error) {
	return responsesTools(set, m.cfg.HostedToolSearch, m.strict)
}

// responsesTools translates a tool set: plain functions at the top level, tools with a
// namespace grouped into `type: namespace` tools (placed where their first tool stood),
// deferred ones marked defer_loading, and a tool_search tool when any is deferred.
func responsesTools(set []*toolbus.Spec, hostedSearch bool, warn *fallbackLog) ([]responses.ToolUnionParam, error) {
	out, err := groupByNamespace(set, set, warn,
		func(fn json.RawMessage) responses.ToolUnionParam {
			f := param.Override[responses.FunctionToolParam](fn)
			return responses.ToolUnionParam{OfFunction: &f}
		},
		func(name, description string) (*responses.NamespaceToolParam, responses.ToolUnionParam) {
			ns := &responses.NamespaceToolParam{Name: name, Description: description}
			return ns, responses.ToolUnionParam{OfNamespace: ns}
		},
		func(ns *responses.NamespaceToolParam, fn json.RawMessage) {
			f := param.Override[responses.NamespaceToolToolFunctionParam](fn)
			ns.Tools = append(ns.Tools, responses.NamespaceToolToolUnionParam{OfFunction: &f})
		})
	if err != nil {
		return nil, err
	}
	if hasDeferred(set) {
		search := responses.ToolSearchToolParam{}
		if !hostedSearch {
			search.Execution = responses.ToolSearchToolExecutionClient
			search.Description = openai.String(toolSearchDescription)
			search.Parameters = toolSearchParams
		}
		out = append(out, responses.ToolUnionParam{OfToolSearch: &search})
	}
	return out, nil
}

// groupByNamespace translates tools (of set) in their order, the same way for a request's
// tools and a tool search's answer: a tool without a namespace becomes top(fn); a
// namespaced one goes into its namespace, which group makes where the namespace's first
// tool stood, and add fills. fn is the tool's function definition (functionJSON).
func groupByNamespace[N, U any](set, tools []*toolbus.Spec, warn *fallbackLog,
	top func(fn json.RawMessage) U,
	group func(name, description string) (*N, U),
	add func(ns *N, fn json.RawMessage),
) ([]U, error) {
	var out []U
	namespaces := make(map[string]*N)
	for _, t := range tools {
		fn, err := functionJSON(t, warn)
		if err != nil {
			return nil, err
		}
		if t.Namespace == "" {
			out = append(out, top(fn))
			continue
		}
		ns, ok := namespaces[t.Namespace]
		if !ok {
			var u U
			ns, u = group(t.Namespace, namespaceDescription(set, t.Namespace))
			namespaces[t.Namespace] = ns
			out = append(out, u)
		}
		add(ns, fn)
	}
	return out, nil
}

// functionJSON is one Responses function definition: the SDK's typed fields, then the
// parameter schema spliced in byte for byte.
func functionJSON(t *toolbus.Spec, warn *fallbackLog) (json.RawMessage, error) {
	params, strict := toolParams(t, warn)
	fn := responses.FunctionToolParam{Name: t.Name, Strict: openai.Bool(strict)}
	if t.Description != "" {
		fn.Description = openai.String(t.Description)
	}
	if t.DeferLoading {
		fn.DeferLoading = openai.Bool(true)
	}
	b, err := fn.MarshalJSON()
	if err != nil {
		return nil, fmt.Errorf("encode tool %s: %w", t.Name, err)
	}
	return appendField(b, "parameters", params), nil
}

// input translates the transcript. Items this gateway returned go back verbatim from
// Raw; neutral items are rebuilt; reasoning and opaque items of other providers are
// skipped, since no other provider's reasoning means anything here.
func (m *Responses) input(items []toolbus.Item) []responses.ResponseInputItemUnionParam {
	namespaces := callNamespaces(items)
	out := make([]responses.ResponseInputItemUnionParam, 0, len(items))
	for _, it := range items {
		if it.Provider == ProviderResponses && len(it.Raw) > 0 {
			out = append(out, param.Override[responses.ResponseInputItemUnionParam](it.Raw))
			continue
		}
		switch it.Kind {
		case toolbus.KindMessage:
			if it.Text == "" {
				continue
			}
			out = append(out, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
				Role:    responses.EasyInputMessageRole(it.Role),
				Content: responses.EasyInputMessageContentUnionParam{OfString: openai.String(it.Text)},
			}})
		case toolbus.KindFunctionCall:
			call := &responses.ResponseFunctionToolCallParam{CallID: it.CallID, Name: it.Name, Arguments: it.Arguments}
			if it.Namespace != "" {
				call.Namespace = openai.String(it.Namespace)
			}
			out = append(out, responses.ResponseInputItemUnionParam{OfFunctionCall: call})
		case toolbus.KindCallOutput:
			o := &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: openai.String(it.CallID),
				Output: functionOutput(it.Output),
			}
			if ns := cmp.Or(it.Namespace, namespaces[it.CallID]); ns != "" {
				o.Namespace = openai.String(ns)
			}
			out = append(out, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: o})
		}
	}
	return out
}

// functionOutput is a call's output: a plain string when it is all text, otherwise a list
// of input_text and input_image parts.
func functionOutput(parts []toolbus.ContentPart) responses.ResponseInputItemFunctionCallOutputOutputUnionParam {
	allText := true
	for _, p := range parts {
		if p.Type != toolbus.ContentText {
			allText = false
		}
	}
	if allText {
		texts := make([]string, len(parts))
		for i, p := range parts {
			texts[i] = p.Text
		}
		return responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String(strings.Join(texts, "\n"))}
	}
	list := make(responses.ResponseFunctionCallOutputItemListParam, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case toolbus.ContentText:
			list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{
				OfInputText: &responses.ResponseInputTextContentParam{Text: p.Text}})
		case toolbus.ContentImage:
			list = append(list, responses.ResponseFunctionCallOutputItemUnionParam{
				OfInputImage: &responses.ResponseInputImageContentParam{ImageURL: openai.String(imageURL(p))}})
		}
	}
	return responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfResponseFunctionCallOutputItemArray: list}
}

// imageURL is an image part's URL, or its bytes as a data URL.
func imageURL(p toolbus.ContentPart) string {
	if p.URL != "" {
		return p.URL
	}
	return "data:" + p.MediaType + ";base64," + base64.StdEncoding.EncodeToString(p.Data)
}

// callNamespace is the namespace of a call as the turn should see it. A top-level tool
// loaded by a client-executed tool search comes back with its own name as namespace
// ("namespace": "get_shipping_eta"); the tool has none, so neither has the call. The
// call's Raw keeps what the model sent.
func callNamespace(set []*toolbus.Spec, name, namespace string) string {
	if namespace == name {
		if findTool(set, "", name) != nil && findTool(set, namespace, name) == nil {
			return ""
		}
	}
	return namespace
}

// search is a client-executed tool search the model asked for.
type search struct {
	callID string
	args   json.RawMessage
}

// output translates the response's output items and collects the tool searches this
// gateway must answer.
func (m *Responses) output(res *responses.Response, set []*toolbus.Spec) ([]toolbus.Item, []search, error) {
	if !res.JSON.Output.Valid() {
		return nil, nil, &Error{Provider: ProviderResponses, Message: "malformed response: no output list"}
	}
	items := make([]toolbus.Item, 0, len(res.Output))
	var searches []search
	for i, o := range res.Output {
		it, s, err := m.item(i, o, set)
		if err != nil {
			return nil, nil, err
		}
		if s != nil {
			searches = append(searches, *s)
		}
		items = append(items, it)
	}
	return items, searches, nil
}

// item translates output item i, and says whether it is a tool search this gateway
// must answer.
func (m *Responses) item(i int, o responses.ResponseOutputItemUnion, set []*toolbus.Spec) (toolbus.Item, *search, error) {
	raw := json.RawMessage(m.red.bytes([]byte(o.RawJSON())))
	it := toolbus.Item{Provider: ProviderResponses, Raw: raw}
	var s *search
	switch o.Type {
	case "":
		return toolbus.Item{}, nil, &Error{Provider: ProviderResponses, Message: fmt.Sprintf("malformed response: output item %d has no type", i)}
	case "message":
		it.Kind, it.Role = toolbus.KindMessage, toolbus.RoleAssistant
		var text []string
		for _, c := range o.Content {
			switch c.Type {
			case "output_text":
				text = append(text, c.Text)
			case "refusal":
				text = append(text, c.Refusal)
			}
		}
		it.Text = m.red.string(strings.Join(text, ""))
	case "function_call":
		fc := o.AsFunctionCall()
		return m.callItem([]byte(o.RawJSON()), fc.CallID, fc.Name, fc.Namespace, fc.Arguments, set), nil, nil
	case "reasoning":
		it.Kind = toolbus.KindReasoning
		var text []string
		for _, s := range o.AsReasoning().Summary {
			text = append(text, s.Text)
		}
		it.Text = m.red.string(strings.Join(text, "\n"))
	case "tool_search_call":
		it.Kind = toolbus.KindOpaque
		call := o.AsToolSearchCall()
		if call.Execution != responses.ResponseToolSearchCallExecutionServer && !m.cfg.HostedToolSearch {
			s = &search{callID: call.CallID, args: json.RawMessage(call.JSON.Arguments.Raw())}
		}
	default:
		// tool_search_output, hosted tool calls and anything newer: carried through.
		it.Kind = toolbus.KindOpaque
	}
	return it, s, nil
}

// callItem is a function call item of the response, raw as it came.
func (m *Responses) callItem(raw []byte, callID, name, namespace, args string, set []*toolbus.Spec) toolbus.Item {
	return toolbus.Item{Provider: ProviderResponses, Raw: json.RawMessage(m.red.bytes(raw)), Kind: toolbus.KindFunctionCall,
		CallID: callID, Name: name, Namespace: callNamespace(set, name, namespace), Arguments: m.red.string(args)}
}

// streamRound asks for one round of a step as a stream (stream: true): text deltas
// and each output item as it is done go to em, numbered from base (the round's first
// item in the step), and the terminal event's response comes back with its items
// translated.
func (m *Responses) streamRound(ctx context.Context, params responses.ResponseNewParams, set []*toolbus.Spec, base int, em *emitter) (*responses.Response, []toolbus.Item, []search, error) {
	type round struct {
		res      *responses.Response
		items    []toolbus.Item
		searches []search
	}
	r, err := streamRetry(ctx, &m.client, ProviderResponses, em, func() (round, error) {
		res, items, searches, err := m.streamOnce(ctx, params, set, base, em)
		return round{res, items, searches}, err
	})
	return r.res, r.items, r.searches, err
}

// streamOnce reads one streamed response: output_text (and refusal) deltas are text
// pieces; output_item.done is an item complete, but for a function call whose status
// says it was cut (incomplete); response.completed, .incomplete and .failed end it with
// the whole response; an error event fails it.
func (m *Responses) streamOnce(ctx context.Context, params responses.ResponseNewParams, set []*toolbus.Spec, base int, em *emitter) (*responses.Response, []toolbus.Item, []search, error) {
	// The request as ResponseService.NewStreaming sends it, and the events read into
	// streamEvent rather than the SDK's event union (see streamEvent).
	var httpRes *http.Response
	sdk := openai.Client{Options: m.service.Options}
	err := sdk.Post(ctx, "responses", params, &httpRes, option.WithJSONSet("stream", true))
	if err != nil {
		// No answer at all: the SDK retried it already, as it does any request.
		return nil, nil, nil, streamAdvice(classify(ctx, ProviderResponses, m.cfg.openAIEndpoint(), m.red, err))
	}
	if wholeJSON(httpRes) {
		// The endpoint ignored "stream": the answer is one response.
		defer httpRes.Body.Close()
		b, err := io.ReadAll(httpRes.Body)
		if err != nil {
			return nil, nil, nil, classify(ctx, ProviderResponses, m.cfg.openAIEndpoint(), m.red, err)
		}
		res := new(responses.Response)
		if err := res.UnmarshalJSON(b); err != nil {
			return nil, nil, nil, classify(ctx, ProviderResponses, m.cfg.openAIEndpoint(), m.red, err)
		}
		items, searches, err := m.output(res, set)
		return res, items, searches, err
	}
	s := sseEvents{dec: ssestream.NewDecoder(httpRes)}
	defer s.Close()
	var (
		done     []toolbus.Item  // the items of output_item.done, by output index
		searched map[int]*search // the tool searches among them
	)
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case "response.output_text.delta", "response.refusal.delta":
			em.text(base+int(ev.OutputIndex), ev.Delta)
		case "response.output_item.done":
			i := int(ev.OutputIndex)
			if i < 0 || i > maxStreamItems {
				return nil, nil, nil, &Error{Provider: ProviderResponses, Message: fmt.Sprintf("malformed stream: output index %d", i)}
			}
			it, srch, cut, err := m.streamedItem(i, ev.Item, set)
			if err != nil {
				return nil, nil, nil, err
			}
			for len(done) <= i {
				done = append(done, toolbus.Item{})
			}
			done[i] = it
			if srch != nil {
				if searched == nil {
					searched = make(map[int]*search)
				}
				searched[i] = srch
			}
			if cut {
				continue // cut by the output limit: only in the response, marked truncated
			}
			em.item(base+i, it)
		case "response.completed", "response.incomplete", "response.failed":
			res := new(responses.Response)
			if err := res.UnmarshalJSON(ev.Response); err != nil {
				return nil, nil, nil, &Error{Provider: ProviderResponses, Message: fmt.Sprintf("malformed stream: %s: %v", ev.Type, err)}
			}
			if !res.JSON.Output.Valid() || len(res.Output) == 0 && len(done) > 0 {
				// Some servers leave the final output empty: the items streamed are it.
				var items []toolbus.Item
				var searches []search
				for i, it := range done {
					if it.Kind == "" {
						continue // an index no item was done at
					}
					items = append(items, it)
					if srch := searched[i]; srch != nil {
						searches = append(searches, *srch)
					}
				}
				return res, items, searches, nil
			}
			items, searches, err := m.output(res, set)
			return res, items, searches, err
		case "error":
			msg := ev.Message
			if ev.Code != "" {
				msg = ev.Code + ": " + msg
			}
			return nil, nil, nil, &Error{Provider: ProviderResponses, Message: m.red.string("the response stream reported an error: " + msg)}
		}
	}
	return nil, nil, nil, streamEnded(ctx, ProviderResponses, m.cfg.openAIEndpoint(), m.red, s.Err())
}

// sseEvents reads a Responses stream's events as ssestream.Stream[streamEvent] does (a
// data of "[DONE]" ends it, one with an "error" member fails it with a
// ssestream.StreamError, events of the Assistants API's "thread." kinds are not read),
// but decodes a plain event once, by hand (streamEvent.read), and hands any other to
// Stream: Stream gives every event to gjson, looking for the error member, and to
// json.Unmarshal, which scans it whole twice (checking it, then finding its end) before
// the event's own UnmarshalJSON reads it. Three scans of every event of the stream, most
// of the time BenchmarkStreamEvent measured.
type sseEvents struct {
	dec  ssestream.Decoder
	cur  streamEvent
	err  error
	done bool
}

func (s *sseEvents) Next() bool {
	if s.err != nil || s.done || s.dec == nil {
		return false
	}
	if !s.dec.Next() {
		s.err = s.dec.Err()
		s.Close()
		return false
	}
	e := s.dec.Event()
	if bytes.HasPrefix(e.Data, []byte("[DONE]")) {
		s.Close()
		return false
	}
	var ev streamEvent
	if hasError, fast := ev.read(e.Data); !fast || hasError || strings.HasPrefix(e.Type, "thread.") {
		// Anything but a plain event is read by Stream itself, as it always was: an
		// error member, malformed data, an event of the Assistants API.
		one := ssestream.NewStream[streamEvent](&oneEvent{e: e}, nil)
		if !one.Next() {
			s.err = one.Err()
			s.Close()
			return false
		}
		ev = one.Current()
	}
	s.cur = ev
	return true
}

// oneEvent is a decoder of one event, for ssestream.Stream to read (sseEvents).
type oneEvent struct {
	e    ssestream.Event
	read bool
}

func (o *oneEvent) Next() bool {
	if o.read {
		return false
	}
	o.read = true
	return true
}

func (o *oneEvent) Event() ssestream.Event { return o.e }
func (o *oneEvent) Close() error           { return nil }
func (o *oneEvent) Err() error             { return nil }

func (s *sseEvents) Current() streamEvent { return s.cur }
func (s *sseEvents) Err() error           { return s.err }

func (s *sseEvents) Close() {
	if !s.done && s.dec != nil {
		_ = s.dec.Close()
	}
	s.done = true
}

// streamEvent is an event of a Responses stream, decoded only as far as streamOnce reads
// it. The SDK's event union (ResponseStreamEventUnion) decodes every field any event
// type has, by reflection: 40 µs an output_item.done of a call, most of the time from
// the event's arrival to the call's dispatch (BenchmarkStreamEvent).
type streamEvent struct {
	Type        string          `json:"type"`
	OutputIndex int64           `json:"output_index"`
	Delta       string          `json:"delta"`
	Item        json.RawMessage `json:"item"`
	Response    json.RawMessage `json:"response"`
	Code        string          `json:"code"`
	Message     string          `json:"message"`
}

// UnmarshalJSON reads an event by hand (internal/jsonfast), or, for anything it does not
// read exactly as encoding/json would (a null, an escape it declines, a key in other
// case, malformed JSON), through encoding/json. By hand, an output_item.done of a call
// and its item's fields take 1.7 µs and 9 allocations instead of 6.3 µs and 23
// (BenchmarkStreamEvent), on the path from the event's arrival to the call's dispatch.
func (ev *streamEvent) UnmarshalJSON(b []byte) error {
	if _, ok := ev.read(b); ok {
		return nil
	}
	*ev = streamEvent{}
	type plain streamEvent // without this method
	return json.Unmarshal(b, (*plain)(ev))
}

// read reads an event by hand: ok reports that it read b as encoding/json would (into a
// zero streamEvent), hasError that b has a top-level member named "error" (which a
// stream's reader checks for, sseEvents). It leaves ev as it was when it does not read b.
func (ev *streamEvent) read(b []byte) (hasError, ok bool) {
	var e streamEvent
	s := jsonfast.Scanner{B: b}
	if s.Object(func(k []byte) bool {
		var ok bool
		if string(k) == "error" {
			hasError = true
		}
		switch string(k) {
		case "type":
			e.Type, ok = knownStr(&s)
		case "output_index":
			e.OutputIndex, ok = s.Int()
		case "delta":
			e.Delta, ok = s.Str()
		case "item":
			e.Item, ok = rawValue(&s)
		case "response":
			e.Response, ok = rawValue(&s)
		case "code":
			e.Code, ok = s.Str()
		case "message":
			e.Message, ok = s.Str()
		default:
			// encoding/json matches keys regardless of case: such a key goes to it.
			ok = !foldsTo(k, "type", "output_index", "delta", "item", "response", "code", "message") && s.Skip()
		}
		return ok
	}) && s.End() {
		*ev = e
		return hasError, true
	}
	return hasError, false
}

// rawValue reads a value that is not null as json.RawMessage holds it: a copy of its
// bytes. (A null would be RawMessage("null"): rare enough to leave to encoding/json.)
func rawValue(s *jsonfast.Scanner) (json.RawMessage, bool) {
	s.WS()
	start := s.I
	if s.Literal("null") {
		return nil, false
	}
	if !s.Skip() {
		return nil, false
	}
	return bytes.Clone(s.B[start:s.I]), true
}

// knownStr reads a string; the event types and statuses a stream repeats come without
// an allocation each.
func knownStr(s *jsonfast.Scanner) (string, bool) {
	start := s.I
	raw, ok := s.Raw()
	if !ok {
		return "", false
	}
	switch string(raw) { // compared without a copy
	case "response.output_text.delta":
		return "response.output_text.delta", true
	case "response.output_item.added":
		return "response.output_item.added", true
	case "response.output_item.done":
		return "response.output_item.done", true
	case "response.function_call_arguments.delta":
		return "response.function_call_arguments.delta", true
	case "function_call":
		return "function_call", true
	case "completed":
		return "completed", true
	}
	s.I = start
	return s.Str()
}

// foldsTo reports whether key equals one of names regardless of case.
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

// callHead is what streamedItem reads of an item first: a function call is read from
// these few fields.
type callHead struct {
	Type      string `json:"type"`
	Status    string `json:"status"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// A string of a function call; an object of a tool search call.
	Arguments json.RawMessage `json:"arguments"`
}

// decodeCallHead reads an item's head as json.Unmarshal does, by hand when it can (see
// streamEvent.UnmarshalJSON); args is the arguments decoded as a string, when they are
// one and were read by hand (argsRead).
func decodeCallHead(raw []byte) (head callHead, args string, argsRead bool, err error) {
	var h callHead
	s := jsonfast.Scanner{B: raw}
	var a string
	var aRead bool
	if s.Object(func(k []byte) bool {
		var ok bool
		switch string(k) {
		case "type":
			h.Type, ok = knownStr(&s)
		case "status":
			h.Status, ok = knownStr(&s)
		case "call_id":
			h.CallID, ok = s.Str()
		case "name":
			h.Name, ok = s.Str()
		case "namespace":
			h.Namespace, ok = s.Str()
		case "arguments":
			s.WS()
			start := s.I
			if s.I < len(s.B) && s.B[s.I] == '"' {
				// The arguments' text, as json.Unmarshal of the raw string gives it.
				a, ok = s.Str()
				aRead = ok
			} else {
				aRead = false
				ok = !s.Literal("null") && s.Skip()
			}
			h.Arguments = s.B[start:s.I]
		default:
			ok = !foldsTo(k, "type", "status", "call_id", "name", "namespace", "arguments") && s.Skip()
		}
		return ok
	}) && s.End() {
		return h, a, aRead, nil
	}
	err = json.Unmarshal(raw, &head)
	return head, "", false, err
}

// streamedItem is the item of an output_item.done; cut reports a function call whose
// status says the output limit cut it (incomplete). A function call is read from the
// few fields it has; any other item through the SDK's item union.
func (m *Responses) streamedItem(i int, raw json.RawMessage, set []*toolbus.Spec) (it toolbus.Item, s *search, cut bool, err error) {
	head, args, argsRead, err := decodeCallHead(raw)
	if err != nil {
		return toolbus.Item{}, nil, false, &Error{Provider: ProviderResponses, Message: fmt.Sprintf("malformed stream: output item %d: %v", i, err)}
	}
	if head.Type == "function_call" {
		if len(head.Arguments) > 0 && !argsRead {
			if err := json.Unmarshal(head.Arguments, &args); err != nil {
				return toolbus.Item{}, nil, false, &Error{Provider: ProviderResponses, Message: fmt.Sprintf("malformed stream: the arguments of output item %d: %v", i, err)}
			}
		}
		it = m.callItem(raw, head.CallID, head.Name, head.Namespace, args, set)
		return it, nil, head.Status != "" && head.Status != "completed", nil
	}
	var o responses.ResponseOutputItemUnion
	if err := o.UnmarshalJSON(raw); err != nil {
		return toolbus.Item{}, nil, false, &Error{Provider: ProviderResponses, Message: fmt.Sprintf("malformed stream: output item %d: %v", i, err)}
	}
	it, s, err = m.item(i, o, set)
	return it, s, false, err
}

// answerSearch runs a client-executed tool search over the deferred tools and returns
// the tool_search_output item holding their definitions, namespaced tools inside their
// namespace.
func (m *Responses) answerSearch(set []*toolbus.Spec, s search) (toolbus.Item, error) {
	found := searchDeferred(set, searchQuery(s.args))
	names := make([]string, 0, len(found))
	for _, t := range found {
		names = append(names, t.Name)
	}
	loaded, err := groupByNamespace(set, found, m.strict,
		func(fn json.RawMessage) responses.ResponseToolSearchOutputItemParamToolUnion {
			f := param.Override[responses.FunctionToolParam](fn)
			return responses.ResponseToolSearchOutputItemParamToolUnion{OfFunction: &f}
		},
		func(name, description string) (*responses.ToolSearchOutputNamespaceToolParam, responses.ResponseToolSearchOutputItemParamToolUnion) {
			ns := &responses.ToolSearchOutputNamespaceToolParam{Name: name, Description: description}
			return ns, responses.ResponseToolSearchOutputItemParamToolUnion{OfNamespace: ns}
		},
		func(ns *responses.ToolSearchOutputNamespaceToolParam, fn json.RawMessage) {
			f := param.Override[responses.ToolSearchOutputNamespaceToolToolFunctionParam](fn)
			ns.Tools = append(ns.Tools, responses.ToolSearchOutputNamespaceToolToolUnionParam{OfFunction: &f})
		})
	if err != nil {
		return toolbus.Item{}, err
	}
	if loaded == nil {
		// An empty list, not null: the search ran and found nothing.
		loaded = []responses.ResponseToolSearchOutputItemParamToolUnion{}
	}
	o := responses.ResponseToolSearchOutputItemParam{
		Tools:     loaded,
		Execution: responses.ResponseToolSearchOutputItemParamExecutionClient,
		Status:    responses.ResponseToolSearchOutputItemParamStatusCompleted,
	}
	if s.callID != "" {
		o.CallID = openai.String(s.callID)
	}
	b, err := o.MarshalJSON()
	if err != nil {
		return toolbus.Item{}, fmt.Errorf("encode tool search output: %w", err)
	}
	m.log.Debug("tool search answered", slog.String("provider", ProviderResponses),
		slog.String("query", searchQuery(s.args)), slog.Any("loaded", names))
	return toolbus.Item{Kind: toolbus.KindOpaque, Provider: ProviderResponses, Raw: b}, nil
}

// namespaceDescription is the first description any tool gives its namespace. The API
// requires one, so a namespace without says at least what it is.
func namespaceDescription(set []*toolbus.Spec, ns string) string {
	for _, t := range set {
		if t.Namespace == ns && t.NamespaceDescription != "" {
			return t.NamespaceDescription
		}
	}
	return "Tools of " + ns + "."
}
