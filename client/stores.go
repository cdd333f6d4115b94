package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/brain/pages"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/profile"
	"github.com/toolbus/toolbus/toolsets/schedule"
)

// What the bus keeps in JetStream for its agents, read (and for profiles and pages,
// written) from the caller's side.

// Profiles opens the agent profiles of the bus, creating their bucket if this is the
// first profile: package profile's store, which reads and writes them on the client's
// own JetStream, each document checked against its version's schema before it is stored.
func (c *Client) Profiles(ctx context.Context) (*profile.Profiles, error) {
	js, err := c.JetStream()
	if err != nil {
		return nil, fmt.Errorf("agent profiles: %w", err)
	}
	return profile.OpenProfiles(ctx, js, 1)
}

// Pages opens the knowledge pages of the bus's agents: package pages' store, which reads
// and writes them on the client's own JetStream, each page checked by the rules the
// brain category keeps. Searching them (recall) is the brain's, on a node: call its
// tools, or open package brain's store on JetStream(), which links an index.
func (c *Client) Pages(ctx context.Context) (*pages.Store, error) {
	js, err := c.JetStream()
	if err != nil {
		return nil, fmt.Errorf("knowledge pages: %w", err)
	}
	return pages.Open(ctx, js, pages.Options{})
}

// ErrNoRecords reports a bus that keeps no records of a kind yet (its bucket was never
// made: no job started, no schedule made).
var ErrNoRecords = errors.New("the bus keeps none yet")

// bucket opens a bucket of the bus for reading; ErrNoRecords when it has none.
func (c *Client) bucket(ctx context.Context, name string) (jetstream.KeyValue, error) {
	js, err := c.JetStream()
	if err != nil {
		return nil, err
	}
	kv, err := bus.OpenKeyValue(ctx, js, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%s: %w", name, ErrNoRecords)
	}
	return kv, bus.NoJetStream(name, err)
}

// Jobs lists the background jobs kept on the bus, newest first: of agent, or of every
// agent when agent is empty. None yet is an empty list.
func (c *Client) Jobs(ctx context.Context, agent string) ([]jobs.Job, error) {
	return listRecords(ctx, c, bus.BucketJobs, agent, jobs.List)
}

// Job reads one background job; jobs.ErrNotFound when the bus has no such job.
func (c *Client) Job(ctx context.Context, id string) (jobs.Job, error) {
	return findRecord(ctx, c, bus.BucketJobs, id, jobs.Find)
}

// Schedules lists the schedules kept on the bus: of agent, or of every agent.
func (c *Client) Schedules(ctx context.Context, agent string) ([]schedule.Schedule, error) {
	return listRecords(ctx, c, bus.BucketSchedules, agent, schedule.List)
}

// Schedule reads one schedule; schedule.ErrNotFound when the bus has no such schedule.
func (c *Client) Schedule(ctx context.Context, id string) (schedule.Schedule, error) {
	return findRecord(ctx, c, bus.BucketSchedules, id, schedule.Find)
}

func listRecords[T any](ctx context.Context, c *Client, bucket, agent string, list func(context.Context, jetstream.KeyValue, string) ([]T, error)) ([]T, error) {
	kv, err := c.bucket(ctx, bucket)
	if errors.Is(err, ErrNoRecords) {
		return []T{}, nil
	}
	if err != nil {
		return nil, err
	}
	return list(ctx, kv, agent)
}

func findRecord[T any](ctx context.Context, c *Client, bucket, id string, find func(context.Context, jetstream.KeyValue, string) (T, error)) (T, error) {
	var none T
	kv, err := c.bucket(ctx, bucket)
	if err != nil {
		return none, err
	}
	return find(ctx, kv, id)
}

// WorkflowWatch follows workflows as they run: the statuses of every turn (a task
// turn's id is "<workflow>-<task>-<attempt>") and, once Document is called, each stored
// revision of one workflow's document, in the order they happened.
//
// The order holds because the node that ends a task turn publishes the turn's last
// status before it writes the workflow, on one connection: the statuses come on a
// channel subscription, which the connection's reader fills as it reads, and the
// revisions through the KV watcher's goroutine; so when a revision arrives, the statuses
// published before it are in the subscription's channel, and are delivered first.
//
// The document comes from a KV watcher, not a subscription to "$KV.<bucket>.<key>":
// that subject carries every write published, the ones the stream refused too (a
// compare-and-set write that lost the race, errors 10071 and 10164), and such a write
// would show a task ending twice. A watcher delivers only stored revisions, each once.
type WorkflowWatch struct {
	// C delivers the statuses and revisions, one WorkflowEvent each.
	C <-chan WorkflowEvent

	c        *Client
	out      chan WorkflowEvent
	sub      *nats.Subscription
	statuses chan *nats.Msg
	docs     chan (<-chan jetstream.KeyValueEntry) // hands Document's watcher to run
	done     chan struct{}
	once     sync.Once

	mu     sync.Mutex
	kw     jetstream.KeyWatcher
	cancel context.CancelFunc
}

// WorkflowEvent is a turn's status or a revision of the watched workflow.
type WorkflowEvent struct {
	Status *bus.TurnMessage
	Doc    *bus.Workflow
}

// workflowBuffer holds the statuses of a busy bus while a revision is shown.
const workflowBuffer = 1024

// WatchWorkflows subscribes to every turn's statuses; call it before starting the
// workflow, then Document once its id is known.
func (c *Client) WatchWorkflows() (*WorkflowWatch, error) {
	w := &WorkflowWatch{c: c, out: make(chan WorkflowEvent, workflowBuffer), statuses: make(chan *nats.Msg, workflowBuffer),
		docs: make(chan (<-chan jetstream.KeyValueEntry), 1), done: make(chan struct{})}
	w.C = w.out
	sub, err := c.nc.ChanSubscribe(bus.AllStatuses, w.statuses)
	if err != nil {
		return nil, fmt.Errorf("watch workflows: %w", err)
	}
	w.sub = sub
	if err := c.nc.Flush(); err != nil {
		w.Stop()
		return nil, fmt.Errorf("watch workflows: %w", err)
	}
	go w.run()
	return w, nil
}

// Document starts watching the document of the workflow id of agent: its latest stored
// revision first, then each one stored after it. Creating the watcher must succeed
// within DialTimeout; the watch lasts until Stop or ctx ends. A watch follows one
// document.
func (w *WorkflowWatch) Document(ctx context.Context, agent, id string) error {
	js, err := w.c.JetStream()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	// The watcher's subscription ends with its context, so its creation is bounded by
	// a timer rather than by a deadline.
	late := time.AfterFunc(DialTimeout, cancel)
	kv, err := js.KeyValue(wctx, bus.BucketWorkflows)
	var kw jetstream.KeyWatcher
	if err == nil {
		kw, err = kv.Watch(wctx, bus.WorkflowKey(agent, id), jetstream.IgnoreDeletes())
	}
	if !late.Stop() && err == nil {
		_ = kw.Stop()
		err = fmt.Errorf("not created within %s", DialTimeout)
	}
	if err != nil {
		cancel()
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		err = errors.New("the workflow watch was stopped")
	default:
		if w.kw != nil {
			err = errors.New("a workflow watch follows one document")
		}
	}
	if err != nil {
		_ = kw.Stop()
		cancel()
		return err
	}
	w.kw, w.cancel = kw, cancel
	w.docs <- kw.Updates()
	return nil
}

// run forwards statuses, and each revision after the statuses that came before it.
func (w *WorkflowWatch) run() {
	send := func(ev WorkflowEvent) bool {
		select {
		case w.out <- ev:
			return true
		case <-w.done:
			return false
		}
	}
	status := func(m *nats.Msg) bool {
		tm, err := bus.DecodeTurnMessage(m)
		if err != nil || tm.Status == nil {
			return true
		}
		return send(WorkflowEvent{Status: &tm})
	}
	var docs <-chan jetstream.KeyValueEntry
	for {
		select {
		case <-w.done:
			return
		case docs = <-w.docs:
		case m := <-w.statuses:
			if !status(m) {
				return
			}
		case e, ok := <-docs:
			if !ok {
				docs = nil // the watcher ended; statuses go on
				continue
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // the end of the initial values, or not a document
			}
			for n := len(w.statuses); n > 0; n-- {
				if !status(<-w.statuses) {
					return
				}
			}
			var wf bus.Workflow
			if json.Unmarshal(e.Value(), &wf) == nil && !send(WorkflowEvent{Doc: &wf}) {
				return
			}
		}
	}
}

// Stop ends the watch.
func (w *WorkflowWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		_ = w.sub.Unsubscribe()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.kw != nil {
			_ = w.kw.Stop()
			w.cancel()
		}
	})
}
