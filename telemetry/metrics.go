package telemetry

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metric names, in Prometheus's terms: a unit in each name, _total on counters, labels of
// bounded cardinality (no turn or call ids; tool and model names capped, boundedLabel).
// Where a GenAI convention exists, its name translated the way the OpenTelemetry
// Prometheus exporter would (gen_ai.execute_tool.duration in s:
// gen_ai_execute_tool_duration_seconds).
const (
	MetricTurnsStarted     = "toolbus_turns_started_total"
	MetricTurnsEnded       = "toolbus_turns_ended_total"
	MetricTurnsRunning     = "toolbus_turns_running"
	MetricTurnResumes      = "toolbus_turn_resumes_total"
	MetricTurnFences       = "toolbus_turn_fences_total"
	MetricIntakeBacklog    = "toolbus_intake_backlog_messages"
	MetricCalls            = "toolbus_tool_calls_total"
	MetricCallDuration     = "gen_ai_execute_tool_duration_seconds"
	MetricHostCalls        = "toolbus_host_executions_total"
	MetricHostDuration     = "toolbus_host_execution_duration_seconds"
	MetricModelRequests    = "toolbus_model_requests_total"
	MetricModelDuration    = "gen_ai_client_operation_duration_seconds"
	MetricModelTokens      = "toolbus_model_tokens_total"
	MetricApprovalsWaiting = "toolbus_approvals_waiting"
	MetricScheduleFirings  = "toolbus_schedule_firings_total"
)

// Caps on the values a label takes: past them, further values count as "other".
const (
	maxToolValues     = 256
	maxCategoryValues = 64
	maxModelValues    = 32
)

// Metrics are a node's Prometheus metrics, in a registry of their own (not the global
// one: an embedding program keeps its own).
type Metrics struct {
	reg *prometheus.Registry

	fences, scheduleFirings prometheus.Counter
	approvalsWaiting        prometheus.Gauge

	calls, hostCalls           *prometheus.CounterVec
	callDuration, hostDuration *prometheus.HistogramVec
	modelRequests, modelTokens *prometheus.CounterVec
	modelDuration              *prometheus.HistogramVec
	turnsStartedC, turnsEndedC *prometheus.CounterVec
	turnsRunningG              *prometheus.GaugeVec
	resumesC                   *prometheus.CounterVec
	tools, categories, models  boundedLabel
	backlogOnce                sync.Once
}

// callBuckets are the latency buckets of calls, in seconds: from a local answer (tens of
// µs) to a long command (minutes).
var callBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// modelBuckets are the conventions' advice for gen_ai.client.operation.duration.
var modelBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}

func newMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), tools: boundedLabel{max: maxToolValues},
		categories: boundedLabel{max: maxCategoryValues}, models: boundedLabel{max: maxModelValues}}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		m.reg.MustRegister(h)
		return h
	}
	m.turnsStartedC = counter(MetricTurnsStarted, "Turns this node started (or resumed), by kind.", "kind")
	m.turnsEndedC = counter(MetricTurnsEnded, "Turns this node ran that ended here, by kind and state (handed_back and fenced: they go on elsewhere).", "kind", "state")
	m.turnsRunningG = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricTurnsRunning, Help: "Turns running on this node, by kind."}, []string{"kind"})
	m.reg.MustRegister(m.turnsRunningG)
	m.resumesC = counter(MetricTurnResumes, "Turns this node resumed from another node's checkpoint, by kind.", "kind")
	m.fences = prometheus.NewCounter(prometheus.CounterOpts{Name: MetricTurnFences, Help: "Turns this node stopped because another node had taken them over (fenced writes)."})
	m.scheduleFirings = prometheus.NewCounter(prometheus.CounterOpts{Name: MetricScheduleFirings, Help: "Schedule firings this node's intake took (each starts a turn or is skipped)."})
	m.approvalsWaiting = prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricApprovalsWaiting, Help: "Calls of this node's turns waiting for a person's approval."})
	m.reg.MustRegister(m.fences, m.scheduleFirings, m.approvalsWaiting)
	m.calls = counter(MetricCalls, "Tool calls of this node's turns, by category, tool and outcome (ok, error, invalid, timeout, unavailable, refused, not_started, abandoned, panic).", "category", "tool", "outcome")
	m.callDuration = histogram(MetricCallDuration, "Duration of the tool calls of this node's turns as the turn saw them (gen_ai.execute_tool.duration), in seconds.", callBuckets, "category", "tool", "outcome")
	m.hostCalls = counter(MetricHostCalls, "Calls this node's category hosts executed or refused, by category, tool and outcome.", "category", "tool", "outcome")
	m.hostDuration = histogram(MetricHostDuration, "Time this node's hosts spent on a call, from its arrival to its reply, in seconds.", callBuckets, "category", "tool")
	m.modelRequests = counter(MetricModelRequests, "Model steps of this node's turns, by provider, model and outcome (ok, error).", "provider", "model", "outcome")
	m.modelDuration = histogram(MetricModelDuration, "Duration of a model step (gen_ai.client.operation.duration, operation chat), in seconds.", modelBuckets, "provider", "model")
	m.modelTokens = counter(MetricModelTokens, "Tokens of the model steps of this node's turns, by provider, model and type (input, output; cache_read and cache_creation: the part of input read from and written to the prompt cache).", "provider", "model", "type")
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry of the node's metrics, nil without metrics.
func (t *Telemetry) Registry() *prometheus.Registry {
	if t == nil || t.metrics == nil {
		return nil
	}
	return t.metrics.reg
}

// Handler serves the metrics in Prometheus's exposition formats (text, or OpenMetrics
// when the scraper asks); 404 without metrics.
func (t *Telemetry) Handler() http.Handler {
	if t == nil || t.metrics == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(t.metrics.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// SetBacklog has the scrape read the intake's backlog (messages waiting for a node) from
// f; the first call wins.
func (t *Telemetry) SetBacklog(f func() float64) {
	if t == nil || t.metrics == nil {
		return
	}
	m := t.metrics
	m.backlogOnce.Do(func() {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricIntakeBacklog,
			Help: "Messages in the turn intake stream, the whole bus's: queued turns, running turns not yet settled, and schedules."}, f))
	})
}

// ScheduleFired counts a schedule's firing taken from the intake.
func (t *Telemetry) ScheduleFired() {
	if t != nil && t.metrics != nil {
		t.metrics.scheduleFirings.Inc()
	}
}

// boundedLabel caps the distinct values of a label: the first max values seen are kept,
// later ones are "other". Tool names come from hosts' catalogs and model names from
// callers' turn specs: neither is trusted to stay few.
type boundedLabel struct {
	mu   sync.RWMutex
	seen map[string]struct{}
	max  int
}

// other is the value of a label past its cap.
const other = "other"

func (b *boundedLabel) bound(v string) string {
	b.mu.RLock()
	_, ok := b.seen[v]
	n := len(b.seen)
	b.mu.RUnlock()
	if ok {
		return v
	}
	if n >= b.max {
		return other
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = make(map[string]struct{})
	}
	if _, ok := b.seen[v]; !ok && len(b.seen) >= b.max {
		return other
	}
	b.seen[v] = struct{}{}
	return v
}
