package batch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolbus/toolbus"
)

// A batch is written as its calls' modes, in the model's order: P parallel, S sequential,
// X refused as it was added, with a trailing "!" for a call that needs approval and "@group" for its group
// ("P S! P@web").
func newBatch(t *testing.T, modes string, open bool) *Batch {
	t.Helper()
	var b Batch
	b.Reset(open)
	for _, m := range strings.Fields(modes) {
		add(t, &b, m)
	}
	return &b
}

func add(t *testing.T, b *Batch, m string) int {
	t.Helper()
	m, group, _ := strings.Cut(m, "@")
	approval := strings.HasSuffix(m, "!")
	switch strings.TrimSuffix(m, "!") {
	case "P":
		return b.Add(toolbus.Parallel, approval, group)
	case "S":
		return b.Add(toolbus.Sequential, approval, group)
	case "X":
		return b.AddRefused()
	}
	t.Fatalf("mode %q: want P, S or X, with an optional !", m)
	return -1
}

// States are written one letter a call: u unstored, y ready, h held, r running, d done,
// f deferred, s stored, c recorded.
const letters = "uyhrdfsc"

func states(b *Batch) string {
	var s strings.Builder
	for i := range b.Len() {
		s.WriteByte(letters[b.State(i)])
	}
	return s.String()
}

// dispatched writes what Next returned: indexes, "h" after a held one ("0h 1").
func dispatched(ds []Dispatch) string {
	var out []string
	for _, d := range ds {
		s := strconv.Itoa(d.Call)
		if d.Hold {
			s += "h"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func ints(is []int) string {
	var out []string
	for _, i := range is {
		out = append(out, strconv.Itoa(i))
	}
	return strings.Join(out, " ")
}

// step is one thing that happens to a batch, what the batch answers (for next, end,
// abort and the verbs that report, "true"/"false"), its states after it, and whether it
// is complete then.
type step struct {
	do     string
	want   string
	states string
	done   bool
}

// play runs steps against b: "add M", "store I" / "store all", "next", "settle I",
// "approve I", "refuse I", "stored I" (its output), "record I", "end", "abort".
func play(t *testing.T, b *Batch, steps []step) {
	t.Helper()
	for n, s := range steps {
		verb, arg, _ := strings.Cut(s.do, " ")
		i, _ := strconv.Atoi(arg)
		var got string
		switch verb {
		case "add":
			got = strconv.Itoa(add(t, b, arg))
		case "store":
			if arg == "all" {
				for j := range b.Len() {
					b.Stored(j)
				}
			} else {
				b.Stored(i)
			}
		case "next":
			got = dispatched(b.Next())
		case "settle":
			got = strconv.FormatBool(b.Settle(i))
		case "approve":
			got = strconv.FormatBool(b.Approved(i))
		case "refuse":
			got = strconv.FormatBool(b.Refuse(i))
		case "stored":
			b.OutputStored(i)
		case "record":
			b.Recorded(i)
		case "end":
			got = ints(b.ResponseEnded())
		case "abort":
			ns, held := b.Abort()
			got = fmt.Sprintf("not started [%s] held [%s]", ints(ns), ints(held))
		default:
			t.Fatalf("step %d: unknown verb %q", n, verb)
		}
		where := fmt.Sprintf("step %d (%s)", n, s.do)
		if s.want != "" && got != s.want || s.want == "" && got != "" && verb == "next" {
			t.Fatalf("%s: got %q, want %q (states %s)", where, got, s.want, states(b))
		}
		if s.states != "" && states(b) != s.states {
			t.Fatalf("%s: states %s, want %s", where, states(b), s.states)
		}
		if b.Complete() != s.done {
			t.Fatalf("%s: complete %v, want %v (states %s)", where, b.Complete(), s.done, states(b))
		}
	}
}

func TestSchedulerTable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		modes string
		open  bool // the response streams
		caps  Caps
		steps []step
	}{{
		name: "a cap on calls in flight: the rest wait, in the model's order", modes: "P P P S P", caps: Caps{Total: 2},
		steps: []step{
			{do: "store all"},
			{do: "next", want: "0 1", states: "rryyy"},
			{do: "settle 1", want: "true"},
			{do: "next", want: "2", states: "rdryy"},
			{do: "settle 0", want: "true"},
			{do: "next", want: ""}, // the sequential call waits for call 2 all the same
			{do: "settle 2", want: "true"},
			{do: "next", want: "3"},
			{do: "settle 3", want: "true"},
			{do: "next", want: "4"},
			{do: "settle 4", want: "true", done: true},
		},
	}, {
		name: "a cap a group: a call at its group's cap holds the calls after it", modes: "P@a P@b P@a P@b", caps: Caps{PerGroup: 1},
		steps: []step{
			{do: "store all"},
			{do: "next", want: "0 1", states: "rryy"},
			{do: "settle 1", want: "true"},
			{do: "next", want: "", states: "rdyy"}, // call 2 (a) waits for call 0, and call 3 (b) behind it
			{do: "settle 0", want: "true"},
			{do: "next", want: "2 3"},
			{do: "settle 2", want: "true"},
			{do: "settle 3", want: "true", done: true},
		},
	}, {
		name: "P P S P P: the parallel runs go out together, the sequential call alone between them", modes: "P P S P P",
		steps: []step{
			{do: "store all", states: "yyyyy"},
			{do: "next", want: "0 1", states: "rryyy"},
			{do: "settle 1", want: "true", states: "rdyyy"},
			{do: "next", want: "", states: "rdyyy"},
			{do: "settle 0", want: "true"},
			{do: "next", want: "2", states: "ddryy"},
			{do: "next", want: ""},
			{do: "settle 2", want: "true"},
			{do: "next", want: "3 4", states: "dddrr"},
			{do: "settle 4", want: "true"},
			{do: "settle 3", want: "true", states: "ddddd", done: true},
			{do: "next", want: "", done: true},
		},
	}, {
		name: "S first, then a parallel run", modes: "S P P",
		steps: []step{
			{do: "store all"},
			{do: "next", want: "0", states: "ryy"},
			{do: "settle 0", want: "true"},
			{do: "next", want: "1 2"},
			{do: "settle 1", want: "true"},
			{do: "settle 2", want: "true", done: true},
			{do: "next", want: "", done: true},
		},
	}, {
		name: "S S: one at a time", modes: "S S",
		steps: []step{
			{do: "store all"},
			{do: "next", want: "0"},
			{do: "next", want: ""},
			{do: "settle 0", want: "true"},
			{do: "next", want: "1"},
			{do: "settle 1", want: "true", done: true},
			{do: "next", want: "", done: true},
		},
	}, {
		name: "an unstored call is a barrier for the calls after it", modes: "P P P",
		steps: []step{
			{do: "store 0"},
			{do: "store 2"},
			{do: "next", want: "0", states: "ruy"},
			{do: "store 1"},
			{do: "next", want: "1 2", states: "rrr"},
			{do: "settle 0", want: "true"},
			{do: "settle 1", want: "true"},
			{do: "settle 2", want: "true", done: true},
			{do: "next", want: "", done: true},
		},
	}, {
		name: "a call refused as it was added never goes out and blocks nothing", modes: "P S P",
		steps: []step{
			{do: "refuse 1", want: "true", states: "udu"},
			{do: "store all", states: "ydy"},
			{do: "next", want: "0 2", states: "rdr"},
			{do: "refuse 0", want: "false"},
			{do: "settle 1", want: "false"},
			{do: "settle 0", want: "true"},
			{do: "settle 2", want: "true", done: true},
			{do: "next", want: "", done: true},
		},
	}, {
		name: "late and duplicate answers change nothing", modes: "P",
		steps: []step{
			{do: "settle 0", want: "false", states: "u"},
			{do: "store 0"},
			{do: "next", want: "0"},
			{do: "settle 0", want: "true", done: true},
			{do: "settle 0", want: "false", states: "d", done: true},
			{do: "approve 0", want: "false", done: true},
			{do: "next", want: "", done: true},
			{do: "stored 0", states: "s", done: true},
		},
	}, {
		name: "approvals: held calls are in flight; approved, they run; refused, they settle", modes: "P! P S! P",
		steps: []step{
			{do: "store all"},
			{do: "next", want: "0h 1", states: "hryy"},
			{do: "approve 0", want: "true", states: "rryy"},
			{do: "approve 0", want: "false"},
			{do: "settle 0", want: "true"},
			{do: "settle 1", want: "true"},
			{do: "next", want: "2h", states: "ddhy"},
			{do: "next", want: ""},
			{do: "settle 2", want: "true", states: "dddy"}, // refused by a person, or its deadline
			{do: "next", want: "3"},
			{do: "settle 3", want: "true", done: true},
			{do: "next", want: "", done: true},
		},
	}, {
		name: "a held sequential call holds the calls after it", modes: "S! P",
		steps: []step{
			{do: "store all"},
			{do: "next", want: "0h"},
			{do: "next", want: ""},
			{do: "approve 0", want: "true"},
			{do: "next", want: ""},
			{do: "settle 0", want: "true"},
			{do: "next", want: "1"},
			{do: "settle 1", want: "true", done: true},
			{do: "next", want: "", done: true},
		},
	}, {
		name: "a call refused as it was to go out (a second final call)", modes: "S S",
		steps: []step{
			{do: "store all"},
			{do: "next", want: "0"},
			{do: "settle 0", want: "true"},
			{do: "next", want: "1"},
			{do: "settle 1", want: "true", states: "dd", done: true},
			{do: "next", want: "", done: true},
		},
	}, {
		name: "early dispatch while the response streams; outputs wait for the response", modes: "P", open: true,
		steps: []step{
			{do: "store 0"},
			{do: "next", want: "0", states: "r"},
			{do: "settle 0", want: "true", states: "f"},
			{do: "next", want: ""},
			{do: "add S", want: "1", states: "fu"},
			{do: "store 1"},
			{do: "next", want: "1", states: "fr"},
			{do: "add P", want: "2"},
			{do: "store 2"},
			{do: "next", want: "", states: "fry"},
			{do: "settle 1", want: "true", states: "ffy"},
			{do: "next", want: "2", states: "ffr"},
			{do: "end", want: "0 1", states: "ddr"},
			{do: "settle 2", want: "true", states: "ddd", done: true},
			{do: "next", want: "", done: true},
		},
	}, {
		name: "a streaming response is not complete until it ends, though every call settled", modes: "P", open: true,
		steps: []step{
			{do: "store 0"},
			{do: "next", want: "0"},
			{do: "settle 0", want: "true"},
			{do: "stored 0", states: "s"},
			{do: "next", want: ""},
			{do: "end", want: "", states: "s", done: true},
		},
	}, {
		name: "a streaming response without calls", modes: "", open: true,
		steps: []step{
			{do: "next", want: ""},
			{do: "end", want: "", states: "", done: true},
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBatch(t, c.modes, c.open)
			b.SetCaps(c.caps)
			play(t, b, c.steps)
		})
	}
}

// TestSchedulerResumePoints resumes a batch from every checkpoint a durable turn can be
// lost at: the outputs of the first k calls recorded (k = 0 … n), and the call in flight
// then abandoned (durable.PlanBatch's decision for a destructive call, or none for a
// read-only one, which runs again). The recorded and abandoned calls never go out, the
// rest go out by the batch's rules, and the batch completes with each call settled once.
func TestSchedulerResumePoints(t *testing.T) {
	t.Parallel()
	for _, modes := range []string{"P P S P P", "S S S", "P P P", "S P! P S", "P! S"} {
		n := len(strings.Fields(modes))
		for k := 0; k <= n; k++ {
			for _, abandon := range []bool{false, true} {
				if abandon && k == n {
					continue // nothing was in flight
				}
				t.Run(fmt.Sprintf("%s/%d recorded/abandon %v", modes, k, abandon), func(t *testing.T) {
					b := newBatch(t, modes, false)
					for i := range n {
						b.Stored(i)
					}
					for i := range k {
						b.Recorded(i)
					}
					if abandon && !b.Refuse(k) {
						t.Fatalf("refuse call %d (%s): false", k, b.State(k))
					}
					var order [][]int
					for range 2 * n {
						ds := b.Next()
						if len(ds) == 0 {
							break
						}
						var run []int
						for _, d := range ds {
							if d.Hold && !b.Approved(d.Call) {
								t.Fatalf("approve held call %d: false", d.Call)
							}
							run = append(run, d.Call)
						}
						order = append(order, run)
						for _, i := range run {
							if !b.Settle(i) {
								t.Fatalf("settle call %d: false", i)
							}
						}
					}
					if !b.Complete() {
						t.Fatalf("not complete: states %s", states(b))
					}
					want := expectedRuns(modes, k, abandon)
					if fmt.Sprint(order) != fmt.Sprint(want) {
						t.Fatalf("runs %v, want %v", order, want)
					}
					for i := range n {
						wantState := Done
						if i < k {
							wantState = Recorded
						}
						if got := b.State(i); got != wantState {
							t.Errorf("call %d is %s, want %s", i, got, wantState)
						}
					}
				})
			}
		}
	}
}

// expectedRuns is what a batch of modes runs after a resume from k recorded calls (and
// call k abandoned): the remaining calls, in runs of parallel calls, each sequential call
// alone. Written apart from the scheduler: a run ends before a sequential call and after it.
func expectedRuns(modes string, k int, abandon bool) [][]int {
	var runs [][]int
	var cur []int
	for i, m := range strings.Fields(modes) {
		if i < k || abandon && i == k {
			continue
		}
		if strings.HasPrefix(m, "S") {
			if len(cur) > 0 {
				runs = append(runs, cur)
				cur = nil
			}
			runs = append(runs, []int{i})
			continue
		}
		cur = append(cur, i)
	}
	if len(cur) > 0 {
		runs = append(runs, cur)
	}
	return runs
}

// TestSchedulerAbortEveryState aborts a batch with a call in each state there is, and
// checks what becomes of it: a call that had not gone out is settled as not started, a
// held one is handed back to be settled as not started, a running one runs on until it
// is settled (the batch is not complete before), a settled one stays as it was; and
// nothing goes out after.
func TestSchedulerAbortEveryState(t *testing.T) {
	t.Parallel()
	// reach brings call 1 of "P P" (call 0 stays running, so the batch is not complete
	// until the turn settles it) to a state.
	reach := map[State]func(b *Batch){
		Unstored: func(b *Batch) {},
		Ready:    func(b *Batch) { b.Stored(1) },
		Held:     func(b *Batch) {},
		Running:  func(b *Batch) { b.Stored(1); b.Next() },
		Done:     func(b *Batch) { b.Stored(1); b.Next(); b.Settle(1) },
		Deferred: func(b *Batch) { b.Stored(1); b.Next(); b.Settle(1) },
		Stored:   func(b *Batch) { b.Stored(1); b.Next(); b.Settle(1); b.OutputStored(1) },
		Recorded: func(b *Batch) { b.Stored(1); b.Recorded(1) },
	}
	for s := Unstored; s <= Recorded; s++ {
		t.Run(s.String(), func(t *testing.T) {
			modes, open := "P P", s == Deferred
			if s == Held {
				modes = "P P!"
			}
			b := newBatch(t, modes, open)
			b.Stored(0)
			b.Next()
			if s == Held {
				b.Stored(1)
				b.Next()
			}
			reach[s](b)
			if got := b.State(1); got != s {
				t.Fatalf("call 1 is %s before the abort, want %s", got, s)
			}
			notStarted, held := b.Abort()
			var want State
			switch s {
			case Unstored, Ready:
				want = Done
				if !slices.Equal(notStarted, []int{1}) || len(held) != 0 {
					t.Errorf("abort: not started %v, held %v; want [1], []", notStarted, held)
				}
			case Held:
				want = Held
				if len(notStarted) != 0 || !slices.Equal(held, []int{1}) {
					t.Errorf("abort: not started %v, held %v; want [], [1]", notStarted, held)
				}
			default:
				want = s
				if len(notStarted)+len(held) != 0 {
					t.Errorf("abort: not started %v, held %v; want none", notStarted, held)
				}
			}
			if got := b.State(1); got != want {
				t.Errorf("call 1 is %s after the abort, want %s", got, want)
			}
			if b.Complete() {
				t.Fatal("complete with call 0 running")
			}
			if ns, h := b.Abort(); ns != nil || h != nil {
				t.Errorf("a second abort: %v %v", ns, h)
			}
			b.Stored(1)
			if ds := b.Next(); len(ds) != 0 {
				t.Fatalf("dispatched after the abort: %v", ds)
			}
			// The turn settles what is in flight: the held call (not started), the
			// running ones (their hosts' answers, or abandoned after the grace).
			for i := range b.Len() {
				if b.State(i).InFlight() && !b.Settle(i) {
					t.Fatalf("settle call %d: false", i)
				}
			}
			if open {
				if b.Complete() {
					t.Fatal("complete while its response streams")
				}
				b.ResponseEnded()
			}
			if !b.Complete() {
				t.Fatalf("not complete after every call settled: %s", states(b))
			}
		})
	}
}

// TestSchedulerRuns: the run each call is placed in, as the transcript records it
// (toolbus.CallRun.N): consecutive parallel calls share one, a sequential call has its
// own, a refused call none; approvals and groups do not move a call.
func TestSchedulerRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ modes, runs string }{
		{"P", "1"},
		{"P P S P P", "1 1 2 3 3"},
		{"S S", "1 2"},
		{"S P P S", "1 2 2 3"},
		{"P X P", "1 0 1"},
		{"S X S", "1 0 2"},
		{"X P", "0 1"},
		{"P! P@web S! P@web", "1 1 2 3"},
	} {
		b := newBatch(t, tc.modes, false)
		var got []string
		for i := range b.Len() {
			got = append(got, strconv.Itoa(b.Run(i)))
		}
		if g := strings.Join(got, " "); g != tc.runs {
			t.Errorf("%s: runs %s, want %s", tc.modes, g, tc.runs)
		}
	}
}
