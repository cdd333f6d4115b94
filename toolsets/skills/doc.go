// Package skills reads an agent's skills: folders in the agent home, skills/<name>/,
// each with a SKILL.md that starts with YAML front matter (name, description, and the MCP
// servers the skill needs) and goes on with the skill's instructions in Markdown.
//
//	---
//	name: notes
//	description: Keeps the team's notes in the notes server.
//	mcp:
//	  notes:
//	    command: notes-server
//	    args: [stdio]
//	---
//	# Notes
//	...
//
// The agent's profile lists the enabled skills by folder name. A turn's instructions list
// them by name and description ([Instructions]); the turn-local tool load_skill returns a
// skill's full text ([Skill.Text]) and, on request, a file of its folder ([ReadFile]).
//
// A skill that declares MCP servers is used through the command tool running mcporter:
// [WriteMcporterConfig] writes those servers into config/mcporter.json in the agent home,
// where mcporter looks when run_command runs it from the home, and the skill's text tells
// the model how to list and call the servers' tools. No MCP client lives in toolbus.
//
// Every read goes through an [os.Root] on the home (and, for a skill's files, on the
// skill's folder), so neither a path from the model nor a symbolic link reaches outside
// it. Sizes are bounded: a SKILL.md, a file load_skill returns, the files a skill lists.
// A SKILL.md's front matter is bounded in size and nesting depth before the YAML parser
// reads it ([MaxFrontMatterSize], [MaxFrontMatterDepth]): past them the skill is left out
// with a problem, as it is when an MCP server's cwd leaves the skill's folder.
// The package knows nothing of NATS or actors.
package skills
