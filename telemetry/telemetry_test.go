package telemetry

import (
	"strings"
	"testing"
)

// TestNilHandlesCostNothing: with no exporter and no metrics, what a turn and a host call
// into allocate nothing (not parallel: AllocsPerRun).
func TestNilHandlesCostNothing(t *testing.T) {
	tel, err := Open(t.Context(), Config{Env: func(string) (string, bool) { return "", false }})
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
