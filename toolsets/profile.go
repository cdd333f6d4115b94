package toolsets

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/toolsets/profile"
)

// Agent profiles are package profile's; these names keep them where turn assembly, the
// node and the commands have long read them.
type (
	Profile         = profile.Profile
	Profiles        = profile.Profiles
	ProfileError    = profile.ProfileError
	Problem         = profile.Problem
	NamespaceRef    = profile.NamespaceRef
	CallsPolicy     = profile.CallsPolicy
	ComputerPolicy  = profile.ComputerPolicy
	JobsPolicy      = profile.JobsPolicy
	SchedulesPolicy = profile.SchedulesPolicy
)

const (
	ProfileVersion     = profile.ProfileVersion
	MaxCallsBound      = profile.MaxCallsBound
	OverlapSkip        = profile.OverlapSkip
	OverlapQueue       = profile.OverlapQueue
	ApproveNever       = profile.ApproveNever
	ApproveDestructive = profile.ApproveDestructive
	ApproveWrites      = profile.ApproveWrites
	LoadDeferred       = profile.LoadDeferred
	LoadUpfront        = profile.LoadUpfront
)

// ErrNoProfile reports an agent without a profile (profile.ErrNoProfile).
var ErrNoProfile = profile.ErrNoProfile

// ParseProfile is profile.ParseProfile.
func ParseProfile(doc []byte) (*Profile, error) { return profile.ParseProfile(doc) }

// OpenProfiles is profile.OpenProfiles.
func OpenProfiles(ctx context.Context, js jetstream.JetStream, replicas int) (*Profiles, error) {
	return profile.OpenProfiles(ctx, js, replicas)
}

// NewProfiles is profile.NewProfiles.
func NewProfiles(kv jetstream.KeyValue) *Profiles { return profile.NewProfiles(kv) }

// agentPart reads one part of a calling agent's profile, at each call, for the hosts
// whose tools follow it (web providers, job and schedule policies). An agent without a
// profile gets what part says of a nil profile.
func agentPart[T any](s *Profiles, part func(*Profile) T) func(ctx context.Context, agent string) (T, error) {
	return func(ctx context.Context, agent string) (T, error) {
		var p *Profile
		err := bus.Retry(ctx, "read profile "+agent, nil, func(ctx context.Context) (err error) {
			p, err = s.Get(ctx, agent)
			return err
		})
		switch {
		case errors.Is(err, ErrNoProfile):
			p = nil
		case err != nil:
			var zero T
			return zero, err
		}
		return part(p), nil
	}
}
