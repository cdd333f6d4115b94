package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/jstest"
)

func TestRetryable(t *testing.T) {
	t.Parallel()
	api := func(code jetstream.ErrorCode, desc string) error {
		return &jetstream.APIError{Code: 503, ErrorCode: code, Description: desc}
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"no responders", nats.ErrNoResponders, true},
		{"no stream response", jetstream.ErrNoStreamResponse, true},
		{"wrapped", fmt.Errorf("open bucket: %w", nats.ErrNoResponders), true},
		{"cluster not available", api(10008, "JetStream system temporarily unavailable"), true},
		{"last sequence per subject not ready", api(10163, "expected last sequence per subject temporarily unavailable"), true},
		{"not enabled", jetstream.ErrJetStreamNotEnabled, true},
		{"not enabled for account", jetstream.ErrJetStreamNotEnabledForAccount, true},
		{"not enabled, as the server sends it", api(jetstream.JSErrCodeJetStreamNotEnabled, "JetStream not enabled"), true},
		{"placement with a peer offline", api(errCodeNoPeers, "no suitable peers for placement, peer offline"), true},

		{"placement on too small a cluster", api(errCodeNoPeers, noSuitablePeers), false},
		{"placement without storage", api(errCodeNoPeers, noSuitablePeers+", insufficient storage"), false},
		{"stream not found", jetstream.ErrStreamNotFound, false},
		{"key exists", jetstream.ErrKeyExists, false},
		{"stream offline", api(10118, "stream is offline"), false},
		{"deadline, judged by Retry", context.DeadlineExceeded, false},
		{"cancelled", context.Canceled, false},
		{"connection closed", nats.ErrConnectionClosed, false},
		{"other", errors.New("boom"), false},
	}
	for _, tt := range tests {
		if got := retryable(tt.err); got != tt.want {
			t.Errorf("%s: retryable(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	want := []time.Duration{50, 100, 200, 400, 800, 1000, 1000, 1000}
	for i, w := range want {
		if got := retryBackoff(i + 1); got != w*time.Millisecond {
			t.Errorf("retryBackoff(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name string
		// f is attempt n's outcome (from 1); cancel ends Retry's context.
		f       func(ctx context.Context, n int, cancel context.CancelFunc) error
		ctxDone bool // Retry's context has ended before it is called
		// outOfTime: an attempt waits for its own deadline, which is then 20 ms. The
		// others get 10 s, which none reaches: with 20 ms, an attempt descheduled past
		// it on a loaded machine was retried as one that ran out of time (load 30, a
		// permanent error retried).
		outOfTime bool
		wantCalls int
		wantErr   string // "" for success
		wantIs    error
	}{
		{
			name:      "first attempt succeeds",
			f:         func(context.Context, int, context.CancelFunc) error { return nil },
			wantCalls: 1,
		},
		{
			name: "fails three times, then succeeds",
			f: func(_ context.Context, n int, _ context.CancelFunc) error {
				switch n {
				case 1:
					return nats.ErrNoResponders
				case 2:
					return fmt.Errorf("get key: %w", jetstream.ErrNoStreamResponse)
				case 3:
					return jetstream.ErrJetStreamNotEnabledForAccount
				}
				return nil
			},
			wantCalls: 4,
		},
		{
			name:      "an error that is not retried returns at once",
			f:         func(context.Context, int, context.CancelFunc) error { return boom },
			wantCalls: 1, wantErr: "load: boom", wantIs: boom,
		},
		{
			name: "a retried error, then one that is not",
			f: func(_ context.Context, n int, _ context.CancelFunc) error {
				if n == 1 {
					return nats.ErrNoResponders
				}
				return jetstream.ErrStreamNotFound
			},
			wantCalls: 2, wantErr: "load: nats: API error: code=404 err_code=10059 description=stream not found", wantIs: jetstream.ErrStreamNotFound,
		},
		{
			name: "the end of ctx returns the last error",
			f: func(_ context.Context, n int, cancel context.CancelFunc) error {
				if n == 3 {
					cancel()
				}
				return nats.ErrNoResponders
			},
			wantCalls: 3, wantErr: "load: nats: no responders available for request", wantIs: nats.ErrNoResponders,
		},
		{
			name: "an attempt cut short by the end of ctx returns the error before it",
			f: func(ctx context.Context, n int, cancel context.CancelFunc) error {
				if n == 1 {
					return jetstream.ErrNoStreamResponse
				}
				cancel()
				<-ctx.Done()
				return ctx.Err()
			},
			wantCalls: 2, wantErr: "load: nats: no response from stream", wantIs: jetstream.ErrNoStreamResponse,
		},
		{
			name: "an attempt cut short by the end of ctx returns the error before it, whatever its words",
			f: func(ctx context.Context, n int, cancel context.CancelFunc) error {
				if n == 1 {
					return fmt.Errorf("read transcript: %w", ErrReadAgain)
				}
				cancel()
				<-ctx.Done()
				// What jetstream's Fetch says of a context past its deadline.
				return fmt.Errorf("%w: context deadline already exceeded", jetstream.ErrInvalidOption)
			},
			wantCalls: 2, wantErr: "load: read transcript: " + ErrReadAgain.Error(), wantIs: ErrReadAgain,
		},
		{
			name: "an attempt that runs out of time is retried",
			f: func(ctx context.Context, n int, _ context.CancelFunc) error {
				if n == 1 {
					<-ctx.Done()
					return fmt.Errorf("stream info: %w", ctx.Err())
				}
				return nil
			},
			outOfTime: true, wantCalls: 2,
		},
		{
			name: "nats.ErrTimeout of an attempt that ran out of time is retried",
			f: func(ctx context.Context, n int, _ context.CancelFunc) error {
				if n == 1 {
					<-ctx.Done()
					return nats.ErrTimeout
				}
				return nil
			},
			outOfTime: true, wantCalls: 2,
		},
		{
			name: "an attempt that ran out of time is retried whatever its error says",
			f: func(ctx context.Context, n int, _ context.CancelFunc) error {
				if n == 1 {
					<-ctx.Done()
					// What jetstream's Fetch says of a context past its deadline.
					return fmt.Errorf("%w: context deadline already exceeded", jetstream.ErrInvalidOption)
				}
				return nil
			},
			outOfTime: true, wantCalls: 2,
		},
		{
			name: "a deadline of f's own is not retried",
			f: func(context.Context, int, context.CancelFunc) error {
				return fmt.Errorf("inner: %w", context.DeadlineExceeded)
			},
			wantCalls: 1, wantErr: "load: inner: context deadline exceeded", wantIs: context.DeadlineExceeded,
		},
		{
			name:      "ctx already ended",
			f:         func(context.Context, int, context.CancelFunc) error { return nil },
			ctxDone:   true,
			wantCalls: 0, wantErr: "load: context canceled", wantIs: context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			if tt.ctxDone {
				cancel()
			}
			calls := 0
			bound := 10 * time.Second
			if tt.outOfTime {
				bound = 20 * time.Millisecond
			}
			err := retry(ctx, "load", nil, func(int) time.Duration { return bound }, func(actx context.Context) error {
				calls++
				return tt.f(actx, calls, cancel)
			})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Errorf("error %v, want %q", err, tt.wantErr)
			case tt.wantIs != nil && !errors.Is(err, tt.wantIs):
				t.Errorf("error %v does not match %v", err, tt.wantIs)
			}
			if calls != tt.wantCalls {
				t.Errorf("%d calls, want %d", calls, tt.wantCalls)
			}
		})
	}
}

// An attempt gets a second, then twice the one before, up to the bound given: an answer a
// forming cluster lost costs a second, and a slow one still gets the bound.
func TestRetryAttemptBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		attempt int
		max     time.Duration
		want    time.Duration
	}{
		{1, RetryAttemptTimeout, time.Second},
		{2, RetryAttemptTimeout, 2 * time.Second},
		{3, RetryAttemptTimeout, 3 * time.Second},
		{40, RetryAttemptTimeout, 3 * time.Second},
		{1, 20 * time.Millisecond, 20 * time.Millisecond},
		{5, 10 * time.Second, 10 * time.Second},
	} {
		if got := attemptBound(tt.attempt, tt.max); got != tt.want {
			t.Errorf("attempt %d, bound %v: %v, want %v", tt.attempt, tt.max, got, tt.want)
		}
	}
}

// TestRetryBoundsAttemptsAndLogs checks the exported Retry: every attempt
// has a deadline within RetryAttemptTimeout, and failures are logged at
// most once a second.
func TestRetryBoundsAttemptsAndLogs(t *testing.T) {
	t.Parallel()
	rec := &logRecorder{}
	const failures = 5 // 50+100+200+400+800 ms of backoff: one or two log lines
	calls := 0
	start := time.Now()
	err := Retry(testContext(t), "open bucket", slog.New(rec), func(ctx context.Context) error {
		calls++
		dl, ok := ctx.Deadline()
		if want := attemptBound(calls, RetryAttemptTimeout); !ok || time.Until(dl) > want {
			t.Errorf("attempt %d: deadline %v (set: %v), want within %v", calls, dl, ok, want)
		}
		if calls <= failures {
			return nats.ErrNoResponders
		}
		return nil
	})
	elapsed := time.Since(start)
	if err != nil || calls != failures+1 {
		t.Fatalf("Retry: %v after %d calls, want success after %d", err, calls, failures+1)
	}
	logs := len(rec.Find(slog.LevelInfo, "JetStream not ready; retrying"))
	if most := 1 + int(elapsed/retryLogEvery); logs < 1 || logs > most {
		t.Errorf("%d log lines in %v, want 1 to %d", logs, elapsed, most)
	}
}

// TestRetryOnServer publishes to a subject that no stream takes yet: the
// server answers no responders, as it does for a stream that has lost its
// leader, until the stream exists.
func TestRetryOnServer(t *testing.T) {
	t.Parallel()
	s, _ := startServer(t, testConfig{})
	ctx := testContext(t)
	js := jstest.JetStream(t, s, "retry")

	failed := make(chan error, 1)
	done := make(chan error, 1)
	calls := 0
	go func() {
		done <- Retry(ctx, "append", nil, func(ctx context.Context) error {
			calls++
			_, err := js.Publish(ctx, "late.stream", []byte("x"), jetstream.WithRetryAttempts(0))
			if err != nil {
				select {
				case failed <- err:
				default:
				}
			}
			return err
		})
	}()
	select {
	case err := <-failed:
		if !errors.Is(err, jetstream.ErrNoStreamResponse) {
			t.Fatalf("first failure %v, want ErrNoStreamResponse", err)
		}
	case err := <-done:
		t.Fatalf("Retry returned %v before the stream existed", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if calls < 2 {
		t.Errorf("%d calls, want at least 2", calls)
	}

	// A stream that does not exist is an answer, not a missing leader.
	calls = 0
	err := Retry(ctx, "open stream", nil, func(ctx context.Context) error {
		calls++
		_, err := js.Stream(ctx, "MISSING")
		return err
	})
	if !errors.Is(err, jetstream.ErrStreamNotFound) || calls != 1 {
		t.Errorf("Retry: %v after %d calls; want ErrStreamNotFound after 1", err, calls)
	}
}

// An attempt that fails on a timer of its own set at its deadline is out of time, even
// when its context's timer has not ended the context yet: nats.go's object reader times
// out so, on a net.Pipe, and the read is tried again rather than failed.
func TestRetryLibraryDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for i := range 20 {
		calls := 0
		err := retry(ctx, "read payload", nil, func(int) time.Duration { return 5 * time.Millisecond }, func(ctx context.Context) error {
			calls++
			if calls > 1 {
				return nil
			}
			r, w := net.Pipe()
			defer r.Close()
			defer w.Close()
			d, _ := ctx.Deadline()
			_ = r.SetReadDeadline(d)
			_, err := r.Read(make([]byte, 1))
			return err
		})
		if err != nil || calls != 2 {
			t.Fatalf("run %d: %d attempts, %v; want the timed-out read tried again", i, calls, err)
		}
	}
}

func TestOutOfTime(t *testing.T) {
	t.Parallel()
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"no deadline", context.Background(), false},
		{"deadline ahead", deadlineOnly{time.Now().Add(time.Hour)}, false},
		{"deadline come, the context's timer not yet", deadlineOnly{time.Now().Add(-time.Millisecond)}, true},
		{"ended", past, true},
	} {
		if got := OutOfTime(tt.ctx); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// deadlineOnly is a context whose deadline has a value and that has not ended, as a
// context is between its deadline and its timer's firing.
type deadlineOnly struct{ d time.Time }

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.d, true }
func (deadlineOnly) Done() <-chan struct{}         { return nil }
func (deadlineOnly) Err() error                    { return nil }
func (deadlineOnly) Value(any) any                 { return nil }

// A payload's store gets a second and a second for each MiB, on every attempt: more than
// Retry's 3 s once it is over 2 MiB.
func TestRetryPayload(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		size int64
		want time.Duration
	}{
		{0, time.Second},
		{512 << 10, 1500 * time.Millisecond},
		{2 << 20, 3 * time.Second},
		{16 << 20, 17 * time.Second},
	} {
		if got := PayloadAttempt(tt.size); got != tt.want {
			t.Errorf("PayloadAttempt(%d): %v, want %v", tt.size, got, tt.want)
		}
	}
	calls := 0
	err := RetryPayload(testContext(t), "store payload", nil, 4<<20, func(ctx context.Context) error {
		calls++
		dl, ok := ctx.Deadline()
		if left := time.Until(dl); !ok || left > 5*time.Second || left < 4*time.Second {
			t.Errorf("attempt %d: %v left (deadline set: %v), want 5 s", calls, left, ok)
		}
		if calls < 3 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("%d attempts, %v", calls, err)
	}
}
