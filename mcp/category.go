package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/schema"
)

// Host hosts a category's tools on the bus: actors.Node.Host.
type Host interface {
	Host(ctx context.Context, category string, tools []*toolbus.Tool) error
}

// Unhoster stops hosting a category: actors.Node.Unhost. A Host that is one too lets a
// category whose server offers other tools (after a restart, or saying its list
// changed) be hosted anew with them; with any other, the tools hosted first stay until
// the node restarts.
type Unhoster interface {
	Unhost(ctx context.Context, category string) error
}

// ErrDown is the error of a call made while the category's server is down (errors.Is).
var ErrDown = errors.New("mcp server is down")

// terminateGrace is how long a stdio server gets to exit after its stdin closes,
// before SIGTERM (the go-sdk's CommandTransport then waits as long again before
// SIGKILL).
const terminateGrace = 2 * time.Second

// Category hosts one MCP server's tools as a toolbus category. It keeps the server
// running: started again, with a growing wait, whenever it ends or fails to start.
type Category struct {
	cfg  ServerConfig
	host Host
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	first  chan struct{} // closed once the first start has ended, either way

	mu      sync.Mutex
	session *sdk.ClientSession
	why     error             // why there is no session
	offered map[string]string // toolbus name → the server's name, of the hosted tools
	live    map[string]bool   // the server's names its current session offers
	hosted  bool
	sum     string // the hosted specs, encoded: what a new list is compared with

	listChanged chan struct{} // the server said its tool list changed

	progress sync.Map // progress token (string) → func(label string)
	tokens   atomic.Uint64
}

// Start starts keeping the server of cfg running and, once it first answers, hosts
// its tools through host. It returns at once; Started tells when the first start
// ended, State how it went.
func Start(cfg ServerConfig, host Host) (*Category, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Category{
		cfg: cfg, host: host, ctx: ctx, cancel: cancel,
		log:  cfg.Logger.With("mcp", cfg.Name, "category", cfg.Category()),
		done: make(chan struct{}), first: make(chan struct{}), listChanged: make(chan struct{}, 1),
		why: errors.New("not started yet"),
	}
	go c.run()
	return c, nil
}

// Name is the server's name, its namespace.
func (c *Category) Name() string { return c.cfg.Name }

// Started is closed once the first start of the server has ended, up or not.
func (c *Category) Started() <-chan struct{} { return c.first }

// State says whether the server is up, and why not.
func (c *Category) State() (up bool, why error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session != nil, c.why
}

// Hosted reports whether the server's tools are hosted on the bus.
func (c *Category) Hosted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hosted
}

// Close stops the server and waits for it. The category's host stays until its node
// stops; its calls are refused from now on.
func (c *Category) Close() {
	c.cancel()
	<-c.done
}

func (c *Category) run() {
	defer close(c.done)
	wait := c.cfg.RestartMin
	firstDone := false
	markFirst := func() {
		if !firstDone {
			firstDone = true
			close(c.first)
		}
	}
	defer markFirst()
	for {
		started := time.Now()
		cs, tools, err := c.connect()
		if err == nil {
			err = c.adopt(cs, tools)
		}
		if err != nil {
			if cs != nil {
				_ = cs.Close()
			}
			if c.ctx.Err() != nil {
				return
			}
			c.setDown(err)
			c.log.Warn("mcp server did not start; its tools are refused until it does", "err", err, "retry_in", wait)
			markFirst()
		} else {
			markFirst()
			// Wait ends when the server does; Close ends the session when the node stops.
			// Meanwhile the server may say its tool list changed: it is read again.
			stop := context.AfterFunc(c.ctx, func() { _ = cs.Close() })
			ended := make(chan error, 1)
			go func() { ended <- cs.Wait() }()
			var werr error
		session:
			for {
				select {
				case werr = <-ended:
					break session
				case <-c.listChanged:
					c.relist(cs)
				}
			}
			stop()
			if c.ctx.Err() != nil {
				c.setDown(errors.New("the node is stopping"))
				return
			}
			c.setDown(fmt.Errorf("the server ended (%v)", orEOF(werr)))
			c.log.Warn("mcp server ended; starting it again", "err", orEOF(werr), "retry_in", wait)
			_ = cs.Close()
			if time.Since(started) > 4*c.cfg.RestartMax {
				wait = c.cfg.RestartMin // it ran well for a while: not a crash loop
			}
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, c.cfg.RestartMax)
	}
}

func orEOF(err error) error {
	if err == nil {
		return errors.New("it closed the connection")
	}
	return err
}

func (c *Category) setDown(why error) {
	c.mu.Lock()
	c.session, c.why = nil, why
	c.mu.Unlock()
}

// connect starts the server (or dials it), initializes a session and lists its
// tools, all within InitTimeout.
func (c *Category) connect() (*sdk.ClientSession, []*sdk.Tool, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.InitTimeout)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "toolbus", Version: "0.1.0"}, &sdk.ClientOptions{
		// Read again by run, not here: the handler runs on the session's reader.
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case c.listChanged <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			p := req.Params
			tok, ok := p.ProgressToken.(string)
			if !ok {
				return
			}
			if f, ok := c.progress.Load(tok); ok {
				f.(func(string))(progressLabel(p))
			}
		},
	})
	var transport sdk.Transport
	if c.cfg.URL != "" {
		t := &sdk.StreamableClientTransport{Endpoint: c.cfg.URL, MaxRetries: -1}
		if len(c.cfg.Headers) > 0 {
			t.HTTPClient = &http.Client{Transport: headerTransport{c.cfg.Headers, http.DefaultTransport}}
		}
		transport = t
	} else {
		// Not CommandContext: the process outlives this start; Close ends it.
		cmd := exec.Command(c.cfg.Command[0], c.cfg.Command[1:]...)
		cmd.Env = append(os.Environ(), c.cfg.Env...)
		cmd.Dir = c.cfg.Dir
		cmd.Stderr = &logWriter{log: c.log}
		transport = &sdk.CommandTransport{Command: cmd, TerminateDuration: terminateGrace}
	}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		if ctx.Err() != nil && c.ctx.Err() == nil {
			return nil, nil, fmt.Errorf("no answer to initialize within %s: %w", c.cfg.InitTimeout, err)
		}
		return nil, nil, fmt.Errorf("initialize: %w", err)
	}
	tools, err := c.listTools(ctx, cs)
	return cs, tools, err
}

// maxTools bounds what one server may offer: a list past it is a server gone wrong.
const maxTools = 1000

// listTools lists the tools of cs, within ctx.
func (c *Category) listTools(ctx context.Context, cs *sdk.ClientSession) ([]*sdk.Tool, error) {
	var tools []*sdk.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			if ctx.Err() != nil && c.ctx.Err() == nil {
				err = fmt.Errorf("no answer within %s: %w", c.cfg.InitTimeout, err)
			}
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		tools = append(tools, t)
		if len(tools) > maxTools {
			return nil, fmt.Errorf("tools/list: more than %d tools", maxTools)
		}
	}
	return tools, nil
}

// relist reads the tools of the running session again, after the server said its
// list changed, and hosts them anew if they differ.
func (c *Category) relist(cs *sdk.ClientSession) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.InitTimeout)
	tools, err := c.listTools(ctx, cs)
	cancel()
	if err != nil {
		c.log.Warn("mcp server said its tools changed, and they could not be read; the hosted ones stay", "err", err)
		return
	}
	if err := c.adopt(cs, tools); err != nil {
		// Unhosted and not hosted again: the next start hosts them.
		c.log.Warn("mcp server's changed tools could not be hosted; it is started again", "err", err)
		_ = cs.Close()
	}
}

// adopt makes cs the category's session and hosts its tools: the first time, and
// again whenever they differ from those hosted (a host's tools are fixed, so the
// category is unhosted and hosted anew; where the Host cannot unhost, the first ones
// stay and what the server now offers differently is logged).
func (c *Category) adopt(cs *sdk.ClientSession, tools []*sdk.Tool) error {
	live := make(map[string]bool, len(tools))
	for _, t := range tools {
		live[t.Name] = true
	}
	specs, names := c.tools(tools)
	sum := specsSum(specs)
	c.mu.Lock()
	hosted, same := c.hosted, c.sum == sum
	c.mu.Unlock()
	if !hosted {
		if len(specs) == 0 {
			return fmt.Errorf("the server offers no tool toolbus can host (%d offered)", len(tools))
		}
		return c.host1(cs, live, names, sum, specs, "mcp server hosted")
	}
	unhoster, canUnhost := c.host.(Unhoster)
	if same || !canUnhost || len(specs) == 0 {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.session, c.why, c.live = cs, nil, live
		for ours, theirs := range c.offered {
			if !live[theirs] {
				c.log.Warn("mcp server no longer offers a hosted tool; its calls are refused", "tool", ours)
			}
		}
		c.log.Info("mcp server up", "tools", len(tools))
		return nil
	}
	c.mu.Lock()
	old := c.offered
	c.mu.Unlock()
	var added, removed []string
	for name := range names {
		if _, ok := old[name]; !ok {
			added = append(added, name)
		}
	}
	for name := range old {
		if _, ok := names[name]; !ok {
			removed = append(removed, name)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.InitTimeout)
	defer cancel()
	if err := unhoster.Unhost(ctx, c.cfg.Category()); err != nil {
		return fmt.Errorf("unhost category %s to host its changed tools: %w", c.cfg.Category(), err)
	}
	c.mu.Lock()
	c.hosted = false
	c.mu.Unlock()
	return c.host1(cs, live, names, sum, specs, "mcp server's tools changed; hosted anew", "added", added, "removed", removed)
}

// host1 hosts specs as the category's tools, cs being its session.
func (c *Category) host1(cs *sdk.ClientSession, live map[string]bool, names map[string]string, sum string, specs []*toolbus.Tool, msg string, attrs ...any) error {
	// Up before hosting: a call may come the moment the host serves.
	c.mu.Lock()
	c.session, c.why, c.live, c.offered = cs, nil, live, names
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.InitTimeout)
	defer cancel()
	if err := c.host.Host(ctx, c.cfg.Category(), specs); err != nil {
		c.setDown(fmt.Errorf("host category %s: %w", c.cfg.Category(), err))
		return fmt.Errorf("host category %s: %w", c.cfg.Category(), err)
	}
	c.mu.Lock()
	c.hosted, c.sum = true, sum
	c.mu.Unlock()
	c.log.Info(msg, append([]any{"tools", len(specs)}, attrs...)...)
	return nil
}

// specsSum encodes the specs of tools, to tell whether a server's list changed.
func specsSum(tools []*toolbus.Tool) string {
	specs := make([]toolbus.Spec, len(tools))
	for i, t := range tools {
		specs[i] = t.Spec
	}
	slices.SortFunc(specs, func(a, b toolbus.Spec) int { return strings.Compare(a.Name, b.Name) })
	b, _ := json.Marshal(specs)
	return string(b)
}

// tools turns the server's tools into toolbus tools. A tool whose name toolbus cannot
// use as it is gets a mapped one (each character other than a letter, digit, '_' or
// '-' becomes '_'); one whose schema toolbus refuses, or whose mapped name another
// takes, is left out. Each is logged.
func (c *Category) tools(offered []*sdk.Tool) ([]*toolbus.Tool, map[string]string) {
	var out []*toolbus.Tool
	names := make(map[string]string, len(offered))
	for _, t := range offered {
		name := ToolName(t.Name)
		if name == "" {
			c.log.Warn("mcp tool left out: its name cannot be mapped to a toolbus name", "tool", t.Name)
			continue
		}
		if prev, dup := names[name]; dup {
			c.log.Warn("mcp tool left out: its mapped name is taken", "tool", t.Name, "name", name, "taken_by", prev)
			continue
		}
		spec, err := specOf(c.cfg, name, t)
		if err != nil {
			c.log.Warn("mcp tool left out", "tool", t.Name, "err", err)
			continue
		}
		if name != t.Name {
			c.log.Info("mcp tool renamed: toolbus names hold only letters, digits, '_' and '-'", "tool", t.Name, "name", name)
		}
		names[name] = t.Name
		theirs := t.Name
		out = append(out, &toolbus.Tool{
			Spec: *spec,
			Execute: func(ctx context.Context, call toolbus.Call) (toolbus.Result, error) {
				return c.call(ctx, theirs, call)
			},
		})
	}
	return out, names
}

// ToolName maps an MCP tool name (up to 128 characters of any kind) to a toolbus
// one: each character other than a letter, digit, '_' or '-' becomes '_'. "" when
// the result would be longer than 64 characters.
func ToolName(s string) string {
	if s == "" || len(s) > 64 {
		return ""
	}
	b := []byte(s)
	for i, r := range b {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// specOf is the toolbus spec of an MCP tool: its input schema as it is (it must be
// an object), its annotations as flags. MCP's destructiveHint defaults to true for a
// tool that is not read-only; a tool that may change things runs sequentially.
func specOf(cfg ServerConfig, name string, t *sdk.Tool) (*toolbus.Spec, error) {
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	params, err := schema.FromJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	spec := &toolbus.Spec{
		Name: name, Description: t.Description, Params: params,
		Namespace: cfg.Name, NamespaceDescription: "Tools of the MCP server " + cfg.Name,
		Category: cfg.Category(), Timeout: cfg.CallTimeout, Mode: toolbus.Sequential,
		Destructive: true,
	}
	if spec.Description == "" {
		spec.Description = t.Title
	}
	if a := t.Annotations; a != nil {
		spec.ReadOnly = a.ReadOnlyHint
		spec.Destructive = !a.ReadOnlyHint && (a.DestructiveHint == nil || *a.DestructiveHint)
	}
	if spec.ReadOnly {
		spec.Mode = toolbus.Parallel
	}
	return spec, spec.Check()
}

// call runs one call on the server.
func (c *Category) call(ctx context.Context, tool string, call toolbus.Call) (toolbus.Result, error) {
	c.mu.Lock()
	cs, why, live := c.session, c.why, c.live[tool]
	c.mu.Unlock()
	switch {
	case cs == nil:
		return toolbus.Result{}, fmt.Errorf("%w: %s: %v; it is being started again, try later", ErrDown, c.cfg.Name, why)
	case !live:
		return toolbus.Result{}, fmt.Errorf("mcp server %s no longer offers the tool %q", c.cfg.Name, tool)
	}
	token := c.cfg.Name + "-" + strconv.FormatUint(c.tokens.Add(1), 10)
	if call.Progress != nil {
		c.progress.Store(token, call.Progress)
		defer c.progress.Delete(token)
	}
	params := &sdk.CallToolParams{Name: tool, Arguments: json.RawMessage(call.Args)}
	params.SetProgressToken(token)
	// ctx ends on abort and at the deadline: the go-sdk then sends
	// notifications/cancelled for the request.
	res, err := cs.CallTool(ctx, params)
	switch {
	case ctx.Err() != nil:
		return toolbus.Result{}, context.Cause(ctx)
	case errors.Is(err, sdk.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return toolbus.Result{}, fmt.Errorf("mcp server %s ended during the call: %v", c.cfg.Name, err)
	case err != nil:
		return toolbus.Result{}, fmt.Errorf("mcp server %s: %w", c.cfg.Name, err)
	}
	return resultOf(res), nil
}

// progressLabel is a progress notification as an event label.
func progressLabel(p *sdk.ProgressNotificationParams) string {
	n := strconv.FormatFloat(p.Progress, 'f', -1, 64)
	if p.Total > 0 {
		n += "/" + strconv.FormatFloat(p.Total, 'f', -1, 64)
	}
	if p.Message != "" {
		return p.Message + " (" + n + ")"
	}
	return n
}

// resultOf turns an MCP result into a toolbus one: text and images as content,
// audio and resources described in text (the model sees no other kind), the
// structured content as details.
func resultOf(r *sdk.CallToolResult) toolbus.Result {
	res := toolbus.Result{IsError: r.IsError}
	for _, c := range r.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			res.Content = append(res.Content, toolbus.Text(c.Text))
		case *sdk.ImageContent:
			res.Content = append(res.Content, toolbus.Image(c.MIMEType, c.Data))
		case *sdk.AudioContent:
			res.Content = append(res.Content, toolbus.Text(fmt.Sprintf("[audio, %s, %d bytes]", c.MIMEType, len(c.Data))))
		case *sdk.ResourceLink:
			res.Content = append(res.Content, toolbus.Text(fmt.Sprintf("[resource %s: %s]", c.Name, c.URI)))
		case *sdk.EmbeddedResource:
			switch {
			case c.Resource == nil:
			case c.Resource.Text != "":
				res.Content = append(res.Content, toolbus.Text(c.Resource.Text))
			default:
				res.Content = append(res.Content, toolbus.Text(fmt.Sprintf("[resource %s, %s, %d bytes]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob))))
			}
		}
	}
	if r.StructuredContent != nil {
		if b, err := json.Marshal(r.StructuredContent); err == nil {
			res.Details = b
		}
	}
	return res
}

// logWriter logs a stdio server's stderr, line by line, at debug level.
type logWriter struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

// maxLogLine bounds a line of a server's stderr kept for the log.
const maxLogLine = 4096

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) > maxLogLine {
				w.log.Debug("mcp server stderr", "line", string(w.buf[:maxLogLine]))
				w.buf = w.buf[:0]
			}
			return len(p), nil
		}
		line := w.buf[:min(i, maxLogLine)]
		w.log.Debug("mcp server stderr", "line", string(line))
		w.buf = w.buf[i+1:]
	}
}

// Category is the toolbus category the server's tools are hosted in: "mcp-NAME".
func (c *Category) Category() string { return c.cfg.Category() }

// headerTransport adds a server's configured headers to each request.
type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.next.RoundTrip(r)
}
