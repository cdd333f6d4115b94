package telemetry

import (
	"strings"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// SemconvVersion is the version of the OpenTelemetry semantic conventions whose GenAI
// spans and attributes toolbus follows: v1.41.0, the last release that holds the GenAI
// conventions in the main repository (they are in Development status there). It is also
// the version of the tracer's schema URL.
const SemconvVersion = "1.41.0"

// OptInEnv is the variable of the conventions' transition plan, and OptInLatest its
// value for the GenAI conventions. toolbus emits the v1.41.0 names either way; without
// the value it also sends gen_ai.system, the provider's name under v1.36.0 and before, so
// that backends built on those still group the model spans; with it, only the new names.
const (
	OptInEnv    = "OTEL_SEMCONV_STABILITY_OPT_IN"
	OptInLatest = "gen_ai_latest_experimental"
)

// optedIn reports whether OptInEnv names OptInLatest.
func optedIn(env func(string) (string, bool)) bool {
	v, _ := env(OptInEnv)
	for s := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(s) == OptInLatest {
			return true
		}
	}
	return false
}

// Span names: the conventions' "{gen_ai.operation.name} {name}"; the host's span, which
// continues a call's execute_tool span on the node that runs it, is toolbus's own.
const (
	OpInvokeAgent = "invoke_agent"
	OpChat        = "chat"
	OpExecuteTool = "execute_tool"
	// HostSpanPrefix starts the name of the span of a call on its host ("toolbus.host
	// read_file"), a child of the turn's execute_tool span.
	HostSpanPrefix = "toolbus.host"
)

// Attribute keys: the conventions' (semconv v1.41.0), then toolbus's own, under toolbus.*.
var (
	keyOperation      = semconv.GenAIOperationNameKey
	keyProvider       = semconv.GenAIProviderNameKey
	keyAgentName      = semconv.GenAIAgentNameKey
	keyAgentID        = semconv.GenAIAgentIDKey
	keyConversation   = semconv.GenAIConversationIDKey
	keyRequestModel   = semconv.GenAIRequestModelKey
	keyResponseModel  = semconv.GenAIResponseModelKey
	keyResponseID     = semconv.GenAIResponseIDKey
	keyFinishReasons  = semconv.GenAIResponseFinishReasonsKey
	keyInputTokens    = semconv.GenAIUsageInputTokensKey
	keyOutputTokens   = semconv.GenAIUsageOutputTokensKey
	keyCachedTokens   = semconv.GenAIUsageCacheReadInputTokensKey
	keyCacheWritten   = semconv.GenAIUsageCacheCreationInputTokensKey
	keyToolName       = semconv.GenAIToolNameKey
	keyToolCallID     = semconv.GenAIToolCallIDKey
	keyToolType       = semconv.GenAIToolTypeKey
	keyToolArguments  = semconv.GenAIToolCallArgumentsKey
	keyToolResult     = semconv.GenAIToolCallResultKey
	keyErrorType      = semconv.ErrorTypeKey
	keyLegacyProvider = attribute.Key("gen_ai.system") // v1.36.0 and before

	// KeyTurnKind is the turn's kind (main, job, task); KeyTurnState how it ended.
	KeyTurnKind  = attribute.Key("toolbus.turn.kind")
	KeyTurnState = attribute.Key("toolbus.turn.state")
	// KeyParentTurn and KeyWorkflow name the turn and workflow that started a turn.
	KeyParentTurn = attribute.Key("toolbus.turn.parent_id")
	KeyWorkflow   = attribute.Key("toolbus.workflow.id")
	KeyTask       = attribute.Key("toolbus.task.id")
	KeyNode       = attribute.Key("toolbus.node")
	KeyStep       = attribute.Key("toolbus.step")
	KeyResumed    = attribute.Key("toolbus.turn.resumed")
	// KeyCategory is the call's tool category, KeyOutcome its outcome (ok, error,
	// invalid, timeout…), KeyRungs the repair rungs its arguments climbed.
	KeyCategory  = attribute.Key("toolbus.tool.category")
	KeyNamespace = attribute.Key("toolbus.tool.namespace")
	KeyOutcome   = attribute.Key("toolbus.call.outcome")
	KeyRungs     = attribute.Key("toolbus.call.repair_rungs")
	KeyTruncated = attribute.Key("toolbus.call.truncated")
	// KeyLinkKind says what a link points to: the parent turn's invoke_agent span, or
	// the same turn's earlier run (resumed on another node).
	KeyLinkKind = attribute.Key("toolbus.link")
)

// Events on the spans.
const (
	EventApprovalRequested = "toolbus.approval.requested"
	EventApprovalGranted   = "toolbus.approval.granted"
	EventApprovalRefused   = "toolbus.approval.refused"
	EventAbort             = "toolbus.turn.aborted"
	EventResume            = "toolbus.turn.resumed"
	EventRetry             = "gen_ai.request.retry"
)

// ToolType is gen_ai.tool.type: "function" for a tool a host runs, "extension" for one
// the turn answers itself (submit_result, tool search).
func toolType(local bool) string {
	if local {
		return "extension"
	}
	return "function"
}

// Provider splits a model spec ("openai:gpt-5.4", "chat:llama3.1", "anthropic:…",
// "script:FILE") into gen_ai.provider.name and the model's name. Chat Completions
// endpoints speak OpenAI's wire; a scripted model is toolbus's own.
func Provider(spec string) (provider, model string) {
	kind, name, ok := strings.Cut(spec, ":")
	if !ok {
		if spec == "" {
			return "unknown", "unknown"
		}
		return "unknown", spec
	}
	switch kind {
	case "openai", "chat":
		return "openai", name
	case "anthropic":
		return "anthropic", name
	case "script":
		return "toolbus.script", "script"
	}
	return "unknown", name
}
