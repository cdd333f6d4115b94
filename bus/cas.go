package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The one conflict predicate and the one compare-and-set helper of toolbus. Every store
// (turns, todo, jobs, schedules, workflows, brain) changes its documents through
// [Change] or writes at a revision it read through [UpdateAt]; nothing else tests for a
// lost compare-and-set.

// JetStream's "wrong last sequence" codes: 10071 on a stream of one replica, 10164
// (JSStreamWrongLastSequenceConstantErr) on a replicated one when another write of the
// same subject is still being proposed. nats.go v1.55 maps both to
// jetstream.ErrKeyRevisionMismatch for KV updates, not for a plain publish with an
// expected last subject sequence (the transcript's fence) nor for KV Create.
const (
	errCodeWrongLastSeq         jetstream.ErrorCode = 10071
	errCodeWrongLastSeqReplicas jetstream.ErrorCode = 10164
)

// ErrConflict is what [UpdateAt] and [Change] wrap when a write at a revision lost to
// another writer; [IsConflict] reports it and every form JetStream gives.
var ErrConflict = errors.New("the document changed since it was read")

// IsConflict reports a write refused because the revision (or expected last subject
// sequence) it named is no longer the key's or subject's last: another writer came
// first. It covers JetStream's 10071 and its replicated form 10164, a KV update's
// jetstream.ErrKeyRevisionMismatch, a KV create's jetstream.ErrKeyExists, and
// [ErrConflict].
func IsConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrConflict) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeWrongLastSeq || apiErr.ErrorCode == errCodeWrongLastSeqReplicas)
}

// isInFlightConflict reports 10164: the server refused the write because another write
// of the subject is being proposed, which may be this writer's own earlier attempt.
func isInFlightConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeWrongLastSeqReplicas
}

// UpdateAt writes value under key at revision rev (0: the key must not exist), retrying
// while JetStream has no leader ([Retry]). It is the write of a holder of a lease: a
// lost compare-and-set is never retried with a newer revision, it returns an error
// that [IsConflict] reports.
//
// An attempt that timed out may have landed all the same, and its retry is then
// refused (10071, or 10164 while the first is still proposed). So a refusal is checked
// against the stored value: the key holding exactly value means this write landed, and
// its revision is returned; the key still at rev means the competing proposal has not
// landed yet, and the write is tried again after a short wait.
func UpdateAt(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, rev uint64) (uint64, error) {
	var newRev uint64
	err := Retry(ctx, "write "+key, nil, func(ctx context.Context) error {
		for attempt := 0; ; attempt++ {
			var err error
			if rev == 0 {
				newRev, err = kv.Create(ctx, key, value)
			} else {
				newRev, err = kv.Update(ctx, key, value, rev)
			}
			if err == nil || !IsConflict(err) {
				return err
			}
			e, gerr := kv.Get(ctx, key)
			switch {
			case gerr == nil && bytes.Equal(e.Value(), value):
				newRev = e.Revision()
				return nil
			case gerr == nil && e.Revision() == rev && isInFlightConflict(err) && attempt < inFlightTries:
				// A proposal of this key is under way (perhaps ours): wait for it to
				// land, then the answer is exact.
			case errors.Is(gerr, jetstream.ErrKeyNotFound) && rev == 0 && isInFlightConflict(err) && attempt < inFlightTries:
			case gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound):
				return gerr
			default:
				return fmt.Errorf("%w (%s at revision %d): %w", ErrConflict, key, rev, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(5+attempt*10) * time.Millisecond):
			}
		}
	})
	return newRev, err
}

// inFlightTries bounds how often UpdateAt waits out a 10164 whose competing proposal
// has not landed: a proposal lands or fails within a few raft round trips (ms).
const inFlightTries = 20

// changeAttempts bounds the rounds of [Change] against writers that keep winning.
const changeAttempts = 64

// ErrUnchanged is what a change function of [Change] returns to leave the document as
// it is: Change then returns the document as read, without writing.
var ErrUnchanged = errors.New("unchanged")

// Change is the read-modify-write of a KV document: it reads key at its revision,
// lets change change the document (found reports whether the key existed), and writes
// it back at that revision; when another writer came first it reads again and changes
// what that writer stored, never a copy held in memory. decode and encode turn the
// stored bytes into a document and back. change returns ErrUnchanged to write nothing;
// any other error stops Change with it. Change returns the document as stored and its
// revision.
func Change[T any](ctx context.Context, kv jetstream.KeyValue, key string,
	decode func([]byte) (T, error), encode func(T) ([]byte, error),
	change func(doc *T, found bool) error) (T, uint64, error) {
	var zero T
	var last error
	for attempt := 0; attempt < changeAttempts; attempt++ {
		var (
			e   jetstream.KeyValueEntry
			err error
		)
		err = Retry(ctx, "read "+key, nil, func(ctx context.Context) (err error) {
			e, err = kv.Get(ctx, key)
			return err
		})
		found := err == nil
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return zero, 0, err
		}
		var doc T
		var rev uint64
		if found {
			rev = e.Revision()
			if doc, err = decode(e.Value()); err != nil {
				return zero, 0, fmt.Errorf("read %s: %w", key, err)
			}
		}
		if err := change(&doc, found); err != nil {
			if errors.Is(err, ErrUnchanged) {
				return doc, rev, nil
			}
			return zero, 0, err
		}
		b, err := encode(doc)
		if err != nil {
			return zero, 0, fmt.Errorf("encode %s: %w", key, err)
		}
		newRev, err := UpdateAt(ctx, kv, key, b, rev)
		if err == nil {
			return doc, newRev, nil
		}
		if !IsConflict(err) {
			return zero, 0, err
		}
		last = err
		// Jittered, so that the writers that lost this round do not collide again.
		select {
		case <-ctx.Done():
			return zero, 0, ctx.Err()
		case <-time.After(time.Duration(1+rand.IntN(2+attempt)) * time.Millisecond):
		}
	}
	return zero, 0, fmt.Errorf("%s: still conflicting with other writers after %d attempts: %w", key, changeAttempts, last)
}
