package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/toolbus/toolbus/telemetry"
)

// DefaultMetricsPath is where the metrics endpoint serves.
const DefaultMetricsPath = "/metrics"

// CheckMetricsAddr refuses a -metrics address that is not host:port, or whose host is not
// a loopback address unless public says the operator means it: the endpoint has no
// authentication, and what it shows (agents' tools, models, load) is for the operator.
func CheckMetricsAddr(addr string, public bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("-metrics %q: want host:port, such as 127.0.0.1:9464", addr)
	}
	if public {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-metrics %s: not a loopback address, and the endpoint has no authentication: add -metrics-public to serve it there anyway (behind your own firewall or proxy)", addr)
}

// MetricsServer serves a node's metrics over HTTP.
type MetricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// ServeMetrics listens on addr and serves tel's metrics at DefaultMetricsPath.
func ServeMetrics(addr string, tel *telemetry.Telemetry, log *slog.Logger) (*MetricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(DefaultMetricsPath, tel.Handler())
	s := &MetricsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() {
		err := s.srv.Serve(ln)
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", "err", err)
		}
		s.done <- err
	}()
	return s, nil
}

// Addr is the address the endpoint listens on.
func (s *MetricsServer) Addr() string { return s.ln.Addr().String() }

// Close stops the endpoint.
func (s *MetricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// OpenTelemetry is the telemetry of a node named name: tracing from the process's OTEL_*
// environment, metrics when asked, and the calls' content recorded only when asked.
func OpenTelemetry(ctx context.Context, name string, metrics, content bool) (*telemetry.Telemetry, error) {
	return telemetry.Open(ctx, telemetry.Config{Node: name, Metrics: metrics, RecordContent: content})
}
