package actors

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// workers runs a node's short jobs (a turn's mailbox burst, a host's call) on goroutines
// that outlive them. A new goroutine starts with a small stack and grows it, copying it
// each time, as a turn validates arguments or a host encodes a reply: a sixth of a call's
// processor time went there when every burst and every call had a goroutine of its own. A
// worker keeps its grown stack for the next job.
//
// workers is also a protoactor dispatcher (Schedule, Throughput), so turn mailboxes run
// on it.
type workers struct {
	jobs chan func() // unbuffered: a send succeeds only when a worker waits for a job
	quit chan struct{}

	mu      sync.Mutex
	n       int // live workers
	closed  bool
	wg      sync.WaitGroup
	maxIdle int
}

const (
	// workerIdle is how long a worker waits for a job before it ends.
	workerIdle = 10 * time.Second
	// mailboxThroughput is the messages a turn's mailbox handles before it yields
	// (protoactor's default).
	mailboxThroughput = 300
)

func newWorkers(maxIdle int) *workers {
	return &workers{jobs: make(chan func()), quit: make(chan struct{}), maxIdle: maxIdle}
}

// Go runs fn on a waiting worker, or on a new one when none waits. It never blocks. After
// close, fn runs on a goroutine of its own.
func (w *workers) Go(fn func()) {
	select {
	case w.jobs <- fn:
		return
	default:
	}
	w.mu.Lock()
	keep := !w.closed && w.n < w.maxIdle
	if keep {
		w.n++
		w.wg.Add(1)
	}
	w.mu.Unlock()
	if !keep {
		go fn()
		return
	}
	go w.work(fn)
}

// work runs fn, then further jobs until it has waited workerIdle for one or the pool
// closes.
func (w *workers) work(fn func()) {
	defer w.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(workerIdle)
		select {
		case fn = <-w.jobs:
		case <-idle.C:
			w.mu.Lock()
			w.n--
			w.mu.Unlock()
			return
		case <-w.quit:
			w.mu.Lock()
			w.n--
			w.mu.Unlock()
			return
		}
	}
}

// Schedule implements actor.Dispatcher.
func (w *workers) Schedule(fn func()) { w.Go(fn) }

// Throughput implements actor.Dispatcher.
func (w *workers) Throughput() int { return mailboxThroughput }

var _ actor.Dispatcher = (*workers)(nil)

// close ends the idle workers, and the busy ones as they finish their jobs, waiting for
// them at most patience: a job that never returns (a tool that ignores its context) is not
// waited for forever.
func (w *workers) close(patience time.Duration) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	close(w.quit)
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(patience):
	}
}

// goFunc runs fn on w, or on a goroutine of its own without w (a turn or host made
// outside a node).
func (w *workers) goFunc(fn func()) {
	if w == nil {
		go fn()
		return
	}
	w.Go(fn)
}

// turnDispatcher runs a turn's mailbox on the node's workers, or at once on the
// goroutine that sends it a message when that goroutine is one of the turn's own and has
// nothing else to do but wait for its next message: the turn's subscription (a reply),
// a model call's worker (the response, or an item as it streams). Each hand-off to a
// worker wakes a parked goroutine while the sender parks; a step of one call made two.
// Only a sender that says so (sendInline) runs the mailbox; one that sends while another
// does may run it too, which is no harm: every goroutine that sends to a turn can wait
// for a message of the turn to be handled (none holds a lock the turn takes, and the
// turn never waits on its sender).
type turnDispatcher struct {
	w      *workers
	inline atomic.Int32
}

// Schedule implements actor.Dispatcher.
func (d *turnDispatcher) Schedule(fn func()) {
	if d.inline.Load() > 0 {
		fn()
		return
	}
	d.w.goFunc(fn)
}

// Throughput implements actor.Dispatcher.
func (d *turnDispatcher) Throughput() int { return mailboxThroughput }

// sendInline sends msg to the turn, handling it on this goroutine if the turn's mailbox
// is idle.
func (d *turnDispatcher) sendInline(sys *actor.ActorSystem, pid *actor.PID, msg any) {
	d.inline.Add(1)
	defer d.inline.Add(-1)
	sys.Root.Send(pid, msg)
}
