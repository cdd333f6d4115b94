package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LeaderLastMsg is subject's last message in stream as the stream's leader has it, nil
// when there is none. It asks the stored-message get, which only the leader answers: a
// direct get (the stream's AllowDirect) is answered by any replica that is nearly
// current, and a server that led the stream before a pause keeps answering direct gets
// from what it had then. (A server just woken from a pause may still take itself for
// the leader for the moment it takes to hear of the next one: a caller that finds less
// than it knows to be stored asks again.)
func LeaderLastMsg(ctx context.Context, nc *nats.Conn, stream, subject string) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return nil, err
	}
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, fmt.Errorf("last message of %s: %w", subject, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs,omitempty"`
			Data    []byte    `json:"data,omitempty"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("last message of %s: malformed answer: %w", subject, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, nil
	case resp.Error != nil:
		return nil, fmt.Errorf("last message of %s: %w", subject, resp.Error)
	case resp.Message == nil:
		return nil, fmt.Errorf("last message of %s: an answer without a message", subject)
	}
	out := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if out.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("last message of %s: its headers: %w", subject, err)
		}
	}
	return out, nil
}
