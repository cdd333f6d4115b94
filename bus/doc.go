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
// Subjects (all built by the functions in subjects.go, which has the headers too):
//
//	toolbus.tool.<category>.<tool>             tool request, queue group toolbus.<category>
//	toolbus.tool.<category>.<tool>.resend      ask the hosts for a reply lost around a reconnect
//	toolbus.describe.<category>.<tool>         a call's activity label, without running it
//	toolbus.turn.<turn>.res.<call>             tool result (the request's reply subject)
//	toolbus.turn.<turn>.evt.<call>.<kind>      activity event of a call (reply_lost among them)
//	toolbus.turn.<turn>.abort                  abort a turn, or one call of it
//	toolbus.turn.<turn>.status.<kind>          turn status: started, step, beat, done
//	toolbus.turn.<turn>.text                   the model's text as it streams
//	toolbus.turn.<turn>.approval.<call>        a held call asks for approval
//	toolbus.turn.<turn>.approve.<call>         an operator's answer
//	toolbus.node.<node>.turn.start             start a turn on one node
//	toolbus.nodes.turn.start                   start a turn on any node, queue group toolbus.turns
//	toolbus.intake.{any,node,schedule,fired}.… the durable intake, in stream TOOLBUS_INTAKE
//	toolbus.transcript.<turn>                  turn transcript, in stream TOOLBUS_TRANSCRIPTS
//	toolbus.catalog.changed                    a category host started or is stopping
//
// Tool categories are nats micro services named toolbus-<category>.
//
// The package imports, of toolbus, only the root contract (whose tool results and
// transcript items its envelopes carry) and internal helpers: docs/internals.md §1 has
// the layers, which TestPackageLayers checks.
package bus
