package telemetry

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/redact"
)

// The span tree of one turn:
//
//	invoke_agent {agent}                 the turn, on the node that runs it
//	├── chat {model}                     one per model step
//	│   ├── execute_tool {tool}          one per call the step asked for
//	│   │   └── toolbus.host {tool}      the call on the node whose host ran it
//	│   └── execute_tool {tool}
//	└── chat {model}
//
// A job's, a workflow task's or a schedule firing's turn is a trace of its own (its id's),
// whose invoke_agent span links to the invoke_agent span of the turn that started it.

// TurnInfo is what a turn's span says of it.
type TurnInfo struct {
	ID, Kind, Agent, Node  string
	Parent, Workflow, Task string
	Model                  string // the spec's model ("openai:gpt-5.4"); Provider splits it
	Resumed                bool   // it goes on from another run's checkpoint
}

// Turn is one turn's telemetry, used from the turn's actor only. A nil *Turn does nothing.
type Turn struct {
	t               *Telemetry
	span            trace.Span // nil: not tracing
	ctx             context.Context
	kind            string
	provider, model string // the model's name, and as a label (capped)
	modelLabel      string
	step            *stepSpan           // the current step
	held            map[string]struct{} // calls this turn counts in approvals_waiting
	ended           bool
}

// StartTurn begins a turn's telemetry: its invoke_agent span, and its count among the
// node's running turns. nil when there is nothing to record.
func (t *Telemetry) StartTurn(info TurnInfo) *Turn {
	if t == nil || (t.tracer == nil && t.metrics == nil) {
		return nil
	}
	tt := &Turn{t: t, kind: kindLabel(info.Kind)}
	tt.provider, tt.model = Provider(info.Model)
	if m := t.metrics; m != nil {
		tt.modelLabel = m.models.bound(tt.model)
		m.turnsStartedC.WithLabelValues(tt.kind).Inc()
		m.turnsRunningG.WithLabelValues(tt.kind).Inc()
		if info.Resumed {
			m.resumesC.WithLabelValues(tt.kind).Inc()
		}
	}
	if t.tracer == nil {
		return tt
	}
	root := rootIDs{trace: TurnTraceID(info.ID)}
	var links []trace.Link
	if info.Resumed {
		links = append(links, trace.Link{SpanContext: TurnSpanContext(info.ID, true), Attributes: []attribute.KeyValue{KeyLinkKind.String("earlier_run")}})
	} else {
		root.span = turnSpanID(info.ID)
	}
	if info.Parent != "" {
		links = append(links, trace.Link{SpanContext: TurnSpanContext(info.Parent, true), Attributes: []attribute.KeyValue{KeyLinkKind.String("parent_turn"), KeyParentTurn.String(info.Parent)}})
	}
	attrs := []attribute.KeyValue{
		keyOperation.String(OpInvokeAgent),
		keyProvider.String(tt.provider),
		keyConversation.String(info.ID),
		keyRequestModel.String(tt.model),
		KeyTurnKind.String(tt.kind),
		KeyNode.String(info.Node),
	}
	if info.Agent != "" {
		attrs = append(attrs, keyAgentName.String(info.Agent), keyAgentID.String(info.Agent))
	}
	for _, kv := range []attribute.KeyValue{KeyParentTurn.String(info.Parent), KeyWorkflow.String(info.Workflow), KeyTask.String(info.Task)} {
		if kv.Value.AsString() != "" {
			attrs = append(attrs, kv)
		}
	}
	if info.Resumed {
		attrs = append(attrs, KeyResumed.Bool(true))
	}
	if t.legacy {
		attrs = append(attrs, keyLegacyProvider.String(tt.provider))
	}
	name := OpInvokeAgent
	if info.Agent != "" {
		name += " " + info.Agent
	}
	tt.ctx, tt.span = t.tracer.Start(withRoot(context.Background(), root), name,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...), trace.WithLinks(links...), trace.WithNewRoot())
	if info.Resumed {
		tt.span.AddEvent(EventResume, trace.WithAttributes(KeyNode.String(info.Node)))
	}
	return tt
}

// kindLabel is a turn kind as a label: main, job or task (anything else is other).
func kindLabel(k string) string {
	switch k {
	case "", "main":
		return "main"
	case "job", "task":
		return k
	}
	return other
}

// Aborted records the turn's abort.
func (tt *Turn) Aborted(reason string) {
	if tt == nil || tt.span == nil {
		return
	}
	tt.span.AddEvent(EventAbort, trace.WithAttributes(attribute.String("toolbus.abort.reason", tt.t.describe(reason, "aborted"))))
}

// TurnEnd is how a turn's run on this node ended.
type TurnEnd struct {
	State      string // bus.TurnState: completed, failed, aborted…
	Err        string
	Steps      int
	Input      int64
	Output     int64
	HandedBack bool // given back to the intake: it goes on elsewhere
	Fenced     bool // another node took it over
}

// End ends the turn's span and its count among the running turns; only the first call
// counts.
func (tt *Turn) End(e TurnEnd) {
	if tt == nil || tt.ended {
		return
	}
	tt.ended = true
	state := e.State
	switch {
	case e.Fenced:
		state = "fenced"
	case e.HandedBack:
		state = "handed_back"
	}
	if m := tt.t.metrics; m != nil {
		m.turnsRunningG.WithLabelValues(tt.kind).Dec()
		m.turnsEndedC.WithLabelValues(tt.kind, stateLabel(state)).Inc()
		if e.Fenced {
			m.fences.Inc()
		}
		if len(tt.held) > 0 {
			m.approvalsWaiting.Sub(float64(len(tt.held)))
			clear(tt.held)
		}
	}
	if s := tt.step; s != nil && s.span != nil && !s.ended {
		s.span.End() // a step whose reply never came (aborted, handed back)
	}
	tt.step = nil
	if tt.span == nil {
		return
	}
	tt.span.SetAttributes(KeyTurnState.String(state), KeyStep.Int(e.Steps),
		keyInputTokens.Int64(e.Input), keyOutputTokens.Int64(e.Output))
	if e.Err != "" && state != "aborted" {
		tt.span.SetAttributes(keyErrorType.String(state))
		tt.span.SetStatus(codes.Error, tt.t.describe(e.Err, state))
	}
	tt.span.End()
}

// stateLabel bounds a turn state as a label.
func stateLabel(s string) string {
	switch s {
	case "completed", "failed", "aborted", "step_limit", "terminated", "handed_back", "fenced", "running", "queued":
		return s
	}
	return other
}

// stepSpan is a model step in flight.
type stepSpan struct {
	span  trace.Span // nil: not tracing
	ctx   context.Context
	start time.Time
	n     int
	ended bool
}

// StartStep begins model step n (from 0): its chat span, a child of the turn's.
func (tt *Turn) StartStep(n int) {
	if tt == nil {
		return
	}
	if p := tt.step; p != nil && p.span != nil && !p.ended {
		p.span.End()
	}
	s := &stepSpan{start: time.Now(), n: n}
	if tt.span != nil {
		attrs := []attribute.KeyValue{keyOperation.String(OpChat), keyProvider.String(tt.provider), keyRequestModel.String(tt.model), KeyStep.Int(n + 1)}
		if tt.t.legacy {
			attrs = append(attrs, keyLegacyProvider.String(tt.provider))
		}
		s.ctx, s.span = tt.t.tracer.Start(tt.ctx, OpChat+" "+tt.model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	}
	tt.step = s
}

// StepEnd is what a model step answered.
type StepEnd struct {
	ResponseID    string
	Input, Output int64
	// CacheRead and CacheWritten are the part of Input read from and written to the
	// provider's prompt cache.
	CacheRead, CacheWritten int64
	Calls                   int  // the function calls it asked for
	Truncated               bool // it stopped on its output limit
	Err                     error
}

// EndStep ends the current step's chat span. The span stays the parent of the calls the
// step asked for, which run after it ends.
func (tt *Turn) EndStep(e StepEnd) {
	if tt == nil || tt.step == nil || tt.step.ended {
		return
	}
	s := tt.step
	s.ended = true
	outcome := "ok"
	if e.Err != nil {
		outcome = "error"
	}
	if m := tt.t.metrics; m != nil {
		m.modelRequests.WithLabelValues(tt.provider, tt.modelLabel, outcome).Inc()
		m.modelDuration.WithLabelValues(tt.provider, tt.modelLabel).Observe(time.Since(s.start).Seconds())
		if e.Input > 0 {
			m.modelTokens.WithLabelValues(tt.provider, tt.modelLabel, "input").Add(float64(e.Input))
		}
		if e.Output > 0 {
			m.modelTokens.WithLabelValues(tt.provider, tt.modelLabel, "output").Add(float64(e.Output))
		}
		if e.CacheRead > 0 {
			m.modelTokens.WithLabelValues(tt.provider, tt.modelLabel, "cache_read").Add(float64(e.CacheRead))
		}
		if e.CacheWritten > 0 {
			m.modelTokens.WithLabelValues(tt.provider, tt.modelLabel, "cache_creation").Add(float64(e.CacheWritten))
		}
	}
	if s.span == nil {
		return
	}
	if e.Err != nil {
		s.span.SetAttributes(keyErrorType.String("model_error"))
		s.span.SetStatus(codes.Error, tt.t.describe(e.Err.Error(), "model_error"))
	} else {
		reason := "stop"
		switch {
		case e.Truncated:
			reason = "length"
		case e.Calls > 0:
			reason = "tool_calls"
		}
		s.span.SetAttributes(keyFinishReasons.StringSlice([]string{reason}), keyInputTokens.Int64(e.Input), keyOutputTokens.Int64(e.Output))
		if e.CacheRead > 0 || e.CacheWritten > 0 {
			s.span.SetAttributes(keyCachedTokens.Int64(e.CacheRead), keyCacheWritten.Int64(e.CacheWritten))
		}
		if e.ResponseID != "" {
			s.span.SetAttributes(keyResponseID.String(e.ResponseID))
		}
	}
	s.span.End()
}

// Retried records a retried model request on the current step.
func (tt *Turn) Retried(attempt int, why string) {
	if tt == nil || tt.step == nil || tt.step.span == nil || tt.step.ended {
		return
	}
	tt.step.span.AddEvent(EventRetry, trace.WithAttributes(attribute.Int("toolbus.attempt", attempt), attribute.String("toolbus.reason", tt.t.describe(why, "retried"))))
}

// CallInfo names a call.
type CallInfo struct {
	Tool, Namespace, Category, ID string
	Local                         bool // the turn answers it itself
}

// Call is a call's execute_tool span, from its dispatch to its settling. nil: not tracing.
type Call struct {
	span trace.Span
	ctx  context.Context
}

// StartCall begins a call's execute_tool span, a child of the current step's chat span;
// nil when not tracing.
func (tt *Turn) StartCall(c CallInfo) *Call {
	if tt == nil || tt.span == nil {
		return nil
	}
	return tt.startCall(c, time.Now())
}

func (tt *Turn) startCall(c CallInfo, at time.Time) *Call {
	parent := tt.ctx
	if tt.step != nil && tt.step.ctx != nil {
		parent = tt.step.ctx
	}
	attrs := []attribute.KeyValue{
		keyOperation.String(OpExecuteTool), keyToolName.String(c.Tool), keyToolCallID.String(c.ID),
		keyToolType.String(toolType(c.Local)),
	}
	if c.Category != "" {
		attrs = append(attrs, KeyCategory.String(c.Category))
	}
	if c.Namespace != "" {
		attrs = append(attrs, KeyNamespace.String(c.Namespace))
	}
	ctx, span := tt.t.tracer.Start(parent, OpExecuteTool+" "+c.Tool, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...), trace.WithTimestamp(at))
	return &Call{span: span, ctx: ctx}
}

// Traceparent is the W3C traceparent of the call's span, for its request; "" for a nil
// Call. Its sampled flag is the sampler's decision, so the host samples what the turn did.
func (c *Call) Traceparent() string {
	if c == nil {
		return ""
	}
	var carrier injectCarrier
	propagatorOf.Inject(c.ctx, &carrier)
	return carrier.traceparent
}

// Approval decisions (Turn.Approval).
const (
	ApprovalRequested = "requested"
	ApprovalGranted   = "granted"
	ApprovalRefused   = "refused"
	// ApprovalGone: the call stopped waiting without a decision (its deadline, an abort,
	// the turn's end).
	ApprovalGone = "gone"
)

// Approval records a step of a held call: requested, then granted or refused by who, or
// gone; it keeps approvals_waiting, counting each call id once.
func (tt *Turn) Approval(c *Call, id, step, who string) {
	if tt == nil {
		return
	}
	if m := tt.t.metrics; m != nil {
		_, held := tt.held[id]
		switch {
		case step == ApprovalRequested && !held:
			if tt.held == nil {
				tt.held = make(map[string]struct{})
			}
			tt.held[id] = struct{}{}
			m.approvalsWaiting.Inc()
		case step != ApprovalRequested && held:
			delete(tt.held, id)
			m.approvalsWaiting.Dec()
		}
	}
	if c == nil {
		return
	}
	switch step {
	case ApprovalRequested:
		c.span.AddEvent(EventApprovalRequested)
	case ApprovalGranted:
		c.span.AddEvent(EventApprovalGranted, trace.WithAttributes(attribute.String("toolbus.approval.by", capText(who, 128))))
	case ApprovalRefused:
		c.span.AddEvent(EventApprovalRefused, trace.WithAttributes(attribute.String("toolbus.approval.by", capText(who, 128))))
	}
}

// CallEnd is how a call ended: the turn's record of it.
type CallEnd struct {
	CallInfo
	Outcome    string
	Error      string
	Rungs      []string
	Truncated  bool
	Start, End time.Time // zero Start: it never went out (refused before it was sent)
	// Args and Result are recorded only with Config.RecordContent, redacted and capped.
	Args   []byte
	Result func() string
}

// EndCall counts a call and ends its span (c, or one made now for a call that was never
// dispatched). Every call of a batch passes here once.
func (tt *Turn) EndCall(c *Call, e CallEnd) {
	if tt == nil {
		return
	}
	if e.End.IsZero() {
		e.End = time.Now()
	}
	start := e.Start
	if start.IsZero() {
		start = e.End
	}
	if m := tt.t.metrics; m != nil {
		cat, tool, outcome := m.categories.bound(labelOr(e.Category)), m.tools.bound(labelOr(e.Tool)), labelOr(e.Outcome)
		m.calls.WithLabelValues(cat, tool, outcome).Inc()
		m.callDuration.WithLabelValues(cat, tool, outcome).Observe(e.End.Sub(start).Seconds())
	}
	if tt.span == nil {
		return
	}
	if c == nil {
		c = tt.startCall(e.CallInfo, start)
	}
	attrs := []attribute.KeyValue{KeyOutcome.String(e.Outcome)}
	if len(e.Rungs) > 0 {
		attrs = append(attrs, KeyRungs.StringSlice(e.Rungs))
	}
	if e.Truncated {
		attrs = append(attrs, KeyTruncated.Bool(true))
	}
	if tt.t.cfg.RecordContent {
		limit := tt.t.cfg.ContentLimit
		if len(e.Args) > 0 {
			attrs = append(attrs, keyToolArguments.String(Content(e.Args, limit)))
		}
		if e.Result != nil {
			attrs = append(attrs, keyToolResult.String(Content([]byte(e.Result()), limit)))
		}
	}
	c.span.SetAttributes(attrs...)
	if e.Outcome != "ok" {
		c.span.SetAttributes(keyErrorType.String(e.Outcome))
		c.span.SetStatus(codes.Error, tt.t.describe(e.Error, e.Outcome))
	}
	c.span.End(trace.WithTimestamp(e.End))
}

// labelOr is v, or "none" for an empty label (a call to no known tool has no category).
func labelOr(v string) string {
	if v == "" {
		return "none"
	}
	return v
}

// Content is b as a recorded argument or result: the process's secrets redacted, then
// cut at limit bytes (on a rune boundary) with a note of the size.
func Content(b []byte, limit int) string {
	b = redact.Secrets(b)
	if len(b) <= limit {
		return string(b)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + "…(" + itoa(len(b)) + " bytes)"
}

func itoa(n int) string {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(buf[i:])
}

// capText cuts s to at most n bytes.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// HostInfo names a call on its host.
type HostInfo struct {
	Category, Tool, ID, Turn, Node string
}

// HostCall is a call's span on the node whose host runs it, and its count. The zero
// value does nothing.
type HostCall struct {
	t        *Telemetry
	span     trace.Span
	category string
	tool     string
	start    time.Time
}

// StartHostCall begins the host's part of a call: a child of the execute_tool span whose
// context the request's traceparent carries (a request without one, `nats req`, starts
// a trace of its own).
func (t *Telemetry) StartHostCall(traceparent string, h HostInfo) HostCall {
	if t == nil || (t.tracer == nil && t.metrics == nil) {
		return HostCall{}
	}
	hc := HostCall{t: t, category: h.Category, tool: h.Tool, start: time.Now()}
	if t.tracer == nil {
		return hc
	}
	ctx := propagatorOf.Extract(context.Background(), traceparentCarrier(traceparent))
	// No gen_ai.operation.name: the call's execute_tool span is the turn's, and a backend
	// that counts tool executions must count it once.
	attrs := []attribute.KeyValue{
		keyToolName.String(h.Tool), keyToolCallID.String(h.ID), KeyCategory.String(h.Category), KeyNode.String(h.Node),
	}
	if h.Turn != "" {
		attrs = append(attrs, keyConversation.String(h.Turn))
	}
	_, hc.span = t.tracer.Start(ctx, HostSpanPrefix+" "+h.Tool, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return hc
}

// End counts the call and ends its span.
func (hc HostCall) End(outcome, errText string) {
	if hc.t == nil {
		return
	}
	if m := hc.t.metrics; m != nil {
		cat, tool := m.categories.bound(hc.category), m.tools.bound(hc.tool)
		m.hostCalls.WithLabelValues(cat, tool, labelOr(outcome)).Inc()
		m.hostDuration.WithLabelValues(cat, tool).Observe(time.Since(hc.start).Seconds())
	}
	if hc.span == nil {
		return
	}
	hc.span.SetAttributes(KeyOutcome.String(outcome))
	if outcome != "ok" {
		hc.span.SetAttributes(keyErrorType.String(outcome))
		hc.span.SetStatus(codes.Error, hc.t.describe(errText, outcome))
	}
	hc.span.End()
}

// propagatorOf is the W3C Trace Context propagator: a call's request carries its
// execute_tool span's context in the traceparent header the bus already defines.
var propagatorOf = propagation.TraceContext{}

// traceparentCarrier carries one traceparent header to Extract.
type traceparentCarrier string

// traceparentHeader is the header the propagator reads and writes, the one bus defines.
const traceparentHeader = bus.HeaderTraceparent

func (c traceparentCarrier) Get(key string) string {
	if strings.EqualFold(key, traceparentHeader) {
		return string(c)
	}
	return ""
}

func (c traceparentCarrier) Keys() []string     { return []string{traceparentHeader} }
func (c traceparentCarrier) Set(string, string) {}

// injectCarrier takes the traceparent Inject writes.
type injectCarrier struct{ traceparent string }

func (c *injectCarrier) Get(string) string { return "" }
func (c *injectCarrier) Keys() []string    { return nil }
func (c *injectCarrier) Set(key, value string) {
	if strings.EqualFold(key, traceparentHeader) {
		c.traceparent = value
	}
}

// describe is a failed span's status description: the error's text only where content is
// recorded (Config.RecordContent), since a tool's error may quote what it read;
// otherwise the outcome alone.
func (t *Telemetry) describe(text, outcome string) string {
	if !t.cfg.RecordContent {
		return outcome
	}
	return capText(redactText(text), 512)
}

// redactText is s with the process's secrets redacted.
func redactText(s string) string { return string(redact.Secrets([]byte(s))) }
