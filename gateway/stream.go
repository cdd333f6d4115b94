package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/internal/label"
)

// Streaming, shared by the gateways. A gateway streams a request when the turn asks for
// it (Request.Stream) and Config.NoStream does not turn it off; its pieces go through an
// emitter, and a round that breaks is asked again through streamRetry, alike on every
// wire. An OpenAI-style endpoint that answers a streamed request with a whole JSON body
// (some servers ignore "stream") is read as if it had not been asked to stream.

// ErrStreamCut is wrapped by the error of a streamed response that stopped after part of
// it was used (text shown, a call dispatched): it is not asked again, since the step's
// pieces were acted on.
var ErrStreamCut = errors.New("the streamed answer began but was not complete")

// streamBroken is a stream that stopped before its terminal event: a transport error,
// an error event, an end without a terminal event. It is retried when nothing of it was
// delivered (streamRetry).
type streamBroken struct {
	provider string
	cause    string
	err      error // the transport's, when there was one
}

func (e *streamBroken) Error() string { return e.provider + ": " + e.cause }
func (e *streamBroken) Unwrap() error { return e.err }

// maxStreamItems bounds the output index a stream may name: a response holds a few
// dozen items, and a server's index allocates the table of items seen.
const maxStreamItems = 4096

// maxStreamArgs bounds the arguments one streamed Chat call may gather from its
// fragments: the response body's own cap bounds them too, this one says which call.
const maxStreamArgs = 16 << 20

// emitter hands a stream's pieces to Request.Stream and counts them, so that a broken
// stream is retried only when nothing of it was used. The items it delivers are, in
// order, the first items of the step's Response: an item out of that order (after one
// that was not delivered, a call cut by the output limit) is not delivered.
//
// Text is redacted as the items are (the API keys taken out), though a key may come split
// over pieces: an end of the text that could be the start of a key is held back until
// more comes or its item is done, so a key is always whole when it is taken out.
type emitter struct {
	f         func(StreamEvent)
	red       redactor
	delivered int // pieces and items
	items     int // items delivered: the index of the next one

	held      string // text not yet delivered, of item heldIndex
	heldIndex int
}

// text takes a raw piece of the text of item index.
func (e *emitter) text(index int, s string) {
	if s == "" {
		return
	}
	if index != e.heldIndex {
		e.flush()
		e.heldIndex = index
	}
	t := e.red.string(e.held + s)
	cut := len(t) - e.red.keyStart(t)
	e.held = t[cut:]
	if cut > 0 {
		e.send(index, t[:cut])
	}
}

// flush delivers the text held back.
func (e *emitter) flush() {
	if e.held != "" {
		t := e.held
		e.held = ""
		e.send(e.heldIndex, t)
	}
}

func (e *emitter) send(index int, s string) {
	e.delivered++
	e.f(StreamEvent{Kind: StreamText, Index: index, Text: s})
}

func (e *emitter) item(index int, it toolbus.Item) {
	if index != e.items {
		return
	}
	if e.held != "" && e.heldIndex == index {
		e.flush() // the item's text is whole
	}
	e.delivered++
	e.items++
	e.f(StreamEvent{Kind: StreamItem, Index: index, Item: &it})
}

// whole is how many of the step's items were delivered whole (none without a stream).
func (e *emitter) whole() int {
	if e == nil {
		return 0
	}
	return e.items
}

// streamRetry runs one streamed round, asking again while it breaks before anything was
// delivered, at most maxRetries times (with the SDK's own backoff schedule: 0.5 s
// doubling, at most 8 s). A stream that breaks after it delivered something fails the
// step with ErrStreamCut.
func streamRetry[T any](ctx context.Context, c *client, provider string, em *emitter, once func() (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		before := em.delivered
		v, err := once()
		var broken *streamBroken
		if err == nil || !errors.As(err, &broken) {
			return v, err
		}
		if em.delivered > before {
			return v, &Error{Provider: provider, err: ErrStreamCut, Message: c.red.string(fmt.Sprintf("%v: %s, after %s of it were used (a response cut short is not asked again)",
				ErrStreamCut, broken.cause, label.Plural(em.delivered-before, "piece")))}
		}
		if attempt >= c.cfg.maxRetries() || ctx.Err() != nil {
			return v, c.red.error(fmt.Errorf("%w (%d attempts)", broken, attempt+1))
		}
		c.log.Warn("model stream broke before anything of it was used; asking again",
			slog.String("provider", provider), slog.Int("retry", attempt+1), slog.String("error", c.red.string(broken.cause)))
		if err := sleepCtx(ctx, min(500*time.Millisecond<<attempt, 8*time.Second)); err != nil {
			var zero T
			return zero, fmt.Errorf("%s: %w", provider, err)
		}
	}
}

// streamEnded is why a stream stopped before its terminal event: the end of its body
// (err nil), a transport error (both retried when nothing was delivered), or what
// classify makes of any other error (a bound, a malformed event, an API's error event,
// the caller's context). ep is the endpoint the stream came from.
func streamEnded(ctx context.Context, provider string, ep endpoint, red redactor, err error) error {
	if err == nil {
		return &streamBroken{provider: provider, cause: "the stream ended before the response was complete"}
	}
	var (
		timeout   *attemptTimeout
		large     *bodyTooLarge
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
		apiErr    *openai.Error
		antErr    *anthropic.Error // an error event of the Messages stream too
	)
	switch {
	case ctx.Err() != nil, errors.As(err, &timeout), errors.As(err, &large), errors.As(err, &apiErr),
		errors.As(err, &antErr), errors.As(err, &syntaxErr), errors.As(err, &typeErr):
		// Bounds and refusals, not breaks: asking again would meet them again.
		return classify(ctx, provider, ep, red, err)
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		return &Error{Provider: provider, Message: red.string("the response stream reported an error: " + se.Message)}
	}
	return &streamBroken{provider: provider, cause: "the stream broke: " + red.string(err.Error()), err: err}
}

// streamAdvice says, of a streamed request the endpoint refused as malformed (400, 422),
// how to ask it without streaming: an endpoint that does not stream may refuse "stream".
func streamAdvice(err error) error {
	var e *Error
	if errors.As(err, &e) && (e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity) {
		e.Message += " (the request asked to stream: for an endpoint that does not, run with -stream=false, gateway.Config.NoStream)"
	}
	return err
}

// wholeJSON reports a response to a streamed request that came as one JSON body.
func wholeJSON(res *http.Response) bool {
	if res == nil {
		return false
	}
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// streaming reports whether a request is to be streamed.
func (c *client) streaming(req *Request) bool { return req.Stream != nil && !c.cfg.NoStream }
