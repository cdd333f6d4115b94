package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
)

func ask(t *testing.T, m gateway.Model) (*gateway.Response, error) {
	t.Helper()
	return m.Respond(context.Background(), &gateway.Request{Input: []toolbus.Item{toolbus.UserMessage("x")}})
}

// A silent endpoint: every attempt times out, each is retried as a network error would
// be, and the call ends naming the endpoint, the timeout and the attempts made.
func TestRequestTimeoutRetriedThenReported(t *testing.T) {
	// Each attempt must reach the server within the timeout: 50 ms, run alone, was missed
	// beside the package's other tests under -race; 500 ms runs beside them (the SDK's
	// backoff between attempts, 0.5 s and 1 s, is most of the test's time either way).
	t.Parallel()
	const timeout = 500 * time.Millisecond
	for _, tc := range []struct {
		name     string
		retries  int
		attempts int
		open     func(*testing.T, gateway.Config) gateway.Model
		provider string
	}{
		{"responses, one retry", 1, 2, func(t *testing.T, c gateway.Config) gateway.Model { return newResponses(t, c) }, "openai"},
		{"chat, default retries", 0, 1 + gateway.DefaultMaxRetries, func(t *testing.T, c gateway.Config) gateway.Model { return newChat(t, c) }, "chat"},
		{"no retries", -1, 1, func(t *testing.T, c gateway.Config) gateway.Model { return newChat(t, c) }, "chat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			script := make([]exchange, tc.attempts)
			for i := range script {
				script[i] = exchange{hang: true}
			}
			api := newFakeAPI(t, script...)
			var logs bytes.Buffer
			cfg := api.config(&logs)
			cfg.RequestTimeout = timeout
			cfg.MaxRetries = tc.retries
			_, err := ask(t, tc.open(t, cfg))
			if !errors.Is(err, gateway.ErrRequestTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want ErrRequestTimeout", err)
			}
			attempts := fmt.Sprintf("%d attempts", tc.attempts)
			if tc.attempts == 1 {
				attempts = "1 attempt"
			}
			want := fmt.Sprintf("%s: no answer from %s/v1 within %s (%s)", tc.provider, api.srv.URL, timeout, attempts)
			if err.Error() != want {
				t.Errorf("err = %q\nwant  %q", err, want)
			}
			// The gateway counts its attempts (the error, the log); the server sees those
			// that reached it within their timeout: under heavy load (the whole suite run
			// twice at once) a retry's 500 ms ran out before its request was read.
			if n := len(api.requests()); n < 1 || n > tc.attempts {
				t.Errorf("%d attempts reached the server, want 1 to %d", n, tc.attempts)
			}
			if got := strings.Count(logs.String(), "no answer from"); got != tc.attempts {
				t.Errorf("%d attempts logged as timed out, want %d:\n%s", got, tc.attempts, logs.String())
			}
			noKey(t, "error", err.Error())
		})
	}
}

// An answer that begins and then stalls is cut at the timeout too, and not retried:
// the endpoint is alive and working on it.
func TestRequestTimeoutStalledBody(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"resp_1","output":[`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	// 1 s, not less: an attempt that times out before the answer's head came is retried
	// (the endpoint did not answer), and with 50 ms two of them did so under load in CI,
	// the third getting its head: three requests, as many as a stalled answer asked
	// again would make. Within 1 s the head comes, and stalls.
	_, err := ask(t, newResponses(t, gateway.Config{APIKey: testKey, BaseURL: srv.URL + "/v1", HTTPClient: srv.Client(), RequestTimeout: time.Second}))
	// Each attempt's answer begins and stalls; the first that got its head within the
	// timeout is not retried: the error names the attempt that stalled, the last one, at
	// least as many as the server saw. A stalled answer asked again would take all three
	// attempts.
	n := requests.Load()
	if n >= 3 {
		t.Fatalf("%d requests: a stalled answer was asked again", n)
	}
	var attempt int64
	want := fmt.Sprintf("openai: the answer from %s/v1 was not complete within 1s (attempt %%d; an answer cut short is not retried)", srv.URL)
	if _, serr := fmt.Sscanf(fmt.Sprint(err), want, &attempt); serr != nil || !errors.Is(err, gateway.ErrRequestTimeout) || attempt < n || attempt > 2 {
		t.Fatalf("err = %v (%d requests seen)\nwant  %s, the attempt at least %d and at most 2", err, n, want, n)
	}
}

// An endpoint that sends without end: the step fails at the cap with a *gateway.Error,
// and memory grows with the cap, not with what the server sent.
func TestResponseBodyCapped(t *testing.T) {
	t.Parallel()
	const serverMax = 512 << 20 // bounds the server's loop should the cap fail
	for _, tc := range []struct {
		name   string
		limit  int64 // 0: the default
		status int
	}{
		{"1 MiB", 1 << 20, http.StatusOK},
		{"default", 0, http.StatusOK},
		{"error status", 1 << 20, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, `{"id":"`)
				chunk := bytes.Repeat([]byte("a"), 64<<10)
				for sent.Load() < serverMax {
					n, err := w.Write(chunk)
					sent.Add(int64(n))
					if err != nil {
						return // the client hung up
					}
				}
			}))
			t.Cleanup(srv.Close)
			limit := tc.limit
			if limit == 0 {
				limit = gateway.DefaultMaxResponseBytes
			}
			m := newResponses(t, gateway.Config{APIKey: testKey, BaseURL: srv.URL + "/v1", HTTPClient: srv.Client(), MaxResponseBytes: tc.limit})

			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ask(t, m)
			runtime.ReadMemStats(&after)

			var gwErr *gateway.Error
			if !errors.As(err, &gwErr) {
				t.Fatalf("err = %v (%T), want a *gateway.Error", err, err)
			}
			want := fmt.Sprintf("openai: response body exceeds %d MiB; stopped reading it (is %s/v1 an endpoint of this API? the cap is Config.MaxResponseBytes)", limit>>20, srv.URL)
			if err.Error() != want {
				t.Errorf("err = %q\nwant  %q", err, want)
			}
			allocated := after.TotalAlloc - before.TotalAlloc
			grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("cap %d MiB: allocated %.1f MiB in all during the call, heap %+.1f MiB after it; the server had sent %.1f MiB when it was cut off",
				limit>>20, float64(allocated)/(1<<20), float64(grown)/(1<<20), float64(sent.Load())/(1<<20))
			// Everything the call allocated, garbage included, bounds how far the heap
			// can have grown.
			if bound := uint64(8*limit + 8<<20); allocated > bound {
				t.Errorf("the call allocated %d bytes; want at most %d for a cap of %d", allocated, bound, limit)
			}
		})
	}
}

// A body announced larger than the cap is refused before a byte of it is read.
func TestResponseBodyAnnouncedTooLarge(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(int64(2)<<30))
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"id":"`)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // until the client hangs up
	}))
	t.Cleanup(srv.Close)
	_, err := ask(t, newChat(t, gateway.Config{BaseURL: srv.URL + "/v1", HTTPClient: srv.Client(), MaxResponseBytes: 4 << 10}))
	var gwErr *gateway.Error
	if !errors.As(err, &gwErr) || !strings.HasPrefix(err.Error(), "chat: response body exceeds 4 KiB; stopped reading it") {
		t.Fatalf("err = %v, want a *gateway.Error about the 4 KiB cap", err)
	}
}
