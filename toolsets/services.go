package toolsets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/toolsets/computer"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/schedule"
	"github.com/toolbus/toolbus/toolsets/todo"
	"github.com/toolbus/toolbus/toolsets/web"
	"github.com/toolbus/toolbus/toolsets/workflow"
)

// Settings configure the built-in categories a node hosts.
type Settings struct {
	// Computer configures the computer category: sandbox, command limits.
	Computer computer.Config
	// Web configures the web category's host: provider keys and caps.
	Web web.Config
	// ScheduleMinInterval is the shortest time between firings a new schedule may ask
	// for (schedule.DefaultMinInterval when zero, never below a second).
	ScheduleMinInterval time.Duration
}

// Validate checks the settings.
func (s Settings) Validate() error {
	if s.ScheduleMinInterval != 0 && s.ScheduleMinInterval < schedule.ServerMinInterval {
		return fmt.Errorf("schedule minimum interval %s is below JetStream's own minimum of %s", s.ScheduleMinInterval, schedule.ServerMinInterval)
	}
	return nil
}

// ServicesConfig is what OpenServices opens.
type ServicesConfig struct {
	JS       jetstream.JetStream
	Replicas int
	Logger   *slog.Logger
	Settings Settings
	// Categories are the built-in categories the node hosts.
	Categories []string
	// Turns says the node runs turns: it then ends jobs and takes schedules' firings,
	// whatever it hosts.
	Turns bool
	// Runner is what the workflow engine needs of the node: it checks, queues and
	// aborts task turns.
	Runner workflow.Runner
}

// Services are the stores and engines the built-in categories keep for one node: what
// its hosts serve, and what its turns need of the categories (a job's record follows
// its turn, a schedule's firing decides its turn, a workflow's task is settled by its
// turn's end). The node knows the categories through this type alone.
type Services struct {
	cfg ServicesConfig
	log *slog.Logger
	h   Handles
}

// OpenServices opens what the node's categories and turns keep in JetStream: the todo
// bucket for a todo host, the jobs and schedules stores and the profiles for a node that
// runs turns or hosts those categories, and the workflow engine. Right after a cluster
// forms, JetStream may not answer yet (no meta or stream leader): it retries until ctx
// ends (bus.Retry) rather than fail the start.
func OpenServices(ctx context.Context, cfg ServicesConfig) (*Services, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Settings.Validate(); err != nil {
		return nil, err
	}
	for _, c := range cfg.Categories {
		if !Builtin(c) {
			return nil, fmt.Errorf("unknown tool category %q (this build hosts %s)", c, Categories())
		}
	}
	s := &Services{cfg: cfg, log: cfg.Logger}
	s.h = Handles{
		Computer: cfg.Settings.Computer, JS: cfg.JS, Web: cfg.Settings.Web,
		ScheduleMinInterval: cfg.Settings.ScheduleMinInterval, Replicas: cfg.Replicas, Logger: cfg.Logger,
	}
	hosts := func(c string) bool { return slices.Contains(cfg.Categories, c) }
	needTodos := hosts(todo.Category)
	needJobs := cfg.Turns || hosts(jobs.Category)
	needSchedules := cfg.Turns || hosts(schedule.Category)
	// The web host reads each caller's providers from its profile.
	needProfiles := needJobs || needSchedules || hosts(web.Category)
	err := bus.Retry(ctx, "open the categories' stores", s.log, func(ctx context.Context) error {
		if needTodos && s.h.Todos == nil {
			kv, err := bus.KeyValue(ctx, cfg.JS, bus.BucketTodos, cfg.Replicas)
			if err != nil {
				return err
			}
			s.h.Todos = kv
		}
		if needProfiles && s.h.Profiles == nil {
			p, err := OpenProfiles(ctx, cfg.JS, cfg.Replicas)
			if err != nil {
				return err
			}
			s.h.Profiles = p
		}
		if needJobs && s.h.Jobs == nil {
			j, err := jobs.Open(ctx, cfg.JS, cfg.Replicas, s.log)
			if err != nil {
				return err
			}
			s.h.Jobs = j
		}
		if needSchedules && s.h.Schedules == nil {
			sc, err := schedule.Open(ctx, cfg.JS, cfg.Replicas, schedule.Config{MinInterval: cfg.Settings.ScheduleMinInterval})
			if err != nil {
				return err
			}
			s.h.Schedules = sc
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if cfg.Runner != nil {
		s.h.Workflows = workflow.NewEngine(cfg.JS, cfg.Replicas, cfg.Runner, s.log)
	}
	if hosts(computer.Category) {
		logSandbox(s.log, cfg.Settings.Computer)
	}
	return s, nil
}

// logSandbox says loudly, when a node hosts the computer tools, that their commands run
// without a sandbox, or that run_command will refuse every call.
func logSandbox(log *slog.Logger, c computer.Config) {
	if c.Sandbox.Mode == computer.SandboxOff {
		log.Warn("NO SANDBOX: run_command runs commands as bare processes of the node (-sandbox=off): " +
			"they can read the node's environment and files, other agents' homes and the network, and outlive their calls")
		return
	}
	if err := computer.CheckSandbox(c); err != nil {
		log.Error("run_command will refuse every call", "err", err)
	}
}

// Tools are the tools a host of category serves.
func (s *Services) Tools(category string) ([]*toolbus.Tool, error) {
	return ForCategory(category, s.h)
}

// Profiles is the agent profile store, when the services opened it (nil otherwise).
func (s *Services) Profiles() *Profiles { return s.h.Profiles }

// Workflows is the node's workflow engine (nil without a Runner).
func (s *Services) Workflows() *workflow.Engine { return s.h.Workflows }

// profile reads an agent's profile; nil when it has none.
func (s *Services) profile(ctx context.Context, agent string) (*Profile, error) {
	if agent == "" || s.h.Profiles == nil {
		return nil, nil
	}
	var p *Profile
	err := bus.Retry(ctx, "read profile "+agent, s.log, func(ctx context.Context) error {
		var err error
		p, err = s.h.Profiles.Get(ctx, agent)
		if errors.Is(err, ErrNoProfile) {
			p, err = nil, nil
		}
		return err
	})
	return p, err
}

// Fire decides what a schedule's firing, taken from the intake, does: the spec of the
// turn it starts, or false once the message is settled (skipped, dropped, or left to
// wait under the queue policy).
func (s *Services) Fire(ctx context.Context, msg jetstream.Msg, sched string) (bus.TurnSpec, bool) {
	log := s.log.With("schedule", sched)
	md, err := msg.Metadata()
	if err != nil || s.h.Schedules == nil {
		log.Error("intake: a schedule's firing this node cannot read; dropped", "err", err)
		_ = msg.Term()
		return bus.TurnSpec{}, false
	}
	f, err := s.h.Schedules.Fire(ctx, sched, md.Sequence.Stream, msg.Data(), func(agent string) (schedule.Policy, error) {
		p, err := s.profile(ctx, agent)
		return p.SchedulePolicy(), err
	})
	if err != nil {
		log.Warn("intake: could not decide a schedule's firing; trying again", "err", err)
		_ = msg.NakWithDelay(time.Second)
		return bus.TurnSpec{}, false
	}
	switch f.Verdict {
	case schedule.Run:
		return f.Spec, true
	case schedule.Wait:
		log.Debug("schedule firing waits for the turn before it (overlap: queue)", "why", f.Why)
		_ = msg.NakWithDelay(schedule.QueueRetry)
	case schedule.Skip:
		log.Info("schedule firing skipped", "why", f.Why)
		_ = msg.Ack()
	default:
		log.Info("schedule firing dropped", "why", f.Why)
		_ = msg.Ack()
	}
	return bus.TurnSpec{}, false
}

// TurnTaken records that node took a job's turn; other turns need nothing.
func (s *Services) TurnTaken(ctx context.Context, spec bus.TurnSpec, node string) {
	if spec.Kind != bus.TurnJob || s.h.Jobs == nil {
		return
	}
	if err := s.h.Jobs.Began(ctx, spec, node); err != nil {
		s.log.Warn("record a job's start", "turn", spec.ID, "err", err)
	}
}

// TurnEnded records how a job's turn ended, as its done status says (on st.Node).
func (s *Services) TurnEnded(spec bus.TurnSpec, st bus.TurnStatus) {
	if spec.Kind != bus.TurnJob || s.h.Jobs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.finishJob(ctx, spec, jobs.End{State: st.State, Node: st.Node, Steps: st.Step, Text: st.Text, Calls: st.Calls, Error: st.Error})
}

// TurnOver settles the job of a turn found ended when taken: a node that ended it and
// was lost before it recorded the job's end, or a job cancelled while queued.
func (s *Services) TurnOver(ctx context.Context, spec bus.TurnSpec) {
	if spec.Kind != bus.TurnJob || s.h.Jobs == nil {
		return
	}
	rec, err := s.h.Jobs.Turn(ctx, spec.ID)
	if err != nil || rec == nil {
		return
	}
	s.finishJob(ctx, spec, jobs.End{State: rec.State, Steps: rec.Step, Error: rec.Error})
}

func (s *Services) finishJob(ctx context.Context, spec bus.TurnSpec, end jobs.End) {
	p, err := s.profile(ctx, spec.Agent)
	if err != nil {
		s.log.Warn("read the profile for a job's keep time; keeping it the default time", "turn", spec.ID, "err", err)
	}
	if _, err := s.h.Jobs.Finish(ctx, spec, end, p.JobsPolicy().Keep); err != nil {
		s.log.Warn("record a job's end", "turn", spec.ID, "err", err)
	}
}

// ErrTaskGone reports a task turn that is no longer its task's live attempt.
var ErrTaskGone = errors.New("the task no longer wants this turn")

// AdmitTask checks, before a node runs a task turn it took, that the turn is still its
// task's live attempt: a workflow cancelled (or a task ended) while the turn waited in
// the intake must not run it (ErrTaskGone). Other turns are admitted.
func (s *Services) AdmitTask(ctx context.Context, spec bus.TurnSpec) error {
	if spec.Kind != bus.TurnTask {
		return nil
	}
	if s.h.Workflows == nil {
		return errors.New("this node has no workflow engine to admit a task turn")
	}
	// Right after a node is lost, the workflows' stream may have no leader for a while:
	// each read is bounded and tried again, as settling is, rather than waited on for as
	// long as the node lives.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := bus.Retry(ctx, "read the workflow of task turn "+spec.ID, s.log, func(ctx context.Context) error {
		return s.h.Workflows.Admit(ctx, spec)
	})
	if errors.Is(err, workflow.ErrNotLive) || errors.Is(err, workflow.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrTaskGone, err)
	}
	return err
}

// CheckTask refuses to queue a task turn whose workflow does not want it (one attempt
// of a task of a running workflow, which records its end; any other would run for
// nobody). Other turns pass.
func (s *Services) CheckTask(ctx context.Context, spec bus.TurnSpec) error {
	if spec.Kind != bus.TurnTask {
		return nil
	}
	if s.h.Workflows == nil {
		return errors.New("this node has no workflow engine to queue a task turn")
	}
	return s.h.Workflows.Admit(ctx, spec)
}

// SettleTask moves the workflow of an ended task turn on (workflow.Engine.Settle);
// other turns need nothing.
func (s *Services) SettleTask(rec bus.TurnRecord) error {
	if rec.Spec.Kind != bus.TurnTask || s.h.Workflows == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return bus.Retry(ctx, "settle task turn "+rec.Spec.ID, s.log, func(ctx context.Context) error {
		return s.h.Workflows.Settle(ctx, rec)
	})
}
