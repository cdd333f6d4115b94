package host

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// A host answers a call once, on the connection the request came in on: the server grants
// a subscriber one reply to a request it delivered (allow_responses), and that grant is the
// connection's. A host whose connection is re-established (its server paused or restarted,
// a network cut) while a call runs sends the reply on the new connection, and the server
// refuses it as a permissions violation that only the host hears of; a reply written to a
// connection that is dead but not yet noticed is lost without a word. Either way the turn
// would wait for the call's deadline (ten minutes for a command) and then call it a timeout,
// though the tool ran and had its answer.
//
// So a host keeps the replies it sent for bus.ReplyKeep (keptReplies), and when its
// connection comes back it says which may be lost (bus.EventReplyLost on each call's event
// subject). The turn of a call still waiting asks for the reply again on bus.ResendSubject,
// where every host of the category listens; the one that kept it answers that request, on
// its live connection, to the call's result subject and no other. The tool does not run again.

// Bounds of the replies a host keeps: they cover the calls that can finish on a connection
// between its last sign of life and its end (at most the host's slots, DefaultMaxConcurrent,
// and the requests queued for them), not the host's whole traffic.
const (
	maxKeptReplies    = 1024
	maxKeptReplyBytes = 16 << 20
	replyLostLabel    = "the reply may not have reached the turn (the host's connection to the bus was re-established); it is kept for the turn to ask again"
)

// keptReply is a reply as it was sent, to send again.
type keptReply struct {
	turn, call, tool string
	data             []byte
	payload          string // the Toolbus-Payload header of a reply sent by reference
	sent             time.Time
}

// keptReplies is a host's recent replies, oldest first, bounded by count and bytes.
type keptReplies struct {
	mu    sync.Mutex
	q     []keptReply
	bytes int
}

func (k *keptReplies) add(r keptReply) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.q = append(k.q, r)
	k.bytes += len(r.data)
	for len(k.q) > maxKeptReplies || k.bytes > maxKeptReplyBytes {
		k.bytes -= len(k.q[0].data)
		k.q[0] = keptReply{}
		k.q = k.q[1:]
	}
}

// find returns the reply kept for a call.
func (k *keptReplies) find(turn, call string) (keptReply, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := len(k.q) - 1; i >= 0; i-- {
		if r := k.q[i]; r.call == call && r.turn == turn {
			return r, true
		}
	}
	return keptReply{}, false
}

// since returns the replies sent from t on.
func (k *keptReplies) since(t time.Time) []keptReply {
	k.mu.Lock()
	defer k.mu.Unlock()
	i := len(k.q)
	for i > 0 && !k.q[i-1].sent.Before(t) {
		i--
	}
	return append([]keptReply(nil), k.q[i:]...)
}

// keep records a reply the host sent to a turn's call, and says at once that it may be
// lost if the connection was re-established since the request came (m.conn): the
// request's grant to reply was the old connection's.
func (h *Host) keep(m *hostCall, reply bus.ToolReply, data []byte, payload string) {
	if m.turn == "" {
		return // not a turn's call (`nats req`, toolbus call): its caller has no way to ask again
	}
	h.kept.add(keptReply{turn: m.turn, call: reply.Call, tool: reply.Tool, data: data, payload: payload, sent: time.Now()})
	if h.connGen.Load() != m.conn {
		h.replyLost(m.turn, reply.Call, reply.Tool)
	}
}

// Reconnected tells the host that its connection was re-established (call it from the
// connection's reconnect handler; Serve does): every reply sent in the last bus.ReplyKeep
// may have gone to the old connection, and the host says so to their turns.
func (h *Host) Reconnected() {
	h.connGen.Add(1)
	lost := h.kept.since(time.Now().Add(-bus.ReplyKeep))
	if len(lost) > 0 {
		h.log.Info("connection re-established; telling turns which replies may be lost", "replies", len(lost))
	}
	for _, r := range lost {
		h.replyLost(r.turn, r.call, r.tool)
	}
}

// replyLost tells a call's turn that its reply may be lost (bus.EventReplyLost).
func (h *Host) replyLost(turn, call, tool string) {
	ev := bus.Event{Turn: turn, Call: call, Tool: tool, Kind: bus.EventReplyLost, Label: replyLostLabel, Time: time.Now()}
	b, err := ev.AppendJSON(make([]byte, 0, 256))
	if err == nil {
		err = h.cfg.Conn.Publish(bus.EventSubject(turn, call, bus.EventReplyLost), b)
	}
	if err != nil {
		h.log.Warn("say a reply may be lost", "turn", turn, "call", call, "err", err)
	}
}

// resend answers a request on bus.ResendSubject with the reply kept for its call, and only
// to the call's result subject: whoever asks, the reply goes where it went the first time.
func (h *Host) resend(m *nats.Msg) {
	turn, call := m.Header.Get(bus.HeaderTurn), m.Header.Get(bus.HeaderCall)
	if turn == "" || call == "" || m.Reply != bus.ResultSubject(turn, call) {
		return
	}
	r, ok := h.kept.find(turn, call)
	if !ok {
		return // another host's call, or one kept too long ago
	}
	out := &nats.Msg{Data: r.data}
	if r.payload != "" {
		out.Header = nats.Header{bus.HeaderPayload: {r.payload}}
	}
	if err := m.RespondMsg(out); err != nil {
		h.log.Warn("send a reply again", "turn", turn, "call", call, "err", err)
		return
	}
	h.log.Info("sent a reply again", "turn", turn, "call", call, "tool", r.tool)
}
