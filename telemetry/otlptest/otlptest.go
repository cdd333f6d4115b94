// Package otlptest is an OTLP/HTTP trace receiver in the process, for tests and the bench:
// an HTTP server that decodes each protobuf ExportTraceServiceRequest as a collector
// would, keeps its spans, and answers as OTLP asks.
package otlptest

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// MaxRequest bounds one export request's body.
const MaxRequest = 32 << 20

// Span is a received span, flattened.
type Span struct {
	TraceID, SpanID, ParentID string // hex
	Name                      string
	Kind                      string // SPAN_KIND_INTERNAL, …
	Attrs                     map[string]string
	Events                    []string
	Links                     []Link
	Service, Instance         string // the resource's service.name and service.instance.id
	Status                    string // STATUS_CODE_UNSET, _OK, _ERROR
	StatusMessage             string
	Start, End                uint64 // Unix nanoseconds
}

// Link is a received span link.
type Link struct {
	TraceID, SpanID string
	Attrs           map[string]string
}

// Receiver is an OTLP/HTTP trace receiver.
type Receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    []Span
	bodies   [][]byte // the decoded request bodies, as they came (after gzip)
	requests int
}

// New starts a receiver; Close stops it.
func New() *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// URL is the receiver's base URL: OTEL_EXPORTER_OTLP_ENDPOINT.
func (r *Receiver) URL() string { return r.srv.URL }

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Close() }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "POST /v1/traces only", http.StatusNotFound)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct+": want application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, req.Body, MaxRequest)
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer gz.Close()
		body = io.LimitReader(gz, MaxRequest)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &export); err != nil {
		http.Error(w, "decode ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	spans := flatten(&export)
	r.mu.Lock()
	r.requests++
	r.bodies = append(r.bodies, b)
	r.spans = append(r.spans, spans...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func flatten(export *coltracepb.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range export.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: s.GetKind().String(),
					Attrs: attrs(s.GetAttributes()), Service: res["service.name"], Instance: res["service.instance.id"],
					Status: s.GetStatus().GetCode().String(), StatusMessage: s.GetStatus().GetMessage(),
					Start: s.GetStartTimeUnixNano(), End: s.GetEndTimeUnixNano(),
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, e.GetName())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId()), Attrs: attrs(l.GetAttributes())})
				}
				out = append(out, sp)
			}
		}
	}
	return out
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, value(e))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return ""
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Requests is how many export requests came.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Contains reports whether any request body received holds b, in whatever field.
func (r *Receiver) Contains(b []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, body := range r.bodies {
		if bytes.Contains(body, b) {
			return true
		}
	}
	return false
}

// Reset forgets what was received.
func (r *Receiver) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans, r.bodies, r.requests = nil, nil, 0
}

// Tree writes the spans of trace as an indented tree, children in start order, with the
// attributes named in keys: the dump docs/operations.md shows.
func Tree(spans []Span, trace string, keys ...string) string {
	byParent := map[string][]Span{}
	ids := map[string]bool{}
	for _, s := range spans {
		if s.TraceID == trace {
			ids[s.SpanID] = true
		}
	}
	for _, s := range spans {
		if s.TraceID != trace {
			continue
		}
		p := s.ParentID
		if !ids[p] {
			p = ""
		}
		byParent[p] = append(byParent[p], s)
	}
	var b strings.Builder
	var walk func(parent, indent string)
	walk = func(parent, indent string) {
		kids := byParent[parent]
		slices.SortFunc(kids, func(a, b Span) int { return cmp.Compare(a.Start, b.Start) })
		for _, s := range kids {
			fmt.Fprintf(&b, "%s%s  [%s, %s, span %s", indent, s.Name, strings.TrimPrefix(s.Kind, "SPAN_KIND_"), s.Instance, s.SpanID)
			if s.Status == tracepb.Status_STATUS_CODE_ERROR.String() {
				b.WriteString(", error")
			}
			b.WriteString("]")
			for _, k := range keys {
				if v, ok := s.Attrs[k]; ok {
					fmt.Fprintf(&b, " %s=%s", k, v)
				}
			}
			for _, l := range s.Links {
				fmt.Fprintf(&b, " link→%s/%s(%s)", l.TraceID, l.SpanID, l.Attrs["toolbus.link"])
			}
			if len(s.Events) > 0 {
				fmt.Fprintf(&b, " events=%v", s.Events)
			}
			b.WriteByte('\n')
			walk(s.SpanID, indent+"  ")
		}
	}
	walk("", "")
	return b.String()
}
