package catalog

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
)

// Defaults of a catalog.
const (
	DefaultFirstReply = time.Second
	DefaultQuiet      = 150 * time.Millisecond
	DefaultRefresh    = 30 * time.Second
)

// Options tune a catalog. Zero values take the defaults.
type Options struct {
	// FirstReply bounds the wait for the first answer to $SRV.INFO; with no host on the
	// bus a refresh takes this long.
	FirstReply time.Duration
	// Quiet ends a refresh once no host answered for this long (at least twice what the
	// first answer took).
	Quiet time.Duration
	// Refresh is the period of the background refresh that Watch runs, a backstop for
	// hosts that come and go without saying so on bus.CatalogChanged. Negative disables.
	Refresh time.Duration
	Logger  *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.FirstReply <= 0 {
		o.FirstReply = DefaultFirstReply
	}
	if o.Quiet <= 0 {
		o.Quiet = DefaultQuiet
	}
	if o.Refresh == 0 {
		o.Refresh = DefaultRefresh
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Host is one instance of a category's micro service.
type Host struct {
	ID   string `json:"id"`   // the micro service instance id
	Node string `json:"node"` // the node or worker name it gives in its metadata
}

func (h Host) String() string {
	if h.Node == "" {
		return "instance " + h.ID
	}
	return h.Node + " (instance " + h.ID + ")"
}

// Category is what the bus says about one tool category.
type Category struct {
	Name  string
	Hosts []Host
	// Specs are the category's tools in the order its first host lists them.
	Specs []*toolbus.Spec
	// Err, when set, refuses the whole category (its hosts disagree): no turn includes it.
	Err error
	// Skipped are endpoints that publish no usable spec, each with the reason; the rest of
	// the category is served.
	Skipped []string
}

// Problems are the lines that say what of the category no turn gets: its refusal, or
// each endpoint skipped with the reason. `toolbus tools -catalog` prints them after
// "toolbus: "; docs/protocol.md §3 shows them, and a test holds the two together.
func (c *Category) Problems() []string {
	if c.Err != nil {
		return []string{fmt.Sprintf("category %s refused: %v", c.Name, c.Err)}
	}
	lines := make([]string, 0, len(c.Skipped))
	for _, s := range c.Skipped {
		lines = append(lines, fmt.Sprintf("category %s: skipped endpoint %s", c.Name, s))
	}
	return lines
}

// ConflictError refuses a category whose hosts publish different specs for one tool:
// a call could reach either host, so no spec can be trusted.
type ConflictError struct {
	Category, Tool string
	Hosts          [2]Host
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("hosts of category %s disagree on tool %s: %s and %s publish different specs; the category is refused until they agree",
		e.Category, e.Tool, e.Hosts[0], e.Hosts[1])
}

// ErrNotServed reports a namespace or tool that no host on the bus serves.
var ErrNotServed = errors.New("no host on the bus serves it")

// Catalog is a cache of the tool categories served on the bus. Refresh reads them;
// Watch keeps them current. Lookups never touch the bus, so a turn's assembly can use
// them freely; no per-call path uses a catalog.
type Catalog struct {
	nc   *nats.Conn
	opts Options
	log  *slog.Logger

	mu         sync.RWMutex
	categories map[string]*Category
	namespaces map[string][]*toolbus.Spec // namespace -> specs, namespace filled in
	// loads holds each namespace's specs as turns include them: [0] loaded up front,
	// [1] deferred. Built once a refresh, so assembling a turn copies nothing.
	loads     map[string][2][]*toolbus.Spec
	refreshed bool
	at        time.Time // when the last refresh ended

	refreshMu sync.Mutex // one refresh at a time
	watch     struct {
		sub  *nats.Subscription
		kick chan struct{}
		stop chan struct{}
		done chan struct{}
		// awaited are the categories announced up that a refresh has not found yet,
		// with the refreshes tried since: a host's answer to $SRV.INFO can come after
		// the refresh its own announcement started has ended (a slow or busy process).
		mu      sync.Mutex
		awaited map[string]int
	}
}

// New returns an empty catalog reading the bus through nc.
func New(nc *nats.Conn, opts Options) *Catalog {
	opts = opts.withDefaults()
	return &Catalog{nc: nc, opts: opts, log: opts.Logger, categories: map[string]*Category{},
		namespaces: map[string][]*toolbus.Spec{}, loads: map[string][2][]*toolbus.Spec{}}
}

// Refresh asks every micro service on the bus for its info ($SRV.INFO), keeps the
// toolbus categories among them and replaces the cached view. It returns after the
// answers stop coming (Options.Quiet, or twice what the first answer took if longer), or
// after Options.FirstReply when none comes.
func (c *Catalog) Refresh(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	return c.refresh(ctx)
}

// Ensure refreshes the catalog when it lacks one of the namespaces and its last refresh
// ended more than maxAge ago. A refresh in flight (after a host's announcement, say) is
// waited for first, so its answer counts.
func (c *Catalog) Ensure(ctx context.Context, maxAge time.Duration, namespaces ...string) error {
	if c.Serves(namespaces...) {
		return nil
	}
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if c.Serves(namespaces...) || (c.Age() < maxAge && !c.awaiting()) {
		return nil
	}
	return c.refresh(ctx)
}

// awaiting reports whether a category announced up is not in the catalog yet: it may
// serve the namespace a turn misses, so the catalog looks again whatever its age.
func (c *Catalog) awaiting() bool {
	c.watch.mu.Lock()
	defer c.watch.mu.Unlock()
	return len(c.watch.awaited) > 0
}

func (c *Catalog) refresh(ctx context.Context) error {
	infos, err := c.gather(ctx)
	if err != nil {
		return fmt.Errorf("refresh catalog: %w", err)
	}
	categories := build(infos)
	namespaces := indexNamespaces(categories)
	loads := indexLoads(namespaces)
	c.mu.Lock()
	c.categories, c.namespaces, c.loads, c.refreshed, c.at = categories, namespaces, loads, true, time.Now()
	c.mu.Unlock()
	c.watch.mu.Lock()
	for name := range c.watch.awaited {
		if _, ok := categories[name]; ok {
			delete(c.watch.awaited, name)
		}
	}
	c.watch.mu.Unlock()
	return nil
}

// gather collects the $SRV.INFO answers of toolbus services.
func (c *Catalog) gather(ctx context.Context) ([]micro.Info, error) {
	var (
		mu    sync.Mutex
		infos []micro.Info
		got   = make(chan struct{}, 1)
	)
	inbox := c.nc.NewRespInbox()
	sub, err := c.nc.Subscribe(inbox, func(m *nats.Msg) {
		// Every answer, a toolbus category's or not, shows that answers still come.
		var info micro.Info
		if json.Unmarshal(m.Data, &info) == nil && strings.HasPrefix(info.Name, bus.CategoryService("")) {
			mu.Lock()
			infos = append(infos, info)
			mu.Unlock()
		}
		select {
		case got <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	asked := time.Now()
	if err := c.nc.PublishRequest("$SRV.INFO", inbox, nil); err != nil {
		return nil, err
	}
	wait := time.NewTimer(c.opts.FirstReply)
	defer wait.Stop()
	// The quiet that ends the gathering is at least twice what the first answer took:
	// a bus slow to answer (a loaded machine) answers slowly throughout, and with the
	// fixed 150 ms a host that answered later was left out (TestAgentProfiles in CI,
	// its foreign worker missing from `toolbus tools -catalog`). A quick first answer
	// keeps Options.Quiet.
	quiet := time.Duration(0)
	for {
		select {
		case <-got:
			if quiet == 0 {
				quiet = max(c.opts.Quiet, 2*time.Since(asked))
			}
			wait.Reset(quiet)
		case <-wait.C:
			// Unsubscribe first, so no answer lands while the list is read.
			_ = sub.Unsubscribe()
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(infos), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// build groups the services' answers by category and checks that a category's hosts
// agree.
func build(infos []micro.Info) map[string]*Category {
	// Stable order: the same bus gives the same catalog whatever the answers' order.
	slices.SortFunc(infos, func(a, b micro.Info) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	categories := make(map[string]*Category)
	for _, info := range infos {
		name := strings.TrimPrefix(info.Name, bus.CategoryService(""))
		if !bus.ValidToken(name) {
			continue
		}
		host := Host{ID: info.ID, Node: info.Metadata[KeyNode]}
		cat := categories[name]
		if cat == nil {
			cat = &Category{Name: name}
			categories[name] = cat
		}
		cat.Hosts = append(cat.Hosts, host)
		first := len(cat.Hosts) == 1
		seen := make(map[string]bool, len(info.Endpoints))
		for _, ep := range info.Endpoints {
			seen[ep.Name] = true
			spec, err := FromEndpoint(name, ep.Name, ep.Subject, ep.Metadata)
			if err != nil {
				if first {
					cat.Skipped = append(cat.Skipped, fmt.Sprintf("%s on %s: %v", ep.Name, host, err))
				}
				continue
			}
			if first {
				cat.Specs = append(cat.Specs, spec)
				continue
			}
			i := slices.IndexFunc(cat.Specs, func(s *toolbus.Spec) bool { return s.Name == spec.Name })
			if cat.Err == nil && (i < 0 || !sameSpec(cat.Specs[i], spec)) {
				cat.Err = &ConflictError{Category: name, Tool: spec.Name, Hosts: [2]Host{cat.Hosts[0], host}}
			}
		}
		if !first && cat.Err == nil {
			for _, s := range cat.Specs {
				if !seen[s.Name] {
					cat.Err = &ConflictError{Category: name, Tool: s.Name, Hosts: [2]Host{cat.Hosts[0], host}}
					break
				}
			}
		}
	}
	return categories
}

// indexNamespaces maps each namespace to its tools. A tool published without a namespace
// belongs to the namespace named like its category, so a profile can include any
// category and its tools never clash with built-in ones.
func indexNamespaces(categories map[string]*Category) map[string][]*toolbus.Spec {
	ns := make(map[string][]*toolbus.Spec)
	for _, name := range slices.Sorted(maps.Keys(categories)) {
		cat := categories[name]
		if cat.Err != nil {
			continue
		}
		for _, s := range cat.Specs {
			if s.Namespace == "" {
				c := *s
				c.Namespace = cat.Name
				s = &c
			}
			ns[s.Namespace] = append(ns[s.Namespace], s)
		}
	}
	return ns
}

// indexLoads makes each namespace's two variants for turns: loaded up front and
// deferred, sharing a spec wherever it already loads that way.
func indexLoads(namespaces map[string][]*toolbus.Spec) map[string][2][]*toolbus.Spec {
	loads := make(map[string][2][]*toolbus.Spec, len(namespaces))
	for name, specs := range namespaces {
		var v [2][]*toolbus.Spec
		for i, deferred := range []bool{false, true} {
			v[i] = make([]*toolbus.Spec, len(specs))
			for j, s := range specs {
				if s.DeferLoading != deferred {
					c := *s
					c.DeferLoading = deferred
					s = &c
				}
				v[i][j] = s
			}
		}
		loads[name] = v
	}
	return loads
}

// Refreshed reports whether the catalog has read the bus at least once.
func (c *Catalog) Refreshed() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.refreshed
}

// Serves reports whether every namespace in names is in the catalog.
func (c *Catalog) Serves(names ...string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, n := range names {
		if _, ok := c.namespaces[n]; !ok {
			return false
		}
	}
	return true
}

// Age is how long ago the last refresh ended; forever before the first.
func (c *Catalog) Age() time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.refreshed {
		return time.Duration(1<<63 - 1)
	}
	return time.Since(c.at)
}

// Categories lists the categories on the bus, by name.
func (c *Catalog) Categories() []Category {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]Category, 0, len(c.categories))
	for _, name := range slices.Sorted(maps.Keys(c.categories)) {
		out = append(out, *c.categories[name])
	}
	return out
}

// Tools returns the tools of a namespace as a turn includes them: loaded up front, or
// deferred behind tool search, whatever their hosts publish. The specs are shared and
// must not be changed. Errors are those of Namespace.
func (c *Catalog) Tools(namespace string, deferred bool) ([]*toolbus.Spec, error) {
	c.mu.RLock()
	v, ok := c.loads[namespace]
	c.mu.RUnlock()
	if !ok {
		_, err := c.Namespace(namespace)
		return nil, err
	}
	if deferred {
		return v[1], nil
	}
	return v[0], nil
}

// Namespace returns the tools of a namespace, each with its namespace set. The specs are
// shared: callers copy one before changing it. A namespace no usable host serves yields
// an error wrapping ErrNotServed, or the ConflictError of a refused category.
func (c *Catalog) Namespace(name string) ([]*toolbus.Spec, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if specs, ok := c.namespaces[name]; ok {
		return specs, nil
	}
	if cat, ok := c.categories[name]; ok && cat.Err != nil {
		return nil, cat.Err
	}
	for _, cat := range c.categories {
		if cat.Err == nil {
			continue
		}
		var ce *ConflictError
		if errors.As(cat.Err, &ce) && slices.ContainsFunc(cat.Specs, func(s *toolbus.Spec) bool { return s.Namespace == name }) {
			return nil, cat.Err
		}
	}
	return nil, ErrNotServed
}

// Lookup finds one tool by the name a person gives it: "namespace.tool", or a bare name
// that names exactly one tool on the bus (tools published without a namespace first).
func (c *Catalog) Lookup(name string) (*toolbus.Spec, error) {
	if ns, tool, ok := strings.Cut(name, "."); ok {
		specs, err := c.Namespace(ns)
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", name, err)
		}
		for _, s := range specs {
			if s.Name == tool {
				return s, nil
			}
		}
		return nil, fmt.Errorf("tool %s: namespace %s has no tool %s (it has %s): %w", name, ns, tool, names(specs), ErrNotServed)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	var bare, namespaced []*toolbus.Spec
	for _, catName := range slices.Sorted(maps.Keys(c.categories)) {
		cat := c.categories[catName]
		if cat.Err != nil {
			continue
		}
		for _, s := range cat.Specs {
			if s.Name != name {
				continue
			}
			if s.Namespace == "" {
				bare = append(bare, s)
			} else {
				namespaced = append(namespaced, s)
			}
		}
	}
	switch {
	case len(bare) == 1:
		return bare[0], nil
	case len(bare) == 0 && len(namespaced) == 1:
		return namespaced[0], nil
	case len(bare)+len(namespaced) == 0:
		return nil, fmt.Errorf("tool %s: %w", name, ErrNotServed)
	}
	var all []string
	for _, s := range append(bare, namespaced...) {
		all = append(all, s.Category+": "+s.QualifiedName())
	}
	return nil, fmt.Errorf("tool %s is ambiguous: %s; name it as namespace.tool", name, strings.Join(all, ", "))
}

func names(specs []*toolbus.Spec) string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Name)
	}
	return strings.Join(out, ", ")
}

// Watch keeps the catalog current in the background: it refreshes at once, whenever a
// host says on bus.CatalogChanged that it started or is stopping, when Kick asks, and
// every Options.Refresh. Close stops it.
func (c *Catalog) Watch() error {
	c.watch.kick = make(chan struct{}, 1)
	c.watch.stop = make(chan struct{})
	c.watch.done = make(chan struct{})
	c.watch.awaited = make(map[string]int)
	sub, err := c.nc.Subscribe(bus.CatalogChanged, func(m *nats.Msg) {
		var ch bus.CatalogChange
		if json.Unmarshal(m.Data, &ch) == nil && bus.ValidToken(ch.Category) {
			c.watch.mu.Lock()
			if ch.State == bus.CatalogUp {
				c.watch.awaited[ch.Category] = 0
			} else {
				delete(c.watch.awaited, ch.Category)
			}
			c.watch.mu.Unlock()
		}
		c.Kick()
	})
	if err != nil {
		return fmt.Errorf("watch catalog: %w", err)
	}
	c.watch.sub = sub
	c.Kick()
	go c.loop()
	return nil
}

// Kick asks a watching catalog to refresh soon. Kicks that arrive during a refresh fold
// into one more refresh after it.
func (c *Catalog) Kick() {
	if c.watch.kick == nil {
		return
	}
	select {
	case c.watch.kick <- struct{}{}:
	default:
	}
}

func (c *Catalog) loop() {
	defer close(c.watch.done)
	var tick <-chan time.Time
	if c.opts.Refresh > 0 {
		t := time.NewTicker(c.opts.Refresh)
		defer t.Stop()
		tick = t.C
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.watch.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-c.watch.stop:
			return
		case <-c.watch.kick:
		case <-tick:
		}
		if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("catalog refresh failed", "err", err)
		}
		c.lookAgain()
	}
}

// awaitedTries bounds the refreshes that look again for a category announced up.
const awaitedTries = 4

// lookAgain kicks another refresh, after a pause that doubles each time, while a
// category announced up is still missing; a category still missing after awaitedTries
// waits for the periodic refresh.
func (c *Catalog) lookAgain() {
	c.mu.RLock()
	c.watch.mu.Lock()
	var delay time.Duration
	for name, tries := range c.watch.awaited {
		if _, ok := c.categories[name]; ok || tries >= awaitedTries {
			delete(c.watch.awaited, name)
			continue
		}
		c.watch.awaited[name] = tries + 1
		delay = max(delay, c.opts.Quiet<<tries)
	}
	c.watch.mu.Unlock()
	c.mu.RUnlock()
	if delay > 0 {
		time.AfterFunc(delay, c.Kick)
	}
}

// Close stops Watch.
func (c *Catalog) Close() {
	if c.watch.stop == nil {
		return
	}
	select {
	case <-c.watch.stop:
		return
	default:
	}
	_ = c.watch.sub.Unsubscribe()
	close(c.watch.stop)
	<-c.watch.done
}
