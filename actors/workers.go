package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/toolbus/toolbus/internal/workpool"
)

// workers runs a node's short jobs (a turn's mailbox burst, a model call, a host's call)
// on goroutines that keep their grown stacks (package workpool). It is also a protoactor
// dispatcher (Schedule, Throughput), so turn mailboxes run on it.
type workers struct{ *workpool.Pool }

// mailboxThroughput is the messages a turn's mailbox handles before it yields
// (protoactor's default).
const mailboxThroughput = 300

func newWorkers(maxIdle int) *workers { return &workers{workpool.New(maxIdle)} }

// Schedule implements actor.Dispatcher.
func (w *workers) Schedule(fn func()) { w.Go(fn) }

// Throughput implements actor.Dispatcher.
func (w *workers) Throughput() int { return mailboxThroughput }

var _ actor.Dispatcher = (*workers)(nil)

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
