package bus

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go/jetstream"
)

// A full store, as nats-server v2.15.2 reports it (server/jetstream.go,
// stream.go, filestore.go, jetstream_cluster.go), comes in two kinds that
// end differently:
//
//   - A JetStream limit used up: the server's max store (JetStreamMaxStore,
//     the node's -max-store) or an account's limit. The server refuses the
//     write up front (stream.go processJetStreamMsg: js.limitsExceeded, then
//     10023 "insufficient resources") and answers the publisher; creating a
//     stream whose MaxBytes does not fit beside the others' is refused the
//     same way (jetstream.go checkBytesLimits: 10047). It is accounting
//     only: once messages are deleted or purged the next write succeeds,
//     with no restart (TestStoreFillsAndRecovers).
//   - The disk itself full (ENOSPC). The filestore keeps the error
//     (filestore.go setWriteErr, msgBlock.werr) and returns it for every
//     later write of the stream, a purge included (10051 with the ENOSPC
//     text); the stream keeps it too (stream.go setWriteErrLocked, "critical
//     write error"); neither is ever cleared. On a single server the
//     publisher gets no answer at all (the default branch after
//     store.StoreMsg in processJetStreamMsg returns without responding), so
//     clients see timeouts, and JetStream stays enabled. A raft or
//     replicated write that hits ENOSPC disables JetStream instead
//     (jetstream.go handleOutOfSpace, "JetStream out of resources, will be
//     DISABLED"). Nothing but a config reload or a restart brings either
//     back: see Server.Failed for what toolbus does.

// JetStream API error codes of a full store (nats-server's errors.json).
const (
	errCodeAccountResourcesExceeded jetstream.ErrorCode = 10002 // JSAccountResourcesExceededErr: the account's limit
	errCodeInsufficientResources    jetstream.ErrorCode = 10023 // JSInsufficientResourcesErr: the server's max store (or max memory) used up
	errCodeMemoryResourcesExceeded  jetstream.ErrorCode = 10028 // JSMemoryResourcesExceededErr: a memory stream does not fit
	errCodeStorageResourcesExceeded jetstream.ErrorCode = 10047 // JSStorageResourcesExceededErr: a file stream's MaxBytes does not fit in what is not reserved
	placementNoStorage                                  = "insufficient storage"
	noSpaceLeft                                         = "no space left"
)

// IsStoreFull reports an error that means the JetStream store is full: the
// server's or the account's JetStream store limit is used up (10023, 10047,
// 10028, 10002), no peer of a cluster has the storage to place a stream
// (10005 "... insufficient storage"), or the disk is (ENOSPC, as such or
// in an API error's text). A stream's own limits (MaxBytes, MaxMsgs with
// DiscardNew: "maximum bytes exceeded") are not a full store and are not
// reported.
func IsStoreFull(err error) bool {
	_, ok := storeFullKind(err)
	return ok
}

// storeFull is what is full.
type storeFull int

const (
	fullServerLimit storeFull = iota // the server's max store
	fullReserved                     // the streams' MaxBytes would exceed the max store
	fullMemory                       // the server's max memory
	fullAccount                      // the account's limit
	fullPlacement                    // no cluster peer has room
	fullDisk                         // the disk (ENOSPC)
)

func storeFullKind(err error) (storeFull, bool) {
	if err == nil {
		return 0, false
	}
	if errors.Is(err, syscall.ENOSPC) {
		return fullDisk, true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		// A server error passed on as text (e.g. Server.Err) still says so.
		return fullDisk, strings.Contains(err.Error(), noSpaceLeft)
	}
	switch apiErr.ErrorCode {
	case errCodeInsufficientResources:
		return fullServerLimit, true
	case errCodeStorageResourcesExceeded:
		return fullReserved, true
	case errCodeMemoryResourcesExceeded:
		return fullMemory, true
	case errCodeAccountResourcesExceeded:
		return fullAccount, true
	case errCodeNoPeers:
		return fullPlacement, strings.Contains(apiErr.Description, placementNoStorage)
	}
	// A store failure (10077) or a stream that could not be created carries
	// the filestore's error as text.
	return fullDisk, strings.Contains(apiErr.Description, noSpaceLeft)
}

// FullStoreError is a full store named: which node, what is full, and what
// to do. [StoreFullError] and the embedded server's Server.StoreFullError (package
// bus/server) make one; a caller that knows the node's limits may fill in MaxStore and
// MaxMemory itself.
type FullStoreError struct {
	Node string
	// MaxStore and MaxMemory are the node's JetStream limits in bytes, for
	// the message; zero when unknown.
	MaxStore, MaxMemory int64
	Err                 error // an error IsStoreFull reports
}

func (e *FullStoreError) Error() string {
	kind, _ := storeFullKind(e.Err)
	var what, fix string
	switch kind {
	case fullServerLimit:
		what, fix = "its JetStream store limit is used up", "free space (delete or purge messages) or raise -max-store"
		if e.MaxStore > 0 {
			what = "JetStream max store " + friendlyBytes(e.MaxStore) + " used up"
		}
	case fullReserved:
		what, fix = "the streams' MaxBytes would exceed its JetStream store limit", "give the stream a smaller MaxBytes, delete a stream or raise -max-store"
		if e.MaxStore > 0 {
			what = "the streams' MaxBytes would exceed JetStream max store " + friendlyBytes(e.MaxStore)
		}
	case fullMemory:
		what, fix = "its JetStream memory limit is used up", "free memory (delete or purge messages of memory streams) or raise -max-memory"
		if e.MaxMemory > 0 {
			what = "JetStream max memory " + friendlyBytes(e.MaxMemory) + " used up"
		}
	case fullAccount:
		what, fix = "the account's JetStream limit is used up", "free space (delete or purge messages) or raise the account's limit"
	case fullPlacement:
		what, fix = "no node of the cluster has room for the stream", "free space or raise -max-store on the nodes"
	case fullDisk:
		what, fix = "no space left on the disk", "free disk space, then restart the node if it has not restarted by itself"
	}
	return fmt.Sprintf("node %s's store is full (%s): %s: %v", e.Node, what, fix, e.Err)
}

func (e *FullStoreError) Unwrap() error { return e.Err }

// StoreFullError wraps err in a [*FullStoreError] naming node when
// IsStoreFull(err), and returns any other err (nil included) as it is. So a
// store can pass every write error through it:
//
//	if _, err := kv.Put(ctx, key, b); err != nil {
//		return bus.StoreFullError(node, err)
//	}
func StoreFullError(node string, err error) error {
	if !IsStoreFull(err) {
		return err
	}
	var fe *FullStoreError
	if errors.As(err, &fe) {
		return err // named already
	}
	return &FullStoreError{Node: node, Err: err}
}

// friendlyBytes writes n in the largest binary unit that keeps it whole or
// nearly: 8 MiB, 1.5 GiB, 512 B.
func friendlyBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string(units[u]) + "iB"
}
