package actors

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/toolsets"
	"github.com/toolbus/toolbus/toolsets/jobs"
	"github.com/toolbus/toolbus/toolsets/schedule"
)

// What the intake does for background jobs and schedules. Both are durable turns like
// any other; the node that takes one from the intake also keeps the job's record (it
// began, how it ended) and decides what a schedule's firing does (a turn, a skip, a
// wait), so the records follow the turns whichever node runs them.

// fire decides what a schedule's firing, taken from the intake, does: the spec of the
// turn it starts, or false once the message is settled (skipped, dropped, or left to
// wait under the queue policy).
func (n *Node) fire(ctx context.Context, msg jetstream.Msg, sched string) (bus.TurnSpec, bool) {
	log := n.log.With("schedule", sched)
	md, err := msg.Metadata()
	if err != nil || n.schedules == nil {
		log.Error("intake: a schedule's firing this node cannot read; dropped", "err", err)
		_ = msg.Term()
		return bus.TurnSpec{}, false
	}
	f, err := n.schedules.Fire(ctx, sched, md.Sequence.Stream, msg.Data(), func(agent string) (schedule.Policy, error) {
		p, err := n.profile(ctx, agent)
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

// profile reads an agent's profile; nil when it has none.
func (n *Node) profile(ctx context.Context, agent string) (*toolsets.Profile, error) {
	if agent == "" || n.profiles == nil {
		return nil, nil
	}
	var p *toolsets.Profile
	err := bus.Retry(ctx, "read profile "+agent, n.log, func(ctx context.Context) error {
		var err error
		p, err = n.profiles.Get(ctx, agent)
		if errors.Is(err, toolsets.ErrNoProfile) {
			p, err = nil, nil
		}
		return err
	})
	return p, err
}

// turnTaken records that this node took a job's turn.
func (n *Node) turnTaken(ctx context.Context, spec bus.TurnSpec) {
	if spec.Kind != bus.TurnJob || n.jobs == nil {
		return
	}
	if err := n.jobs.Began(ctx, spec, n.cfg.Name); err != nil {
		n.log.Warn("record a job's start", "turn", spec.ID, "err", err)
	}
}

// turnEnded records how a job's turn ended, here.
func (n *Node) turnEnded(spec bus.TurnSpec, r TurnResult) {
	if spec.Kind != bus.TurnJob || n.jobs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.finishJob(ctx, spec, jobs.End{State: r.State, Node: n.cfg.Name, Steps: r.Steps, Text: r.Text, Calls: r.Calls, Error: r.Error})
}

// turnOver settles the job of a turn found ended when taken: a node that ended it and was
// lost before it recorded the job's end, or a job cancelled while queued.
func (n *Node) turnOver(ctx context.Context, spec bus.TurnSpec) {
	if spec.Kind != bus.TurnJob || n.jobs == nil {
		return
	}
	rec, err := n.jobs.Turn(ctx, spec.ID)
	if err != nil || rec == nil {
		return
	}
	n.finishJob(ctx, spec, jobs.End{State: rec.State, Steps: rec.Step, Error: rec.Error})
}

func (n *Node) finishJob(ctx context.Context, spec bus.TurnSpec, end jobs.End) {
	p, err := n.profile(ctx, spec.Agent)
	if err != nil {
		n.log.Warn("read the profile for a job's keep time; keeping it the default time", "turn", spec.ID, "err", err)
	}
	if _, err := n.jobs.Finish(ctx, spec, end, p.JobsPolicy().Keep); err != nil {
		n.log.Warn("record a job's end", "turn", spec.ID, "err", err)
	}
}
