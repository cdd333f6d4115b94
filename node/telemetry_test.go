package node

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus/server"
	"github.com/toolbus/toolbus/telemetry"
	"github.com/toolbus/toolbus/telemetry/otlptest"
)

// scrape reads the metrics endpoint at url with Prometheus's text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("scrape: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal("parse the scrape:", err)
	}
	return fams
}

// sample is the value of the metric family name's sample with these labels (a
// histogram's count), and whether there is one.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetricsEndpoint: a node's metrics endpoint, scraped and parsed with Prometheus's
// text parser; its counters move as turns and calls run, and its labels hold no turn or
// call ids.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr   string
		public bool
		ok     bool
	}{
		{"127.0.0.1:9464", false, true}, {"[::1]:9464", false, true}, {"localhost:9464", false, true},
		{"0.0.0.0:9464", false, false}, {":9464", false, false}, {"10.1.2.3:9464", false, false},
		{"0.0.0.0:9464", true, true}, {"127.0.0.1", false, false},
	} {
		if err := CheckMetricsAddr(c.addr, c.public); (err == nil) != c.ok {
			t.Errorf("CheckMetricsAddr(%q, %v) = %v", c.addr, c.public, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tel, err := telemetry.Open(ctx, telemetry.Config{Node: "m1", Metrics: true, Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	echo := echoTool(t, "echo", "metered")
	n, err := Start(ctx, Config{Bus: server.Config{Logger: slog.New(slog.DiscardHandler)}, Node: NodeConfig{Name: "m1", Telemetry: tel}, Tools: []*toolbus.Tool{echo}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ms, err := ServeMetrics("127.0.0.1:0", tel, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	url := "http://" + ms.Addr() + DefaultMetricsPath

	before := scrape(t, url)
	if v, ok := sample(before, telemetry.MetricTurnsStarted, map[string]string{"kind": "main"}); ok && v != 0 {
		t.Fatalf("turns started before any: %v", v)
	}
	if before["go_goroutines"] == nil || before["process_cpu_seconds_total"] == nil {
		t.Error("the Go and process collectors are missing")
	}

	script := `{"responses": [{"calls": [{"name": "echo", "arguments": "{}"}, {"name": "nosuch", "arguments": "{}"}]}, {"text": "done"}]}`
	const turns = 3
	for range turns {
		res, err := n.Run(ctx, Turn{Input: "go", Script: script})
		if err != nil || res.Text != "done" {
			t.Fatalf("turn: %+v %v", res, err)
		}
	}
	after := scrape(t, url)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{telemetry.MetricTurnsStarted, map[string]string{"kind": "main"}, turns},
		{telemetry.MetricTurnsEnded, map[string]string{"kind": "main", "state": "completed"}, turns},
		{telemetry.MetricTurnsRunning, map[string]string{"kind": "main"}, 0},
		{telemetry.MetricCalls, map[string]string{"category": "metered", "tool": "echo", "outcome": "ok"}, turns},
		{telemetry.MetricCalls, map[string]string{"category": "none", "tool": "unknown", "outcome": "invalid"}, turns},
		{telemetry.MetricCallDuration, map[string]string{"category": "metered", "tool": "echo", "outcome": "ok"}, turns},
		{telemetry.MetricHostCalls, map[string]string{"category": "metered", "tool": "echo", "outcome": "ok"}, turns},
		{telemetry.MetricHostDuration, map[string]string{"category": "metered", "tool": "echo"}, turns},
		{telemetry.MetricModelRequests, map[string]string{"provider": "toolbus.script", "model": "script", "outcome": "ok"}, 2 * turns},
		{telemetry.MetricModelDuration, map[string]string{"provider": "toolbus.script", "model": "script"}, 2 * turns},
		{telemetry.MetricApprovalsWaiting, nil, 0},
	} {
		got, ok := sample(after, c.name, c.labels)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// Bounded labels: no label of any toolbus or gen_ai metric is an id.
	for name, f := range after {
		if !strings.HasPrefix(name, "toolbus_") && !strings.HasPrefix(name, "gen_ai_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "kind", "state", "category", "tool", "outcome", "provider", "model", "type", "le":
				default:
					t.Errorf("%s has label %s=%s", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	if t.Failed() {
		for _, name := range []string{telemetry.MetricCalls, telemetry.MetricTurnsEnded} {
			t.Log(fmt.Sprint(after[name]))
		}
	}
}

// TestStartTracesFromEnv: a node started without a Telemetry traces when the process's
// environment names an OTLP endpoint (as `toolbus run` does), and exports its last spans
// when it closes. Not parallel: it sets the environment.
func TestStartTracesFromEnv(t *testing.T) {
	r := otlptest.New()
	defer r.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL())
	t.Setenv("OTEL_SERVICE_NAME", "toolbus-env")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := Start(ctx, Config{Bus: server.Config{Logger: slog.New(slog.DiscardHandler)}, Tools: []*toolbus.Tool{echoTool(t, "echo", "env")}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := n.Run(ctx, Turn{Input: "go", Script: `{"responses": [{"calls": [{"name": "echo", "arguments": "{}"}]}, {"text": "done"}]}`})
	n.Close()
	if err != nil {
		t.Fatal(err)
	}
	trace := telemetry.TurnTraceID(res.Turn).String()
	names := map[string]int{}
	for _, s := range r.Spans() {
		if s.TraceID == trace && s.Service == "toolbus-env" {
			names[strings.Fields(s.Name)[0]]++
		}
	}
	if names["invoke_agent"] != 1 || names["chat"] != 2 || names["execute_tool"] != 1 || names[telemetry.HostSpanPrefix] != 1 {
		t.Errorf("spans exported by the time the node closed: %v", names)
	}
}
