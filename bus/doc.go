// Package bus holds toolbus's message bus: an embedded nats-server with
// JetStream, the subject, queue group and header names of the protocol, the
// JSON envelopes on the wire, and JetStream bucket and stream setup.
//
// A Server runs in one of three ways:
//
//   - in-process only (the default): no port is opened and every
//     connection comes through Server.Connect;
//   - with a client listener (Config.Listen), for other processes and the
//     nats CLI, which requires users; role permissions such as
//     TurnPermissions and ToolPermissions give each user only the subjects
//     its part of the protocol needs;
//   - as a cluster node (Config.Cluster), joined to other nodes by routes,
//     with replicated JetStream state.
//
// In-process connections authenticate too, as an nkey user whose key never
// leaves the process and which the server accepts only on in-process
// connections, so no network client can use it (nats-server has no
// unauthenticated mode for in-process clients alone).
//
// Subjects (all built by the functions in subjects.go):
//
//	toolbus.tool.<category>.<tool>          tool request, queue group toolbus.<category>
//	toolbus.turn.<turn>.res.<call>          tool result (the request's reply subject)
//	toolbus.turn.<turn>.evt.<call>.<kind>   activity event of a call
//	toolbus.turn.<turn>.abort               abort a turn
//	toolbus.turn.<turn>.status.<kind>       turn status: started, step, done
//	toolbus.node.<node>.turn.start          start a turn on one node
//	toolbus.nodes.turn.start                start a turn on any node, queue group toolbus.turns
//	toolbus.transcript.<turn>               turn transcript, in stream TOOLBUS_TRANSCRIPTS
//
// Tool categories are nats micro services named toolbus-<category>.
//
// The package imports no other toolbus package: the root package converts
// between its tool contract and the envelopes here.
package bus
