package toolsets

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/catalog"
	"github.com/toolbus/toolbus/toolsets/computer"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// Catalog is where assembly finds the tools of external namespaces (catalog.Catalog).
type Catalog interface {
	// Tools returns the specs of a namespace served on the bus, each loaded up front or
	// deferred behind tool search as asked, or why the namespace cannot be included. The
	// specs are shared: assembly does not change them.
	Tools(namespace string, deferred bool) ([]*toolbus.Spec, error)
}

// Decision is what a turn's policy says about one call the model made.
type Decision uint8

const (
	// Run dispatches the call.
	Run Decision = iota
	// Refuse answers the call with an error result and does not run it.
	Refuse
)

// TextRule is what a turn does with a response that calls no tool.
type TextRule uint8

const (
	// TextEnds completes the turn with the text as its answer.
	TextEnds TextRule = iota
	// TextRepairOnce sends the policy's RepairInstruction once and asks again; a second
	// response without a call fails the turn. A turn that must end through a local tool
	// (a task's submit_result) has this rule.
	TextRepairOnce
)

// Policy is what differs between turn kinds, and the one place where it does.
type Policy struct {
	Kind bus.TurnKind
	// Admit decides whether a call runs, and why not. Nil runs every call.
	Admit func(spec *toolbus.Spec) (Decision, string)
	Text  TextRule
	// RepairInstruction is the developer message TextRepairOnce sends.
	RepairInstruction string
}

// LocalTool is a tool the turn answers itself, without the bus: a task's submit_result.
// Its result's Terminate ends the turn.
type LocalTool struct {
	Spec   *toolbus.Spec
	Answer func(ctx context.Context, args json.RawMessage) (toolbus.Result, error)
	// Final marks a tool whose accepted call is what the turn exists for (a task's
	// submit_result): the turn keeps that call's arguments as its submission
	// (bus.TurnRecord.Submitted), ends after it, and a turn resumed on another node
	// that finds such a call accepted in its transcript ends at once.
	Final bool
}

// LocalCategory is the category of local tools; no host serves it.
const LocalCategory = "turn"

// Kit is everything a turn needs from assembly.
type Kit struct {
	// Tools are the specs the model sees, in order: the built-in categories, load_skill,
	// the external namespaces, then the kind's own local tools.
	Tools *toolbus.Set
	// Instructions are added to the turn's own (the list of skills, task rules).
	Instructions string
	// Local are the turn-local tools by name.
	Local  map[string]LocalTool
	Policy Policy
	// Notes say what assembly could not include (a namespace with no host), for the turn's
	// status; the turn runs with the rest.
	Notes []string
	// Approvals is the agent's approval policy (ApproveNever when empty).
	Approvals string
	// MaxCalls and MaxCallsPerCategory bound the turn's calls in flight at once (the
	// profile's CallsPolicy); zero is no bound.
	MaxCalls, MaxCallsPerCategory int
	// Home is the agent's home on the assembling node (Options.AgentHome), told to the
	// turn's watchers; "" when the node has none.
	Home string
}

// NeedsApproval reports whether a call of the tool waits for a person's approval.
func (k *Kit) NeedsApproval(s *toolbus.Spec) bool {
	switch {
	case s.Category == LocalCategory:
		return false
	case k.Approvals == ApproveDestructive:
		return s.Destructive
	case k.Approvals == ApproveWrites:
		return !s.ReadOnly
	}
	return false
}

// Options carry the configuration built-in specs depend on.
type Options struct {
	Computer computer.Config
	// Home, when set, is every agent's home; otherwise HomeRoot/<agent> is (see
	// AgentHome). Assembly reads the agent's skills there, on the node that runs the
	// turn, and writes their mcporter configuration there: in a cluster, the nodes that
	// run turns and those that host the computer category must see the same homes.
	// Neither set: no skill is read (load_skill is still listed).
	Home     string
	HomeRoot string
	// ScheduleMinInterval is the node's shortest interval between a schedule's firings.
	ScheduleMinInterval time.Duration
}

// policies are the turn kinds' policies.
var policies = map[bus.TurnKind]Policy{
	bus.TurnMain: {Kind: bus.TurnMain, Text: TextEnds},
	// A job's turn runs like a main turn; its catalog lacks job and workflow tools.
	bus.TurnJob: {Kind: bus.TurnJob, Text: TextEnds},
	// A task turn only reads and submits: whatever else reached its catalog is refused,
	// and it cannot end with text alone.
	bus.TurnTask: {
		Kind: bus.TurnTask,
		Admit: func(s *toolbus.Spec) (Decision, string) {
			if s.ReadOnly || s.Category == LocalCategory {
				return Run, ""
			}
			return Refuse, fmt.Sprintf("a task turn may only read and submit its result; %s changes things", s.QualifiedName())
		},
		Text:              TextRepairOnce,
		RepairInstruction: "This task ends only when you call submit_result with your result. Do that now.",
	},
}

// PolicyFor returns the policy of a turn kind ("" is main).
func PolicyFor(kind bus.TurnKind) (Policy, error) {
	if kind == "" {
		kind = bus.TurnMain
	}
	p, ok := policies[kind]
	if !ok {
		return Policy{}, fmt.Errorf("unknown turn kind %q", kind)
	}
	return p, nil
}

// Assemble builds a turn's kit from its spec, its agent's profile (nil: none) and the
// catalog of the bus (nil: no external namespaces can be included). The order is fixed:
// the built-in categories the kind includes, then skills (load_skill, for main and job
// turns whose profile enables skills), then the profile's namespaces in profile order,
// then local tools. A namespace that cannot be included, or a skill that cannot be
// read, is a note in the kit, not an error: the turn runs with the rest.
//
// With a home in opts, assembly reads the agent's enabled skills from it and brings the
// mcporter configuration of their MCP servers there up to date
// (skills.WriteMcporterConfig).
func Assemble(spec bus.TurnSpec, profile *Profile, cat Catalog, opts Options) (*Kit, error) {
	policy, err := PolicyFor(spec.Kind)
	if err != nil {
		return nil, err
	}
	kit := &Kit{Policy: policy, Home: opts.AgentHome(spec.Agent)}
	if profile != nil {
		kit.Approvals = profile.Approvals
		if c := profile.Calls; c != nil {
			kit.MaxCalls, kit.MaxCallsPerCategory = c.MaxInFlight, c.MaxPerCategory
		}
	}
	var specs []*toolbus.Spec
	h := Handles{Computer: opts.Computer, ScheduleMinInterval: opts.ScheduleMinInterval}
	for _, c := range categories {
		if !c.in(policy.Kind, profile) {
			continue
		}
		for _, s := range c.specs(h, profile) {
			// A task turn's catalog is fixed and reads only: of the categories it
			// includes (the web tools the profile binds, the brain's recall and
			// get_page), it takes the read-only tools.
			if policy.Kind == bus.TurnTask && !s.ReadOnly {
				continue
			}
			specs = append(specs, s)
		}
	}
	if skillsIn(policy.Kind, profile) {
		specs = append(specs, addSkills(kit, spec.Agent, profile, opts))
	}
	if profile != nil && policy.Kind != bus.TurnTask {
		for _, ref := range profile.Namespaces {
			if cat == nil {
				kit.Notes = append(kit.Notes, fmt.Sprintf("namespace %s is left out: this node has no catalog of the bus", ref.Name))
				continue
			}
			ns, err := cat.Tools(ref.Name, ref.Deferred())
			if err != nil {
				note := fmt.Sprintf("namespace %s is left out: %v", ref.Name, err)
				if errors.Is(err, catalog.ErrNotServed) {
					// What next: the profile names it on purpose, or by mistake.
					note += fmt.Sprintf("; start a host that serves it (docs/protocol.md), or take it out of agent %s's profile (toolbus agent set)", cmp.Or(spec.Agent, "default"))
				}
				kit.Notes = append(kit.Notes, note)
				continue
			}
			// Names are unique within a category; only a namespace that several
			// categories serve can hold one tool twice.
			var served map[string]string // tool name → category, for such a namespace
			for _, s := range ns {
				if s.Category != ns[0].Category {
					served = make(map[string]string, len(ns))
					break
				}
			}
			for _, s := range ns {
				if Builtin(s.Category) {
					kit.Notes = append(kit.Notes, fmt.Sprintf("tool %s is left out: it claims the built-in category %s", s.QualifiedName(), s.Category))
					continue
				}
				if served != nil {
					// The first (by category name) serves it, and the turn still runs.
					if first, dup := served[s.Name]; dup {
						kit.Notes = append(kit.Notes, fmt.Sprintf("tool %s of category %s is left out: category %s serves it already", s.QualifiedName(), s.Category, first))
						continue
					}
					served[s.Name] = s.Category
				}
				specs = append(specs, s)
			}
		}
	}
	if policy.Kind == bus.TurnTask {
		submit, err := taskSubmit(spec)
		if err != nil {
			return nil, err
		}
		specs = append(specs, submit.Spec)
		kit.Local = map[string]LocalTool{submit.Spec.Name: submit}
		kit.Instructions = taskRules
	}
	set, err := toolbus.NewSet(specs...)
	if err != nil {
		return nil, fmt.Errorf("assemble %s turn: %w", policy.Kind, err)
	}
	kit.Tools = set
	return kit, nil
}

// taskRules are a task turn's own instructions, after its spec's.
const taskRules = "Do the task below with the tools you have. When you have the result, call submit_result " +
	"with it; the task ends only when a result is accepted. If it is refused, fix what the refusal names and submit again."

// taskSubmit is a task turn's submit_result, built from the result schema its spec
// carries: an accepted call ends the turn, and its arguments are the turn's submission.
func taskSubmit(spec bus.TurnSpec) (LocalTool, error) {
	s, err := workflow.SubmitSpec(spec.ResultSchema)
	if err != nil {
		return LocalTool{}, fmt.Errorf("assemble task turn %s: result_schema: %w", spec.ID, err)
	}
	s.Category = LocalCategory
	return LocalTool{Spec: s, Final: true, Answer: acceptSubmission}, nil
}

// acceptSubmission answers a submit_result call the turn found valid: the turn's
// validation against the schema is the acceptance, and the turn ends.
func acceptSubmission(context.Context, json.RawMessage) (toolbus.Result, error) {
	res := toolbus.TextResult("Result accepted. The task is done.")
	res.Terminate = true
	return res, nil
}

// NewKit is the kit of a main turn with exactly the given tools, for programs that
// assemble their own tool set.
func NewKit(set *toolbus.Set) *Kit {
	return &Kit{Tools: set, Policy: policies[bus.TurnMain]}
}
