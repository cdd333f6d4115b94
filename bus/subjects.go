package bus

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nuid"
)

// Every subject, queue group, service and header name used on the bus is
// defined in this file and nowhere else, so that the wire contract has a
// single source. Arguments that become subject tokens (categories, tools,
// turn and call ids, node names) must satisfy [ValidToken]; the builders do
// not check, because they sit on the hot path and ids are validated where
// they enter the system.

// Prefix is the first token of every toolbus subject.
const Prefix = "toolbus"

const (
	toolPrefix       = Prefix + ".tool."
	turnPrefix       = Prefix + ".turn."
	nodePrefix       = Prefix + ".node."
	transcriptPrefix = Prefix + ".transcript."
	intakePrefix     = Prefix + ".intake."
)

// Subject wildcards for subscriptions and permissions.
const (
	AllTools       = Prefix + ".tool.>"       // every tool request
	AllTurns       = Prefix + ".turn.>"       // every turn-scoped message
	AllAborts      = Prefix + ".turn.*.abort" // every abort
	AllResults     = Prefix + ".turn.*.res.>" // every tool result
	AllEvents      = Prefix + ".turn.*.evt.>" // every activity event
	AllStatuses    = Prefix + ".turn.*.status.>"
	AllTexts       = Prefix + ".turn.*.text"       // every turn's streamed text
	AllApprovals   = Prefix + ".turn.*.approval.>" // held calls asking for approval
	AllApproves    = Prefix + ".turn.*.approve.>"  // operators' answers
	AllTranscripts = Prefix + ".transcript.>"
	AllNodeStarts  = Prefix + ".node.*.turn.start"
	AllIntake      = Prefix + ".intake.>"
	AllDescribes   = Prefix + ".describe.>" // activity labels asked of hosts
	// AllRepliesLost matches every host's word that a reply may be lost ([EventReplyLost]).
	AllRepliesLost = Prefix + ".turn.*.evt.*." + string(EventReplyLost)
)

// DescribeSubject is where a category host answers what a call of one of its tools
// would do, as its activity label, without running it: "toolbus.describe.<category>.<tool>".
// The request's body is the arguments; the reply is a [Description]. A turn asks it for a
// call held for approval, so the person deciding sees the label the host would show.
func DescribeSubject(category, tool string) string {
	return Prefix + ".describe." + category + "." + tool
}

// DescribeSubjects matches the describe subjects of a category.
func DescribeSubjects(category string) string { return Prefix + ".describe." + category + ".*" }

// IntakeAny is the intake subject of a turn any node may run:
// "toolbus.intake.any.<turn>".
func IntakeAny(turn string) string { return intakePrefix + "any." + turn }

// IntakeNode is the intake subject of a turn asked of one node:
// "toolbus.intake.node.<node>.<turn>".
func IntakeNode(node, turn string) string { return intakePrefix + "node." + node + "." + turn }

// IntakeSchedule is the subject of a schedule's message in the intake stream:
// "toolbus.intake.schedule.<schedule>". The message carries JetStream's schedule headers
// (HeaderSchedule ...) and, as its body, the TurnSpec each firing starts; no consumer
// takes it.
func IntakeSchedule(schedule string) string { return intakePrefix + "schedule." + schedule }

// IntakeFired is where the server publishes a schedule's firings, its
// HeaderScheduleTarget: "toolbus.intake.fired.<schedule>". The runners take them as
// turns.
func IntakeFired(schedule string) string { return intakePrefix + "fired." + schedule }

// ParseIntakeFired returns the schedule of a subject made by [IntakeFired].
func ParseIntakeFired(subject string) (string, bool) {
	id, ok := strings.CutPrefix(subject, intakePrefix+"fired.")
	if !ok || !lastToken(id) {
		return "", false
	}
	return id, true
}

// CatalogChanged is where a category host says that it started or is stopping, so
// catalogs refresh at once instead of at their next periodic refresh. The body is a
// [CatalogChange].
const CatalogChanged = Prefix + ".catalog.changed"

// AnyNodeStartTurn is the subject on which any turn-hosting node may take a
// new turn; subscribers join [StartTurnQueue] so exactly one node answers.
const AnyNodeStartTurn = Prefix + ".nodes.turn.start"

// StartTurnQueue is the queue group of the [AnyNodeStartTurn] subscribers.
const StartTurnQueue = Prefix + ".turns"

// Turn subject kinds: the token after the turn id.
const (
	KindResult = "res"
	KindEvent  = "evt"
	KindAbort  = "abort"
	KindStatus = "status"
	// KindApproval carries a held call's approval request, from the turn:
	// "toolbus.turn.<turn>.approval.<call>".
	KindApproval = "approval"
	// KindApprove is where an operator answers it, as a request the turn replies to:
	// "toolbus.turn.<turn>.approve.<call>".
	KindApprove = "approve"
	// KindText carries the text of a streaming model step as it is written, from the
	// turn: "toolbus.turn.<turn>.text" (a [TextDelta]).
	KindText = "text"
)

// TextSubject is where a turn publishes the model's text as it streams, piece by piece,
// when anyone listens: "toolbus.turn.<turn>.text".
func TextSubject(turn string) string { return turnPrefix + turn + "." + KindText }

// ApprovalSubject is where a turn asks for a held call's approval.
func ApprovalSubject(turn, call string) string {
	return turnPrefix + turn + "." + KindApproval + "." + call
}

// ApproveSubject is where an operator approves or refuses a held call.
func ApproveSubject(turn, call string) string {
	return turnPrefix + turn + "." + KindApprove + "." + call
}

// Turn status kinds, the last token of [TurnStatusSubject].
const (
	StatusStarted = "started"
	StatusStep    = "step"
	StatusDone    = "done"
	// StatusBeat is the heartbeat of a running turn's owner, so clients notice a lost one.
	StatusBeat = "beat"
)

// ToolSubject is the request subject of one tool: "toolbus.tool.<category>.<tool>".
func ToolSubject(category, tool string) string {
	return toolPrefix + category + "." + tool
}

// ResendSubject is where a caller asks the hosts of a category for the reply to a call
// again: "toolbus.tool.<category>.<tool>.resend". A host answers a reply once on the
// connection it received the request on (the server's response permission is per
// connection), so a reply sent around a reconnect is refused; the host keeps its recent
// replies and says so ([EventReplyLost]), and the caller asks here, with the call's
// [ResultSubject] as reply subject and [HeaderTurn] and [HeaderCall] set. Every host of
// the category receives it (no queue group); only one that kept the reply answers, and
// only to that reply subject. The tool never runs again.
func ResendSubject(category, tool string) string {
	return ToolSubject(category, tool) + ".resend"
}

// ResendSubjects matches the resend requests of a category's tools:
// "toolbus.tool.<category>.*.resend".
func ResendSubjects(category string) string {
	return toolPrefix + category + ".*.resend"
}

// CategorySubjects matches every tool of a category: "toolbus.tool.<category>.>".
func CategorySubjects(category string) string {
	return toolPrefix + category + ".>"
}

// TurnSubjects matches every message of one turn: "toolbus.turn.<turn>.>".
func TurnSubjects(turn string) string {
	return turnPrefix + turn + ".>"
}

// ResultSubject is where a tool call's result is sent, the reply subject of
// the tool request: "toolbus.turn.<turn>.res.<call>".
func ResultSubject(turn, call string) string {
	return turnPrefix + turn + "." + KindResult + "." + call
}

// EventSubject carries a call's activity events:
// "toolbus.turn.<turn>.evt.<call>.<kind>".
func EventSubject(turn, call string, kind EventKind) string {
	return turnPrefix + turn + "." + KindEvent + "." + call + "." + string(kind)
}

// AbortSubject is where anyone may ask a turn to stop: "toolbus.turn.<turn>.abort".
func AbortSubject(turn string) string {
	return turnPrefix + turn + "." + KindAbort
}

// TurnStatusSubject carries turn-level progress ([StatusStarted],
// [StatusStep], [StatusDone]): "toolbus.turn.<turn>.status.<kind>".
func TurnStatusSubject(turn, kind string) string {
	return turnPrefix + turn + "." + KindStatus + "." + kind
}

// NodeStartTurnSubject asks one specific node to run a turn:
// "toolbus.node.<node>.turn.start".
func NodeStartTurnSubject(node string) string {
	return nodePrefix + node + ".turn.start"
}

// TranscriptSubject is the subject a turn appends its transcript to, stored
// in [StreamTranscripts]: "toolbus.transcript.<turn>".
func TranscriptSubject(turn string) string {
	return transcriptPrefix + turn
}

// QueuePrefix starts every queue group name of a tool category.
const QueuePrefix = Prefix + "."

// CategoryQueue is the queue group the hosts of a category join, so each
// tool request reaches exactly one of them: "toolbus.<category>".
func CategoryQueue(category string) string {
	return QueuePrefix + category
}

// CategoryService is the nats micro service name of a category:
// "toolbus-<category>" (micro names allow no dots).
func CategoryService(category string) string {
	return Prefix + "-" + category
}

// TurnSubject is a parsed turn-scoped subject. Its strings share memory with
// the parsed subject.
type TurnSubject struct {
	Turn   string
	Kind   string    // KindResult, KindEvent, KindAbort or KindStatus
	Call   string    // set for KindResult and KindEvent
	Event  EventKind // set for KindEvent
	Status string    // set for KindStatus
}

// ParseTurnSubject splits a subject under [AllTurns]. It reports false for
// any other subject, an unknown kind, a wrong number of tokens or an empty
// token. It does not allocate.
func ParseTurnSubject(subject string) (TurnSubject, bool) {
	rest, ok := strings.CutPrefix(subject, turnPrefix)
	if !ok {
		return TurnSubject{}, false
	}
	var ts TurnSubject
	ts.Turn, rest, ok = strings.Cut(rest, ".")
	if !ok || ts.Turn == "" {
		return TurnSubject{}, false
	}
	kind, rest, more := strings.Cut(rest, ".")
	switch kind {
	case KindAbort, KindText:
		if more {
			return TurnSubject{}, false
		}
		ts.Kind = kind
	case KindResult:
		if !more || !lastToken(rest) {
			return TurnSubject{}, false
		}
		ts.Kind, ts.Call = KindResult, rest
	case KindStatus:
		if !more || !lastToken(rest) {
			return TurnSubject{}, false
		}
		ts.Kind, ts.Status = KindStatus, rest
	case KindApproval, KindApprove:
		if !more || !lastToken(rest) {
			return TurnSubject{}, false
		}
		ts.Kind, ts.Call = kind, rest
	case KindEvent:
		if !more {
			return TurnSubject{}, false
		}
		call, evt, ok := strings.Cut(rest, ".")
		if !ok || call == "" || !lastToken(evt) {
			return TurnSubject{}, false
		}
		ts.Kind, ts.Call, ts.Event = KindEvent, call, EventKind(evt)
	default:
		return TurnSubject{}, false
	}
	return ts, true
}

// lastToken reports whether s is one non-empty token.
func lastToken(s string) bool {
	return s != "" && strings.IndexByte(s, '.') < 0
}

// ValidToken reports whether s can be used as one subject token: not empty,
// valid UTF-8, and free of '.', the wildcards '*' and '>', whitespace and
// control characters.
func ValidToken(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == '.' || r == '*' || r == '>':
			return false
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return false
		}
	}
	return true
}

// NewID returns a new unique id that is a valid subject token (a 22-character
// nuid), for turns and calls.
func NewID() string {
	return nuid.Next()
}

// Header names. nats.go matches header names case-sensitively, so always use
// these constants.
const (
	HeaderTurn        = "Toolbus-Turn"
	HeaderCall        = "Toolbus-Call"
	HeaderAgent       = "Toolbus-Agent"
	HeaderTask        = "Toolbus-Task"
	HeaderDeadline    = "Toolbus-Deadline" // absolute, see FormatDeadline
	HeaderTraceparent = "traceparent"      // W3C trace context; the server reads it for sampled message tracing
	HeaderTruncated   = "Toolbus-Truncated"
	HeaderSeq         = "Toolbus-Seq" // a transcript message's position in its turn, from 1
	// HeaderEpoch is the claim (TurnRecord.Epoch) whose holder wrote a transcript message.
	HeaderEpoch = "Toolbus-Epoch"
	// HeaderStep is the turn's step (model responses so far) when it wrote a transcript
	// message: a running turn's progress, read from its last message.
	HeaderStep = "Toolbus-Step"
)

// JetStream's message-schedule headers (ADR-51, nats-server 2.14+), as toolbus uses
// them on IntakeSchedule messages and reads them on their firings.
const (
	// HeaderSchedule is when a schedule fires: "@at <RFC 3339>", "@every <Go
	// duration>" or a 6-field cron expression (seconds first).
	HeaderSchedule = "Nats-Schedule"
	// HeaderScheduleTarget is the subject a firing is published to, in the same stream.
	HeaderScheduleTarget = "Nats-Schedule-Target"
	// HeaderScheduleTimeZone is the IANA zone of a cron schedule (cron only).
	HeaderScheduleTimeZone = "Nats-Schedule-Time-Zone"
	// HeaderScheduler is set by the server on a firing: the schedule's subject.
	HeaderScheduler = "Nats-Scheduler"
	// HeaderScheduleNext is set by the server on a firing: the next firing (RFC 3339),
	// or "purge" for a one-shot schedule, whose message the server then removes.
	HeaderScheduleNext = "Nats-Schedule-Next"
)

// FormatDeadline renders an absolute deadline for [HeaderDeadline]:
// RFC 3339 with nanoseconds, in UTC.
func FormatDeadline(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// ParseDeadline reads a [HeaderDeadline] value: an RFC 3339 date-time with
// or without fractional seconds (1 to 9 digits), "Z" or a numeric offset,
// the separators "T" and "Z" in either case. It returns the instant in UTC.
func ParseDeadline(s string) (time.Time, error) {
	return parseRFC3339(s)
}
