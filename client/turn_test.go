package client_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
)

// handleWorld is an embedded node (startNode, the examples') and a client on it, for a
// test.
func handleWorld(t *testing.T) (context.Context, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	_, c, stop := startNode(ctx)
	t.Cleanup(stop)
	return ctx, c
}

// scripted is a main turn of agent on a scripted model.
func scripted(agent, script string) bus.TurnSpec {
	return bus.TurnSpec{Kind: bus.TurnMain, Agent: agent, Input: "go", Script: []byte(script)}
}

// readNotes is a script of two steps: one call, c1, reads notes.txt; then the answer.
const readNotes = `{"responses":[
	{"calls":[{"id":"c1","name":"read_file","arguments":"{\"path\":\"notes.txt\"}"}]},
	{"text":"Two things."}]}`

// kindOf names a message as a test reads it: "status:started", "evt:c1:started",
// "res:c1:ok", "approval:c1", "abort", "text".
func kindOf(m bus.TurnMessage) string {
	switch {
	case m.Status != nil:
		return "status:" + m.Subject.Status
	case m.Event != nil:
		return "evt:" + m.Subject.Call + ":" + string(m.Subject.Event)
	case m.Reply != nil:
		return "res:" + m.Subject.Call + ":" + string(m.Reply.Outcome)
	case m.Approval != nil:
		return "approval:" + m.Subject.Call
	case m.Abort != nil:
		return "abort"
	case m.Text != nil:
		return "text"
	}
	return m.Subject.Kind
}

// TestTurnHandleEvents: a handle from Start yields every message of its turn, typed, in
// order, from its started status to its done status, where the loop ends; read again
// after the end, Events yields the done status alone, from the record.
func TestTurnHandleEvents(t *testing.T) {
	t.Parallel()
	ctx, c := handleWorld(t)
	tr, err := c.Start(ctx, scripted("demo", readNotes), "")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var got []string
	label := ""
	for m, err := range tr.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if k := kindOf(m); k != "status:beat" && k != "text" {
			got = append(got, k)
		}
		if m.Reply != nil {
			label = m.Reply.Label
		}
	}
	// The host publishes the completed event after its reply (protocol.md §10), so it
	// may come after the done status (CI, once); the reply carries its label.
	if label != "Read 2 lines of notes.txt" {
		t.Errorf("events %v: the call's reply has the label %q", got, label)
	}
	want := []string{"status:started", "evt:c1:started", "res:c1:ok", "status:step", "status:done"}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("events %v lack %s", got, w)
		}
	}
	if len(got) == 0 || got[0] != "status:started" || got[len(got)-1] != "status:done" {
		t.Errorf("events %v: want the started status first and the done status last", got)
	}
	if i, j := slices.Index(got, "evt:c1:started"), slices.Index(got, "status:step"); i < 0 || j < i {
		t.Errorf("events %v: the call's events come before its step's status", got)
	}

	var again []string
	for m, err := range tr.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, kindOf(m))
		if m.Status == nil || m.Status.State != bus.TurnCompleted {
			t.Errorf("after the end: %+v", m)
		}
	}
	if !slices.Equal(again, []string{"status:done"}) {
		t.Errorf("Events after the end yielded %v, want the done status alone", again)
	}
}

// TestTurnHandleWait: Wait returns the final status, its text and its calls' records;
// breaking out of Events early leaves Wait to read the rest.
func TestTurnHandleWait(t *testing.T) {
	t.Parallel()
	ctx, c := handleWorld(t)
	tr, err := c.Start(ctx, scripted("demo", readNotes), "")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for m, err := range tr.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != nil {
			break // the started status: the rest is Wait's
		}
	}
	st, err := tr.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != bus.TurnCompleted || st.Text != "Two things." || st.Turn != tr.ID {
		t.Errorf("final status %s %q of %s", st.State, st.Text, st.Turn)
	}
	if len(st.Calls) != 1 || st.Calls[0].Outcome != bus.OutcomeOK || st.Calls[0].Tool != "read_file" {
		t.Errorf("calls %+v", st.Calls)
	}
}

// TestTurnHandleAbort: Abort ends a turn whose model is slow, with the reason; CancelCall
// ends one running call, honestly, while its turn goes on to its end.
func TestTurnHandleAbort(t *testing.T) {
	t.Parallel()
	ctx, c := handleWorld(t)

	t.Run("turn", func(t *testing.T) {
		t.Parallel()
		tr, err := c.Start(ctx, scripted("demo", `{"responses":[{"delay_ms":60000,"text":"too late"}]}`), "")
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		for m, err := range tr.Events(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			if m.Status != nil && m.Subject.Status == bus.StatusStarted {
				if err := tr.Abort(ctx, "changed my mind"); err != nil {
					t.Fatal(err)
				}
			}
			if m.Status != nil && m.Subject.Status == bus.StatusDone {
				if m.Status.State != bus.TurnAborted || !strings.Contains(m.Status.Error, "changed my mind") {
					t.Errorf("ended %s: %q", m.Status.State, m.Status.Error)
				}
			}
		}
	})

	t.Run("one call", func(t *testing.T) {
		t.Parallel()
		tr, err := c.Start(ctx, scripted("demo", `{"responses":[
			{"calls":[{"id":"slow","name":"run_command","arguments":"{\"command\":\"sleep 60\"}"}]},
			{"text":"Went on without it."}]}`), "")
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		var final *bus.TurnStatus
		for m, err := range tr.Events(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			if m.Event != nil && m.Subject.Call == "slow" && m.Subject.Event == bus.EventStarted {
				if err := tr.CancelCall(ctx, "slow", "not needed"); err != nil {
					t.Fatal(err)
				}
			}
			if m.Status != nil && m.Subject.Status == bus.StatusDone {
				final = m.Status
			}
		}
		if final == nil || final.State != bus.TurnCompleted || final.Text != "Went on without it." {
			t.Fatalf("final status %+v", final)
		}
		if len(final.Calls) != 1 || final.Calls[0].Outcome != bus.OutcomeStopped || !strings.Contains(final.Calls[0].Error, "not needed") {
			t.Errorf("the cancelled call's record %+v", final.Calls)
		}
	})
}

// TestTurnHandleApprove: a call held for approval runs once Approve lets it, and never
// runs once Refuse refuses it, the model reading the reason.
func TestTurnHandleApprove(t *testing.T) {
	t.Parallel()
	ctx, c := handleWorld(t)
	if err := holdDestructive(ctx, c, "careful"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		decide  func(tr *client.Turn, call string) error
		outcome bus.Outcome
	}{
		{"approve", func(tr *client.Turn, call string) error { return tr.Approve(ctx, call) }, bus.OutcomeOK},
		{"refuse", func(tr *client.Turn, call string) error { return tr.Refuse(ctx, call, "not today") }, bus.OutcomeRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := "out-" + tc.name + ".txt"
			tr, err := c.Start(ctx, scripted("careful", `{"responses":[
				{"calls":[{"id":"w1","name":"write_file","arguments":"{\"path\":\"`+file+`\",\"content\":\"x\\n\"}"}]},
				{"text":"done"}]}`), "")
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			held := false
			for m, err := range tr.Events(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				if m.Approval != nil && m.Subject.Call == "w1" && !held {
					held = true
					if err := tc.decide(tr, "w1"); err != nil {
						t.Fatal(err)
					}
				}
			}
			st, err := tr.Wait(ctx) // after the end: from the record
			if err != nil {
				t.Fatal(err)
			}
			if !held || st.State != bus.TurnCompleted || len(st.Calls) != 1 || st.Calls[0].Outcome != tc.outcome {
				t.Errorf("held %v; ended %s with %+v, want the call %s", held, st.State, st.Calls, tc.outcome)
			}
			if tc.outcome == bus.OutcomeRefused {
				items, err := tr.Transcript(ctx)
				if err != nil {
					t.Fatal(err)
				}
				said := false
				for _, it := range items {
					if it.Kind == toolbus.KindCallOutput && it.CallID == "w1" && strings.Contains((toolbus.Result{Content: it.Output}).Text(), "not today") {
						said = true
					}
				}
				if !said {
					t.Error("the model was not told the refusal's reason")
				}
			}
		})
	}
}

// TestTurnHandleByID: a handle found by id is the same handle: its record, transcript and
// end are those of the turn Start began; a bad id is refused, an unknown one has no
// record.
func TestTurnHandleByID(t *testing.T) {
	t.Parallel()
	ctx, c := handleWorld(t)
	started, err := c.Start(ctx, scripted("demo", `{"responses":[{"text":"Hello."}]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	started.Close()

	tr, err := c.Turn(started.ID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tr.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != bus.TurnCompleted || st.Text != "Hello." {
		t.Errorf("end %s %q", st.State, st.Text)
	}
	rec, err := tr.Record(ctx)
	if err != nil || rec == nil || rec.State != bus.TurnCompleted || rec.Spec.Agent != "demo" {
		t.Fatalf("record %+v: %v", rec, err)
	}
	items, err := tr.Transcript(ctx)
	if err != nil || len(items) == 0 || items[0].Kind != toolbus.KindMessage || items[0].Text != "go" {
		t.Errorf("transcript %+v: %v", items, err)
	}

	if _, err := c.Turn("not a turn id!"); err == nil {
		t.Error("a bad id was taken")
	}
	unknown, err := c.Turn(bus.NewID())
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := unknown.Record(ctx); rec != nil || err != nil {
		t.Errorf("an unknown turn's record: %+v, %v", rec, err)
	}
	// Starting a turn under an id in use is refused, with the handle of the turn that
	// has it.
	spec := scripted("demo", `{"responses":[{"text":"Again."}]}`)
	spec.ID = started.ID
	again, err := c.Start(ctx, spec, "")
	if again == nil || again.ID != started.ID || !errors.Is(err, client.ErrTurnExists) {
		t.Errorf("a second start under the same id: %+v, %v", again, err)
	}
	if again != nil {
		again.Close()
	}
}
