package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/redact"
)

// keepAlive is how often an idle feed sends a comment, so that proxies keep it open
// and a page gone away is noticed.
const keepAlive = 20 * time.Second

// feedMsg is one message of a live feed, as the page reads it: a turn's status,
// activity event, call result (its outcome, not its content), abort, held call,
// decision or piece of streamed text; or a revision of the workflow a page shows.
type feedMsg struct {
	Turn     string               `json:"turn_id,omitempty"`
	Kind     string               `json:"kind"`
	Name     string               `json:"name,omitempty"` // the status (started, step, beat, done)
	Call     string               `json:"call_id,omitempty"`
	Status   *bus.TurnStatus      `json:"status,omitempty"`
	Event    *bus.Event           `json:"event,omitempty"`
	Reply    *replyView           `json:"reply,omitempty"`
	Abort    *bus.Abort           `json:"abort,omitempty"`
	Approval *bus.ApprovalRequest `json:"approval,omitempty"`
	Decision *decisionView        `json:"decision,omitempty"`
	Text     *bus.TextDelta       `json:"text,omitempty"` // a piece of a step's text as the model writes it
	Workflow *bus.Workflow        `json:"workflow,omitempty"`
	Time     time.Time            `json:"time"` // when the console heard it
}

// replyView is what the feed says of a call's result: the content waits in the
// transcript, read when the page asks for it.
type replyView struct {
	Outcome bus.Outcome `json:"outcome"`
	Error   string      `json:"error,omitempty"`
	Label   string      `json:"label,omitempty"`
	Rungs   []string    `json:"rungs,omitempty"`
}

type decisionView struct {
	Decision string `json:"decision,omitempty"`
	By       string `json:"by,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// feedOf turns a message of a turn into the page's, without what a page need not
// carry (the calls' details, results' content).
func feedOf(m bus.TurnMessage) feedMsg {
	f := feedMsg{Turn: m.Subject.Turn, Kind: m.Subject.Kind, Name: m.Subject.Status, Call: m.Subject.Call, Time: time.Now(),
		Status: m.Status, Event: m.Event, Abort: m.Abort, Approval: m.Approval, Text: m.Text}
	if f.Status != nil {
		st := *f.Status
		st.Calls = make([]bus.CallRecord, len(st.Calls))
		for i, c := range f.Status.Calls {
			c.Details = nil
			st.Calls[i] = c
		}
		f.Status = &st
	}
	if f.Event != nil {
		ev := *f.Event
		ev.Data = nil
		f.Event = &ev
	}
	switch {
	case m.Reply != nil:
		f.Reply = &replyView{Outcome: m.Reply.Outcome, Error: firstLine(m.Reply.Error), Label: m.Reply.Label}
	case m.NoResponders:
		f.Reply = &replyView{Outcome: bus.OutcomeError, Error: "no host serves the call's category"}
	}
	if f.Text != nil {
		d := *f.Text
		d.Text = clip(d.Text) // a turn sends at most bus.MaxTextDelta; another publisher may not
		f.Text = &d
	}
	if m.Approve != nil {
		f.Decision = &decisionView{Decision: m.Approve.Decision, By: m.Approve.By, Reason: m.Approve.Reason}
	}
	return f
}

// events is the live feed of one view, as server-sent events: scope "turns" (every
// turn's statuses), "turn" (everything of turn id, its model's text as it streams
// among it: the one subscription to the turn's subjects covers its text subject, so
// the turn streams its text while the page is open, and stops when it closes) or "workflow" (the statuses of a
// workflow's task turns and each revision of its document). The feed's subscription
// lives as long as the request: a console nobody looks at subscribes to nothing.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, errors.New("this connection cannot stream"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	q := r.URL.Query()
	var (
		quiet bool // leave out heartbeats
		turns <-chan bus.TurnMessage
		wfs   <-chan client.WorkflowEvent
		only  func(turn string) bool
	)
	switch q.Get("scope") {
	case "turns":
		wt, err := s.cl.WatchStatuses()
		if err != nil {
			writeError(w, http.StatusBadGateway, err)
			return
		}
		defer wt.Stop()
		turns, quiet = wt.C, true
	case "turn":
		id := q.Get("id")
		wt, err := s.cl.Watch(id)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		defer wt.Stop()
		turns = wt.C
	case "workflow":
		agent, id := q.Get("agent"), q.Get("id")
		if !bus.ValidToken(agent) || !bus.ValidToken(id) {
			writeError(w, http.StatusBadRequest, errors.New("want an agent and a workflow id"))
			return
		}
		ww, err := s.cl.WatchWorkflows()
		if err != nil {
			writeError(w, http.StatusBadGateway, err)
			return
		}
		defer ww.Stop()
		if err := ww.Document(ctx, agent, id); err != nil {
			writeError(w, http.StatusBadGateway, fmt.Errorf("watch workflow %s: %w", id, err))
			return
		}
		prefix := id + "-"
		only = func(turn string) bool { return strings.HasPrefix(turn, prefix) }
		wfs = ww.C
	default:
		writeError(w, http.StatusBadRequest, errors.New(`scope: want "turns", "turn" or "workflow"`))
		return
	}
	s.feeds.Add(1)
	defer s.feeds.Add(-1)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	send := func(event string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return true
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, redact.Secrets(b)); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	// The subscription is in place: what the page reads from now on, the feed adds to.
	if !send("ready", map[string]any{}) {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": still here\n\n"); err != nil {
				return
			}
			fl.Flush()
		case m := <-turns:
			if quiet && m.Subject.Status == bus.StatusBeat {
				continue // a list has no use for a running turn's heartbeat
			}
			if !send("msg", feedOf(m)) {
				return
			}
		case ev := <-wfs:
			var f feedMsg
			switch {
			case ev.Doc != nil:
				f = feedMsg{Kind: "workflow", Workflow: slimWorkflow(ev.Doc), Time: time.Now()}
			case ev.Status != nil && only(ev.Status.Subject.Turn):
				f = feedOf(*ev.Status)
			default:
				continue
			}
			if !send("msg", f) {
				return
			}
		}
	}
}
