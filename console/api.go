package console

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/toolsets/schedule"
)

// readTimeout bounds a read of the bus behind one request.
const readTimeout = 15 * time.Second

// Bounds of what one answer carries.
const (
	maxTurns           = 500      // the newest turns a list shows
	countedTurns       = 50       // the newest turns whose calls a list counts from their transcripts
	maxCountedMessages = 500      // a longer transcript is not read for a count
	maxText            = 32 << 10 // of one argument string, output or text
	maxReason          = 2000     // of a reason given on the page
	maxHeldAsks        = 64       // calls of a running turn asked whether they are held, when its page opens
)

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"bus": s.cl.Bus(), "by": s.cfg.By})
}

// turnRow is one line of the list of turns.
type turnRow struct {
	ID       string        `json:"turn_id"`
	Agent    string        `json:"agent,omitempty"`
	Kind     bus.TurnKind  `json:"kind"`
	State    bus.TurnState `json:"state"`
	Node     string        `json:"node,omitempty"`
	Step     int           `json:"step"`
	Calls    *int          `json:"calls,omitempty"` // nil: not counted
	Workflow string        `json:"workflow_id,omitempty"`
	Error    string        `json:"error,omitempty"`
	Created  time.Time     `json:"created"`
	Updated  time.Time     `json:"updated"`
}

func (s *Server) turns(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	recs, err := s.cl.Turns(ctx)
	if errors.Is(err, client.ErrNoTurns) {
		writeJSON(w, []turnRow{})
		return
	}
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	if len(recs) > maxTurns {
		recs = recs[:maxTurns]
	}
	rows := make([]turnRow, len(recs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, rec := range recs {
		kind := cmp.Or(rec.Spec.Kind, bus.TurnMain)
		rows[i] = turnRow{ID: rec.Spec.ID, Agent: rec.Spec.Agent, Kind: kind, State: rec.State, Node: rec.Owner,
			Step: rec.Step, Workflow: rec.Spec.Workflow, Error: firstLine(rec.Error), Created: rec.Created, Updated: rec.Updated}
		if i >= countedTurns || rec.Stored > maxCountedMessages {
			continue // a long transcript is not read for a count: "–"
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if n, ok := s.callCount(ctx, rec); ok {
				rows[i].Calls = &n
			}
		})
	}
	wg.Wait()
	writeJSON(w, rows)
}

// callCount counts a turn's calls in its transcript; an ended turn's count is kept.
func (s *Server) callCount(ctx context.Context, rec bus.TurnRecord) (int, bool) {
	id := rec.Spec.ID
	s.mu.Lock()
	n, ok := s.calls[id]
	s.mu.Unlock()
	if ok {
		return n, true
	}
	items, err := s.cl.Transcript(ctx, id)
	if err != nil {
		return 0, false
	}
	for _, it := range items {
		if it.Kind == toolbus.KindFunctionCall {
			n++
		}
	}
	if rec.State.Ended() {
		s.mu.Lock()
		if len(s.calls) > 4*maxTurns {
			clear(s.calls)
		}
		s.calls[id] = n
		s.mu.Unlock()
	}
	return n, true
}

// itemView is one item of a transcript as the timeline shows it.
type itemView struct {
	Kind      toolbus.ItemKind `json:"kind"`
	Role      string           `json:"role,omitempty"`
	Text      string           `json:"text,omitempty"`
	Call      string           `json:"call_id,omitempty"`
	Name      string           `json:"name,omitempty"`
	Namespace string           `json:"namespace,omitempty"`
	Args      string           `json:"arguments,omitempty"`
	Truncated bool             `json:"truncated,omitempty"`
	// What the turn made of a call (toolbus.Item.Run, Repaired, Rungs): the page lays
	// out runs and marks repairs by them, not by the tools' modes of today.
	Run      *toolbus.CallRun `json:"run,omitempty"`
	Repaired string           `json:"repaired,omitempty"`
	Rungs    []string         `json:"rungs,omitempty"`
	Ran      *toolbus.CallRan `json:"ran,omitempty"` // on an output: how the call ended
	Output   string           `json:"output,omitempty"`
	Media    int              `json:"media,omitempty"` // output parts that are not text
	IsError  bool             `json:"is_error,omitempty"`
	Note     any              `json:"note,omitempty"`
}

// turnView is one turn: its record, its transcript, the modes of its tools (which
// calls ran in parallel, for a transcript of a build that did not record each call's
// run) and the calls it holds for approval.
type turnView struct {
	Record *bus.TurnRecord        `json:"record"`
	Items  []itemView             `json:"items"`
	Modes  map[string]string      `json:"modes"`
	Held   []*bus.ApprovalRequest `json:"held"`
}

func (s *Server) turn(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if !bus.ValidToken(id) {
		writeError(w, http.StatusBadRequest, errors.New("want a turn id"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	rec, err := s.cl.Record(ctx, id)
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	items, err := s.cl.Transcript(ctx, id)
	if errors.Is(err, client.ErrNoTranscript) {
		err = nil // queued, or not past its first model step yet
	}
	if err != nil && rec != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	if rec == nil && len(items) == 0 {
		writeError(w, http.StatusNotFound, errors.New("no turn "+id+" on this bus"))
		return
	}
	v := turnView{Record: rec, Items: make([]itemView, 0, len(items)), Modes: s.modes(ctx), Held: []*bus.ApprovalRequest{}}
	if rec != nil {
		rec.Spec.Script = nil // the scripted model's answers-to-come are no one's business
	}
	for _, it := range items {
		iv := itemView{Kind: it.Kind, Role: it.Role, Text: clip(it.Text), Call: it.CallID, Name: it.Name,
			Namespace: it.Namespace, Args: clip(it.Arguments), Truncated: it.Truncated, IsError: it.IsError,
			Run: it.Run, Repaired: clip(string(it.Repaired)), Rungs: it.Rungs, Ran: it.Ran}
		switch it.Kind {
		case toolbus.KindCallOutput:
			res := toolbus.Result{Content: it.Output}
			iv.Output = clip(res.Text())
			for _, p := range it.Output {
				if p.Type != toolbus.ContentText {
					iv.Media++
				}
			}
		case toolbus.KindNote:
			iv.Note = it.Raw
		case toolbus.KindReasoning, toolbus.KindOpaque:
			// Provider items carried verbatim: shown as their kind only.
		}
		v.Items = append(v.Items, iv)
	}
	if rec != nil && rec.State == bus.TurnRunning {
		// A call held before this page opened is one of the calls the transcript has
		// no output of yet: ask the turn about each (the request the command line's
		// approve makes first). A user who may not ask is refused: none shown.
		answered := map[string]bool{}
		for _, it := range items {
			if it.Kind == toolbus.KindCallOutput {
				answered[it.CallID] = true
			}
		}
		asked := 0
		for _, it := range items {
			if it.Kind != toolbus.KindFunctionCall || answered[it.CallID] || !bus.ValidID(it.CallID) || asked == maxHeldAsks {
				continue
			}
			asked++
			hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			reply, err := s.cl.Approve(hctx, id, it.CallID, bus.Approval{})
			cancel()
			if err == nil && reply.Request != nil {
				v.Held = append(v.Held, reply.Request)
			}
		}
	}
	writeJSON(w, v)
}

// modes maps each tool the catalog serves (namespace.name when namespaced) to its mode.
func (s *Server) modes(ctx context.Context) map[string]string {
	m := map[string]string{
		// A task turn's own tool, which no host serves: it ends the turn.
		"submit_result": toolbus.Sequential.String(),
	}
	cats, err := s.cl.Categories(ctx)
	if err != nil {
		return m
	}
	for _, c := range cats {
		for _, spec := range c.Specs {
			m[spec.QualifiedName()] = spec.Mode.String()
		}
	}
	return m
}

func (s *Server) workflows(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	wfs, err := s.cl.Workflows(ctx, "")
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	for i := range wfs {
		for j := range wfs[i].Tasks {
			wfs[i].Tasks[j].Script = nil
			wfs[i].Tasks[j].ResultSchema = nil
			wfs[i].Tasks[j].Instructions = ""
			wfs[i].Tasks[j].Result = nil
		}
	}
	writeJSON(w, wfs)
}

func (s *Server) workflow(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	q := r.URL.Query()
	wf, err := s.cl.Workflow(ctx, q.Get("agent"), q.Get("id"))
	switch {
	case errors.Is(err, client.ErrNoRecords):
		writeError(w, http.StatusNotFound, err)
		return
	case err != nil:
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, slimWorkflow(wf))
}

// slimWorkflow drops what a task's scripted model will answer.
func slimWorkflow(wf *bus.Workflow) *bus.Workflow {
	for j := range wf.Tasks {
		wf.Tasks[j].Script = nil
	}
	return wf
}

func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	js, err := s.cl.Jobs(ctx, "")
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, js)
}

// scheduleRow is a schedule with its next firing.
type scheduleRow struct {
	schedule.Schedule
	When string    `json:"when"`
	Next time.Time `json:"next,omitzero"`
}

func (s *Server) schedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	ss, err := s.cl.Schedules(ctx, "")
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	now := time.Now()
	rows := make([]scheduleRow, len(ss))
	for i := range ss {
		rows[i] = scheduleRow{Schedule: ss[i], When: ss[i].When()}
		if next, ok := ss[i].Next(now); ok {
			rows[i].Next = next
		}
	}
	writeJSON(w, rows)
}

// categoryView is a category of the catalog, with its hosts and tools.
type categoryView struct {
	Name    string     `json:"name"`
	Hosts   []hostView `json:"hosts"`
	Tools   []toolView `json:"tools"`
	Error   string     `json:"error,omitempty"`
	Skipped []string   `json:"skipped,omitempty"`
}

type hostView struct {
	Node string `json:"node"`
	ID   string `json:"id"`
}

type toolView struct {
	Name        string `json:"name"`
	Mode        string `json:"mode"`
	ReadOnly    bool   `json:"read_only,omitempty"`
	Destructive bool   `json:"destructive,omitempty"`
	Deferred    bool   `json:"deferred,omitempty"`
	About       string `json:"about,omitempty"`
}

func (s *Server) nodes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	cats, err := s.cl.Categories(ctx)
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	out := make([]categoryView, 0, len(cats))
	for _, c := range cats {
		cv := categoryView{Name: c.Name, Hosts: []hostView{}, Tools: []toolView{}, Skipped: c.Skipped}
		if c.Err != nil {
			cv.Error = c.Err.Error()
		}
		for _, h := range c.Hosts {
			cv.Hosts = append(cv.Hosts, hostView{Node: h.Node, ID: h.ID})
		}
		for _, t := range c.Specs {
			cv.Tools = append(cv.Tools, toolView{Name: t.QualifiedName(), Mode: t.Mode.String(), ReadOnly: t.ReadOnly,
				Destructive: t.Destructive, Deferred: t.DeferLoading, About: firstLine(t.Description)})
		}
		out = append(out, cv)
	}
	writeJSON(w, out)
}

// The state-changing requests: each does what the command line's command does.

type abortReq struct {
	Turn   string `json:"turn_id"`
	Call   string `json:"call_id"` // one call only (bus.Abort.Call)
	Reason string `json:"reason"`
}

// abort is `toolbus abort` (with call_id, `toolbus abort -call`): an ended turn is said
// so; otherwise the abort is sent and the page hears the outcome on its feed.
func (s *Server) abort(w http.ResponseWriter, r *http.Request) {
	var q abortReq
	if !decode(w, r, &q) || !checkReason(w, q.Reason) {
		return
	}
	if !bus.ValidToken(q.Turn) || q.Call != "" && !bus.ValidToken(q.Call) {
		writeError(w, http.StatusBadRequest, errors.New("want a turn id, and a valid call id if any"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	rec, err := s.cl.Record(ctx, q.Turn)
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	if rec != nil && rec.State.Ended() {
		writeError(w, http.StatusConflict, errors.New("turn "+q.Turn+" has ended ("+string(rec.State)+")"))
		return
	}
	if q.Call != "" {
		// One call, as `toolbus abort -call` does: the turn goes on.
		if err := s.cl.CancelCall(ctx, q.Turn, q.Call, cmp.Or(q.Reason, "cancelled from the console")); err != nil {
			writeError(w, http.StatusBadGateway, err)
			return
		}
		writeJSON(w, map[string]string{"ok": "cancel sent to call " + q.Call + " of turn " + q.Turn})
		return
	}
	if err := s.cl.Abort(ctx, q.Turn, cmp.Or(q.Reason, "aborted from the console")); err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, map[string]string{"ok": "abort sent to turn " + q.Turn})
}

type approveReq struct {
	Turn     string `json:"turn_id"`
	Call     string `json:"call_id"`
	Decision string `json:"decision"` // approve or refuse
	Reason   string `json:"reason"`
}

// approve is `toolbus approve`: it asks the turn for the held call's request, then
// decides on exactly those arguments (their hash).
func (s *Server) approve(w http.ResponseWriter, r *http.Request) {
	var q approveReq
	if !decode(w, r, &q) || !checkReason(w, q.Reason) {
		return
	}
	if !bus.ValidID(q.Turn) || !bus.ValidID(q.Call) {
		writeError(w, http.StatusBadRequest, errors.New("want a turn id and a call id"))
		return
	}
	decision := bus.Approval{Decision: bus.ApprovalGrant, By: s.cfg.By}
	switch q.Decision {
	case bus.ApprovalGrant:
	case bus.ApprovalRefuse:
		decision.Decision, decision.Reason = bus.ApprovalRefuse, q.Reason
	default:
		writeError(w, http.StatusBadRequest, errors.New(`decision: want "approve" or "refuse"`))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	if err := s.cl.Decide(ctx, q.Turn, q.Call, decision); err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, map[string]string{"ok": "call " + q.Call + " of turn " + q.Turn + " " + decision.Decision + "d"})
}

type cancelWorkflowReq struct {
	Agent  string `json:"agent"`
	ID     string `json:"workflow_id"`
	Reason string `json:"reason"`
}

func (s *Server) cancelWorkflow(w http.ResponseWriter, r *http.Request) {
	var q cancelWorkflowReq
	if !decode(w, r, &q) || !checkReason(w, q.Reason) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout+30*time.Second)
	defer cancel()
	wf, err := s.cl.CancelWorkflow(ctx, q.Agent, q.ID, cmp.Or(q.Reason, "cancelled from the console"))
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, slimWorkflow(wf))
}

type cancelJobReq struct {
	ID     string `json:"job_id"`
	Reason string `json:"reason"`
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	var q cancelJobReq
	if !decode(w, r, &q) || !checkReason(w, q.Reason) {
		return
	}
	if !bus.ValidID(q.ID) {
		writeError(w, http.StatusBadRequest, errors.New("want a job id"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout+30*time.Second)
	defer cancel()
	text, err := s.cl.CancelJob(ctx, q.ID, cmp.Or(q.Reason, "cancelled from the console"))
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, map[string]string{"ok": text})
}

type removeScheduleReq struct {
	ID string `json:"schedule_id"`
}

func (s *Server) removeSchedule(w http.ResponseWriter, r *http.Request) {
	var q removeScheduleReq
	if !decode(w, r, &q) {
		return
	}
	if !bus.ValidID(q.ID) {
		writeError(w, http.StatusBadRequest, errors.New("want a schedule id"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout+30*time.Second)
	defer cancel()
	text, err := s.cl.RemoveSchedule(ctx, q.ID)
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, map[string]string{"ok": text})
}

func checkReason(w http.ResponseWriter, reason string) bool {
	if len(reason) > maxReason {
		writeError(w, http.StatusBadRequest, errors.New("the reason is too long"))
		return false
	}
	return true
}

// clip cuts a text for the page, saying how much was left out.
func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	cut := maxText
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "\n… (" + strconv.Itoa(len(s)-cut) + " more bytes)"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
