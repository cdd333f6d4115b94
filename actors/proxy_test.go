package actors

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
)

// proxy forwards TCP connections to a server; the test can cut them, make them swallow
// what clients write (a connection that is dead but not closed, one way), or partition
// them: silent both ways, as over a network cut without a word.
type proxy struct {
	url  string
	addr string // the server's host:port

	mu       sync.Mutex
	conns    []net.Conn
	accepted int
	hole     bool
	eaten    bytes.Buffer
	silent   map[net.Conn]bool // both ends of the connections partition cut off
}

func startProxy(t *testing.T, server string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{url: "nats://" + l.Addr().String(), addr: strings.TrimPrefix(server, "nats://"), silent: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		p.cut()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.accepted++
			p.hole = false
			p.mu.Unlock()
			wg.Go(func() { p.pipe(s, c, true) })
			wg.Go(func() { p.pipe(c, s, false) })
		}
	})
	return p
}

// pipe copies from src to dst: from the client, into the black hole while there is one;
// from a partitioned connection's end, into nothing. When src ends, both ends close,
// but for a partitioned connection only src's: the other end stays open until its own
// side closes it (a client that gives such a connection up leaves the server's end open).
func (p *proxy) pipe(dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		silent := p.silent[src]
		eat := !silent && fromClient && p.hole
		if n > 0 && eat {
			p.eaten.Write(buf[:n])
		}
		p.mu.Unlock()
		if n > 0 && !eat && !silent {
			if _, err := dst.Write(buf[:n]); err != nil {
				_ = dst.Close()
				_ = src.Close()
				return
			}
		}
		if err != nil {
			_ = src.Close()
			if !silent {
				_ = dst.Close()
			}
			return
		}
	}
}

func (p *proxy) blackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
}

// partition cuts off every connection the proxy carries now; later ones are carried.
func (p *proxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		p.silent[c] = true
	}
}

func (p *proxy) swallowed(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Contains(p.eaten.Bytes(), []byte(s))
}

func (p *proxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// cut closes every connection through the proxy; clients connect again.
func (p *proxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
