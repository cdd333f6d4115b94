package skills

import (
	"fmt"
	"strings"
)

// ToolName is the name of the turn-local tool that loads a skill.
const ToolName = "load_skill"

// Instructions are what a turn's instructions say about its skills: each by name and
// description, and how to load one. No skill, no instructions.
func Instructions(skills []*Skill) string {
	if len(skills) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Skills\n\n")
	fmt.Fprintf(&b, "You have skills: instructions for particular kinds of work, each in a folder %s/<name>/ of your home. "+
		"When a task is one a skill below is for, call %s with the skill's name before you start, and follow what it says.\n\n", Dir, ToolName)
	for _, s := range skills {
		fmt.Fprintf(&b, "- %s: %s\n", s.Name, oneLine(s.Description))
	}
	return strings.TrimRight(b.String(), "\n")
}

// oneLine folds a description onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Text is what load_skill returns for the skill: its instructions, the files of its
// folder, and, for a skill with MCP servers, how to reach them with mcporter.
func (s *Skill) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Skill %s\n\n%s\n", s.Name, s.Body)
	if len(s.Files) > 0 {
		fmt.Fprintf(&b, "\n## Files of this skill\n\n%s/%s/ holds these files besides %s; read one with %s {\"name\": %q, \"file\": \"PATH\"}:\n\n",
			Dir, s.Name, File, ToolName, s.Name)
		for _, f := range s.Files {
			fmt.Fprintf(&b, "- %s (%s)\n", f.Path, FormatSize(f.Size))
		}
		if s.FilesCut {
			fmt.Fprintf(&b, "- … and more: only the first %d are listed; list_files shows the rest\n", MaxFiles)
		}
	}
	if len(s.Servers) > 0 {
		b.WriteString("\n" + McporterGuide(s.Servers))
	}
	return b.String()
}

// McporterGuide tells the model how to reach MCP servers with mcporter through
// run_command; WriteMcporterConfig has configured them in the home.
func McporterGuide(servers []Server) string {
	var b strings.Builder
	b.WriteString("## MCP servers of this skill\n\n")
	fmt.Fprintf(&b, "This skill's tools are served by MCP servers. Reach them with the mcporter command through run_command, "+
		"run from your home (run_command's default working directory), where %s configures them. "+
		"There are no separate tools for them.\n\n", McporterConfig)
	for _, srv := range servers {
		fmt.Fprintf(&b, "- %s: `mcporter list %s` lists its tools with their parameters (add --schema for JSON Schemas); "+
			"`mcporter call %s.TOOL key=value ...` calls one.\n", srv.Name, srv.Name, srv.Name)
	}
	b.WriteString("\nArguments go as key=value (quote values with spaces: key='two words') or as JSON with --args '{\"key\": 1}'; " +
		"mcporter prints the tool's result. A server started by a command starts anew for each call, which takes a second or so. " +
		"Run `mcporter list` to see every configured server and whether it answers.\n")
	return b.String()
}
