package gateway

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/toolbus/toolbus/internal/jsonpos"
)

// Script is a fixed sequence of model responses that drives a turn deterministically: step
// N of a turn gets Responses[N]. Arguments are raw strings, so malformed ones can be
// scripted exactly as a model would send them.
//
//	{"responses": [
//	  {"calls": [{"name": "list_files", "arguments": "{\"path\": \".\"}"}]},
//	  {"text": "Done."}
//	]}
//
// Child, when set, is the script of the turns a turn playing this one starts: its
// background jobs and the turns its schedules fire (bus.TurnSpec.ChildModel). Without
// it they play this script again.
type Script struct {
	Responses []ScriptStep `json:"responses"`
	Child     *Script      `json:"child,omitempty"`
}

// ScriptStep is one scripted response.
type ScriptStep struct {
	Text  string       `json:"text,omitempty"`
	Calls []ScriptCall `json:"calls,omitempty"`
	// Truncated scripts a response that hit the output limit.
	Truncated bool `json:"truncated,omitempty"`
	// Usage scripts the tokens the response reports.
	Usage *Usage `json:"usage,omitempty"`
	// DelayMS makes the response take that many milliseconds, as a model thinking
	// would (a cancelled request ends the wait).
	DelayMS int `json:"delay_ms,omitempty"`
}

// ScriptCall is one scripted function call.
type ScriptCall struct {
	ID        string `json:"id,omitempty"` // default "call_<step>_<index>"
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Arguments string `json:"arguments"`
}

// Scripted is a Model that plays a Script. It holds no per-turn state, so one value can
// serve many turns at once.
type Scripted struct {
	script Script
}

// NewScripted validates a script and returns its model.
func NewScripted(s Script) (*Scripted, error) {
	if len(s.Responses) == 0 {
		return nil, fmt.Errorf("script has no responses")
	}
	for i, st := range s.Responses {
		if st.DelayMS < 0 {
			return nil, fmt.Errorf("script response %d: delay_ms %d is negative", i, st.DelayMS)
		}
		for j, c := range st.Calls {
			if c.Name == "" {
				return nil, fmt.Errorf("script response %d, call %d: name is empty", i, j)
			}
		}
	}
	if s.Child != nil {
		if _, err := NewScripted(*s.Child); err != nil {
			return nil, fmt.Errorf("child script: %w", err)
		}
	}
	return &Scripted{script: s}, nil
}

// LoadScript reads a script file.
func LoadScript(path string) (*Scripted, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load script: %w", err)
	}
	var s Script
	if err := jsonpos.Decode(path, b, &s, true); err != nil {
		return nil, fmt.Errorf("load script: %w", err)
	}
	m, err := NewScripted(s)
	if err != nil {
		return nil, fmt.Errorf("load script %s: %w", path, err)
	}
	return m, nil
}

// Respond returns the scripted response for req.Step.
func (m *Scripted) Respond(ctx context.Context, req *Request) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.Step >= len(m.script.Responses) {
		return nil, &Error{Provider: "script", Message: fmt.Sprintf("no response scripted for step %d (the script has %d)", req.Step+1, len(m.script.Responses))}
	}
	st := m.script.Responses[req.Step]
	if st.DelayMS > 0 {
		t := time.NewTimer(time.Duration(st.DelayMS) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	resp := &Response{ID: fmt.Sprintf("script_%d", req.Step), Truncated: st.Truncated}
	if st.Usage != nil {
		resp.Usage = *st.Usage
	}
	if st.Text != "" {
		resp.Items = append(resp.Items, Item{Kind: KindMessage, Role: RoleAssistant, Text: st.Text})
	}
	for i, c := range st.Calls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", req.Step, i)
		}
		resp.Items = append(resp.Items, Item{
			Kind:      KindFunctionCall,
			CallID:    id,
			Name:      c.Name,
			Namespace: c.Namespace,
			Arguments: c.Arguments,
			Truncated: st.Truncated,
		})
	}
	return resp, nil
}
