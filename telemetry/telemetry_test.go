package telemetry

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestNilHandlesCostNothing: with no exporter and no metrics, what a turn and a host call
// into allocate nothing (not parallel: AllocsPerRun).
// open opens a Telemetry closed when the test ends: its batch span processor runs a
// goroutine until then.
func open(t *testing.T, c Config) (*Telemetry, error) {
	tel, err := Open(t.Context(), c)
	if err == nil {
		t.Cleanup(func() { _ = tel.Close(context.Background()) })
	}
	return tel, err
}

func TestNilHandlesCostNothing(t *testing.T) {
	tel, err := open(t, Config{Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Tracing() || tel.StartTurn(TurnInfo{ID: "t1"}) != nil {
		t.Fatal("telemetry with nothing configured records")
	}
	var tt *Turn
	allocs := testing.AllocsPerRun(100, func() {
		tt.StartStep(0)
		c := tt.StartCall(CallInfo{Tool: "echo", ID: "c1"})
		_ = c.Traceparent()
		tt.Approval(c, "c1", ApprovalRequested, "")
		tt.EndStep(StepEnd{})
		tt.EndCall(c, CallEnd{Outcome: "ok"})
		hc := tel.StartHostCall("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", HostInfo{Tool: "echo"})
		hc.End("ok", "")
		tt.Aborted("x")
		tt.End(TurnEnd{})
	})
	if allocs != 0 {
		t.Errorf("%.0f allocations per call with nothing configured", allocs)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want string // error text; "" for none
	}{
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "toolbus exports traces with otlp"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "want http/protobuf or grpc"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, "want a URL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "want a ratio"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER=sometimes"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, ""},
	} {
		tel, err := Open(t.Context(), Config{Env: func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.env, err)
		case c.want == "" && !tel.Tracing():
			t.Errorf("%v: not tracing", c.env)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want %q", c.env, err, c.want)
		}
		if err == nil {
			_ = tel.Close(t.Context())
		}
	}
}

func TestContentIsRedactedAndCapped(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 40)
	got := Content([]byte(long), 11)
	if !strings.HasPrefix(got, strings.Repeat("é", 5)+"…(80 bytes)") {
		t.Errorf("Content = %q", got)
	}
}

// TestTurnIDsAndLinks: a turn's first run is the span its id names; a resumed run is
// another span of the same trace, linked to the first; a child turn links to its parent's.
func TestTurnIDsAndLinks(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tel, err := open(t, Config{Exporter: exp, Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range []TurnInfo{
		{ID: "t1", Agent: "ann"},
		{ID: "t1", Agent: "ann", Resumed: true, Node: "n2"},
		{ID: "j1", Kind: "job", Parent: "t1"},
	} {
		tel.StartTurn(info).End(TurnEnd{State: "completed"})
	}
	if err := tel.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	first, resumed, job := spans[0], spans[1], spans[2]
	want := TurnSpanContext("t1", true)
	switch {
	case first.SpanContext.TraceID() != want.TraceID() || first.SpanContext.SpanID() != want.SpanID():
		t.Errorf("first run %s/%s, want %s/%s", first.SpanContext.TraceID(), first.SpanContext.SpanID(), want.TraceID(), want.SpanID())
	case resumed.SpanContext.TraceID() != want.TraceID() || resumed.SpanContext.SpanID() == want.SpanID():
		t.Errorf("resumed run %s/%s: want the same trace, another span", resumed.SpanContext.TraceID(), resumed.SpanContext.SpanID())
	case len(resumed.Links) != 1 || resumed.Links[0].SpanContext.SpanID() != want.SpanID() || len(resumed.Events) != 1 || resumed.Events[0].Name != EventResume:
		t.Errorf("resumed run: links %+v, events %+v", resumed.Links, resumed.Events)
	case job.SpanContext.TraceID() != TurnTraceID("j1") || len(job.Links) != 1 || job.Links[0].SpanContext.SpanID() != want.SpanID():
		t.Errorf("job: trace %s, links %+v", job.SpanContext.TraceID(), job.Links)
	}
}

// TestApprovalsWaiting: the gauge counts each held call once, until its decision or its
// turn's end.
func TestApprovalsWaiting(t *testing.T) {
	t.Parallel()
	tel, err := open(t, Config{Metrics: true, Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	gauge := func() float64 {
		fams, err := tel.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() == MetricApprovalsWaiting {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no gauge")
		return 0
	}
	tt := tel.StartTurn(TurnInfo{ID: "t1"})
	tt.Approval(nil, "c1", ApprovalRequested, "")
	tt.Approval(nil, "c1", ApprovalRequested, "")
	tt.Approval(nil, "c2", ApprovalRequested, "")
	if g := gauge(); g != 2 {
		t.Fatalf("two held calls: %v", g)
	}
	tt.Approval(nil, "c1", ApprovalGranted, "ops")
	tt.Approval(nil, "c1", ApprovalGone, "")
	if g := gauge(); g != 1 {
		t.Fatalf("one decided: %v", g)
	}
	tt.End(TurnEnd{State: "aborted"})
	tt.End(TurnEnd{State: "aborted"})
	if g := gauge(); g != 0 {
		t.Fatalf("turn ended: %v", g)
	}
}

// TestStepCacheTokens: a step whose provider reports its prompt cache carries the cache's
// tokens on its chat span and in the token counter; a step without them carries neither.
func TestStepCacheTokens(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tel, err := open(t, Config{Exporter: exp, Metrics: true, Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	tt := tel.StartTurn(TurnInfo{ID: "t1", Model: "anthropic:claude"})
	tt.StartStep(0)
	tt.EndStep(StepEnd{Input: 3120, Output: 30, CacheRead: 1500, CacheWritten: 1500})
	tt.StartStep(1)
	tt.EndStep(StepEnd{Input: 10, Output: 1})
	tt.End(TurnEnd{State: "completed"})
	if err := tel.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	var steps []map[attribute.Key]attribute.Value
	for _, s := range exp.GetSpans() {
		if s.SpanKind != trace.SpanKindClient {
			continue
		}
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes {
			attrs[kv.Key] = kv.Value
		}
		steps = append(steps, attrs)
	}
	if len(steps) != 2 {
		t.Fatalf("%d chat spans, want 2", len(steps))
	}
	if steps[0][keyCachedTokens].AsInt64() != 1500 || steps[0][keyCacheWritten].AsInt64() != 1500 {
		t.Errorf("first step's cache tokens: %v, %v", steps[0][keyCachedTokens], steps[0][keyCacheWritten])
	}
	if _, ok := steps[1][keyCachedTokens]; ok {
		t.Errorf("a step without a cache carries %s", keyCachedTokens)
	}
	fams, err := tel.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != MetricModelTokens {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" {
					got[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if got["input"] != 3130 || got["cache_read"] != 1500 || got["cache_creation"] != 1500 {
		t.Errorf("token counter by type: %v", got)
	}
}

// TestResourceAndScope: spans carry the service's version and the SDK's name, language
// and version on their resource, and toolbus's version (not the conventions') as their
// scope's.
func TestResourceAndScope(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tel, err := open(t, Config{Exporter: exp, Node: "n1", Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	tel.StartTurn(TurnInfo{ID: "t1"}).End(TurnEnd{State: "completed"})
	if err := tel.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	got := map[string]string{}
	for _, kv := range spans[0].Resource.Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	for _, k := range []string{"service.name", "service.version", "service.instance.id", "telemetry.sdk.name", "telemetry.sdk.language", "telemetry.sdk.version"} {
		if got[k] == "" {
			t.Errorf("the resource has no %s: %v", k, got)
		}
	}
	if v := spans[0].InstrumentationScope.Version; v != Version() || v == SemconvVersion {
		t.Errorf("scope version %q, want toolbus's %q", v, Version())
	}
}
