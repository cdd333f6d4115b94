package gatewaytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Messages builds the events of one streamed Anthropic Messages API response
// (POST /v1/messages with "stream": true), in the order the API sends them:
// message_start with the input's usage, a ping, then for each content block its
// content_block_start, its deltas (text_delta, input_json_delta) and its
// content_block_stop, then message_delta with the stop_reason and the output's usage, and
// message_stop. Every event is named ("event: TYPE"), as the API sends them; its Stream
// answers a request that does not stream with the same message as one JSON body.
type Messages struct {
	id      string
	usage   Usage
	events  []Event
	content []json.RawMessage
	next    *Event // the pacing of the next event
	whole   string // the message, once it ended
}

// Usage is the tokens of a Messages response: Input not read from the prompt cache,
// CacheCreation written to it, CacheRead read from it, and Output.
type Usage struct {
	Input, CacheCreation, CacheRead, Output int
}

func (u Usage) json(output int) string {
	return fmt.Sprintf(`{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%d}`,
		u.Input, u.CacheCreation, u.CacheRead, output)
}

// NewMessages starts the events of message id, whose usage is u: its message_start,
// with the input's tokens and one output token as the API counts them then, and a ping.
func NewMessages(id string, u Usage) *Messages {
	b := &Messages{id: id, usage: u}
	b.add("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":%s}}`,
		id, u.json(1)))
	b.add("ping", `{"type":"ping"}`)
	return b
}

// Pace delays the next event by d and holds it until wait is closed (nil: no hold).
func (b *Messages) Pace(d time.Duration, wait <-chan struct{}) *Messages {
	b.next = &Event{Delay: d, Wait: wait}
	return b
}

// OnWrite calls f just before the last event added so far is written.
func (b *Messages) OnWrite(f func()) *Messages {
	b.events[len(b.events)-1].Writing = f
	return b
}

func (b *Messages) add(typ, data string) {
	ev := Event{Name: typ, Data: data}
	if b.next != nil {
		ev.Delay, ev.Wait = b.next.Delay, b.next.Wait
		b.next = nil
	}
	b.events = append(b.events, ev)
}

// block adds a content block: its start (with start, the block before its deltas), a
// content_block_delta for each delta, its stop; whole is the block in the message.
func (b *Messages) block(start string, deltas []string, whole string) *Messages {
	i := len(b.content)
	b.add("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, i, start))
	for _, d := range deltas {
		b.add("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, i, d))
	}
	b.add("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i))
	b.content = append(b.content, json.RawMessage(whole))
	return b
}

// Text adds a text block written in pieces (text_delta).
func (b *Messages) Text(pieces ...string) *Messages {
	deltas := make([]string, len(pieces))
	for i, p := range pieces {
		deltas[i] = fmt.Sprintf(`{"type":"text_delta","text":%s}`, quote(p))
	}
	return b.block(`{"type":"text","text":""}`, deltas, fmt.Sprintf(`{"type":"text","text":%s}`, quote(strings.Join(pieces, ""))))
}

// ToolUse adds a tool_use block whose input comes in the given pieces of JSON
// (input_json_delta). In the message whole, its input is the pieces joined, or {} when
// they are not one JSON value (a call max_tokens cut: end with End("max_tokens")).
func (b *Messages) ToolUse(id, name string, pieces ...string) *Messages {
	deltas := make([]string, len(pieces))
	for i, p := range pieces {
		deltas[i] = fmt.Sprintf(`{"type":"input_json_delta","partial_json":%s}`, quote(p))
	}
	input := []byte(strings.Join(pieces, ""))
	var c bytes.Buffer
	if err := json.Compact(&c, input); err != nil || c.Len() == 0 {
		c.Reset()
		c.WriteString("{}")
	}
	return b.block(fmt.Sprintf(`{"type":"tool_use","id":%q,"name":%q,"input":{}}`, id, name), deltas,
		fmt.Sprintf(`{"type":"tool_use","id":%q,"name":%q,"input":%s}`, id, name, c.Bytes()))
}

// End ends the message for stop (end_turn, tool_use, max_tokens, pause_turn, ...):
// message_delta carries the stop_reason and the output's tokens
// (cumulative, as the API counts them), then message_stop.
func (b *Messages) End(stop string) *Messages {
	u := b.usage
	b.add("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, stop, u.Output))
	b.add("message_stop", `{"type":"message_stop"}`)
	content, _ := json.Marshal(b.content)
	if b.content == nil {
		content = []byte("[]")
	}
	b.whole = fmt.Sprintf(`{"id":%q,"type":"message","role":"assistant","model":"claude-test","content":%s,"stop_reason":%q,"stop_sequence":null,"usage":%s}`,
		b.id, content, stop, u.json(u.Output))
	return b
}

// Stream is the message as a Stream: its events, and once it ended (End), the message
// whole for a request that does not stream.
func (b *Messages) Stream() Stream { return Stream{Events: b.events, Whole: b.whole} }

// Events returns the events so far: before End, a stream that breaks.
func (b *Messages) Events() []Event { return b.events }
