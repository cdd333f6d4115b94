package gateway

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/toolbus/toolbus"
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
// Streamed (a turn asks to see its steps as they arrive, and Config.NoStream is not
// set), a step's text comes word by word, stream_delay_ms apart, then each call once its
// delay_ms has passed, so a script can pace a response as a model writing it would:
//
//	{"delay_ms": 200, "text": "Reading both files.", "stream_delay_ms": 40,
//	 "calls": [{"name": "read_file", "arguments": "{\"path\": \"a\"}", "delay_ms": 100},
//	           {"name": "read_file", "arguments": "{\"path\": \"b\"}", "delay_ms": 900}]}
//
// Not streamed, the same step answers whole after all of its delays. In a Truncated step
// streamed, the last call is the one the output limit cut: only it is marked truncated.
//
// A step's if_error, when set, is played instead of it once a call of the turn has failed
// (an output the model was given is an error), as a model would say so rather than claim
// a success: the demo's script says its checks could not run on a machine without
// bubblewrap, where it said they passed.
//
//	{"text": "The checks pass.", "if_error": {"text": "The checks could not run."}}
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
	// StreamDelayMS paces the text: the pause before each of its words.
	StreamDelayMS int `json:"stream_delay_ms,omitempty"`
	// IfError is played instead of this step once a call of the turn has failed (see
	// Script); its own if_error is not read.
	IfError *ScriptStep `json:"if_error,omitempty"`
}

// ScriptCall is one scripted function call.
type ScriptCall struct {
	ID        string `json:"id,omitempty"` // default "call_<step>_<index>"
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Arguments string `json:"arguments"`
	// DelayMS is the time the model takes to write the call, after what came before it.
	DelayMS int `json:"delay_ms,omitempty"`
}

// Scripted is a Model that plays a Script. It holds no per-turn state, so one value can
// serve many turns at once.
type Scripted struct {
	script   Script
	noStream bool
}

// OpenScript is NewScripted with the gateway configuration a script honours: NoStream.
func OpenScript(s Script, cfg Config) (*Scripted, error) {
	m, err := NewScripted(s)
	if err != nil {
		return nil, err
	}
	m.noStream = cfg.NoStream
	return m, nil
}

// NewScripted validates a script and returns its model.
func NewScripted(s Script) (*Scripted, error) {
	if len(s.Responses) == 0 {
		return nil, fmt.Errorf("script has no responses")
	}
	for i, st := range s.Responses {
		if err := st.validate(); err != nil {
			return nil, fmt.Errorf("script response %d: %w", i, err)
		}
		if st.IfError != nil {
			if err := st.IfError.validate(); err != nil {
				return nil, fmt.Errorf("script response %d, if_error: %w", i, err)
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

func (st *ScriptStep) validate() error {
	if st.DelayMS < 0 || st.StreamDelayMS < 0 {
		return fmt.Errorf("delay_ms %d or stream_delay_ms %d is negative", st.DelayMS, st.StreamDelayMS)
	}
	for j, c := range st.Calls {
		if c.Name == "" {
			return fmt.Errorf("call %d: name is empty", j)
		}
		if c.DelayMS < 0 {
			return fmt.Errorf("call %d: delay_ms %d is negative", j, c.DelayMS)
		}
	}
	return nil
}

// failed reports whether an output the model was given is an error.
func failed(input []toolbus.Item) bool {
	for i := range input {
		if input[i].Kind == toolbus.KindCallOutput && input[i].IsError {
			return true
		}
	}
	return false
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

// Respond returns the scripted response for req.Step, streamed when req asks for it.
func (m *Scripted) Respond(ctx context.Context, req *Request) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.Step >= len(m.script.Responses) {
		return nil, &Error{Provider: "script", Message: fmt.Sprintf("no response scripted for step %d (the script has %d)", req.Step+1, len(m.script.Responses))}
	}
	st := m.script.Responses[req.Step]
	if st.IfError != nil && failed(req.Input) {
		st = *st.IfError
	}
	resp := &Response{ID: fmt.Sprintf("script_%d", req.Step), Truncated: st.Truncated}
	if st.Usage != nil {
		resp.Usage = *st.Usage
	}
	if st.Text != "" {
		resp.Items = append(resp.Items, toolbus.Item{Kind: toolbus.KindMessage, Role: toolbus.RoleAssistant, Text: st.Text})
	}
	for i, c := range st.Calls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", req.Step, i)
		}
		resp.Items = append(resp.Items, toolbus.Item{
			Kind:      toolbus.KindFunctionCall,
			CallID:    id,
			Name:      c.Name,
			Namespace: c.Namespace,
			Arguments: c.Arguments,
			Truncated: st.Truncated,
		})
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	if err := sleepCtx(ctx, ms(st.DelayMS)); err != nil {
		return nil, err
	}
	if req.Stream == nil || m.noStream {
		// Whole: after the time the stream would have taken.
		total := 0
		if st.Text != "" {
			total += st.StreamDelayMS * len(words(st.Text))
		}
		for _, c := range st.Calls {
			total += c.DelayMS
		}
		if err := sleepCtx(ctx, ms(total)); err != nil {
			return nil, err
		}
		return resp, nil
	}
	em := &emitter{f: req.Stream}
	next := 0
	if st.Text != "" {
		for _, w := range words(st.Text) {
			if err := sleepCtx(ctx, ms(st.StreamDelayMS)); err != nil {
				return nil, err
			}
			em.text(0, w)
		}
		em.item(0, resp.Items[0])
		next = 1
	}
	for i, c := range st.Calls {
		if err := sleepCtx(ctx, ms(c.DelayMS)); err != nil {
			return nil, err
		}
		if st.Truncated && i == len(st.Calls)-1 {
			break // cut by the output limit: it never comes whole
		}
		resp.Items[next].Truncated = false
		em.item(next, resp.Items[next])
		next++
	}
	return resp, nil
}

// words splits text into the pieces a scripted stream delivers: each word with the
// space after it, so that the pieces join to the text.
func words(text string) []string {
	var out []string
	for len(text) > 0 {
		i := strings.IndexByte(text, ' ')
		if i < 0 {
			out = append(out, text)
			break
		}
		j := i
		for j < len(text) && text[j] == ' ' {
			j++
		}
		out = append(out, text[:j])
		text = text[j:]
	}
	return out
}
