// Package mcp joins toolbus and the Model Context Protocol both ways.
//
// MCP servers as categories: a [Category] connects to one MCP server (a command
// speaking stdio, or a streamable HTTP URL), turns each tool it offers into a
// toolbus tool of category "mcp-NAME" in namespace NAME, and hands them to a
// category host (actors.Node.Host, through the consumer-side [Host]); a call
// becomes an MCP tools/call with a progress token, an abort becomes MCP
// cancellation, progress notifications become the call's progress events. The
// server is restarted when it ends; its tools are refused with the reason
// while it is down. Its tool list is read again at each start and when it says
// the list changed, and the category hosted anew when it differs (through a Host
// that is also an [Unhoster]).
//
// The bus as an MCP server: [Server] serves the tools an agent profile
// assembles to an MCP client (over stdio or streamable HTTP), each tools/call
// going through the same path as `toolbus call`: the repair ladder, the
// schema, the tool's host anywhere on the bus.
package mcp
