package mcp

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/toolsets"
)

// Defaults of a Server.
const (
	// DefaultApprovalWait is how long a held call waits for a person's decision
	// before the MCP client is told it was not approved. It stays under the 60 s
	// request timeout common MCP clients default to, so the client hears why.
	DefaultApprovalWait = 50 * time.Second
	// DefaultSessionIdle is how long an HTTP client's session may go without a request
	// before the server closes it (ServeConfig.SessionIdle). Long enough for a person
	// who left an assistant open over lunch; short enough that a client that went away
	// without saying goodbye does not leave its session's turn running for days.
	DefaultSessionIdle = 30 * time.Minute
	// DefaultRefreshQuiet is how long the server waits after a catalog change before
	// it reads the catalog again (hosts announce themselves in bursts).
	DefaultRefreshQuiet = 200 * time.Millisecond
	// heldProgressEvery is how often a held call tells its client it still waits.
	heldProgressEvery = 10 * time.Second
	// closePatience bounds Close's wait for the sessions' turns to be recorded as ended.
	closePatience = recordPatience + 5*time.Second
)

// ServeConfig configures a Server.
type ServeConfig struct {
	// Client is the bus the tools are called on.
	Client *client.Client
	// Agent is the agent the calls are made for: its profile says which external
	// namespaces are served and which calls need approval.
	Agent string
	// Namespaces, when set, serves only the tools of these namespaces (a built-in
	// tool has none, so it is left out).
	Namespaces []string
	// ApprovalWait bounds a held call's wait for approval; a negative one does not
	// wait (the call is refused at once, saying how to approve it). Zero is
	// DefaultApprovalWait.
	ApprovalWait time.Duration
	// SessionIdle closes the session of an HTTP client (Handler) that has had no
	// request for this long and none in flight (an open event stream is one), and
	// ends its turn as aborted, saying so. A client that goes away without DELETE
	// otherwise keeps its session, and its turn running, until the server stops. The
	// client's next request gets 404, and by the MCP spec it starts a new session.
	// Zero is DefaultSessionIdle; negative, never. Sessions served by Run end with
	// their transport.
	SessionIdle time.Duration
	// Refresh reads the catalog again this often, whatever was announced: a backstop,
	// as a node's catalog has (catalog.DefaultRefresh), for a host that comes or goes
	// without a word (killed, or slow to answer the first read). Zero is
	// catalog.DefaultRefresh; negative, never.
	Refresh time.Duration
	Logger  *slog.Logger
}

func (c ServeConfig) withDefaults() ServeConfig {
	if c.ApprovalWait == 0 {
		c.ApprovalWait = DefaultApprovalWait
	}
	if c.SessionIdle == 0 {
		c.SessionIdle = DefaultSessionIdle
	}
	if c.Refresh == 0 {
		c.Refresh = catalog.DefaultRefresh
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c ServeConfig) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("mcp serve: no client")
	case c.Agent == "" || !bus.ValidID(c.Agent):
		return fmt.Errorf("mcp serve: agent %q is not an agent id", c.Agent)
	}
	for _, ns := range c.Namespaces {
		if err := toolbus.CheckNamespace(ns); err != nil {
			return fmt.Errorf("mcp serve: %w", err)
		}
	}
	return nil
}

// Server serves the tools of the bus to MCP clients: those the agent's profile
// gives its main turns (the built-in categories served on the bus and the external
// namespaces it names), with their schemas and annotations. A tools/call is
// parsed and repaired like a turn's call, held when the profile asks for approval,
// and sent to the tool's host as `toolbus call` sends it; its events come back as
// progress notifications, and the client's cancellation stops it. All the calls of
// one client session go under one turn of the session's own, recorded as a turn of
// kind mcp while the session lives (sessionTurn); no node runs it, so aborts name the
// call.
type Server struct {
	cfg ServeConfig
	log *slog.Logger
	srv *sdk.Server

	mu    sync.Mutex
	specs map[string]*toolbus.Spec // by MCP name
	sums  map[string]string        // MCP name → what the spec was, to see it change
	// approvals is the agent's approval policy, read with the catalog.
	approvals string

	// turns are the sessions' turns: every call of a session goes under its one turn,
	// so `nats sub 'toolbus.turn.TURN.>'` shows a session's calls, and `toolbus turns`
	// and the console list it (sessionTurn).
	turns sync.Map // *sdk.ServerSession → *sessionTurn
	// endMu orders the sessions' turns against Close: once closing, no turn begins
	// recording, so none is added to ending while Close waits for it.
	endMu   sync.Mutex
	closing bool
	stopped map[*sdk.ServerSession]string // sessions this server ended, and why
	ending  sync.WaitGroup                // the sessions' turns, until their ends are written

	// updateMu orders the reads of the catalog (update): an older read applied after a
	// newer one would take back what the newer added.
	updateMu sync.Mutex
	// missMu guards missAt, when a call of a tool not served last read the catalog
	// (refreshOnMiss).
	missMu sync.Mutex
	missAt time.Time

	refresh chan struct{}
	sub     *nats.Subscription
	cancel  context.CancelFunc
	done    chan struct{}
	// idle counts the HTTP sessions' requests, one account however many Handlers
	// serve them, for the sweep that closes the idle ones (nil: SessionIdle < 0).
	idle      *idleSessions
	idleSwept chan struct{} // closed when the sweep ends
}

// NewServer reads the catalog and the agent's profile once, and keeps the served
// tools current from then on (each change reaching the clients as
// notifications/tools/list_changed) until Close.
func NewServer(ctx context.Context, cfg ServeConfig) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger, specs: map[string]*toolbus.Spec{}, sums: map[string]string{},
		refresh: make(chan struct{}, 1), done: make(chan struct{}), stopped: map[*sdk.ServerSession]string{},
	}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "toolbus", Title: "toolbus: the tools of a bus", Version: "0.1.0"}, &sdk.ServerOptions{
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
		Logger:       cfg.Logger,
	})
	s.srv.AddReceivingMiddleware(s.refreshOnMiss)
	if err := s.update(ctx); err != nil {
		return nil, err
	}
	// Hosts announce themselves when they start and stop; the profile may change
	// any time too, and is read again with the catalog.
	sub, err := cfg.Client.Conn().Subscribe(bus.CatalogChanged, func(*nats.Msg) { s.poke() })
	if err != nil {
		return nil, fmt.Errorf("mcp serve: watch the catalog: %w", err)
	}
	s.sub = sub
	var life context.Context
	life, s.cancel = context.WithCancel(context.Background())
	go s.refreshLoop(life)
	if cfg.SessionIdle > 0 {
		s.idle, s.idleSwept = &idleSessions{seen: map[string]*sessionUse{}}, make(chan struct{})
		go func() {
			defer close(s.idleSwept)
			s.closeIdle(life, s.idle)
		}()
	}
	return s, nil
}

// MCP is the go-sdk server, to run on a transport (Run) or behind HTTP (Handler).
func (s *Server) MCP() *sdk.Server { return s.srv }

// Run serves one client on t (sdk.StdioTransport for a client that started this
// process) until it goes or ctx ends. As sdk.Server.Run, with the session ended
// through stop when ctx ends, so that its turn says the server ended it.
func (s *Server) Run(ctx context.Context, t sdk.Transport) error {
	ss, err := s.srv.Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case <-ctx.Done():
		s.stop(ss, stoppedWhy)
		<-ended
		return ctx.Err()
	case err := <-ended:
		return err
	}
}

// stoppedWhy is the error of a session's turn when the server stops with it open.
const stoppedWhy = "toolbus mcp stopped while the session was open"

// stop ends a session on the server's side: its turn is recorded as aborted, not
// completed, with why (the first reason given wins). (A session that ended on its
// own is no longer among the server's sessions by the time its end is heard: the
// go-sdk drops it first.)
func (s *Server) stop(ss *sdk.ServerSession, why string) {
	s.endMu.Lock()
	if _, ok := s.stopped[ss]; !ok {
		s.stopped[ss] = why
	}
	s.endMu.Unlock()
	_ = ss.Close()
}

// Close stops following the catalog and ends every client's session (an HTTP client
// that never said goodbye keeps one open otherwise), their turns recorded as aborted.
func (s *Server) Close() {
	s.endMu.Lock()
	s.closing = true
	s.endMu.Unlock()
	for ss := range s.srv.Sessions() {
		s.stop(ss, stoppedWhy)
	}
	// The sessions' ends are written before the process goes, within a bound: a bus
	// that stopped answering must not hold the exit.
	ended := make(chan struct{})
	go func() {
		s.ending.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(closePatience):
		s.log.Warn("mcp serve: the end of a session's turn was not recorded in time; it shows as running", "waited", closePatience)
	}
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	if s.cancel != nil {
		s.cancel()
		<-s.done
		if s.idleSwept != nil {
			<-s.idleSwept
		}
	}
}

func (s *Server) poke() {
	select {
	case s.refresh <- struct{}{}:
	default:
	}
}

func (s *Server) refreshLoop(ctx context.Context) {
	defer close(s.done)
	var every <-chan time.Time
	if s.cfg.Refresh > 0 {
		tick := time.NewTicker(s.cfg.Refresh)
		defer tick.Stop()
		every = tick.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-every:
		case <-s.refresh:
			select {
			case <-ctx.Done():
				return
			case <-time.After(DefaultRefreshQuiet):
			}
		}
		uctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := s.update(uctx); err != nil && ctx.Err() == nil {
			s.log.Warn("mcp serve: read the catalog", "err", err)
		}
		cancel()
	}
}

// Name is the MCP name of a tool: its name, or namespace__name (toolbus's
// separator where a wire has no namespaces). Not "namespace.name": MCP clients hand
// the names on to models, and OpenAI's function names may not hold dots.
func Name(s *toolbus.Spec) string {
	if s.Namespace == "" {
		return s.Name
	}
	return s.Namespace + toolbus.NamespaceSeparator + s.Name
}

// missRefreshEvery bounds how often calls of tools the server does not serve read the
// catalog again (refreshOnMiss): a client that keeps calling a name nobody serves costs
// one read a second.
const missRefreshEvery = time.Second

// refreshOnMiss is the server's middleware: a tools/call of a tool it does not serve
// reads the catalog again first (once a missRefreshEvery at most), so that a host that
// started a moment ago is found by the call that wants it, not by the next refresh. Its
// announcement may have come before this server watched, or its answer to the first
// read come late (seen on a loaded machine: `toolbus mcp -listen` on an embedded node
// answered "unknown tool" for one of the node's own tools).
func (s *Server) refreshOnMiss(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if p, ok := req.GetParams().(*sdk.CallToolParamsRaw); ok && method == "tools/call" && !s.serves(p.Name) {
			s.missMu.Lock()
			if time.Since(s.missAt) >= missRefreshEvery {
				s.missAt = time.Now()
				uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if err := s.update(uctx); err != nil {
					s.log.Warn("mcp serve: read the catalog for a tool not served", "tool", p.Name, "err", err)
				}
				cancel()
			}
			s.missMu.Unlock()
		}
		return next(ctx, method, req)
	}
}

// serves reports whether the server serves the tool named name.
func (s *Server) serves(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.specs[name] != nil
}

// update reads the catalog and the profile, and adds, changes and removes tools to
// match.
func (s *Server) update(ctx context.Context) error {
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	cats, err := s.cfg.Client.Categories(ctx)
	if err != nil {
		return err
	}
	profiles, err := s.cfg.Client.Profiles(ctx)
	if err != nil {
		return err
	}
	profile, err := profiles.Get(ctx, s.cfg.Agent)
	if errors.Is(err, toolsets.ErrNoProfile) {
		profile, err = nil, nil // built-in tools only, as its turns get
	}
	if err != nil {
		return err
	}
	want := map[string]*toolbus.Spec{}
	for _, c := range cats {
		for _, spec := range c.Specs {
			if !toolsets.Includes(bus.TurnMain, profile, spec) {
				continue
			}
			if len(s.cfg.Namespaces) > 0 && !slices.Contains(s.cfg.Namespaces, spec.Namespace) {
				continue
			}
			want[Name(spec)] = spec
		}
	}
	// The go-sdk tells every session of each change as it is made: made outside the
	// lock, so that a slow client holds no call up.
	var gone []string
	type added struct {
		name string
		spec *toolbus.Spec
	}
	var adds []added
	s.mu.Lock()
	s.approvals = ""
	if profile != nil {
		s.approvals = profile.Approvals
	}
	for name := range s.specs {
		if want[name] == nil {
			gone = append(gone, name)
			delete(s.specs, name)
			delete(s.sums, name)
		}
	}
	for name, spec := range want {
		b, _ := json.Marshal(spec)
		if s.sums[name] == string(b) {
			continue
		}
		s.specs[name], s.sums[name] = spec, string(b)
		adds = append(adds, added{name, spec})
	}
	s.mu.Unlock()
	if len(gone) > 0 {
		s.srv.RemoveTools(gone...)
	}
	for _, a := range adds {
		s.srv.AddTool(toolOf(a.name, a.spec), s.handler(a.name))
	}
	return nil
}

// toolOf is the MCP tool of a spec: its schema as it is, its flags as annotations
// (a read-only tool is idempotent too).
func toolOf(name string, spec *toolbus.Spec) *sdk.Tool {
	destructive := spec.Destructive
	return &sdk.Tool{
		Name: name, Description: spec.Description, InputSchema: json.RawMessage(spec.Params.JSON()),
		Annotations: &sdk.ToolAnnotations{
			Title:           spec.QualifiedName(),
			ReadOnlyHint:    spec.ReadOnly,
			DestructiveHint: &destructive,
			IdempotentHint:  spec.ReadOnly,
		},
	}
}

func (s *Server) handler(name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		turn := s.sessionTurn(req.Session)
		ids := client.CallIDs{Turn: turn.id, Call: bus.NewID()}
		s.mu.Lock()
		spec, approvals := s.specs[name], s.approvals
		s.mu.Unlock()
		raw := string(req.Params.Arguments)
		if raw == "" || raw == "null" {
			raw = "{}"
		}
		item := toolbus.Item{Kind: toolbus.KindFunctionCall, CallID: ids.Call, Name: name, Arguments: raw}
		if spec != nil {
			item.Name, item.Namespace = spec.Name, spec.Namespace
		}
		step := turn.called(item)
		began := time.Now()
		res, rec := s.call(ctx, req, name, spec, approvals, raw, ids)
		rec.Call, rec.Tool, rec.Namespace, rec.Latency = ids.Call, item.Name, item.Namespace, time.Since(began)
		turn.answered(step, outputItem(item, res), rec)
		// Where to find the call on the bus: nats sub 'toolbus.turn.TURN.>'.
		res.Meta = sdk.Meta{MetaTurn: ids.Turn, MetaCall: ids.Call}
		return res, nil
	}
}

// call runs one tools/call: its arguments repaired and checked, held when the profile
// asks, then sent to the tool's host. It returns the client's result and the call's
// account for the session's turn.
func (s *Server) call(ctx context.Context, req *sdk.CallToolRequest, name string, spec *toolbus.Spec, approvals, raw string, ids client.CallIDs) (*sdk.CallToolResult, bus.CallRecord) {
	if spec == nil {
		msg := fmt.Sprintf("tool %s is no longer served on the bus", name)
		return errorResult(msg), bus.CallRecord{Outcome: bus.OutcomeUnavailable, Error: msg}
	}
	args, err := client.Args(spec, raw)
	if err != nil {
		// The model sees what is wrong, as in a turn, and the tool does not run.
		return errorResult(err.Error()), bus.CallRecord{Outcome: bus.OutcomeInvalid, Error: err.Error()}
	}
	rec := bus.CallRecord{Truncated: args.Truncated}
	for _, r := range args.Rungs {
		rec.Rungs = append(rec.Rungs, string(r))
	}
	notify := s.notifier(ctx, req)
	s.log.Info("mcp call", "tool", spec.QualifiedName(), "turn", ids.Turn, "call", ids.Call, "rungs", args.Rungs)

	if (&toolsets.Kit{Approvals: approvals}).NeedsApproval(spec) {
		held := time.Now()
		if res, outcome := s.hold(ctx, spec, ids, args.JSON, notify); res != nil {
			rec.Outcome, rec.Error = outcome, resultText(res)
			return res, rec
		}
		// The deadline ran while the call was held, as in a turn: it gets what is left.
		timeout := spec.Timeout
		if timeout <= 0 {
			timeout = bus.DefaultCallTimeout
		}
		left := *spec
		left.Timeout = max(timeout-time.Since(held), time.Millisecond)
		spec = &left
	}
	// The call's events, as the host publishes them, go to the client as progress.
	if notify != nil {
		sub, err := s.cfg.Client.Conn().Subscribe(bus.EventSubject(ids.Turn, ids.Call, "*"), func(m *nats.Msg) {
			var ev bus.Event
			if json.Unmarshal(m.Data, &ev) == nil && ev.Kind == bus.EventProgress {
				notify(ev.Label)
			}
		})
		if err == nil {
			defer func() { _ = sub.Unsubscribe() }()
			_ = s.cfg.Client.Conn().Flush()
		}
	}
	reply, err := s.cfg.Client.CallWith(ctx, spec, s.cfg.Agent, args, ids)
	if err != nil {
		rec.Outcome, rec.Error = bus.OutcomeError, err.Error()
		return errorResult(err.Error()), rec
	}
	rec.Outcome, rec.Error, rec.Label, rec.Duration, rec.Details = reply.Outcome, reply.Error, reply.Label, reply.Duration, reply.Details
	return resultOfReply(spec, reply), rec
}

// outputItem is a call's output as the session's transcript holds it: what the client
// got.
func outputItem(call toolbus.Item, res *sdk.CallToolResult) toolbus.Item {
	out := toolbus.Item{Kind: toolbus.KindCallOutput, CallID: call.CallID, Name: call.Name, Namespace: call.Namespace, IsError: res.IsError}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			out.Output = append(out.Output, toolbus.ContentPart{Type: toolbus.ContentText, Text: c.Text})
		case *sdk.ImageContent:
			out.Output = append(out.Output, toolbus.ContentPart{Type: toolbus.ContentImage, MediaType: c.MIMEType, Data: c.Data})
		case *sdk.ResourceLink:
			out.Output = append(out.Output, toolbus.ContentPart{Type: toolbus.ContentImage, MediaType: c.MIMEType, URL: c.URI})
		}
	}
	return out
}

// resultText is the text of a result's content.
func resultText(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// notifier sends progress notifications to the client of req, when it asked for
// them with a progress token; nil otherwise.
func (s *Server) notifier(ctx context.Context, req *sdk.CallToolRequest) func(label string) {
	tok := req.Params.GetProgressToken()
	if tok == nil {
		return nil
	}
	var mu sync.Mutex
	n := 0
	return func(label string) {
		mu.Lock()
		defer mu.Unlock()
		n++
		if err := req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: float64(n), Message: label}); err != nil {
			s.log.Debug("mcp progress", "err", err)
		}
	}
}

// hold keeps a call the agent's profile holds for approval, as a turn does: the
// request goes out on the call's approval subject, and `toolbus approve TURN CALL`
// (or the console) answers on its approve subject. It returns nil once the call is
// approved, and the result to send otherwise.
func (s *Server) hold(ctx context.Context, spec *toolbus.Spec, ids client.CallIDs, args []byte, notify func(string)) (*sdk.CallToolResult, bus.Outcome) {
	how := fmt.Sprintf("toolbus approve %s %s", ids.Turn, ids.Call)
	if s.cfg.ApprovalWait < 0 {
		return errorResult(fmt.Sprintf("%s needs a person's approval (agent %s's profile holds %s calls), and this MCP server does not wait for one (-approval-wait); the call did not run",
			spec.QualifiedName(), s.cfg.Agent, s.approvalsLocked())), bus.OutcomeRefused
	}
	sum := sha256.Sum256(args)
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = bus.DefaultCallTimeout
	}
	// The call's deadline runs while it is held, as in a turn.
	patience := min(s.cfg.ApprovalWait, timeout)
	req := bus.ApprovalRequest{
		Turn: ids.Turn, Call: ids.Call, Agent: s.cfg.Agent, Tool: spec.Name, Namespace: spec.Namespace,
		Args: args, ArgsHash: hex.EncodeToString(sum[:]), Destructive: spec.Destructive, ReadOnly: spec.ReadOnly,
		Deadline: time.Now().Add(patience),
	}
	decided := make(chan bus.Approval, 1)
	nc := s.cfg.Client.Conn()
	var once sync.Once
	sub, err := nc.Subscribe(bus.ApproveSubject(ids.Turn, ids.Call), func(m *nats.Msg) {
		answer := func(r bus.ApprovalReply) {
			b, _ := json.Marshal(r)
			_ = m.Respond(b)
		}
		var a bus.Approval
		if err := json.Unmarshal(m.Data, &a); err != nil {
			answer(bus.ApprovalReply{Error: "malformed approval: " + err.Error()})
			return
		}
		switch {
		case a.Decision == "":
			answer(bus.ApprovalReply{Request: &req})
		case a.Decision != bus.ApprovalGrant && a.Decision != bus.ApprovalRefuse:
			answer(bus.ApprovalReply{Error: fmt.Sprintf("decision %q: want %s or %s", a.Decision, bus.ApprovalGrant, bus.ApprovalRefuse)})
		case a.ArgsHash != req.ArgsHash:
			answer(bus.ApprovalReply{Request: &req, Error: "the decision is for other arguments than the call holds: look at them again and decide for these"})
		default:
			answer(bus.ApprovalReply{Request: &req})
			once.Do(func() { decided <- a })
		}
	})
	if err != nil {
		return errorResult(fmt.Sprintf("%s needs approval, and the approval subject could not be watched: %v", spec.QualifiedName(), err)), bus.OutcomeNotStarted
	}
	defer func() { _ = sub.Unsubscribe() }()
	b, _ := json.Marshal(req)
	subject := bus.ApprovalSubject(ids.Turn, ids.Call)
	err = nc.Publish(subject, b)
	if err == nil {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second) // FlushWithContext wants a deadline
		err = nc.FlushWithContext(fctx)
		cancel()
	}
	// A refused publish is told by the server before the flush's answer, and only in
	// LastError: without this check the call would wait out its patience for nothing.
	if last := nc.LastError(); err == nil && last != nil && errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), `"`+subject+`"`) {
		err = fmt.Errorf("%w (holding calls needs a NATS user that may publish %s and answer requests, as the turn role may; an operator may not: run toolbus mcp as a turn user, see docs/mcp.md)", last, bus.AllApprovals)
	}
	if err != nil {
		return errorResult(fmt.Sprintf("%s needs a person's approval, and the request could not be published: %v; the call did not run", spec.QualifiedName(), err)), bus.OutcomeNotStarted
	}
	s.log.Info("mcp call held for approval", "tool", spec.QualifiedName(), "approve", how)
	tell := func() {
		if notify != nil {
			notify("waiting for approval: " + how)
		}
	}
	tell()
	tick := time.NewTicker(heldProgressEvery)
	defer tick.Stop()
	wait := time.NewTimer(patience)
	defer wait.Stop()
	for {
		select {
		case a := <-decided:
			if a.Decision == bus.ApprovalRefuse {
				who := a.By
				if who == "" {
					who = "an operator"
				}
				msg := fmt.Sprintf("call refused by %s before it ran", who)
				if a.Reason != "" {
					msg += ": " + a.Reason
				}
				return errorResult(msg), bus.OutcomeRefused
			}
			return nil, ""
		case <-tick.C:
			tell()
		case <-wait.C:
			return errorResult(fmt.Sprintf("%s was held for approval and nobody approved it within %s (%s); the call did not run",
				spec.QualifiedName(), patience, how)), bus.OutcomeTimeout
		case <-ctx.Done():
			return errorResult("cancelled while held for approval; the call did not run"), bus.OutcomeNotStarted
		}
	}
}

func (s *Server) approvalsLocked() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.approvals {
	case toolsets.ApproveDestructive:
		return "destructive"
	case toolsets.ApproveWrites:
		return "all but read-only"
	}
	return "no"
}

// The _meta keys of a tools/call result that name the call on the bus.
const (
	MetaTurn = "toolbus/turn"
	MetaCall = "toolbus/call"
)

func errorResult(msg string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: msg}}}
}

// resultOfReply is a host's reply as an MCP result: its content (text and images),
// its details as structured content (an object, as MCP wants it), an error outcome
// as isError with the reason.
func resultOfReply(spec *toolbus.Spec, r bus.ToolReply) *sdk.CallToolResult {
	res := &sdk.CallToolResult{IsError: r.Outcome != bus.OutcomeOK, Content: []sdk.Content{}}
	for _, p := range r.Content {
		switch p.Type {
		case toolbus.ContentText:
			res.Content = append(res.Content, &sdk.TextContent{Text: p.Text})
		case toolbus.ContentImage:
			if len(p.Data) > 0 {
				res.Content = append(res.Content, &sdk.ImageContent{MIMEType: p.MediaType, Data: p.Data})
			} else if p.URL != "" {
				res.Content = append(res.Content, &sdk.ResourceLink{URI: p.URL, Name: "image", MIMEType: p.MediaType})
			}
		}
	}
	if r.Outcome != bus.OutcomeOK && r.Error != "" {
		res.Content = append(res.Content, &sdk.TextContent{Text: fmt.Sprintf("%s: %s", r.Outcome, r.Error)})
	}
	if len(r.Details) > 0 {
		var obj map[string]any
		if json.Unmarshal(r.Details, &obj) == nil {
			res.StructuredContent = json.RawMessage(r.Details)
		} else {
			res.StructuredContent = map[string]json.RawMessage{"details": r.Details}
		}
	}
	if len(res.Content) == 0 {
		res.Content = append(res.Content, &sdk.TextContent{Text: fmt.Sprintf("%s: %s", spec.QualifiedName(), r.Outcome)})
	}
	return res
}

// ErrNeedsToken is CheckListen's error for an address other hosts reach, given no token.
var ErrNeedsToken = errors.New("needs a token")

// CheckListen refuses an HTTP address that other hosts reach when no bearer token
// guards it.
func CheckListen(addr string, hasToken bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen %q: %w", addr, err)
	}
	if hasToken || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("listen %s: reachable from other hosts: %w", addr, ErrNeedsToken)
}

// Handler serves the MCP server over streamable HTTP. With a token, every request
// must carry "Authorization: Bearer TOKEN"; others get 401. Sessions idle for
// ServeConfig.SessionIdle are closed.
func (s *Server) Handler(token string) http.Handler {
	var h http.Handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, nil)
	if s.idle != nil {
		h = s.idle.wrap(h)
	}
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolbus"`)
			http.Error(w, "toolbus mcp: a bearer token is required (Authorization: Bearer TOKEN)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// SplitNamespaces reads a comma-separated namespace filter.
func SplitNamespaces(v string) []string {
	var out []string
	for _, ns := range strings.Split(v, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			out = append(out, ns)
		}
	}
	return out
}
