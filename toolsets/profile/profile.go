// Package profile holds agent profiles: one JSON document per agent in the KV bucket
// bus.BucketAgents, its schema for each version, its checks, and the store that reads and
// writes them. It links the wire and the profile's parts (package limits for commands,
// package binding for the web) and none of the categories, so a client reads and writes
// profiles with it (client.Profiles) without linking them. Package toolsets assembles a
// turn from a profile.
package profile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets/computer/limits"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/schedule"
	"github.com/toolbus/toolbus/toolsets/web/binding"
)

// ProfileVersion is the newest profile document version this build reads and writes.
// Each version keeps its own schema below, so stored documents of an older version stay
// readable when a newer one adds fields.
const ProfileVersion = 5

// Profile is an agent's profile: one JSON document per agent in the KV bucket
// bus.BucketAgents, under the agent's id. No profile means built-in tools only.
//
// Version 1 holds the external namespaces the agent's main turns include; version 2 adds
// the approval policy; version 3 adds web providers, skills, the brain, background jobs
// and schedules. A profile holds no secret: provider keys are the web host's own
// configuration.
type Profile struct {
	Version int    `json:"version"`
	Agent   string `json:"agent"`
	// Namespaces are the external tool namespaces, served by other processes, that the
	// agent's main and job turns include, in this order.
	Namespaces []NamespaceRef `json:"namespaces,omitempty"`
	// Approvals says which calls a person must approve before they run:
	// ApproveNever (the default), ApproveDestructive or ApproveWrites (every tool that
	// is not read-only).
	Approvals string `json:"approvals,omitempty"`

	// Web binds the web tools: web_search exists in the agent's turns only when Search
	// names a provider, web_fetch only when Fetch is set.
	Web *binding.Binding `json:"web,omitempty"`
	// Skills are the enabled skills, by folder name under the agent home's skills/.
	Skills []string `json:"skills,omitempty"`
	// Brain enables the agent's knowledge store (recall, get_page).
	Brain bool `json:"brain,omitempty"`
	// Jobs says whether the agent's main turns may start background jobs, and their limits.
	Jobs *JobsPolicy `json:"jobs,omitempty"`
	// Schedules says whether the agent's main turns may create schedules, and what a
	// firing does while the turn it started last still runs.
	Schedules *SchedulesPolicy `json:"schedules,omitempty"`
	// Computer sets the agent's command limits, field by field over the node's.
	Computer *ComputerPolicy `json:"computer,omitempty"`
	// Calls bounds the calls of one of the agent's turns in flight at once.
	Calls *CallsPolicy `json:"calls,omitempty"`
}

// CallsPolicy bounds the calls of one turn in flight at once (held for approval or
// running), over a response's batch: past a bound a call waits, and the calls after it
// too, so they still go out in the model's order. Zero is no bound of the agent's (the
// node's -max-turn-calls still holds).
type CallsPolicy struct {
	MaxInFlight    int `json:"max_in_flight,omitempty"`
	MaxPerCategory int `json:"max_per_category,omitempty"`
}

// MaxCallsBound is the largest bound a profile may set on a turn's calls in flight.
const MaxCallsBound = 1024

// ComputerPolicy is how an agent's commands run: their limits (processes, memory, CPU
// time, file size, /tmp), each a zero for the node's own (run_command reads them at each
// call), a negative value to turn that limit off.
type ComputerPolicy struct {
	Limits limits.Limits `json:"limits"`
}

// JobsPolicy is whether and how much an agent's main turns may start background jobs.
type JobsPolicy struct {
	Spawn bool `json:"spawn"`
	// MaxRunning bounds the agent's jobs running at once; 0 means the default.
	MaxRunning int `json:"max_running,omitempty"`
	// MaxPerHour bounds the jobs the agent starts in any hour; 0 means the default.
	MaxPerHour int `json:"max_per_hour,omitempty"`
	// Keep is how long a finished job's result is kept (a Go duration); "" is the default.
	Keep string `json:"keep,omitempty"`
}

// SchedulesPolicy is whether an agent's main turns may create schedules.
type SchedulesPolicy struct {
	Enabled bool `json:"enabled"`
	// Overlap is OverlapSkip (the default) or OverlapQueue: what a firing does while the
	// turn the schedule started last is still running.
	Overlap string `json:"overlap,omitempty"`
}

// JobsPolicy is the profile's job policy, with the defaults (jobs.DefaultMaxRunning,
// jobs.DefaultMaxPerHour, jobs.DefaultKeep) where it leaves a limit out; no jobs section
// (or no profile) allows no jobs.
func (p *Profile) JobsPolicy() jobs.Policy {
	if p == nil || p.Jobs == nil {
		return jobs.Policy{}.WithDefaults()
	}
	keep, _ := time.ParseDuration(p.Jobs.Keep) // checked when the profile was read
	return jobs.Policy{Spawn: p.Jobs.Spawn, MaxRunning: p.Jobs.MaxRunning, MaxPerHour: p.Jobs.MaxPerHour, Keep: keep}.WithDefaults()
}

// SchedulePolicy is the profile's schedule policy; no schedules section (or no profile)
// enables none, and the overlap policy defaults to OverlapSkip.
func (p *Profile) SchedulePolicy() schedule.Policy {
	if p == nil || p.Schedules == nil {
		return schedule.Policy{Overlap: OverlapSkip}
	}
	overlap := p.Schedules.Overlap
	if overlap == "" {
		overlap = OverlapSkip
	}
	return schedule.Policy{Enabled: p.Schedules.Enabled, Overlap: overlap}
}

// Overlap policies of schedules.
const (
	OverlapSkip  = schedule.OverlapSkip
	OverlapQueue = schedule.OverlapQueue
)

// Approval policies of a profile.
const (
	ApproveNever       = "never"
	ApproveDestructive = "destructive"
	ApproveWrites      = "writes"
)

// NamespaceRef names one external namespace and how its tools are shown to the model.
type NamespaceRef struct {
	Name string `json:"name"`
	// Load is LoadDeferred (the default: behind tool search until the model asks) or
	// LoadUpfront (every tool in every request).
	Load string `json:"load,omitempty"`
}

// How a namespace's tools are loaded.
const (
	LoadDeferred = "deferred"
	LoadUpfront  = "upfront"
)

// Deferred reports whether the namespace's tools wait behind tool search.
func (r NamespaceRef) Deferred() bool { return r.Load != LoadUpfront }

// profileSchema is the document schema of a version: the fields of every version up to it
// (version 2 added approvals, version 3 web, skills, brain, jobs and schedules, version
// 4 computer, version 5 calls), and nothing else.
func profileSchema(version int) *schema.Schema {
	approvals := ""
	if version >= 2 {
		approvals = `"approvals": {"enum": ["never", "destructive", "writes"]},`
	}
	if version >= 3 {
		approvals += `
    "web": {
      "type": "object",
      "properties": {
        "search": {
          "type": "object",
          "properties": {
            "provider": {"enum": ["searxng", "brave", "tavily"]},
            "url": {"type": "string", "minLength": 1, "maxLength": 2048}
          },
          "required": ["provider"],
          "additionalProperties": false
        },
        "fetch": {
          "type": "object",
          "properties": {"allow_private": {"type": "boolean"}},
          "additionalProperties": false
        }
      },
      "additionalProperties": false
    },
    "skills": {
      "type": "array",
      "items": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"}
    },
    "brain": {"type": "boolean"},
    "jobs": {
      "type": "object",
      "properties": {
        "spawn": {"type": "boolean"},
        "max_running": {"type": "integer", "minimum": 0, "maximum": 1000},
        "max_per_hour": {"type": "integer", "minimum": 0, "maximum": 100000},
        "keep": {"type": "string", "maxLength": 32}
      },
      "required": ["spawn"],
      "additionalProperties": false
    },
    "schedules": {
      "type": "object",
      "properties": {
        "enabled": {"type": "boolean"},
        "overlap": {"enum": ["skip", "queue"]}
      },
      "required": ["enabled"],
      "additionalProperties": false
    },`
	}
	if version >= 4 {
		approvals += `
    "computer": {
      "type": "object",
      "properties": {
        "limits": {
          "type": "object",
          "properties": {
            "pids": {"type": "integer"},
            "memory_bytes": {"type": "integer"},
            "cpu_seconds": {"type": "integer"},
            "file_size_bytes": {"type": "integer"},
            "tmp_bytes": {"type": "integer"}
          },
          "additionalProperties": false
        }
      },
      "additionalProperties": false
    },`
	}
	if version >= 5 {
		approvals += fmt.Sprintf(`
    "calls": {
      "type": "object",
      "properties": {
        "max_in_flight": {"type": "integer", "minimum": 0, "maximum": %d},
        "max_per_category": {"type": "integer", "minimum": 0, "maximum": %d}
      },
      "additionalProperties": false
    },`, MaxCallsBound, MaxCallsBound)
	}
	return schema.MustFromJSON([]byte(fmt.Sprintf(`{
  "type": "object",
  "properties": {
    "version": {"const": %d},
    "agent": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9_-]+$"},
    %s
    "namespaces": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9_-]+$"},
          "load": {"enum": ["deferred", "upfront"]}
        },
        "required": ["name"],
        "additionalProperties": false
      }
    }
  },
  "required": ["version", "agent"],
  "additionalProperties": false
}`, version, approvals)))
}

// profileSchemas are the document schemas, by version.
var profileSchemas = map[int]*schema.Schema{1: profileSchema(1), 2: profileSchema(2), 3: profileSchema(3), 4: profileSchema(4), 5: profileSchema(5)}

// ProfileError refuses a profile document, naming each problem by its JSON pointer.
type ProfileError struct {
	Problems []Problem
}

// Problem is one thing wrong in a document, at Path (a JSON pointer, "/" for the root).
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (e *ProfileError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Path + ": " + p.Message
	}
	return "invalid agent profile: " + strings.Join(lines, "; ")
}

func profileError(path, format string, args ...any) *ProfileError {
	return &ProfileError{Problems: []Problem{{Path: path, Message: fmt.Sprintf(format, args...)}}}
}

// ParseProfile reads and checks a profile document: its version's schema, then the rules
// a schema cannot say (the agent-id rule, namespace names, no namespace twice, no
// built-in category named as a namespace). Every error is a *ProfileError.
func ParseProfile(doc []byte) (*Profile, error) {
	var head struct {
		Version *json.RawMessage `json:"version"`
	}
	if err := json.Unmarshal(doc, &head); err != nil {
		return nil, profileError("/", "not a JSON object: %v", err)
	}
	if head.Version == nil {
		return nil, profileError("/version", "missing: a profile says which version of the document it is (this build writes %d)", ProfileVersion)
	}
	var version int
	if err := json.Unmarshal(*head.Version, &version); err != nil || version < 1 {
		return nil, profileError("/version", "%s is not a version: want a whole number from 1", *head.Version)
	}
	sch, ok := profileSchemas[version]
	if !ok {
		return nil, profileError("/version", "version %d is newer than this build reads (up to %d)", version, ProfileVersion)
	}
	if err := sch.Validate(doc); err != nil {
		var ve *schema.ValidationError
		if errors.As(err, &ve) {
			pe := &ProfileError{}
			for _, l := range ve.Leaves {
				pe.Problems = append(pe.Problems, Problem{Path: l.Path, Message: l.Message})
			}
			return nil, pe
		}
		return nil, profileError("/", "%v", err)
	}
	var p Profile
	if err := json.Unmarshal(doc, &p); err != nil {
		return nil, profileError("/", "%v", err)
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return &p, nil
}

// builtin are the built-in categories (package toolsets' registry, which
// TestBuiltinCategories holds equal to it): in every main turn already, so a profile
// names external namespaces only.
var builtin = []string{"todo", "computer", "web", "schedule", "jobs", "workflow", "brain"}

// Builtin reports whether name is a built-in category.
func Builtin(name string) bool { return slices.Contains(builtin, name) }

// BuiltinCategories lists the built-in categories, in assembly order.
func BuiltinCategories() []string { return slices.Clone(builtin) }

// check applies the rules beyond the schema.
func (p *Profile) check() error {
	if err := bus.CheckAgent(p.Agent); err != nil {
		return profileError("/agent", "%v", err)
	}
	pe := &ProfileError{}
	for i, ns := range p.Namespaces {
		path := fmt.Sprintf("/namespaces/%d/name", i)
		switch {
		case toolbus.CheckNamespace(ns.Name) != nil:
			pe.Problems = append(pe.Problems, Problem{path, toolbus.CheckNamespace(ns.Name).Error()})
		case Builtin(ns.Name):
			pe.Problems = append(pe.Problems, Problem{path, fmt.Sprintf("%q is a built-in category, in every main turn already; name external namespaces only", ns.Name)})
		case slices.ContainsFunc(p.Namespaces[:i], func(o NamespaceRef) bool { return o.Name == ns.Name }):
			pe.Problems = append(pe.Problems, Problem{path, fmt.Sprintf("namespace %q is named twice", ns.Name)})
		}
	}
	if p.Web != nil && p.Web.Search != nil {
		if err := checkProviderURL(p.Web.Search); err != nil {
			pe.Problems = append(pe.Problems, Problem{"/web/search/url", err.Error()})
		}
	}
	for i, name := range p.Skills {
		if slices.Contains(p.Skills[:i], name) {
			pe.Problems = append(pe.Problems, Problem{fmt.Sprintf("/skills/%d", i), fmt.Sprintf("skill %q is named twice", name)})
		}
	}
	if p.Jobs != nil && p.Jobs.Keep != "" {
		if d, err := time.ParseDuration(p.Jobs.Keep); err != nil || d < time.Minute {
			pe.Problems = append(pe.Problems, Problem{"/jobs/keep", fmt.Sprintf("%q is not a duration of a minute or more (write it as Go does: 90m, 24h)", p.Jobs.Keep)})
		}
	}
	if p.Computer != nil {
		if err := p.Computer.Limits.Validate(); err != nil {
			pe.Problems = append(pe.Problems, Problem{"/computer/limits", err.Error()})
		}
	}
	if c := p.Calls; c != nil {
		for _, f := range []struct {
			path string
			n    int
		}{{"/calls/max_in_flight", c.MaxInFlight}, {"/calls/max_per_category", c.MaxPerCategory}} {
			if f.n < 0 || f.n > MaxCallsBound {
				pe.Problems = append(pe.Problems, Problem{f.path, fmt.Sprintf("%d is not a bound from 1 to %d (0 or absent: none)", f.n, MaxCallsBound)})
			}
		}
	}
	if len(pe.Problems) > 0 {
		return pe
	}
	return nil
}

// checkProviderURL checks a search binding's endpoint: http(s), a host, no credentials
// (a key is the web host's configuration, never the profile's).
func checkProviderURL(b *binding.SearchBinding) error {
	if b.URL == "" {
		if b.Provider == binding.SearXNG {
			return errors.New("a SearXNG binding needs the instance's URL")
		}
		return nil
	}
	u, err := url.Parse(b.URL)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q is not an http or https URL", b.URL)
	case u.Host == "":
		return fmt.Errorf("%q has no host", b.URL)
	case u.User != nil:
		return errors.New("the URL holds credentials; give a provider's key to the web host instead (docs/web.md)")
	}
	return nil
}

// Encode returns the profile as a document of the newest version.
func (p *Profile) Encode() ([]byte, error) {
	c := *p
	c.Version = ProfileVersion
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode profile %s: %w", p.Agent, err)
	}
	return b, nil
}

// ErrNoProfile reports an agent without a profile.
var ErrNoProfile = errors.New("no profile")

// Profiles is the store of agent profiles.
type Profiles struct {
	kv jetstream.KeyValue
}

// OpenProfiles opens (creating if needed) the profile bucket.
func OpenProfiles(ctx context.Context, js jetstream.JetStream, replicas int) (*Profiles, error) {
	kv, err := bus.KeyValue(ctx, js, bus.BucketAgents, replicas)
	if err != nil {
		return nil, bus.NoJetStream("agent profiles", err)
	}
	return &Profiles{kv: kv}, nil
}

// NewProfiles wraps an open profile bucket.
func NewProfiles(kv jetstream.KeyValue) *Profiles { return &Profiles{kv: kv} }

// Put checks a profile document and stores it under its agent. A refused document is a
// *ProfileError and nothing is stored.
func (s *Profiles) Put(ctx context.Context, doc []byte) (*Profile, error) {
	p, err := ParseProfile(doc)
	if err != nil {
		return nil, err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, doc); err != nil {
		return nil, profileError("/", "%v", err)
	}
	// Retried while JetStream has no leader to answer: a put that no server acknowledged
	// (the bucket's leader moving, a cluster still forming) waited out the caller's whole
	// deadline (60 s) before. Putting the same document twice stores the same profile.
	if err := bus.Retry(ctx, "store profile", nil, func(ctx context.Context) error {
		_, err := s.kv.Put(ctx, p.Agent, compact.Bytes())
		return err
	}); err != nil {
		return nil, fmt.Errorf("store profile %s: %w", p.Agent, err)
	}
	return p, nil
}

// Get reads an agent's profile; an agent without one yields ErrNoProfile.
func (s *Profiles) Get(ctx context.Context, agent string) (*Profile, error) {
	raw, err := s.Raw(ctx, agent)
	if err != nil {
		return nil, err
	}
	p, err := ParseProfile(raw)
	if err != nil {
		return nil, fmt.Errorf("stored profile of %s: %w", agent, err)
	}
	return p, nil
}

// Raw reads an agent's stored document as it is.
func (s *Profiles) Raw(ctx context.Context, agent string) ([]byte, error) {
	if err := bus.CheckAgent(agent); err != nil {
		return nil, err
	}
	e, err := s.kv.Get(ctx, agent)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("agent %s: %w", agent, ErrNoProfile)
	}
	if err != nil {
		return nil, fmt.Errorf("read profile %s: %w", agent, err)
	}
	return e.Value(), nil
}

// List returns every stored profile, by agent. A stored document this build cannot read
// is returned as an error naming its agent, after the readable ones.
func (s *Profiles) List(ctx context.Context) ([]*Profile, error) {
	keys, err := bus.ListKeys(ctx, s.kv)
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	slices.Sort(keys)
	var (
		out  []*Profile
		errs []error
	)
	for _, k := range keys {
		p, err := s.Get(ctx, k)
		switch {
		case errors.Is(err, ErrNoProfile):
			// Deleted meanwhile.
		case err != nil:
			errs = append(errs, err)
		default:
			out = append(out, p)
		}
	}
	return out, errors.Join(errs...)
}

// Delete removes an agent's profile; an agent without one yields ErrNoProfile.
func (s *Profiles) Delete(ctx context.Context, agent string) error {
	if err := bus.CheckAgent(agent); err != nil {
		return err
	}
	if _, err := s.kv.Get(ctx, agent); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("agent %s: %w", agent, ErrNoProfile)
	}
	if err := s.kv.Delete(ctx, agent); err != nil {
		return fmt.Errorf("delete profile %s: %w", agent, err)
	}
	return nil
}
