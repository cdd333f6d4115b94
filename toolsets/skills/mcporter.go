package skills

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"sync"
)

// Where the mcporter configuration goes in the agent home. mcporter reads
// config/mcporter.json relative to its working directory, and run_command runs in the
// home, so the model runs `mcporter list SERVER` with no flag.
const (
	McporterConfig = "config/mcporter.json"
	// McporterRecord records which servers of McporterConfig toolbus wrote, and how:
	// toolbus replaces or removes only those, and only while they are as it wrote them.
	// Everything else in McporterConfig is the user's and stays as it is.
	McporterRecord = "config/mcporter.toolbus.json"
)

// maxConfig bounds the mcporter files read.
const maxConfig = 1 << 20

// record is the document at McporterRecord.
type record struct {
	Note    string                     `json:"note"`
	Servers map[string]json.RawMessage `json:"servers"`
}

const recordNote = "toolbus writes the MCP servers of the agent's enabled skills into mcporter.json and lists them here. " +
	"It replaces or removes only these, and only while they are as listed; change one and it is yours."

// writeMu serialises the writes of this process; turns of one agent assembled at once
// would otherwise interleave their reads and writes of one file.
var writeMu sync.Mutex

// WriteMcporterConfig brings the mcporter configuration of the agent home up to date with
// the MCP servers the skills declare: it adds or replaces the servers it wrote before,
// removes those of skills no longer given, and leaves every other server and key of
// McporterConfig alone. A server whose name the user's own configuration or an earlier
// skill already uses is not written, and a note says so. Nothing is written when nothing
// changes, nor when no skill declares a server and toolbus never wrote one.
//
// A stdio server starts in its skill's folder, or in its cwd (relative to that folder, or
// absolute, but inside it): mcporter itself would start it in the folder of the
// configuration, so the command is wrapped in `env -C DIR`. A server whose cwd leaves
// the skill's folder is not written, and a note says so.
func WriteMcporterConfig(home string, skills []*Skill) (notes []string, err error) {
	want := map[string]json.RawMessage{}
	wantBy := map[string]string{} // server → skill
	for _, s := range skills {
		for _, srv := range s.Servers {
			m, err := entry(s, srv)
			if err != nil {
				notes = append(notes, fmt.Sprintf("MCP server %s of skill %s is not configured: %v", srv.Name, s.Name, err))
				continue
			}
			e, err := json.Marshal(m)
			if err != nil {
				return nil, fmt.Errorf("MCP server %s of skill %s: %w", srv.Name, s.Name, err)
			}
			if other, dup := wantBy[srv.Name]; dup {
				if !bytes.Equal(want[srv.Name], e) {
					notes = append(notes, fmt.Sprintf("MCP server %s of skill %s is not configured: skill %s declares a different server of that name; rename one of them", srv.Name, s.Name, other))
				}
				continue
			}
			want[srv.Name], wantBy[srv.Name] = e, s.Name
		}
	}
	writeMu.Lock()
	defer writeMu.Unlock()
	root, err := os.OpenRoot(home)
	if errors.Is(err, fs.ErrNotExist) && len(want) == 0 {
		return notes, nil
	}
	if err != nil {
		return notes, fmt.Errorf("write %s: %w", McporterConfig, err)
	}
	defer root.Close()

	var rec record
	recRaw, err := readRegular(root, McporterRecord, maxConfig)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if len(want) == 0 {
			return notes, nil
		}
	case err != nil:
		return notes, fmt.Errorf("read %s: %s", McporterRecord, readError(err))
	default:
		if err := json.Unmarshal(recRaw, &rec); err != nil {
			// Forget it: what toolbus wrote now counts as the user's.
			notes = append(notes, fmt.Sprintf("%s is not valid JSON (%v): the servers toolbus wrote before are kept as the user's", McporterRecord, err))
			rec = record{}
		}
	}

	doc := map[string]json.RawMessage{}
	servers := map[string]json.RawMessage{}
	cfgRaw, err := readRegular(root, McporterConfig, maxConfig)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cfgRaw = nil
	case err != nil:
		return notes, fmt.Errorf("read %s: %s", McporterConfig, readError(err))
	default:
		if err := json.Unmarshal(cfgRaw, &doc); err != nil {
			return notes, fmt.Errorf("%s is not a JSON object (%v): the skills' MCP servers are not configured; fix or remove the file", McporterConfig, err)
		}
		if raw, ok := doc["mcpServers"]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &servers); err != nil {
				return notes, fmt.Errorf("%s: mcpServers is not an object (%v): the skills' MCP servers are not configured; fix or remove the file", McporterConfig, err)
			}
		}
	}

	// Take back what toolbus wrote and nobody changed since.
	for name, wrote := range rec.Servers {
		if cur, ok := servers[name]; ok && sameJSON(cur, wrote) {
			delete(servers, name)
		}
	}
	owned := map[string]json.RawMessage{}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, taken := servers[name]; taken {
			notes = append(notes, fmt.Sprintf("MCP server %s of skill %s is not configured: %s has a server of that name that toolbus did not write (rename one of them)", name, wantBy[name], McporterConfig))
			continue
		}
		servers[name], owned[name] = want[name], want[name]
	}

	// Write the configuration, then the record: a crash between them leaves servers
	// that toolbus wrote unrecorded, which it then leaves alone, never the reverse.
	var newCfg []byte
	if len(servers) > 0 || len(doc) > 1 || (len(doc) == 1 && doc["mcpServers"] == nil) {
		s, err := json.Marshal(servers)
		if err != nil {
			return notes, err
		}
		doc["mcpServers"] = s
		if newCfg, err = json.MarshalIndent(doc, "", "  "); err != nil {
			return notes, err
		}
		newCfg = append(newCfg, '\n')
	}
	if err := replace(root, McporterConfig, cfgRaw, newCfg); err != nil {
		return notes, err
	}
	var newRec []byte
	if len(owned) > 0 {
		if newRec, err = json.MarshalIndent(record{Note: recordNote, Servers: owned}, "", "  "); err != nil {
			return notes, err
		}
		newRec = append(newRec, '\n')
	}
	if err := replace(root, McporterRecord, recRaw, newRec); err != nil {
		return notes, err
	}
	return notes, nil
}

// replace writes data to name through a temporary file and a rename, removes name when
// data is nil, and does nothing when data is what old holds.
func replace(root *os.Root, name string, old, data []byte) error {
	switch {
	case data == nil && old == nil:
		return nil
	case data == nil:
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %s", name, readError(err))
		}
		return nil
	case bytes.Equal(old, data):
		return nil
	}
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return fmt.Errorf("write %s: %s", name, readError(err))
	}
	tmp := name + ".toolbus-tmp"
	if err := root.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %s", name, readError(err))
	}
	if err := root.Rename(tmp, name); err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("write %s: %s", name, readError(err))
	}
	return nil
}

// entry is a server's mcporter entry; a stdio server's cwd must stay in the skill's
// folder.
func entry(s *Skill, srv Server) (map[string]any, error) {
	e := map[string]any{"description": "for skill " + s.Name + " (written by toolbus)"}
	if srv.URL != "" {
		e["url"] = srv.URL
		if len(srv.Headers) > 0 {
			e["headers"] = srv.Headers
		}
		return e, nil
	}
	dir, err := serverDir(s.Dir, srv.Cwd)
	if err != nil {
		return nil, err
	}
	e["command"] = "env"
	e["args"] = append([]string{"-C", dir, srv.Command}, srv.Args...)
	if len(srv.Env) > 0 {
		e["env"] = srv.Env
	}
	return e, nil
}

// sameJSON reports whether two JSON documents hold the same value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
