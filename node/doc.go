// Package node starts a toolbus node: on an embedded NATS server with JetStream (no port
// unless asked, a temporary store unless given one), or joined to a running bus
// (Config.Server). One starter serves the toolbus command line, the node daemon, the
// bench and the tests, and any Go program that embeds toolbus.
//
// A program's own tools go in Config.Tools: the node hosts them, one host per category,
// each category the Spec.Category its tools name (beside the built-in categories of
// Node.Categories, which default to all of them unless Tools is set). [Node.Run] runs a
// turn and returns its end: the final text and each call with its tool and outcome.
// A turn's tools are Turn.Tools, by default the node's Config.Tools; a node that hosts
// no tools of its own gives its turns what their agent's profile assembles (the
// built-in categories and the external namespaces it names, docs/tools.md).
//
//	n, err := node.Start(ctx, node.Config{Tools: []*toolbus.Tool{weather}})
//	...
//	defer n.Close()
//	res, err := n.Run(ctx, node.Turn{Input: "Weather in Oslo?", Model: "openai:gpt-5.4"})
//	for _, c := range res.Calls {
//		fmt.Println(c.Tool, c.Outcome)
//	}
//	fmt.Println(res.Text)
//
// [Node.Run] is one of the two ways to start a turn: a turn of this program, on this
// node, which ends with it. The other is client.Start, on a connection from
// [Node.Connect] or to any bus: a durable turn, taken by a node of the bus that runs
// turns (NodeConfig.Turns), or by the one it names.
// [Node.Host] and [Node.Unhost] change what the running node hosts.
//
// A node joined to a running bus with Tools and no Categories hosts a category for
// that bus: its turns, on other nodes, call the tools when their agents' profiles name
// the tools' namespace. The package function [Run] is `toolbus node`, the daemon, with its flags.
package node
