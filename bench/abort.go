package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/toolsets"
)

// abortLatency starts a turn with `inflight` blocked calls, publishes its
// abort, and measures until the last call's context is cancelled.
func (s *suite) abortLatency(ctx context.Context, inflight, rounds int) (Row, error) {
	set, err := toolbus.NewSet(&s.block.Spec)
	if err != nil {
		return Row{}, err
	}
	ctl, err := s.node.Connect("bench-abort")
	if err != nil {
		return Row{}, err
	}
	defer ctl.Close()
	// Made once: the timed abort is a publish and a flush, not a client's setup.
	cl := client.New(ctl, client.Where("the bench's bus"))
	var samples []time.Duration
	for round := range rounds + 1 {
		r := &blockRound{}
		r.started.Add(inflight)
		r.done.Add(inflight)
		s.blockCh.Store(r)
		m := &stepModel{tool: s.block.Name, calls: inflight, steps: 1}
		done := make(chan actors.TurnResult, 1)
		id, err := s.node.Actors().Spawn(ctx, actors.TurnConfig{Model: m, Kit: toolsets.NewKit(set),
			Spec: bus.TurnSpec{Input: "bench", Limits: bus.TurnLimits{MaxSteps: 2}}, Done: func(r actors.TurnResult) { done <- r }})
		if err != nil {
			return Row{}, err
		}
		r.started.Wait()
		t0 := time.Now()
		if err := cl.Abort(ctx, id, "bench"); err != nil {
			return Row{}, err
		}
		r.done.Wait()
		res := <-done
		if res.State != bus.TurnAborted {
			return Row{}, fmt.Errorf("abort: turn ended %s", res.State)
		}
		if round == 0 {
			continue // warm-up
		}
		last := slices.MaxFunc(r.cancelled, time.Time.Compare)
		samples = append(samples, last.Sub(t0))
	}
	res := latency(fmt.Sprintf("abort → all %d in-flight calls cancelled", inflight), samples, "")
	res.Target = "p99 ≤ 2000 µs"
	met := res.P99 <= 2000
	res.Met = &met
	return res, nil
}

// waitingTurns starts n turns whose model never answers, measures what each costs the
// node in memory (heap and stacks, after a collection, against before them), then
// aborts them all and measures until the last one ended.
func (s *suite) waitingTurns(ctx context.Context, n int) ([]Row, error) {
	set, err := toolbus.NewSet(&s.noop.Spec)
	if err != nil {
		return nil, err
	}
	ctl, err := s.node.Connect("bench-waiting")
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	inUse := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse + ms.StackInuse
	}
	before := inUse()
	var waiting, ended sync.WaitGroup
	waiting.Add(n)
	ended.Add(n)
	m := &waitModel{waiting: &waiting}
	var aborted atomic.Int64
	ids := make([]string, 0, n)
	for range n {
		id, err := s.node.Actors().Spawn(ctx, actors.TurnConfig{Model: m, Kit: toolsets.NewKit(set),
			Spec: bus.TurnSpec{Input: "wait"},
			Done: func(r actors.TurnResult) {
				if r.State == bus.TurnAborted {
					aborted.Add(1)
				}
				ended.Done()
			}})
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	waiting.Wait()
	per := float64(inUse()-min(before, inUse())) / float64(n) / 1024
	// The aborts go out as one burst (client.Abort flushes each, a round trip apiece).
	abort, err := json.Marshal(bus.Abort{Reason: "bench"})
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	for _, id := range ids {
		if err := ctl.Publish(bus.AbortSubject(id), abort); err != nil {
			return nil, err
		}
	}
	if err := ctl.Flush(); err != nil {
		return nil, err
	}
	ended.Wait()
	took := time.Since(t0)
	if a := aborted.Load(); a != int64(n) {
		return nil, fmt.Errorf("waiting turns: %d of %d ended aborted", a, n)
	}
	memMet, abortMet := per <= 64, took <= time.Second
	return []Row{
		{Name: fmt.Sprintf("memory per turn waiting on its model, %d turns", n), Unit: "KiB", Value: per, Samples: n,
			Target: "≤ 64 KiB", Met: &memMet},
		{Name: fmt.Sprintf("abort of %d waiting turns, until the last ended", n), Unit: "ms",
			Value: float64(took) / float64(time.Millisecond), Samples: n, Target: "≤ 1000 ms", Met: &abortMet},
	}, nil
}
