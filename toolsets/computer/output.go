package computer

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
)

// capture keeps the head and the tail of a stream, limit bytes in all, and counts the rest.
// A command's first lines say what it did and its last lines how it ended; the middle of a
// long build log is what the model can most afford to lose.
type capture struct {
	mu      sync.Mutex
	headMax int
	tailMax int
	head    []byte
	tail    []byte // holds at least the last tailMax bytes once the head is full
	total   int64
}

func newCapture(limit int) *capture {
	head := limit / 2
	return &capture{headMax: head, tailMax: limit - head, head: make([]byte, 0, min(head, 4096))}
}

// Write never fails: output beyond the limit is counted, not kept.
func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	q := p
	if room := c.headMax - len(c.head); room > 0 {
		n := min(room, len(q))
		c.head = append(c.head, q[:n]...)
		q = q[n:]
	}
	if len(q) == 0 {
		return len(p), nil
	}
	if len(q) >= c.tailMax {
		c.tail = append(c.tail[:0], q[len(q)-c.tailMax:]...)
		return len(p), nil
	}
	c.tail = append(c.tail, q...)
	// Compact only when the buffer has doubled, so appends stay amortised O(1).
	if len(c.tail) > 2*c.tailMax {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-c.tailMax:]...)
	}
	return len(p), nil
}

// Total is the number of bytes written.
func (c *capture) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Output is the kept text and the number of bytes cut from the middle. The cut falls on
// line boundaries when a newline is near, and never splits a UTF-8 sequence.
func (c *capture) Output() (string, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tail := c.tail
	if len(tail) > c.tailMax {
		tail = tail[len(tail)-c.tailMax:]
	}
	kept := int64(len(c.head) + len(tail))
	if kept == c.total {
		return strings.ToValidUTF8(string(c.head)+string(tail), "\uFFFD"), 0
	}
	head := validPrefix(c.head)
	if i := bytes.LastIndexByte(head, '\n'); i >= len(head)*3/4 {
		head = head[:i+1]
	}
	tail = validSuffix(tail)
	if i := bytes.IndexByte(tail, '\n'); i >= 0 && i < len(tail)/4 {
		tail = tail[i+1:]
	}
	cut := c.total - int64(len(head)) - int64(len(tail))
	var b strings.Builder
	b.Grow(len(head) + len(tail) + 64)
	b.WriteString(strings.ToValidUTF8(string(head), "\uFFFD"))
	if len(head) > 0 && head[len(head)-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[… %s of output cut (%d bytes) …]\n", formatSize(cut), cut)
	b.WriteString(strings.ToValidUTF8(string(tail), "\uFFFD"))
	return b.String(), cut
}
