package toolsets

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolsets/skills"
)

// skillsIn says whether a turn includes skills: main and job turns whose agent's profile
// enables some. A task turn never does.
func skillsIn(kind bus.TurnKind, p *Profile) bool {
	return kind != bus.TurnTask && p != nil && len(p.Skills) > 0
}

// loadSkillArgs are the arguments of load_skill.
type loadSkillArgs struct {
	Name string `json:"name" jsonschema:"minLength=1,maxLength=64" jsonschema_description:"The skill's name, as the Skills section of your instructions lists it."`
	File string `json:"file,omitempty" jsonschema:"maxLength=1024" jsonschema_description:"A file of the skill's folder to read instead of the skill's instructions, relative to that folder, as the skill's file list shows it."`
}

// LoadSkillDetails are the details of a load_skill result.
type LoadSkillDetails struct {
	Skill string `json:"skill"`
	File  string `json:"file,omitempty"`
	Bytes int    `json:"bytes"`
}

// loadSkillSpec is the spec of load_skill, a tool the turn answers itself.
var loadSkillSpec = &toolbus.Spec{
	Name: skills.ToolName,
	Description: "Load one of your skills, listed under Skills in your instructions: its full instructions, the files of its folder " +
		"and, for a skill that works with MCP servers, how to reach them with mcporter through run_command. " +
		"With file, return that file of the skill's folder instead.",
	Params:   schema.MustFor[loadSkillArgs](),
	Mode:     toolbus.Parallel,
	ReadOnly: true,
	Category: LocalCategory,
}

// AgentHome is the home of an agent on this node, as category hosts compute it: Home for
// every agent, else HomeRoot/<agent> ("default" for none); "" when neither is set.
func (o Options) AgentHome(agent string) string {
	switch {
	case o.Home != "":
		return o.Home
	case o.HomeRoot != "":
		if agent == "" {
			agent = "default"
		}
		return filepath.Join(o.HomeRoot, agent)
	}
	return ""
}

// addSkills adds the profile's skills to a turn's kit: their list to its instructions,
// what is wrong with them to its notes, the mcporter configuration of their MCP servers
// to the agent home, and load_skill. Without a home (opts name none) it adds load_skill
// alone, which then says it has no skills to read.
func addSkills(kit *Kit, agent string, profile *Profile, opts Options) *toolbus.Spec {
	home := opts.AgentHome(agent)
	if home != "" {
		loaded, problems := skills.Load(home, profile.Skills)
		for _, p := range problems {
			kit.Notes = append(kit.Notes, "skill left out: "+p.Error())
		}
		if ins := skills.Instructions(loaded); ins != "" {
			if kit.Instructions != "" {
				kit.Instructions += "\n\n"
			}
			kit.Instructions += ins
		}
		notes, err := skills.WriteMcporterConfig(home, loaded)
		kit.Notes = append(kit.Notes, notes...)
		if err != nil {
			kit.Notes = append(kit.Notes, "the skills' MCP servers are not configured: "+err.Error())
		}
	}
	enabled := slices.Clone(profile.Skills)
	if kit.Local == nil {
		kit.Local = map[string]LocalTool{}
	}
	kit.Local[skills.ToolName] = LocalTool{Spec: loadSkillSpec, Answer: func(_ context.Context, raw json.RawMessage) (toolbus.Result, error) {
		return loadSkill(home, enabled, raw), nil
	}}
	return loadSkillSpec
}

// loadSkill answers one load_skill call, reading the skill afresh.
func loadSkill(home string, enabled []string, raw json.RawMessage) toolbus.Result {
	var a loadSkillArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return toolbus.ErrorResult(fmt.Sprintf("load_skill: %v", err))
	}
	if !slices.Contains(enabled, a.Name) {
		return toolbus.ErrorResult(fmt.Sprintf("no enabled skill is named %q; the enabled ones are %s", a.Name, strings.Join(enabled, ", ")))
	}
	if home == "" {
		return toolbus.ErrorResult("this node has no agent homes, so it cannot read skills")
	}
	var text string
	if a.File != "" {
		t, err := skills.ReadFile(home, a.Name, a.File)
		if err != nil {
			return toolbus.ErrorResult(err.Error())
		}
		text = t
	} else {
		got, problems := skills.Load(home, []string{a.Name})
		if len(problems) > 0 {
			return toolbus.ErrorResult(fmt.Sprintf("skill %s cannot be loaded: %v", a.Name, problems[0]))
		}
		text = got[0].Text()
	}
	res := toolbus.TextResult(text)
	res.Details, _ = json.Marshal(LoadSkillDetails{Skill: a.Name, File: a.File, Bytes: len(text)})
	label := fmt.Sprintf("Loaded skill %s (%s)", a.Name, skills.FormatSize(int64(len(text))))
	if a.File != "" {
		label = fmt.Sprintf("Read %s of skill %s (%s)", a.File, a.Name, skills.FormatSize(int64(len(text))))
	}
	res.Completion = &toolbus.Event{Kind: string(bus.EventCompleted), Label: label}
	return res
}
