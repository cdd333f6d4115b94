package bus

import (
	"slices"

	"github.com/nats-io/nats-server/v2/server"
)

// Role permissions for listener users. Each role may publish and subscribe
// only where its part of the protocol needs; a violation leaves the
// connection open and is reported through the client's nats.ErrorHandler as
// nats.ErrPermissionViolation (a request to a denied subject just times out).

// inboxes is where nats.go receives replies to its requests.
const inboxes = "_INBOX.>"

// Micro control subjects (ADR-32): $SRV.<verb>, $SRV.<verb>.<name>, $SRV.<verb>.<name>.<id>.
const allServices = "$SRV.>"

// replyOnce lets a subscriber answer each request it received once, whatever
// the reply subject (e.g. a requester's inbox), within the server's default
// two minutes.
func replyOnce() *server.ResponsePermission {
	return &server.ResponsePermission{MaxMsgs: 1}
}

// TurnPermissions is the role of a node that runs turns: it calls tools,
// discovers categories through micro, publishes turn status and aborts,
// receives everything turn-scoped and start-turn requests, and uses
// JetStream for transcripts and checkpoints.
func TurnPermissions() *server.Permissions {
	return WithJetStream(&server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			AllTools, AllAborts, AllStatuses, AllApprovals, AllTranscripts, allServices,
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			inboxes, AllTurns, AllNodeStarts, AnyNodeStartTurn, CatalogChanged,
		}},
		Response: replyOnce(),
	})
}

// ToolPermissions is the role of a node that hosts the given tool
// categories: it receives their requests, aborts and its own micro control
// requests, and publishes results and activity events. It cannot call
// tools, nor serve or impersonate other categories. Compose with
// [WithJetStream] for categories that keep state in JetStream.
func ToolPermissions(categories ...string) *server.Permissions {
	sub := []string{AllAborts, "$SRV.PING", "$SRV.INFO", "$SRV.STATS"}
	for _, c := range categories {
		svc := CategoryService(c)
		sub = append(sub, CategorySubjects(c), "$SRV.*."+svc, "$SRV.*."+svc+".*")
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{AllResults, AllEvents, CatalogChanged}},
		Subscribe: &server.SubjectPermission{Allow: sub},
		Response:  replyOnce(), // micro PING/INFO/STATS replies go to the requester's inbox
	}
}

// ControlPermissions is the role of an operator's client such as the
// command line: it starts turns on any node, calls tools, aborts turns,
// lists services and watches every turn. Compose with [WithJetStream] to
// read transcripts and state.
func ControlPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			AllTools, AllAborts, AllApproves, AllNodeStarts, AnyNodeStartTurn, allServices,
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{inboxes, AllTurns}},
	}
}

// AdminPermissions allows everything. A nil *server.Permissions does too;
// this spells it out.
func AdminPermissions() *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{">"}},
		Subscribe: &server.SubjectPermission{Allow: []string{">"}},
	}
}

// WithJetStream returns a copy of p that may also use JetStream: its API,
// key-value and object stores, acks and flow control, with replies in
// _INBOX. The access is account-wide (any stream or bucket); per-bucket
// rules would have to list every API subject of every operation.
func WithJetStream(p *server.Permissions) *server.Permissions {
	c := clonePermissions(p)
	if c.Publish == nil {
		c.Publish = &server.SubjectPermission{}
	}
	if c.Subscribe == nil {
		c.Subscribe = &server.SubjectPermission{}
	}
	c.Publish.Allow = appendMissing(c.Publish.Allow, "$JS.API.>", "$KV.>", "$O.>", "$JS.ACK.>", "$JS.FC.>")
	c.Subscribe.Allow = appendMissing(c.Subscribe.Allow, inboxes)
	return c
}

func appendMissing(list []string, subjects ...string) []string {
	for _, s := range subjects {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}

func clonePermissions(p *server.Permissions) *server.Permissions {
	if p == nil {
		return &server.Permissions{}
	}
	c := &server.Permissions{
		Publish:   cloneSubjectPermission(p.Publish),
		Subscribe: cloneSubjectPermission(p.Subscribe),
	}
	if p.Response != nil {
		r := *p.Response
		c.Response = &r
	}
	return c
}

func cloneSubjectPermission(p *server.SubjectPermission) *server.SubjectPermission {
	if p == nil {
		return nil
	}
	return &server.SubjectPermission{Allow: slices.Clone(p.Allow), Deny: slices.Clone(p.Deny)}
}
