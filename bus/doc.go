// Package bus is toolbus's wire: the subject, queue group and header names of the
// protocol, the JSON envelopes and records on the wire, their encoding, large payloads
// in the object store, and JetStream bucket and stream setup with the one
// compare-and-set helper. It imports nats.go and nothing of nats-server: a program
// that only drives turns or hosts tools on a running bus (package client, a Go tool
// host) links the wire and not the server. The embedded server of a node, with its
// users and their roles' permissions, is package bus/server.
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
