package host_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/host"
)

// BenchmarkServe is calls to a program's own host (ServeConfig, Config.Go nil: the host's
// workers) against the same host running each call on a goroutine of its own, 16
// requesters at once, on an embedded server: processor time a call (the whole process's,
// cpu-ns/op) and allocations. The tool encodes a small result, as most do.
func BenchmarkServe(b *testing.B) {
	srv := bustest.Server(b, nil)
	type args struct {
		Text string `json:"text"`
	}
	echo := toolbus.MustDefine(toolbus.Def[args]{
		Spec: toolbus.Spec{Name: "echo", Category: "bench", ReadOnly: true},
		Execute: func(_ context.Context, _ toolbus.Call, a args) (toolbus.Result, error) {
			return toolbus.TextResult("said: " + a.Text), nil
		},
	})
	for _, c := range []struct {
		name string
		goFn func(func())
	}{{"workers", nil}, {"goroutine per call", func(f func()) { go f() }}} {
		b.Run(c.name, func(b *testing.B) {
			hc, err := srv.Connect("bench-host")
			if err != nil {
				b.Fatal(err)
			}
			defer hc.Close()
			ctx, stop := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() {
				served <- host.ServeConfig(ctx, host.Config{Conn: hc, Tools: []*toolbus.Tool{echo}, Go: c.goFn})
			}()
			defer func() { stop(); <-served }()
			rc, err := srv.Connect("bench-requester")
			if err != nil {
				b.Fatal(err)
			}
			defer rc.Close()
			subject := bus.ToolSubject("bench", "echo")
			bustest.CheckFor(b, 10*time.Second, 10*time.Millisecond, func() error {
				_, err := rc.Request(subject, []byte(`{"text":"hi"}`), time.Second)
				return err
			})
			const requesters = 16
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N/requesters + 1
			for range requesters {
				wg.Go(func() {
					for range per {
						if _, err := rc.Request(subject, []byte(`{"text":"hi"}`), 5*time.Second); err != nil && err != nats.ErrTimeout {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(per*requesters), "cpu-ns/op")
		})
	}
}
