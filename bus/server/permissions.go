package server

import (
	"slices"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
)

// Role permissions for listener users. Each role may publish and subscribe
// only where its part of the protocol needs; a violation leaves the
// connection open and is reported through the client's nats.ErrorHandler as
// nats.ErrPermissionViolation (a request to a denied subject just times out).

// Replies. A listener user receives the replies to its requests on an inbox
// prefix of its own, [InboxPrefix], and may subscribe to no other inbox: no
// watcher or tool host reads another client's replies, nor those of a node's own
// (in-process) connections, whose inboxes keep nats.go's "_INBOX." prefix. Its
// clients connect with nats.CustomInboxPrefix(InboxPrefix(user)), as [Dial] does.
// The role builders below leave the inbox out; [RolePermissions] adds the
// user's, and [WithInbox] adds one to a hand-made role.

// WithInbox returns a copy of p that may also receive the replies to the
// requests of user (see [InboxPrefix]).
func WithInbox(p *natsserver.Permissions, user string) *natsserver.Permissions {
	c := clonePermissions(p)
	if c.Subscribe == nil {
		c.Subscribe = &natsserver.SubjectPermission{}
	}
	c.Subscribe.Allow = appendMissing(c.Subscribe.Allow, bus.UserInbox(user))
	return c
}

// Micro control subjects (ADR-32): $SRV.<verb>, $SRV.<verb>.<name>, $SRV.<verb>.<name>.<id>.
const allServices = "$SRV.>"

// answerRequests lets a subscriber answer each request it received once,
// whatever the reply subject (a turn's result subject, a requester's inbox),
// within bus.ReplyWindow: nats-server's allow_responses. It is how a tool host
// answers a call: it may not publish on result subjects otherwise, so it
// answers only the calls delivered to it, never another category's.
func answerRequests() *natsserver.ResponsePermission {
	return &natsserver.ResponsePermission{MaxMsgs: 1, Expires: bus.ReplyWindow}
}

// TurnPermissions is the role of a node that runs turns: it calls tools,
// discovers categories through micro, publishes turn status and aborts,
// queues turns in the intake, receives everything turn-scoped and
// start-turn requests, and uses JetStream for the intake, transcripts and
// checkpoints. It is the only role that may publish a turn's status. It answers
// the requests it receives (start-turn requests, approvals) and, like a tool
// host, publishes no tool result but as the answer to a call it received.
func TurnPermissions() *natsserver.Permissions {
	return WithJetStream(&natsserver.Permissions{
		Publish: &natsserver.SubjectPermission{Allow: []string{
			bus.AllTools, bus.AllDescribes, bus.AllAborts, bus.AllStatuses, bus.AllTexts, bus.AllApprovals, bus.AllTranscripts, bus.AllIntake, allServices,
		}},
		Subscribe: &natsserver.SubjectPermission{Allow: []string{
			bus.AllTurns, bus.AllNodeStarts, bus.AnyNodeStartTurn, bus.CatalogChanged,
		}},
		Response: answerRequests(),
	})
}

// ToolPermissions is the role of a node that hosts the given tool
// categories: it receives their requests, aborts and its own micro control
// requests, answers each request it received once ([bus.ReplyWindow]), and
// publishes activity events. It cannot call tools, nor serve other
// categories, nor answer their calls: it may not publish on result subjects
// (toolbus.turn.*.res.>) but as the answer to a request delivered to it.
// Compose with [WithJetStream] for categories that keep state in JetStream.
func ToolPermissions(categories ...string) *natsserver.Permissions {
	sub := []string{bus.AllAborts, "$SRV.PING", "$SRV.INFO", "$SRV.STATS"}
	for _, c := range categories {
		svc := bus.CategoryService(c)
		sub = append(sub, bus.CategorySubjects(c), bus.DescribeSubjects(c), "$SRV.*."+svc, "$SRV.*."+svc+".*")
	}
	// A host reads turn records, and nothing else of them, to take a call's agent from
	// its turn's stored spec rather than from a header.
	pub := append([]string{bus.AllEvents, bus.CatalogChanged}, jsGet(kvStream(bus.BucketTurns))...)
	// Arguments and results over the bus limit travel through the payload object store
	// (Payloads): a host reads a call's arguments there and stores a large reply. The
	// reference names the object's digest, so a host that wrote over another call's
	// object would only make that call fail.
	pub = append(pub, jsRead(objStream(bus.ObjectPayloads))[1:]...) // not $JS.API.INFO: the account's figures are not a host's
	pub = append(pub, jsWriteObjects(bus.ObjectPayloads)...)
	pub = append(pub, "$JS.ACK."+objStream(bus.ObjectPayloads)+".>")
	return &natsserver.Permissions{
		Publish:   &natsserver.SubjectPermission{Allow: pub},
		Subscribe: &natsserver.SubjectPermission{Allow: sub},
		// Results go to the call's reply subject, micro PING/INFO/STATS replies
		// to the requester's inbox: answers, and nothing else.
		Response: answerRequests(),
	}
}

// jsGet lists what reading single messages (keys) of streams needs, without consumers.
func jsGet(streams ...string) []string {
	var out []string
	for _, s := range streams {
		out = append(out,
			"$JS.API.STREAM.INFO."+s,
			"$JS.API.STREAM.MSG.GET."+s,
			"$JS.API.DIRECT.GET."+s, "$JS.API.DIRECT.GET."+s+".>",
		)
	}
	return out
}

// withTodoStore returns a copy of p that may use the todo bucket alone:
// what a host of the todo category needs, without the account-wide
// JetStream access of [WithJetStream].
func withTodoStore(p *natsserver.Permissions) *natsserver.Permissions {
	c := clonePermissions(p)
	c.Publish.Allow = appendMissing(c.Publish.Allow, jsRead(kvStream(bus.BucketTodos))...)
	c.Publish.Allow = appendMissing(c.Publish.Allow, jsWriteKV(bus.BucketTodos)...)
	c.Publish.Allow = appendMissing(c.Publish.Allow, "$JS.ACK."+kvStream(bus.BucketTodos)+".>")
	return c
}

// withProfileReader returns a copy of p that may read the agent profiles: what a host of
// the web category needs, to find each caller's providers, and one of the computer
// category, each caller's command limits. It may create the bucket
// (empty) when no turn node has yet, never write a profile.
func withProfileReader(p *natsserver.Permissions) *natsserver.Permissions {
	c := clonePermissions(p)
	c.Publish.Allow = appendMissing(c.Publish.Allow, jsRead(kvStream(bus.BucketAgents))...)
	c.Publish.Allow = appendMissing(c.Publish.Allow, "$JS.API.STREAM.CREATE."+kvStream(bus.BucketAgents))
	return c
}

// withWorkflowStore returns a copy of p that may do what a host of the workflow
// category does: read and write the workflows bucket, read turn records (a caller's
// model), queue task turns through a node that runs turns, and abort them.
func withWorkflowStore(p *natsserver.Permissions) *natsserver.Permissions {
	c := clonePermissions(p)
	c.Publish.Allow = appendMissing(c.Publish.Allow, jsRead(kvStream(bus.BucketWorkflows), kvStream(bus.BucketTurns))...)
	c.Publish.Allow = appendMissing(c.Publish.Allow, jsWriteKV(bus.BucketWorkflows)...)
	c.Publish.Allow = appendMissing(c.Publish.Allow, "$JS.ACK."+kvStream(bus.BucketWorkflows)+".>", bus.AnyNodeStartTurn, bus.AllAborts)
	return c
}

// withBrainStore returns a copy of p that may read the knowledge pages (gets, watches,
// the object store of large pages) and create their buckets if no node has: what a
// host of the brain category needs. Its tools only read; pages are written by
// operators.
func withBrainStore(p *natsserver.Permissions) *natsserver.Permissions {
	c := clonePermissions(p)
	c.Publish.Allow = appendMissing(c.Publish.Allow, jsRead(brainStreams...)...)
	c.Publish.Allow = appendMissing(c.Publish.Allow,
		"$JS.API.STREAM.CREATE."+kvStream(bus.BucketBrain), "$JS.API.STREAM.CREATE."+objStream(bus.ObjectBrain))
	// The host's watches and object reads get their messages with $JS.ACK reply
	// subjects it never answers (ordered consumers do not ack). Unless it may
	// publish there, the server keeps a reply permission for each of them
	// (answerRequests) for a whole bus.ReplyWindow.
	for _, s := range brainStreams {
		c.Publish.Allow = appendMissing(c.Publish.Allow, "$JS.ACK."+s+".>")
	}
	return c
}

// BackgroundPermissions is what hosts of the jobs and schedule categories need beyond
// ToolPermissions: they start turns (a job is a request on AnyNodeStartTurn), stop them
// (job_cancel aborts a job and waits for its final status), put schedules into the
// intake, and keep jobs, schedules and the turn records they read in JetStream.
func BackgroundPermissions() *natsserver.Permissions {
	return WithJetStream(&natsserver.Permissions{
		Publish:   &natsserver.SubjectPermission{Allow: []string{bus.AnyNodeStartTurn, bus.AllAborts, bus.IntakeSchedule("*")}},
		Subscribe: &natsserver.SubjectPermission{Allow: []string{bus.AllStatuses}},
	})
}

// brainStreams are the streams of the knowledge pages.
var brainStreams = []string{kvStream(bus.BucketBrain), objStream(bus.ObjectBrain)}

// jsWriteObjects lists what writing an object store needs beyond jsRead: creating its
// stream, publishing chunks and metadata, and purging the chunks of a replaced or
// deleted object.
func jsWriteObjects(bucket string) []string {
	return []string{
		"$JS.API.STREAM.CREATE." + objStream(bucket), "$O." + bucket + ".>",
		"$JS.API.STREAM.PURGE." + objStream(bucket),
	}
}

// merge returns the union of the allow lists of a and b; the response
// permission is a's, else b's. Neither has deny lists.
func merge(a, b *natsserver.Permissions) *natsserver.Permissions {
	c := clonePermissions(a)
	if c.Publish == nil {
		c.Publish = &natsserver.SubjectPermission{}
	}
	if c.Subscribe == nil {
		c.Subscribe = &natsserver.SubjectPermission{}
	}
	if b.Publish != nil {
		c.Publish.Allow = appendMissing(c.Publish.Allow, b.Publish.Allow...)
	}
	if b.Subscribe != nil {
		c.Subscribe.Allow = appendMissing(c.Subscribe.Allow, b.Subscribe.Allow...)
	}
	if c.Response == nil && b.Response != nil {
		r := *b.Response
		c.Response = &r
	}
	return c
}

// ControlPermissions is the role of an operator's client such as the
// command line: it starts turns on any node, calls tools, aborts turns,
// lists services and watches every turn. Compose with [WithJetStream] to
// read transcripts and state, and with [WithInbox] to get replies.
func ControlPermissions() *natsserver.Permissions {
	return &natsserver.Permissions{
		Publish: &natsserver.SubjectPermission{Allow: []string{
			bus.AllTools, bus.AllAborts, bus.AllApproves, bus.AllNodeStarts, bus.AnyNodeStartTurn, allServices,
		}},
		// The writes of workflow documents, for `toolbus workflow` to follow them.
		Subscribe: &natsserver.SubjectPermission{Allow: []string{bus.AllTurns, "$KV." + bus.BucketWorkflows + ".>"}},
	}
}

// OperatorPermissions is the role of a person's command line on a shared
// bus: ControlPermissions (start, abort, call, watch), queueing a turn again
// in the intake (toolbus resume), reading the turn records, transcripts,
// todo lists, jobs and schedules (cancelled through their tools), reading and writing
// agent profiles (creating their bucket if no turn node did), and the agents' knowledge
// pages (toolbus brain). It may not publish a turn's status nor write turn records or
// transcripts.
func OperatorPermissions() *natsserver.Permissions {
	p := ControlPermissions()
	p.Publish.Allow = append(p.Publish.Allow, bus.IntakeAny("*"))
	p.Publish.Allow = append(p.Publish.Allow, jsRead(readableStreams...)...)
	p.Publish.Allow = appendMissing(p.Publish.Allow, jsWriteKV(bus.BucketAgents)...)
	p.Publish.Allow = appendMissing(p.Publish.Allow, jsWriteKV(bus.BucketBrain)...)
	p.Publish.Allow = appendMissing(p.Publish.Allow, jsWriteObjects(bus.ObjectBrain)...)
	return p
}

// WatcherPermissions is a read-only role: it receives every turn-scoped
// message and may ask micro services for their PING, INFO and STATS, and
// reads the turn records, agent profiles, todo lists, jobs, schedules, knowledge pages
// and transcripts. It publishes nothing but requests to those read APIs.
func WatcherPermissions() *natsserver.Permissions {
	return &natsserver.Permissions{
		Publish: &natsserver.SubjectPermission{Allow: append([]string{
			"$SRV.PING", "$SRV.PING.>", "$SRV.INFO", "$SRV.INFO.>", "$SRV.STATS", "$SRV.STATS.>",
		}, jsRead(readableStreams...)...)},
		Subscribe: &natsserver.SubjectPermission{Allow: []string{bus.AllTurns, bus.CatalogChanged}},
	}
}

// readableStreams are the streams operators and watchers may read: not the
// intake, whose work-queue consumer a reader could take turns from.
var readableStreams = append([]string{
	kvStream(bus.BucketTurns), kvStream(bus.BucketAgents), kvStream(bus.BucketTodos), bus.StreamTranscripts,
	kvStream(bus.BucketJobs), kvStream(bus.BucketSchedules), kvStream(bus.BucketWorkflows),
	objStream(bus.ObjectTranscripts), // the bodies of large transcript messages
}, brainStreams...)

// kvStream is the stream behind a key-value bucket.
func kvStream(bucket string) string { return "KV_" + bucket }

// objStream is the stream behind an object store.
func objStream(bucket string) string { return "OBJ_" + bucket }

// jsRead lists the JetStream API subjects that read the given streams:
// their info, direct and stored message gets, and ephemeral (ordered)
// consumers, which is what key-value gets, listings and watches and
// transcript reads use. Flow control replies are allowed for push
// consumers; acks are not needed (ordered consumers do not ack).
func jsRead(streams ...string) []string {
	out := []string{"$JS.API.INFO"}
	for _, s := range streams {
		out = append(out,
			"$JS.API.STREAM.INFO."+s,
			"$JS.API.STREAM.MSG.GET."+s,
			"$JS.API.DIRECT.GET."+s, "$JS.API.DIRECT.GET."+s+".>",
			"$JS.API.CONSUMER.CREATE."+s, "$JS.API.CONSUMER.CREATE."+s+".>",
			"$JS.API.CONSUMER.INFO."+s+".*",
			"$JS.API.CONSUMER.DELETE."+s+".*",
			"$JS.API.CONSUMER.MSG.NEXT."+s+".*",
			"$JS.FC."+s+".>",
		)
	}
	return out
}

// jsWriteKV lists what writing a key-value bucket needs beyond jsRead:
// creating its stream if it is missing, and publishing its keys.
func jsWriteKV(bucket string) []string {
	return []string{"$JS.API.STREAM.CREATE." + kvStream(bucket), "$KV." + bucket + ".>"}
}

// AdminPermissions allows everything. A nil *server.Permissions does too;
// this spells it out.
func AdminPermissions() *natsserver.Permissions {
	return &natsserver.Permissions{
		Publish:   &natsserver.SubjectPermission{Allow: []string{">"}},
		Subscribe: &natsserver.SubjectPermission{Allow: []string{">"}},
	}
}

// WithJetStream returns a copy of p that may also use JetStream: its API,
// key-value and object stores, acks and flow control; its replies come to the
// user's inbox ([WithInbox]). The access is account-wide (any stream or
// bucket); per-bucket rules would have to list every API subject of every
// operation. Whoever has it can also create a stream that captures any
// subject, another user's inbox included: it is trusted as much as the admin.
func WithJetStream(p *natsserver.Permissions) *natsserver.Permissions {
	c := clonePermissions(p)
	if c.Publish == nil {
		c.Publish = &natsserver.SubjectPermission{}
	}
	if c.Subscribe == nil {
		c.Subscribe = &natsserver.SubjectPermission{}
	}
	c.Publish.Allow = appendMissing(c.Publish.Allow, "$JS.API.>", "$KV.>", "$O.>", "$JS.ACK.>", "$JS.FC.>")
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

func clonePermissions(p *natsserver.Permissions) *natsserver.Permissions {
	if p == nil {
		return &natsserver.Permissions{}
	}
	c := &natsserver.Permissions{
		Publish:   cloneSubjectPermission(p.Publish),
		Subscribe: cloneSubjectPermission(p.Subscribe),
	}
	if p.Response != nil {
		r := *p.Response
		c.Response = &r
	}
	return c
}

func cloneSubjectPermission(p *natsserver.SubjectPermission) *natsserver.SubjectPermission {
	if p == nil {
		return nil
	}
	return &natsserver.SubjectPermission{Allow: slices.Clone(p.Allow), Deny: slices.Clone(p.Deny)}
}
