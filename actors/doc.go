// Package actors holds toolbus's protoactor actors: the turn (the loop that calls the
// model, dispatches every function call on the bus and records an honest outcome for
// each, with its journal), the category host (a NATS micro service that runs the calls
// of one tool category), and the node supervisor that starts both, takes turns from the
// durable intake and hands them back when it stops.
//
// A program rarely starts these itself: package node starts a node on an embedded or a
// running bus (node.Start), hosts a program's own tools (node.Config.Tools) and runs a
// turn with them (node.Node.Run); package client drives a bus from the caller's side.
// [Node.Host] hosts a category of tools on a running node, and [Node.Run] runs a turn
// with a kit of its own (TurnConfig.Kit, toolsets.NewKit).
package actors
