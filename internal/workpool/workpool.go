// Package workpool runs short jobs (a turn's mailbox burst, a host's call) on goroutines
// that outlive them. A new goroutine starts with a small stack and grows it, copying it
// each time, as a turn validates arguments or a host encodes a reply: a sixth of a
// node's processor time a call went there when every burst and every call had a
// goroutine of its own. A worker keeps its grown stack for the next job.
package workpool

import (
	"sync"
	"time"
)

// Idle is how long a worker waits for a job before it ends.
const Idle = 10 * time.Second

// Pool is a set of workers. The zero value is not usable: see New.
type Pool struct {
	jobs chan func() // unbuffered: a send succeeds only when a worker waits for a job
	quit chan struct{}

	mu      sync.Mutex
	n       int // live workers
	closed  bool
	wg      sync.WaitGroup
	maxIdle int
}

// New is a pool that keeps at most maxIdle workers (those past it end with their job).
func New(maxIdle int) *Pool {
	return &Pool{jobs: make(chan func()), quit: make(chan struct{}), maxIdle: maxIdle}
}

// Go runs fn on a waiting worker, or on a new one when none waits. It never blocks. After
// Close, fn runs on a goroutine of its own.
func (p *Pool) Go(fn func()) {
	select {
	case p.jobs <- fn:
		return
	default:
	}
	p.mu.Lock()
	keep := !p.closed && p.n < p.maxIdle
	if keep {
		p.n++
		p.wg.Add(1)
	}
	p.mu.Unlock()
	if !keep {
		go fn()
		return
	}
	go p.work(fn)
}

// work runs fn, then further jobs until it has waited Idle for one or the pool closes.
func (p *Pool) work(fn func()) {
	defer p.wg.Done()
	idle := time.NewTimer(Idle)
	defer idle.Stop()
	for {
		fn()
		idle.Reset(Idle)
		select {
		case fn = <-p.jobs:
		case <-idle.C:
			p.mu.Lock()
			p.n--
			p.mu.Unlock()
			return
		case <-p.quit:
			p.mu.Lock()
			p.n--
			p.mu.Unlock()
			return
		}
	}
}

// Live is the number of workers, busy or waiting.
func (p *Pool) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// Close ends the idle workers, and the busy ones as they finish their jobs, waiting for
// them at most patience: a job that never returns (a tool that ignores its context) is not
// waited for forever. Close is idempotent.
func (p *Pool) Close(patience time.Duration) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	close(p.quit)
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(patience):
	}
}
