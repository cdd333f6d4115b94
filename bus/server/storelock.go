package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// StoreLockFile is the lock file a running server holds in its store
// directory. It names the holder; its lock, not its presence, is what counts:
// the file stays behind when the server stops.
const StoreLockFile = "toolbus.lock"

// StoreLockHolder is what a lock file says about the server holding it.
type StoreLockHolder struct {
	Node  string    `json:"node"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
}

// StoreDirInUseError is the error of [Start] when another server, in this
// process or another, holds the store directory. Two JetStream servers on
// one directory each restore the streams and then write over the other's
// blocks.
type StoreDirInUseError struct {
	Dir string
	// Holder is the zero value when the lock file could not be read (the
	// holder had not written it yet, or it is not ours).
	Holder StoreLockHolder
}

func (e *StoreDirInUseError) Error() string {
	who := "another server (it does not say which)"
	if h := e.Holder; h.PID != 0 {
		who = fmt.Sprintf("node %s (pid %d, since %s)", h.Node, h.PID, h.Since.Format(time.RFC3339))
	}
	return fmt.Sprintf("store directory %s is in use by %s; stop it or give this node another -store-dir", e.Dir, who)
}

// storeLock is an exclusive flock on <dir>/toolbus.lock, held for the life
// of a server. flock is per open file description: the kernel releases it
// when the process dies however it dies, and a second open of the file in
// the same process conflicts like another process does, so one mechanism
// covers a second node and a second Server in one test binary.
type storeLock struct {
	f *os.File
}

// lockStoreDir creates dir if needed and locks it for node, or returns a
// *StoreDirInUseError naming the holder.
func lockStoreDir(dir, node string) (*storeLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create store dir: %w", err)
	}
	path := filepath.Join(dir, StoreLockFile)
	// Never truncated on open: the holder's record must survive others'
	// attempts.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open store lock: %w", err)
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &StoreDirInUseError{Dir: dir, Holder: readHolder(path)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	rec, _ := json.Marshal(StoreLockHolder{Node: node, PID: os.Getpid(), Since: time.Now().Truncate(time.Second)})
	// A failed write (a full disk) is no reason to refuse to start: the lock
	// holds regardless, and a refused server then says only that the
	// directory is in use.
	if f.Truncate(0) == nil {
		_, _ = f.WriteAt(append(rec, '\n'), 0)
	}
	return &storeLock{f: f}, nil
}

// readHolder reads the lock file of another server. That server writes it
// just after it takes the lock, so an empty or torn file is read again for a
// moment before giving up.
func readHolder(path string) StoreLockHolder {
	var h StoreLockHolder
	for range 5 {
		b, err := os.ReadFile(path)
		if err == nil && json.Unmarshal(b, &h) == nil && h.PID != 0 {
			return h
		}
		time.Sleep(10 * time.Millisecond)
	}
	return StoreLockHolder{}
}

// release empties the record, so that a file left behind does not name a
// node that is gone, and drops the lock.
func (l *storeLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
}

// flock retries EINTR, which a signal may cause even with LOCK_NB.
func flock(f *os.File, how int) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := conn.Control(func(fd uintptr) {
		for {
			if ferr = syscall.Flock(int(fd), how); !errors.Is(ferr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}
