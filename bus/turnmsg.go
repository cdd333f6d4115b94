package bus

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// TurnMessage is one message on a turn's subjects, decoded: what the turn hears of its
// calls and of aborts, and what a follower (toolbus run, toolbus watch, a program using
// package client) shows. Exactly one of the pointer fields is set, for the kind the
// subject names, except for a result the server answered itself (NoResponders) or
// one whose body is in the object store (Payload).
type TurnMessage struct {
	Subject TurnSubject

	Status   *TurnStatus      // KindStatus: started, step, beat, done
	Event    *Event           // KindEvent; its Call is the subject's
	Reply    *ToolReply       // KindResult, with a valid outcome
	Abort    *Abort           // KindAbort
	Approval *ApprovalRequest // KindApproval: a call held for approval
	Approve  *Approval        // KindApprove: a decision sent to the turn
	Text     *TextDelta       // KindText: a piece of the text the model is writing

	// NoResponders is a result the server sent itself (status 503): no host serves
	// the call's category.
	NoResponders bool
	// Payload is a result whose reply the host stored in the object store (too large
	// for a message); Reply is then nil and the reply is read with Payloads.Get.
	Payload *PayloadRef
}

// ErrNotTurnMessage reports a message that is not on a turn's subjects.
var ErrNotTurnMessage = errors.New("not a message of a turn's subjects")

// DecodeTurnMessage decodes a message of a turn's subjects. A body that is not the
// envelope its subject names is an error: the turn settles such a result as a
// malformed reply, and a follower skips it.
func DecodeTurnMessage(m *nats.Msg) (TurnMessage, error) {
	ts, ok := ParseTurnSubject(m.Subject)
	if !ok {
		return TurnMessage{}, fmt.Errorf("%w: %q", ErrNotTurnMessage, m.Subject)
	}
	tm := TurnMessage{Subject: ts}
	var err error
	switch ts.Kind {
	case KindStatus:
		tm.Status = new(TurnStatus)
		err = json.Unmarshal(m.Data, tm.Status)
	case KindEvent:
		tm.Event = new(Event)
		err = json.Unmarshal(m.Data, tm.Event)
		tm.Event.Call = ts.Call
	case KindAbort:
		tm.Abort = new(Abort)
		err = json.Unmarshal(m.Data, tm.Abort)
	case KindApproval:
		tm.Approval = new(ApprovalRequest)
		err = json.Unmarshal(m.Data, tm.Approval)
	case KindApprove:
		tm.Approve = new(Approval)
		err = json.Unmarshal(m.Data, tm.Approve)
	case KindText:
		tm.Text = new(TextDelta)
		err = json.Unmarshal(m.Data, tm.Text)
	case KindResult:
		if m.Header.Get("Status") == "503" {
			tm.NoResponders = true
			return tm, nil
		}
		if ref, ok, perr := PayloadOf(m.Header); ok {
			if perr == nil {
				perr = ref.Check(ObjectPayloads, MaxCallPayload)
			}
			if perr != nil {
				return tm, fmt.Errorf("reply of call %s: %w", ts.Call, perr)
			}
			tm.Payload = &ref
			return tm, nil
		}
		tm.Reply, err = DecodeReplyBody(m.Data)
	}
	if err != nil {
		return TurnMessage{Subject: ts}, fmt.Errorf("%s message of turn %s: %w", ts.Kind, ts.Turn, err)
	}
	return tm, nil
}

// errBadOutcome reports a reply whose outcome is none of the defined ones.
var errBadOutcome = errors.New("reply has no valid outcome")

// DecodeReplyBody decodes a tool reply and checks its outcome: the one reading of a
// reply's body, inline or fetched from the object store.
func DecodeReplyBody(data []byte) (*ToolReply, error) {
	r := new(ToolReply)
	if err := DecodeToolReply(data, r); err != nil {
		return nil, err
	}
	if !r.Outcome.Valid() {
		return nil, fmt.Errorf("%w: %q", errBadOutcome, r.Outcome)
	}
	return r, nil
}
