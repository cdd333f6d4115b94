// Package toolsets assembles the tools of a turn, and hands each tool-category host the
// tools it serves.
//
// A turn's tools are built anew for every turn, explicitly and in a fixed order: todo,
// computer, web, schedule, jobs, brain, the workflow category still to come, then
// load_skill when the agent's profile enables skills (package skills), then the tools of
// external namespaces that other processes serve. Nothing registers itself;
// each category is one entry in this package's table.
package toolsets
