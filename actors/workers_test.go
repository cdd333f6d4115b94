package actors

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
)

// TestWorkers: jobs run, an idle worker takes the next job instead of a new goroutine,
// close ends idle workers and does not wait forever for a job that never returns, and a
// job given after close still runs.
func TestWorkers(t *testing.T) {
	t.Parallel()
	w := newWorkers(4)
	var ran atomic.Int32
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		w.Go(func() { ran.Add(1); wg.Done() })
	}
	wg.Wait()
	if n := ran.Load(); n != 100 {
		t.Fatalf("%d jobs ran, want 100", n)
	}
	w.mu.Lock()
	live := w.n
	w.mu.Unlock()
	if live < 1 || live > 4 {
		t.Errorf("%d workers kept, want 1 to 4", live)
	}

	stuck := make(chan struct{})
	defer close(stuck)
	w.Go(func() { <-stuck })
	start := time.Now()
	w.close(100 * time.Millisecond)
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("close waited %v for a job that never returns", waited)
	}
	done := make(chan struct{})
	w.Go(func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a job given after close did not run")
	}
}

// BenchmarkWorkersGo is a job that encodes and decodes a tool reply, as a host's call
// does, handed to a waiting worker against a goroutine per job.
func BenchmarkWorkersGo(b *testing.B) {
	reply := bus.ToolReply{Call: "c1", Tool: "noop", Outcome: bus.OutcomeOK,
		Content: []bus.ContentPart{{Type: "text", Text: "ok"}}, Details: json.RawMessage(`{"a":[1,2,{"b":"c"}]}`)}
	job := func() {
		data, _ := json.Marshal(reply)
		var r bus.ToolReply
		_ = json.Unmarshal(data, &r)
	}
	b.Run("pool", func(b *testing.B) {
		w := newWorkers(8)
		defer w.close(time.Second)
		done := make(chan struct{})
		for b.Loop() {
			w.Go(func() { job(); done <- struct{}{} })
			<-done
		}
	})
	b.Run("goroutine", func(b *testing.B) {
		done := make(chan struct{})
		for b.Loop() {
			go func() { job(); done <- struct{}{} }()
			<-done
		}
	})
}
