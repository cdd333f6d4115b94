package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// CreateOnce creates key with value, retrying while JetStream has no leader (Retry). A
// retried create that finds its own value under the key took effect the first time; any
// other value there is jetstream.ErrKeyExists.
func CreateOnce(ctx context.Context, kv jetstream.KeyValue, key string, value []byte) error {
	return Retry(ctx, "create "+key, nil, func(ctx context.Context) error {
		_, err := kv.Create(ctx, key, value)
		if errors.Is(err, jetstream.ErrKeyExists) {
			if e, gerr := kv.Get(ctx, key); gerr == nil && bytes.Equal(e.Value(), value) {
				return nil
			}
		}
		return err
	})
}

// GetRecord reads the JSON record under key and its revision, retrying while JetStream
// has no leader. A missing key is jetstream.ErrKeyNotFound; a value that is not the
// record's JSON says which key holds it.
func GetRecord[T any](ctx context.Context, kv jetstream.KeyValue, key string) (T, uint64, error) {
	var (
		rec T
		e   jetstream.KeyValueEntry
	)
	err := Retry(ctx, "read "+key, nil, func(ctx context.Context) (err error) {
		e, err = kv.Get(ctx, key)
		return err
	})
	if err != nil {
		return rec, 0, err
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return rec, 0, fmt.Errorf("unreadable record %s: %w", key, err)
	}
	return rec, e.Revision(), nil
}

// ListKeys lists a bucket's keys that match the filters (all keys without any),
// retrying while JetStream has no leader. A bucket without such keys gives none.
func ListKeys(ctx context.Context, kv jetstream.KeyValue, filters ...string) ([]string, error) {
	var keys []string
	err := Retry(ctx, "list the keys of "+kv.Bucket(), nil, func(ctx context.Context) error {
		// A copy for each attempt: nats.go writes the bucket's prefix into the filters
		// it is given, and the next attempt's would then be refused as invalid keys
		// ("$KV.<bucket>.…"; seen in a schedule listing under load).
		lister, err := kv.ListKeysFiltered(ctx, slices.Clone(filters)...)
		if err != nil {
			return err
		}
		keys = keys[:0]
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		// The lister ends its keys the same way when it has them all and when ctx
		// ends: a list cut short by the attempt's time is not the bucket's keys.
		return ctx.Err()
	})
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	return keys, err
}
