package workpool

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPool: jobs run, an idle worker takes the next job instead of a new goroutine,
// Close ends idle workers and does not wait forever for a job that never returns, and a
// job given after Close still runs.
func TestPool(t *testing.T) {
	t.Parallel()
	p := New(4)
	var ran atomic.Int32
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		p.Go(func() { ran.Add(1); wg.Done() })
	}
	wg.Wait()
	if n := ran.Load(); n != 100 {
		t.Fatalf("%d jobs ran, want 100", n)
	}
	if live := p.Live(); live < 1 || live > 4 {
		t.Errorf("%d workers kept, want 1 to 4", live)
	}

	stuck := make(chan struct{})
	defer close(stuck)
	p.Go(func() { <-stuck })
	start := time.Now()
	p.Close(100 * time.Millisecond)
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("Close waited %v for a job that never returns", waited)
	}
	done := make(chan struct{})
	p.Go(func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a job given after Close did not run")
	}
}

// BenchmarkGo is a job that encodes and decodes a tool reply's shape, as a host's call
// does, handed to a waiting worker against a goroutine per job.
func BenchmarkGo(b *testing.B) {
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type reply struct {
		Call    string          `json:"call_id"`
		Tool    string          `json:"tool"`
		Outcome string          `json:"outcome"`
		Content []part          `json:"content"`
		Details json.RawMessage `json:"details"`
	}
	r := reply{Call: "c1", Tool: "noop", Outcome: "ok", Content: []part{{Type: "text", Text: "ok"}}, Details: json.RawMessage(`{"a":[1,2,{"b":"c"}]}`)}
	job := func() {
		data, _ := json.Marshal(r)
		var back reply
		_ = json.Unmarshal(data, &back)
	}
	b.Run("pool", func(b *testing.B) {
		p := New(8)
		defer p.Close(time.Second)
		done := make(chan struct{})
		for b.Loop() {
			p.Go(func() { job(); done <- struct{}{} })
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
