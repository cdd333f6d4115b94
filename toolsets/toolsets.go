package toolsets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/brain"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/toolsets/computer"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/schedule"
	"github.com/toolbus/toolbus/toolsets/todo"
	"github.com/toolbus/toolbus/toolsets/web"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// Handles are what the built-in categories need to execute their tools on a host.
type Handles struct {
	// Todos is the todo bucket.
	Todos    jetstream.KeyValue
	Computer computer.Config
	// JS is the node's JetStream, for categories that keep state there.
	JS jetstream.JetStream
	// Profiles is the agent profile store, for categories whose tools follow the
	// calling agent's profile (web providers, job limits).
	Profiles *Profiles
	// Web configures the web host: provider keys and caps. The web category reads each
	// calling agent's binding from Profiles.
	Web web.Config
	// Jobs and Schedules keep background jobs and schedules (jobs.Open, schedule.Open).
	Jobs      *jobs.Store
	Schedules *schedule.Store
	// ScheduleMinInterval is the shortest time between firings a schedule may ask for
	// (schedule.DefaultMinInterval when zero); the specs say it to the model.
	ScheduleMinInterval time.Duration
	// Replicas of the buckets a category creates (capped by the cluster size).
	Replicas int
	// Logger is for what a category notices beside its calls (nil: discarded).
	Logger *slog.Logger
	// Workflows is the node's workflow engine, for the workflow category.
	Workflows *workflow.Engine
}

// category is one built-in tool category: its specs for turns, its tools for hosts, and
// the turn kinds whose catalog includes it.
type category struct {
	name string
	// specs are the category's specs in a turn for this profile (nil: none), once in
	// says the turn includes the category.
	specs func(h Handles, p *Profile) []*toolbus.Spec
	tools func(h Handles) ([]*toolbus.Tool, error)
	// in says whether a turn of this kind, for this profile, includes the category. The
	// categories still to come take their rules here: web (the profile binds a
	// provider), workflow (main turns only), skills (the profile's enabled ones).
	in func(kind bus.TurnKind, p *Profile) bool
}

// notInTasks is the rule of the main turn's working categories: a task turn has its own
// fixed catalog, without computer, files, shell, todos, skills, schedules, workflows or
// jobs.
func notInTasks(kind bus.TurnKind, _ *Profile) bool { return kind != bus.TurnTask }

// mainOnly is the rule of the tools only an agent's main text turn has: a job's turn
// and a task's do not start workflows.
func mainOnly(kind bus.TurnKind, _ *Profile) bool { return kind == bus.TurnMain }

// categories is the fixed assembly order of the built-in categories. It is set in init:
// some categories read profiles, whose checks ask which categories are built in.
var categories []category

func init() { categories = builtinCategories() }

func builtinCategories() []category {
	return []category{
		{
			name:  todo.Category,
			specs: func(Handles, *Profile) []*toolbus.Spec { return todo.Specs() },
			tools: func(h Handles) ([]*toolbus.Tool, error) {
				if h.Todos == nil {
					return nil, errors.New("the todo category needs a todo bucket (Handles.Todos)")
				}
				return todo.Tools(h.Todos), nil
			},
			in: notInTasks,
		},
		{
			name:  computer.Category,
			specs: func(h Handles, _ *Profile) []*toolbus.Spec { return computer.Specs(h.Computer) },
			tools: func(h Handles) ([]*toolbus.Tool, error) {
				cfg := h.Computer
				if cfg.CallOptions == nil && (h.Profiles != nil || h.JS != nil) {
					cfg.CallOptions = agentLimits(&lazyProfiles{profiles: h.Profiles, js: h.JS, replicas: h.Replicas, log: h.Logger})
				}
				return computer.Tools(cfg), nil
			},
			in: notInTasks,
		},
		{
			// web_search and web_fetch, each where the profile binds it, in turns of every
			// kind: a task turn gets the web tools its agent's profile binds.
			name:  web.Category,
			specs: func(_ Handles, p *Profile) []*toolbus.Spec { return web.Specs(p.Web) },
			tools: func(h Handles) ([]*toolbus.Tool, error) {
				if h.Profiles == nil {
					return nil, errors.New("the web category needs the agent profile store (Handles.Profiles) to read each agent's providers")
				}
				cfg := h.Web
				cfg.Binding = agentPart(h.Profiles, func(p *Profile) *web.Binding {
					if p == nil {
						return nil
					}
					return p.Web
				})
				return web.Tools(cfg), nil
			},
			in: func(_ bus.TurnKind, p *Profile) bool {
				return p != nil && p.Web != nil && (p.Web.Search != nil || p.Web.Fetch != nil)
			},
		},
		{
			name:  schedule.Category,
			specs: func(h Handles, _ *Profile) []*toolbus.Spec { return schedule.Specs(h.ScheduleMinInterval) },
			tools: func(h Handles) ([]*toolbus.Tool, error) {
				if h.Schedules == nil || h.Profiles == nil {
					return nil, errors.New("the schedule category needs the schedule store and the profiles (Handles.Schedules, Handles.Profiles)")
				}
				return schedule.Tools(h.Schedules, agentPart(h.Profiles, (*Profile).SchedulePolicy)), nil
			},
			// A main turn only, of an agent whose profile enables schedules: a job or task
			// turn does not plan the agent's time.
			in: func(kind bus.TurnKind, p *Profile) bool { return kind == bus.TurnMain && p.SchedulePolicy().Enabled },
		},
		{
			name:  jobs.Category,
			specs: func(_ Handles, p *Profile) []*toolbus.Spec { return jobs.Specs(p.JobsPolicy()) },
			tools: func(h Handles) ([]*toolbus.Tool, error) {
				if h.Jobs == nil || h.Profiles == nil {
					return nil, errors.New("the jobs category needs the jobs store and the profiles (Handles.Jobs, Handles.Profiles)")
				}
				return jobs.Tools(h.Jobs, agentPart(h.Profiles, (*Profile).JobsPolicy)), nil
			},
			// A main turn only, of an agent whose profile allows jobs: never a job's own
			// turn (no jobs of jobs) nor a task's.
			in: func(kind bus.TurnKind, p *Profile) bool { return kind == bus.TurnMain && p.JobsPolicy().Spawn },
		},
		{
			name:  workflow.Category,
			specs: func(Handles, *Profile) []*toolbus.Spec { return workflow.Specs() },
			tools: func(h Handles) ([]*toolbus.Tool, error) {
				if h.Workflows == nil {
					return nil, errors.New("the workflow category needs a workflow engine (Handles.Workflows)")
				}
				return workflow.Tools(h.Workflows), nil
			},
			in: mainOnly,
		},
		{
			name:  brain.Category,
			specs: func(Handles, *Profile) []*toolbus.Spec { return brain.Specs() },
			tools: func(h Handles) ([]*toolbus.Tool, error) {
				if h.JS == nil {
					return nil, errors.New("the brain category keeps pages in JetStream (Handles.JS)")
				}
				// The store opens its buckets on the first call and follows each agent's
				// pages while the connection under h.JS lives.
				return brain.Tools(brain.NewStore(h.JS, brain.Options{Replicas: h.Replicas, Logger: h.Logger})), nil
			},
			// recall and get_page are read-only: a task turn gets them too.
			in: func(_ bus.TurnKind, p *Profile) bool { return p != nil && p.Brain },
		},
	}
}

// Includes reports whether a turn of this kind, for an agent with this profile (nil:
// none), would include the tool s, as Assemble decides it: a built-in tool by its
// category's rule (a task turn takes its read-only tools only), an external tool when
// the profile names its namespace (never in a task turn). Direct calls (toolbus call)
// skip this gating; they use it to say so.
func Includes(kind bus.TurnKind, p *Profile, s *toolbus.Spec) bool {
	if kind == "" {
		kind = bus.TurnMain
	}
	for _, c := range categories {
		if c.name != s.Category {
			continue
		}
		if !c.in(kind, p) || kind == bus.TurnTask && !s.ReadOnly {
			return false
		}
		return slices.ContainsFunc(c.specs(Handles{}, p), func(x *toolbus.Spec) bool { return x.Name == s.Name })
	}
	if p == nil || kind == bus.TurnTask || s.Namespace == "" {
		return false
	}
	return slices.ContainsFunc(p.Namespaces, func(r NamespaceRef) bool { return r.Name == s.Namespace })
}

// Categories lists the built-in tool categories, in assembly order.
func Categories() []string {
	names := make([]string, len(categories))
	for i, c := range categories {
		names[i] = c.name
	}
	return names
}

// Builtin reports whether name is a built-in category.
func Builtin(name string) bool {
	for _, c := range categories {
		if c.name == name {
			return true
		}
	}
	return false
}

// ForCategory returns the tools a host of a built-in category executes.
func ForCategory(name string, h Handles) ([]*toolbus.Tool, error) {
	for _, c := range categories {
		if c.name == name {
			tools, err := c.tools(h)
			if err != nil {
				return nil, fmt.Errorf("category %s: %w", name, err)
			}
			return tools, nil
		}
	}
	return nil, fmt.Errorf("unknown tool category %q (this build hosts %s)", name, strings.Join(Categories(), ", "))
}

// profileReadPatience bounds a run_command call's read of its agent's profile, and
// opening the profile store.
const profileReadPatience = 3 * time.Second

// lazyProfiles is the profile store of a host that reads its callers' profiles, opened
// at the first call that needs it: a host whose user may not read profiles (the tool
// role) starts as fast as before, and after a failed open tries again a minute later,
// not at every call.
type lazyProfiles struct {
	js       jetstream.JetStream
	replicas int
	log      *slog.Logger

	mu       sync.Mutex
	profiles *Profiles
	failed   time.Time
}

func (l *lazyProfiles) get(ctx context.Context) *Profiles {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.profiles != nil || l.js == nil || time.Since(l.failed) < time.Minute {
		return l.profiles
	}
	p, err := OpenProfiles(ctx, l.js, l.replicas)
	if err != nil {
		if l.failed.IsZero() && l.log != nil {
			l.log.Warn("run_command: cannot open the agent profiles; the node's command limits apply to every agent", "err", err)
		}
		l.failed = time.Now()
		return nil
	}
	l.profiles = p
	return p
}

// agentLimits gives each run_command call its agent's command limits (Profile.Computer).
// A profile that cannot be read leaves the node's limits in force, and says so.
func agentLimits(profiles *lazyProfiles) func(agent string) computer.CallSandbox {
	part := func(p *Profile) computer.Limits {
		if p == nil || p.Computer == nil {
			return computer.Limits{}
		}
		return p.Computer.Limits
	}
	return func(agent string) computer.CallSandbox {
		if agent == "" {
			return computer.CallSandbox{}
		}
		ctx, cancel := context.WithTimeout(context.Background(), profileReadPatience)
		defer cancel()
		store := profiles.get(ctx)
		if store == nil {
			return computer.CallSandbox{}
		}
		l, err := agentPart(store, part)(ctx, agent)
		if err != nil && profiles.log != nil {
			profiles.log.Warn("run_command: could not read the agent's command limits; the node's apply", "agent", agent, "err", err)
		}
		return computer.CallSandbox{Limits: l}
	}
}
