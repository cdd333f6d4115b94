package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bounds of [Retry].
const (
	// RetryAttemptTimeout bounds each attempt: a request that no JetStream
	// server answers (no meta or stream leader to answer it) would
	// otherwise hold the whole wait.
	RetryAttemptTimeout = 3 * time.Second
	// retryFirstAttempt bounds the first attempt, and the bound doubles with each
	// attempt up to RetryAttemptTimeout. A cluster that is forming loses answers: all
	// three nodes of a cluster started together had a stream's creation, a bucket's
	// opening or a stream's update go unanswered, once or twice each, and every lost
	// answer cost a whole 3 s attempt (nodes ready 4-9 s after their start; nats-server's
	// own tests make short attempts for the same reason, nats-server#4519). An answer
	// takes milliseconds, and a few hundred on a loaded machine: a slower one still gets
	// 2 s, then 3 s, on the next attempts.
	retryFirstAttempt = time.Second
	retryMinBackoff   = 50 * time.Millisecond
	retryMaxBackoff   = time.Second
	retryLogEvery     = time.Second
)

// Retry calls f until it succeeds, f fails with an error that JetStream
// does not give only while it has no leader, or ctx ends. Each attempt gets
// a context bounded by 1 s, then 2 s, then [RetryAttemptTimeout] (and by
// ctx); attempts are spaced from 50 ms, doubling up to 1 s. Failures are
// logged to log, when it is not nil, at most once a second.
//
// Retried, because a JetStream without a leader, or one still forming,
// answers so for a few seconds:
//   - nats.ErrNoResponders and jetstream.ErrNoStreamResponse: nobody
//     serves the request (a stream with no leader; a server whose
//     JetStream is not up yet);
//   - any error of an attempt whose context expired while ctx had not
//     (context.DeadlineExceeded, nats.ErrTimeout, or a library's own words for
//     it): nobody answered in time;
//   - JetStream API errors "JetStream system temporarily unavailable"
//     (10008: no meta leader), "expected last sequence per subject
//     temporarily unavailable" (10163), "JetStream not enabled" (10076)
//     and "JetStream not enabled for account" (10039), as a server says
//     while its JetStream or the account's is starting;
//   - ErrReadAgain: a read served by a replica still catching up, or by a consumer
//     that is gone;
//   - a placement that fails because a peer is offline ("no suitable peers
//     for placement, peer offline", 10005), as it does right after a
//     cluster forms, until the meta leader has heard from every peer;
//   - a placement refused for too few servers while the cluster is still
//     forming (errClusterForming, made by the bus's bucket and stream
//     creation: see capReplicasOn).
//
// A server without JetStream, or a cluster with a peer down for good,
// answers some of these for ever: then ctx bounds the wait.
//
// Every error Retry returns is prefixed with what: any other error of f at
// once, as "<what>: <error>"; when ctx ends, the last error of f that says
// more than that ctx ended, fmt.Errorf("%s: %w", what, lastErr).
func Retry(ctx context.Context, what string, log *slog.Logger, f func(ctx context.Context) error) error {
	return retry(ctx, what, log, func(attempt int) time.Duration { return attemptBound(attempt, RetryAttemptTimeout) }, f)
}

// RetryPayload is Retry for the store of a payload of size bytes (or the read of one):
// every attempt gets PayloadAttempt(size). Retry's attempts, of 1 s to 3 s, are sized for
// a request's answer; a store's time grows with its size, and they would cut a large one
// short on every attempt on a loaded machine.
func RetryPayload(ctx context.Context, what string, log *slog.Logger, size int64, f func(ctx context.Context) error) error {
	bound := PayloadAttempt(size)
	return retry(ctx, what, log, func(int) time.Duration { return bound }, f)
}

// PayloadAttempt is the time an attempt to store or read a payload of size bytes gets: a
// second, and a second more for each MiB. Race-built, at rest, 16 MiB were stored in 126 ms
// here; 2 MiB took over a second once under CI's load (TestLargeTranscriptMessage).
func PayloadAttempt(size int64) time.Duration {
	return retryFirstAttempt + time.Duration(size)*time.Second/(1<<20)
}

// retry is Retry with bound(n) for the n-th attempt (from 1).
func retry(ctx context.Context, what string, log *slog.Logger, bound func(attempt int) time.Duration, f func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var (
		lastErr error
		logged  time.Time
		timer   *time.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, bound(attempt))
		err := f(actx)
		attemptEnded := OutOfTime(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			// The attempt may have failed only because ctx ended, or because its
			// own deadline came first (a loaded machine: seen in TestRetry), whatever
			// its words for it (jetstream's Fetch: "invalid jetstream option: context
			// deadline already exceeded"): an error before it then says more.
			saysNothing := errors.Is(err, ctx.Err()) || attemptEnded
			if lastErr == nil || !saysNothing {
				lastErr = err
			}
			return fmt.Errorf("%s: %w", what, lastErr)
		}
		lastErr = err
		// An attempt whose own context ended ran out of time, whatever its error says
		// of it: jetstream's Fetch refuses a context already past its deadline as an
		// invalid option (a transcript's read failed so on a loaded machine, when the
		// steps before its fetch took the attempt's time).
		if !attemptEnded && !retryable(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if log != nil && time.Since(logged) >= retryLogEvery {
			logged = time.Now()
			log.Info("JetStream not ready; retrying", "what", what, "attempt", attempt, "err", err)
		}
		wait := retryBackoff(attempt)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, lastErr)
		case <-timer.C:
		}
	}
}

// OutOfTime reports whether ctx has ended or its deadline has come. A library that sets
// its own timer at the context's deadline can fail before the context's timer has ended
// it: nats.go's object reader puts the deadline on a net.Pipe, and its "read pipe: i/o
// timeout" came while ctx.Err() was still nil in 121 of 200 reads here (a large
// transcript's read then failed a claim instead of being tried again). A caller that
// asks whether an attempt ran out of time asks this, not ctx.Err().
func OutOfTime(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// attemptBound is the time the attempt-th attempt gets: retryFirstAttempt, doubling
// up to limit.
func attemptBound(attempt int, limit time.Duration) time.Duration {
	return doubled(retryFirstAttempt, limit, attempt)
}

// retryBackoff is the wait after the attempt-th failure: 50 ms, doubling
// up to 1 s.
func retryBackoff(attempt int) time.Duration {
	return doubled(retryMinBackoff, retryMaxBackoff, attempt)
}

// doubled is first doubled for each attempt after the first, up to limit.
func doubled(first, limit time.Duration, attempt int) time.Duration {
	d := first
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// JetStream API error codes that a leaderless or starting JetStream gives
// (nats-server's errors.json); nats.go names only some of them.
const (
	errCodeClusterNotAvailable       jetstream.ErrorCode = 10008 // JSClusterNotAvailErr
	errCodeLastSeqPerSubjectNotReady jetstream.ErrorCode = 10163 // JSStreamExpectedLastSeqPerSubjectNotReady
	placementPeerOffline                                 = "peer offline"
)

// retryable reports whether err is one a JetStream without a leader, or
// still forming, gives (see Retry); deadlines are Retry's to judge.
func retryable(err error) bool {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, ErrReadAgain) ||
		errors.Is(err, errClusterForming) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeClusterNotAvailable, errCodeLastSeqPerSubjectNotReady,
		jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
		return true
	case errCodeNoPeers:
		return strings.Contains(apiErr.Description, placementPeerOffline)
	}
	return false
}
