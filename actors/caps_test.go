package actors

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/gateway"
)

// gated is a parallel tool whose calls each wait until the test opens their gate; it
// records the order they started in and the most in flight at once.
type gated struct {
	mu      sync.Mutex
	gates   map[string]chan struct{}
	order   []string
	running int
	peak    int
	byCat   map[string]int // running, by category
	peakCat int            // the most of one category running at once
	started chan string
}

func newGated() *gated {
	return &gated{gates: map[string]chan struct{}{}, byCat: map[string]int{}, started: make(chan string, 64)}
}

func (g *gated) gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[id] == nil {
		g.gates[id] = make(chan struct{})
	}
	return g.gates[id]
}

func (g *gated) tool(name, category string) *toolbus.Tool {
	return toolbus.MustDefine(toolbus.Def[idArgs]{
		Spec: toolbus.Spec{Name: name, Category: category, Mode: toolbus.Parallel, Timeout: 30 * time.Second},
		Execute: func(ctx context.Context, _ toolbus.Call, a idArgs) (toolbus.Result, error) {
			g.mu.Lock()
			g.order = append(g.order, a.ID)
			g.running++
			g.byCat[category]++
			g.peak, g.peakCat = max(g.peak, g.running), max(g.peakCat, g.byCat[category])
			g.mu.Unlock()
			defer func() {
				g.mu.Lock()
				g.running--
				g.byCat[category]--
				g.mu.Unlock()
			}()
			g.started <- a.ID
			select {
			case <-g.gate(a.ID):
				return toolbus.TextResult("done " + a.ID), nil
			case <-ctx.Done():
				return toolbus.Result{}, ctx.Err()
			}
		},
	})
}

func (g *gated) open(id string) { close(g.gate(id)) }

func (g *gated) next(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.started:
		return id
	case <-time.After(20 * time.Second):
		t.Fatal("no call started")
		return ""
	}
}

// runCapped runs one response of calls (tool name, id) with the turn's caps, then "done".
func runCapped(t *testing.T, h *harness, tools []*toolbus.Tool, maxCalls, perCategory int, calls [][2]string) <-chan TurnResult {
	var sc []gateway.ScriptCall
	for _, c := range calls {
		sc = append(sc, gateway.ScriptCall{ID: "c_" + c[1], Name: c[0], Arguments: fmt.Sprintf(`{"id":%q}`, c[1])})
	}
	model, err := gateway.NewScripted(gateway.Script{Responses: []gateway.ScriptStep{{Calls: sc}, {Text: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	kit := kitOf(t, tools...)
	kit.MaxCallsPerCategory = perCategory
	done := make(chan TurnResult, 1)
	go func() {
		res, err := h.node.Run(context.Background(), TurnConfig{Spec: bus.TurnSpec{Agent: "ann", Input: "go"}, Model: model, Kit: kit, MaxCalls: maxCalls})
		if err != nil {
			res = TurnResult{State: bus.TurnFailed, Err: err}
		}
		done <- res
	}()
	return done
}

// TestConcurrencyCap runs six parallel calls of a turn capped at two in flight (the
// node's bound) and four calls of two categories capped at one a category (the agent's):
// never more go out at once, the rest wait for one to settle, and every call completes.
func TestConcurrencyCap(t *testing.T) {
	t.Parallel()
	t.Run("turn", func(t *testing.T) {
		t.Parallel()
		g := newGated()
		meet := g.tool("meet", "capa")
		h := newHarness(t, meet)
		var calls [][2]string
		for i := range 6 {
			calls = append(calls, [2]string{"meet", fmt.Sprint(i)})
		}
		done := runCapped(t, h, []*toolbus.Tool{meet}, 2, 0, calls)
		// Two go out; each time one is let finish, the next goes out in its slot.
		inflight, started := []string{g.next(t), g.next(t)}, 2
		for len(inflight) > 0 {
			g.open(inflight[0])
			inflight = inflight[1:]
			if started < 6 {
				inflight = append(inflight, g.next(t))
				started++
			}
		}
		res := wait(t, done)
		if res.State != bus.TurnCompleted || len(res.Calls) != 6 {
			t.Fatalf("turn %s, %d calls (%s)", res.State, len(res.Calls), res.ErrorText())
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.peak != 2 {
			t.Errorf("at most %d calls in flight, want 2", g.peak)
		}
	})
	t.Run("category", func(t *testing.T) {
		t.Parallel()
		g := newGated()
		a, b := g.tool("alpha", "cata"), g.tool("beta", "catb")
		h := newHarness(t, a, b)
		done := runCapped(t, h, []*toolbus.Tool{a, b}, 0, 1, [][2]string{{"alpha", "a1"}, {"beta", "b1"}, {"alpha", "a2"}, {"beta", "b2"}})
		// a1 and b1 go out together (one of each category); a2 waits for a1, and b2, after
		// it in the model's order, with it (peakCat says none went out past the cap).
		first := []string{g.next(t), g.next(t)}
		slices.Sort(first)
		if !slices.Equal(first, []string{"a1", "b1"}) {
			t.Fatalf("first out: %v, want a1 and b1", first)
		}
		g.open("b1")
		g.open("a1")
		// a2 and b2 go out together once a1 ended (their hosts may start them in either order).
		then := []string{g.next(t), g.next(t)}
		slices.Sort(then)
		if !slices.Equal(then, []string{"a2", "b2"}) {
			t.Fatalf("then out: %v, want a2 and b2", then)
		}
		g.open("a2")
		g.open("b2")
		if res := wait(t, done); res.State != bus.TurnCompleted || len(res.Calls) != 4 {
			t.Fatalf("turn %s, %d calls (%s)", res.State, len(res.Calls), res.ErrorText())
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.peakCat != 1 {
			t.Errorf("at most %d calls of one category in flight, want 1", g.peakCat)
		}
	})
}

// TestCapKeepsModelOrder caps a turn of six parallel calls at two in flight and settles
// them in another order than they went out: each slot that frees goes to the next call
// in the model's order, so they start c0, c1, … c5 whatever order they end in.
func TestCapKeepsModelOrder(t *testing.T) {
	t.Parallel()
	g := newGated()
	meet := g.tool("meet", "capo")
	h := newHarness(t, meet)
	var calls [][2]string
	for i := range 6 {
		calls = append(calls, [2]string{"meet", fmt.Sprint(i)})
	}
	done := runCapped(t, h, []*toolbus.Tool{meet}, 2, 0, calls)
	// Two out; then always end the later of the two running, then the other.
	running := []string{g.next(t), g.next(t)}
	for len(running) > 0 {
		slices.Sort(running)
		last := running[len(running)-1]
		g.open(last)
		running = running[:len(running)-1]
		g.mu.Lock()
		more := len(g.order) < 6
		g.mu.Unlock()
		if more {
			running = append(running, g.next(t))
		}
	}
	res := wait(t, done)
	if res.State != bus.TurnCompleted {
		t.Fatalf("turn %s (%s)", res.State, res.ErrorText())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// The first two go out together (their hosts may start them in either order); each
	// after them alone, as a slot frees.
	got := slices.Clone(g.order)
	if len(got) >= 2 {
		slices.Sort(got[:2])
	}
	if want := []string{"0", "1", "2", "3", "4", "5"}; !slices.Equal(got, want) {
		t.Errorf("started %v, want %v", g.order, want)
	}
	if g.peak != 2 {
		t.Errorf("at most %d calls in flight, want 2", g.peak)
	}
}
