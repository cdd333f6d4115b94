package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/actors"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/durable"
	"github.com/toolbus/toolbus/gateway"
)

// checkpointCost measures a step of one no-op call in a turn run in Go (no record, no
// fenced appends) against the same step in a durable turn taken from the intake (the
// response stored before the call goes out, the output as it arrives, each a fenced
// append; the record only at the claim and the end). Both turns play the same script; a
// step's time is the turn's wall time over its steps. Target: ≤ 5× (issue "Durable
// state with one owner"), and at most two writes a step, counted from the transcript.
func (s *suite) checkpointCost(ctx context.Context) ([]Row, error) {
	steps := max(s.cfg.Samples/10, 50)
	type call struct {
		ID        string `json:"id"`
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
		Arguments string `json:"arguments"`
	}
	type step struct {
		Text  string `json:"text,omitempty"`
		Calls []call `json:"calls,omitempty"`
	}
	var script struct {
		Responses []step `json:"responses"`
	}
	for i := range steps {
		script.Responses = append(script.Responses, step{Calls: []call{{ID: fmt.Sprintf("c%d", i), Name: s.noop.Name, Namespace: s.noop.Category, Arguments: "{}"}}})
	}
	script.Responses = append(script.Responses, step{Text: "done"})
	raw, err := json.Marshal(script)
	if err != nil {
		return nil, err
	}
	// The durable turn includes the bench category through its agent's profile (a
	// category without a namespace is the namespace of its name).
	profiles, err := s.node.Actors().Profiles(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := profiles.Put(ctx, []byte(`{"version":1,"agent":"bench","namespaces":[{"name":"bench","load":"upfront"}]}`)); err != nil {
		return nil, err
	}
	spec := bus.TurnSpec{Agent: "bench", Input: "bench", Script: raw, Limits: bus.TurnLimits{MaxSteps: bus.MaxStepsLimit}}
	if steps+1 > bus.MaxStepsLimit {
		return nil, fmt.Errorf("checkpoint bench: %d steps exceed the limit", steps)
	}

	// In Go, no checkpoints: the same kit as the durable turn gets.
	var sc gateway.Script
	if err := json.Unmarshal(raw, &sc); err != nil {
		return nil, err
	}
	scripted, err := gateway.NewScripted(sc)
	if err != nil {
		return nil, err
	}
	kit, err := s.node.Actors().Assemble(ctx, spec)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	res, err := s.node.Actors().Run(ctx, actors.TurnConfig{Spec: spec, Model: scripted, Kit: kit})
	if err != nil {
		return nil, err
	}
	if res.State != bus.TurnCompleted {
		return nil, fmt.Errorf("checkpoint bench: turn in Go ended %s: %s", res.State, res.ErrorText())
	}
	plain := time.Since(t0) / time.Duration(res.Steps)

	// Durable: through the intake, waiting for its done status.
	done, err := s.node.Actors().Conn().SubscribeSync(bus.AllStatuses)
	if err != nil {
		return nil, err
	}
	defer func() { _ = done.Unsubscribe() }()
	t0 = time.Now()
	id, err := s.node.Actors().Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	var st bus.TurnStatus
	for {
		m, err := done.NextMsgWithContext(ctx)
		if err != nil {
			return nil, err
		}
		if m.Subject == bus.TurnStatusSubject(id, bus.StatusDone) {
			if err := json.Unmarshal(m.Data, &st); err != nil {
				return nil, err
			}
			break
		}
	}
	if st.State != bus.TurnCompleted {
		return nil, fmt.Errorf("checkpoint bench: durable turn ended %s: %s", st.State, st.Error)
	}
	fenced := time.Since(t0) / time.Duration(st.Step)
	audit, err := durable.AuditTranscript(ctx, s.node.Actors().JetStream(), id)
	if err != nil {
		return nil, err
	}
	// The claim's message (the input) is the turn's, not a step's.
	perStep := float64(audit.Messages-1) / float64(st.Step)
	base := Row{Name: "turn step of 1 no-op call, turn run in Go (not durable)", Unit: "us",
		P50: float64(plain) / float64(time.Microsecond), Samples: res.Steps, Note: "mean of one turn's steps"}
	r := Row{Name: "turn step of 1 no-op call, durable turn (fenced appends)", Unit: "us",
		P50: float64(fenced) / float64(time.Microsecond), Samples: st.Step,
		Note: fmt.Sprintf("mean of one turn's steps; %.2f writes a step (transcript appends; the record is written at the claim and the end)", perStep)}
	return []Row{base, compare(r, base, 5, true)}, nil
}
