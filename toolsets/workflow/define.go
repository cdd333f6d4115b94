package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"
)

// Limits of a workflow definition.
const (
	MaxTasks = 32
	// MaxAttempts bounds a task's attempts; DefaultAttempts is a task's limit when its
	// definition gives none.
	MaxAttempts     = 5
	DefaultAttempts = 1
	maxTitle        = 200
)

// Definition is what workflow_start takes (its arguments) and `toolbus workflow start
// FILE` reads.
type Definition struct {
	Title string `json:"title"`
	// Model runs the task turns (openai:MODEL or chat:MODEL); empty means the model of
	// the turn that starts the workflow.
	Model string    `json:"model,omitempty"`
	Tasks []TaskDef `json:"tasks"`
}

// TaskDef is one task of a definition.
type TaskDef struct {
	ID string `json:"id"`
	// Instructions are the task turn's input; {{tasks.<id>.result}} stands for the
	// result of a task it depends on (see Render).
	Instructions string          `json:"instructions"`
	ResultSchema json.RawMessage `json:"result_schema"`
	DependsOn    []string        `json:"depends_on,omitempty"`
	MaxAttempts  int             `json:"max_attempts,omitempty"`
	// Script is an inline scripted model (gateway.Script) for offline runs and tests.
	Script json.RawMessage `json:"script,omitempty"`
}

// DefinitionError refuses a definition, one line per problem, each naming its task.
type DefinitionError struct {
	Problems []string
}

func (e *DefinitionError) Error() string {
	return "workflow refused:\n- " + strings.Join(e.Problems, "\n- ")
}

// refPattern finds the references to dependency results in task instructions:
// {{tasks.<id>.result}} or {{tasks.<id>.result.<field>.<field>…}}.
var refPattern = regexp.MustCompile(`\{\{\s*tasks\.([A-Za-z0-9_-]+)\.result((?:\.[A-Za-z0-9_-]+)*)\s*\}\}`)

// looseRef finds what looks like a reference, to refuse malformed ones.
var looseRef = regexp.MustCompile(`\{\{\s*tasks\.[^}]*\}\}`)

// Check reports every problem of the definition: the title; the number of tasks; each
// task's id (unique, a valid task id), instructions, dependencies (declared tasks, no
// cycle), attempt limit, references (only to the results of tasks it depends on) and
// result schema (CheckResultSchema, its path named). Nothing is started from a
// definition that fails.
func (d *Definition) Check() error {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	switch {
	case strings.TrimSpace(d.Title) == "":
		add("title is empty: give the workflow a title")
	case utf8.RuneCountInString(d.Title) > maxTitle:
		add("title is longer than %d characters", maxTitle)
	}
	switch {
	case len(d.Tasks) == 0:
		add("no tasks: a workflow has at least one")
	case len(d.Tasks) > MaxTasks:
		add("%d tasks: a workflow has at most %d", len(d.Tasks), MaxTasks)
	}
	ids := make(map[string]int, len(d.Tasks))
	for i, t := range d.Tasks {
		if err := bus.CheckTaskID(t.ID); err != nil {
			add("task %d: %v", i+1, err)
			continue
		}
		if _, dup := ids[t.ID]; dup {
			add("task %s: the id is used twice", t.ID)
			continue
		}
		ids[t.ID] = i
	}
	for _, t := range d.Tasks {
		if _, ok := ids[t.ID]; !ok {
			continue
		}
		name := "task " + t.ID
		if strings.TrimSpace(t.Instructions) == "" {
			add("%s: instructions are empty", name)
		} else if n := len(t.Instructions); n > MaxInstructionsBytes {
			add("%s: instructions are %s (%d bytes), over the %s a task's instructions may hold", name, sizeOf(n), n, sizeOf(MaxInstructionsBytes))
		}
		seen := make(map[string]bool, len(t.DependsOn))
		for _, dep := range t.DependsOn {
			switch _, ok := ids[dep]; {
			case dep == t.ID:
				add("%s: depends on itself", name)
			case !ok:
				add("%s: depends on %q, which is not a task of this workflow", name, dep)
			case seen[dep]:
				add("%s: names the dependency %s twice", name, dep)
			}
			seen[dep] = true
		}
		if t.MaxAttempts < 0 || t.MaxAttempts > MaxAttempts {
			add("%s: max_attempts %d is out of range: 1 to %d (left out, %d)", name, t.MaxAttempts, MaxAttempts, DefaultAttempts)
		}
		refs := map[string]bool{}
		for _, m := range refPattern.FindAllStringSubmatch(t.Instructions, -1) {
			refs[m[1]] = true
		}
		for _, m := range looseRef.FindAllString(t.Instructions, -1) {
			if !refPattern.MatchString(m) {
				add("%s: %s is not a reference: write {{tasks.<id>.result}} or {{tasks.<id>.result.<field>}}", name, m)
			}
		}
		for ref := range refs {
			if !slices.Contains(t.DependsOn, ref) {
				add("%s: instructions use the result of %s, which %s does not depend on: add it to depends_on", name, ref, t.ID)
			}
		}
		if len(t.ResultSchema) == 0 {
			add("%s: result_schema is missing", name)
		} else if err := CheckResultSchema(t.ResultSchema); err != nil {
			add("%s: result_schema: %v", name, err)
		}
		if len(t.Script) > 0 && !bytes.HasPrefix(bytes.TrimSpace(t.Script), []byte("{")) {
			add("%s: script is not an object (a scripted model: {\"responses\": […]})", name)
		}
	}
	if cycle := findCycle(d.Tasks, ids); cycle != "" {
		add("the dependencies form a cycle: %s", cycle)
	}
	if len(p) > 0 {
		return &DefinitionError{Problems: p}
	}
	return nil
}

// findCycle returns a dependency cycle as "a → b → a", or "".
func findCycle(tasks []TaskDef, ids map[string]int) string {
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]int, len(tasks))
	var path []string
	var visit func(i int) string
	visit = func(i int) string {
		state[i] = onPath
		path = append(path, tasks[i].ID)
		for _, dep := range tasks[i].DependsOn {
			j, ok := ids[dep]
			if !ok || dep == tasks[i].ID {
				continue // reported already
			}
			switch state[j] {
			case onPath:
				start := slices.Index(path, dep)
				return strings.Join(append(slices.Clone(path[start:]), dep), " → ")
			case unseen:
				if c := visit(j); c != "" {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[i] = done
		return ""
	}
	for i, t := range tasks {
		if _, ok := ids[t.ID]; ok && state[i] == unseen {
			if c := visit(i); c != "" {
				return c
			}
		}
	}
	return ""
}

// Render is a task's instructions with each reference replaced by a dependency's
// result: {{tasks.<id>.result}} by the whole result as compact JSON;
// {{tasks.<id>.result.<field>…}} by the value at that path, a string as its text and
// anything else as JSON (null when the path leads nowhere). A reference to a result
// not in results stays as it is.
func Render(instructions string, results map[string]json.RawMessage) string {
	values := substitutions(instructions, results)
	return refPattern.ReplaceAllStringFunc(instructions, func(m string) string {
		if v, ok := values[m]; ok {
			return v
		}
		return m
	})
}

// renderedSize is the length Render would give, found without building it: a reference
// repeated many times costs its value's length each time, but is looked up once.
func renderedSize(instructions string, results map[string]json.RawMessage) int {
	values := substitutions(instructions, results)
	n := len(instructions)
	for _, loc := range refPattern.FindAllStringIndex(instructions, -1) {
		if v, ok := values[instructions[loc[0]:loc[1]]]; ok {
			n += len(v) - (loc[1] - loc[0])
		}
	}
	return n
}

// substitutions maps each distinct reference of instructions whose task is in results
// to its value.
func substitutions(instructions string, results map[string]json.RawMessage) map[string]string {
	values := map[string]string{}
	for _, sub := range refPattern.FindAllStringSubmatch(instructions, -1) {
		if _, done := values[sub[0]]; done {
			continue
		}
		raw, ok := results[sub[1]]
		if !ok {
			continue
		}
		values[sub[0]] = refValue(raw, sub[2])
	}
	return values
}

// refValue is the value of one reference into a result: path is "" (the whole result)
// or ".<field>.<field>…".
func refValue(raw json.RawMessage, path string) string {
	if path == "" {
		return compactJSON(raw)
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "null"
	}
	for _, field := range strings.Split(strings.TrimPrefix(path, "."), ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return "null"
		}
		if v, ok = obj[field]; !ok {
			return "null"
		}
	}
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
