package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/openai/openai-go/v3/option"

	"github.com/toolbus/toolbus/internal/label"
	"github.com/toolbus/toolbus/internal/redact"
)

// ErrRequestTimeout is wrapped by the error of a call whose endpoint did not answer
// within Config.RequestTimeout on its last attempt.
var ErrRequestTimeout = errors.New("model request timed out")

// errAttemptDeadline is the cause of an attempt's context when its own timer fired, which
// tells it apart from the caller's context ending.
var errAttemptDeadline = errors.New("attempt deadline")

// attemptTimeout is an attempt that ran out of time. Returned from the middleware before
// any answer, the SDK takes it for a network error and retries; returned from the body,
// after the SDK's retry loop, it ends the call.
type attemptTimeout struct {
	endpoint string // redacted
	timeout  time.Duration
	attempt  int  // 1-based
	stalled  bool // the answer had begun
}

func (e *attemptTimeout) Error() string {
	if e.stalled {
		return fmt.Sprintf("the answer from %s was not complete within %s (attempt %d; an answer cut short is not retried)",
			e.endpoint, e.timeout, e.attempt)
	}
	return fmt.Sprintf("no answer from %s within %s (%s)", e.endpoint, e.timeout, label.Plural(e.attempt, "attempt"))
}

func (e *attemptTimeout) Unwrap() []error {
	return []error{ErrRequestTimeout, context.DeadlineExceeded}
}

// bodyTooLarge is a response body longer than Config.MaxResponseBytes.
type bodyTooLarge struct{ limit int64 }

func (e *bodyTooLarge) Error() string {
	return "response body exceeds " + formatBytes(e.limit)
}

// boundAttempts gives each HTTP attempt its own deadline, covering the answer's body too,
// and caps the body. The SDK reads a body whole (io.ReadAll) before decoding it; the
// cap makes that read fail at the limit instead of growing with whatever the server
// sends, and closing the body then drops the connection, unread.
func (c Config) boundAttempts(baseURL string) option.Middleware {
	timeout, limit := c.requestTimeout(), c.maxResponseBytes()
	endpoint := redact.URL(baseURL)
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		attempt := 1
		if n, err := strconv.Atoi(req.Header.Get("X-Stainless-Retry-Count")); err == nil {
			attempt = n + 1
		}
		expired := func() *attemptTimeout {
			return &attemptTimeout{endpoint: endpoint, timeout: timeout, attempt: attempt}
		}
		ctx, cancel := context.WithTimeoutCause(req.Context(), timeout, errAttemptDeadline)
		req = req.WithContext(ctx)
		// What the SDK would announce with its own timeout: servers may use it.
		req.Header.Set("X-Stainless-Timeout", strconv.Itoa(int(timeout.Seconds())))
		res, err := next(req)
		if err != nil {
			cancel()
			if errors.Is(context.Cause(ctx), errAttemptDeadline) {
				return nil, expired()
			}
			return nil, err
		}
		b := &boundedBody{rc: res.Body, limit: limit, left: limit, ctx: ctx, cancel: cancel, expired: expired}
		if res.ContentLength > limit {
			// Announced too long: fail without reading a byte.
			b.err = &bodyTooLarge{limit: limit}
		}
		res.Body = b
		return res, nil
	}
}

// boundedBody reads at most left bytes of a response body and ends its attempt's
// deadline when closed.
type boundedBody struct {
	rc      io.ReadCloser
	limit   int64
	left    int64 // of limit
	ctx     context.Context
	cancel  context.CancelFunc
	expired func() *attemptTimeout
	err     error // sticky
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if int64(len(p)) > b.left {
		// One byte past the cap tells a body of exactly the cap from a longer one.
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) > b.left {
		n, b.err = int(b.left), &bodyTooLarge{limit: b.limit}
		b.left = 0
		return n, b.err
	}
	b.left -= int64(n)
	if err != nil && err != io.EOF && errors.Is(context.Cause(b.ctx), errAttemptDeadline) {
		t := b.expired()
		t.stalled = true
		err = t
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

// Close reads what is left of the body, at most drainLimit bytes and for drainPatience,
// then ends the attempt. net/http keeps a connection only for a body read to its end
// before it is closed; a stream is done at its terminal event (response.completed,
// [DONE]: the SDK's own stream closes there), and the body's end, its last chunk, follows
// it, over a network a moment later and often in a packet of its own. Closed at once,
// every streamed step cost a new connection, over TLS a handshake
// (TestStreamReusesConnection). A body that failed or ended is closed at once; one whose
// server keeps it open past drainPatience costs a step that and the connection, as before.
func (b *boundedBody) Close() error {
	if b.err == nil {
		stop := time.AfterFunc(drainPatience, b.cancel) // ends the read that waits
		_, _ = io.CopyN(io.Discard, b, drainLimit)
		stop.Stop()
	}
	b.cancel()
	return b.rc.Close()
}

// What a body's Close reads of what is left (boundedBody.Close): a chunked body's end is
// five bytes after the stream's terminal event; a server that sends more, or takes
// longer, loses the connection.
const drainLimit = 64 << 10

// drainPatience is a variable for TestStreamReusesConnection alone (export_test.go),
// whose server, in the same loaded process as the client, may send a body's end later
// than a provider does.
var drainPatience = 100 * time.Millisecond

// formatBytes is a size for people: 32 MiB, 1.5 KiB, 100 bytes.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return label.Plural(int(n), "byte")
}
