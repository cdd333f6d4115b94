// Package telemetry holds toolbus's observability in the ecosystem's terms: OpenTelemetry
// traces that follow the GenAI semantic conventions (semconv.go names the version), set up
// from the standard OTEL_* environment, and a Prometheus registry of the node's metrics
// (metrics.go). Turns and hosts make small calls into it (spans.go); nothing else in the
// tree speaks OpenTelemetry or Prometheus.
//
// Off by default and safe by default: with no exporter configured, Open returns a
// Telemetry whose tracer is nil, the turn's and host's calls return nil handles whose
// methods do nothing, and no span is made; arguments and results are never recorded
// unless Config.RecordContent asks, and then only redacted and capped.
package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdk "go.opentelemetry.io/otel/sdk"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of a Config.
const (
	DefaultServiceName = "toolbus"
	// DefaultContentLimit caps each recorded argument or result (Config.RecordContent).
	DefaultContentLimit = 1024
	// MaxContentLimit bounds Config.ContentLimit: span attributes travel in every export.
	MaxContentLimit = 64 << 10
)

// Config configures a node's telemetry. The tracing part comes from the standard
// environment (Env): OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT and
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL and its _TRACES_ form
// (http/protobuf, the default, or grpc), OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG, OTEL_SEMCONV_STABILITY_OPT_IN. The OTLP exporters read their
// own headers, timeout, compression and certificates (OTEL_EXPORTER_OTLP_HEADERS…) from
// the process environment.
type Config struct {
	// Node is the node's name: the spans' service.instance.id.
	Node string
	// Env looks up a variable; nil: the process environment (os.LookupEnv).
	Env func(string) (string, bool)
	// Metrics opens the Prometheus registry (Telemetry.Registry); without it no metric
	// is kept.
	Metrics bool
	// RecordContent records the calls' arguments and results on their execute_tool
	// spans (gen_ai.tool.call.arguments, gen_ai.tool.call.result), after redaction and
	// cut at ContentLimit bytes each. Off by default: they may hold secrets.
	RecordContent bool
	ContentLimit  int
	// Exporter, when set, receives the spans instead of the OTLP exporter the
	// environment names (tests, benchmarks); it turns tracing on.
	Exporter sdktrace.SpanExporter
}

// withDefaults fills what a config may leave out.
func (c Config) withDefaults() Config {
	if c.Env == nil {
		c.Env = os.LookupEnv
	}
	if c.ContentLimit <= 0 {
		c.ContentLimit = DefaultContentLimit
	}
	return c
}

// validate checks a config after withDefaults.
func (c Config) validate() error {
	if c.ContentLimit > MaxContentLimit {
		return fmt.Errorf("telemetry: content limit %d over %d bytes", c.ContentLimit, MaxContentLimit)
	}
	return nil
}

// Telemetry is a node's tracer and metrics. A nil *Telemetry is valid: it records nothing.
type Telemetry struct {
	tp      *sdktrace.TracerProvider // nil: no exporter, no tracing
	tracer  trace.Tracer
	metrics *Metrics // nil: no metrics
	cfg     Config
	// legacy: OTEL_SEMCONV_STABILITY_OPT_IN does not name gen_ai_latest_experimental, so
	// the attributes renamed since v1.36.0 are also sent under their old names.
	legacy bool
	prop   propagation.TraceContext
}

// Open sets up the telemetry cfg and the environment describe. With no exporter
// configured it returns a Telemetry that traces nothing (and, without cfg.Metrics, one
// that does nothing at all).
func Open(ctx context.Context, cfg Config) (*Telemetry, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &Telemetry{cfg: cfg, legacy: !optedIn(cfg.Env)}
	if cfg.Metrics {
		t.metrics = newMetrics()
	}
	exp := cfg.Exporter
	if exp == nil {
		var err error
		if exp, err = exporterFromEnv(ctx, cfg.Env); err != nil {
			return nil, err
		}
	}
	if exp == nil {
		return t, nil
	}
	sampler, err := samplerFromEnv(cfg.Env)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	service := DefaultServiceName
	if v, ok := cfg.Env("OTEL_SERVICE_NAME"); ok && v != "" {
		service = v
	}
	attrs := []attribute.KeyValue{
		semconv.ServiceName(service), semconv.ServiceVersion(Version()),
		semconv.TelemetrySDKName("opentelemetry"), semconv.TelemetrySDKLanguageGo, semconv.TelemetrySDKVersion(sdk.Version()),
	}
	if cfg.Node != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(cfg.Node))
	}
	// OTEL_RESOURCE_ATTRIBUTES comes from the process environment; the service name given
	// here wins over its service.name, as the specification asks of OTEL_SERVICE_NAME.
	res, err := resource.Merge(envResource(cfg.Env), resource.NewWithAttributes(semconv.SchemaURL, attrs...))
	if err != nil {
		res = resource.NewWithAttributes(semconv.SchemaURL, attrs...)
	}
	t.tp = sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler),
		sdktrace.WithIDGenerator(turnIDs{}),
	)
	// The scope's version is toolbus's: the conventions' version is in the schema URL.
	t.tracer = t.tp.Tracer(instrumentation, trace.WithInstrumentationVersion(Version()), trace.WithSchemaURL(semconv.SchemaURL))
	return t, nil
}

// instrumentation names the tracer.
const instrumentation = "github.com/toolbus/toolbus"

// Version is the version of the toolbus module this program was built with, as the Go
// toolchain recorded it: a tag, a pseudo-version, or "(devel)" for a build of a checkout;
// "unknown" without build information. It is the spans' scope version and the
// resource's service.version.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if bi.Main.Path == instrumentation {
		return bi.Main.Version
	}
	for _, d := range bi.Deps { // a program that embeds toolbus
		if d.Path == instrumentation {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}

// Tracing reports whether spans are made and exported.
func (t *Telemetry) Tracing() bool { return t != nil && t.tracer != nil }

// Flush exports the spans ended so far.
func (t *Telemetry) Flush(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Close exports what is left and stops the exporter.
func (t *Telemetry) Close(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// exporterFromEnv is the OTLP exporter the environment names, or nil for none: tracing
// is on when OTEL_TRACES_EXPORTER is otlp, or unset with an OTLP endpoint set.
func exporterFromEnv(ctx context.Context, env func(string) (string, bool)) (sdktrace.SpanExporter, error) {
	get := func(k string) string { v, _ := env(k); return strings.TrimSpace(v) }
	endpoint, perSignal := get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), true
	if endpoint == "" {
		endpoint, perSignal = get("OTEL_EXPORTER_OTLP_ENDPOINT"), false
	}
	switch kind := get("OTEL_TRACES_EXPORTER"); kind {
	case "none":
		return nil, nil
	case "":
		if endpoint == "" {
			return nil, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%s: toolbus exports traces with otlp (or none)", kind)
	}
	protocol := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "", "http/protobuf":
		var opts []otlptracehttp.Option
		if endpoint != "" {
			u, err := signalURL(endpoint, perSignal)
			if err != nil {
				return nil, err
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u))
		}
		return otlptracehttp.New(ctx, opts...)
	case "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			if _, err := url.Parse(endpoint); err != nil {
				return nil, fmt.Errorf("telemetry: OTLP endpoint %q: %w", endpoint, err)
			}
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("telemetry: OTLP protocol %q: want http/protobuf or grpc (http/json is not offered by the Go exporter)", protocol)
	}
}

// signalURL is the traces URL of an OTLP/HTTP endpoint: OTEL_EXPORTER_OTLP_ENDPOINT is a
// base to which /v1/traces is added; the _TRACES_ form is used as it is.
func signalURL(endpoint string, perSignal bool) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("telemetry: OTLP endpoint %q: want a URL such as http://127.0.0.1:4318", endpoint)
	}
	if !perSignal {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// samplerFromEnv is OTEL_TRACES_SAMPLER's sampler (default parentbased_always_on).
func samplerFromEnv(env func(string) (string, bool)) (sdktrace.Sampler, error) {
	name, _ := env("OTEL_TRACES_SAMPLER")
	arg, hasArg := env("OTEL_TRACES_SAMPLER_ARG")
	ratio := 1.0
	if strings.HasSuffix(name, "traceidratio") && hasArg {
		r, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", arg)
		}
		ratio = r
	}
	switch strings.TrimSpace(name) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	}
	return nil, fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER=%s: want always_on, always_off, traceidratio or their parentbased_ forms", name)
}

// envResource is OTEL_RESOURCE_ATTRIBUTES as a resource (k=v,k=v, values URL-encoded).
func envResource(env func(string) (string, bool)) *resource.Resource {
	v, _ := env("OTEL_RESOURCE_ATTRIBUTES")
	var attrs []attribute.KeyValue
	for pair := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(pair, "=")
		if !ok || strings.TrimSpace(k) == "" {
			continue
		}
		if dec, err := url.QueryUnescape(strings.TrimSpace(val)); err == nil {
			val = dec
		}
		attrs = append(attrs, attribute.String(strings.TrimSpace(k), val))
	}
	return resource.NewWithAttributes(semconv.SchemaURL, attrs...)
}

// CloseTimeout is Close with a deadline of its own, for a node's shutdown.
func (t *Telemetry) CloseTimeout(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return t.Close(ctx)
}
