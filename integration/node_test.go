//go:build linux

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/needs"
	"github.com/toolbus/toolbus/toolsets"
)

// microInfo is a micro service's INFO response (ADR-32), as the nats CLI
// prints it with --json.
type microInfo struct {
	Name      string            `json:"name"`
	ID        string            `json:"id"`
	Version   string            `json:"version"`
	Metadata  map[string]string `json:"metadata"`
	Endpoints []microEndpoint   `json:"endpoints"`
}

type microEndpoint struct {
	Name       string            `json:"name"`
	Subject    string            `json:"subject"`
	QueueGroup string            `json:"queue_group"`
	Metadata   map[string]string `json:"metadata"`
}

// toolReply is a tool call's reply as it travels on the wire (docs of
// bus.ToolReply). It is decoded independently of the bus package, so a
// renamed field shows up here.
type toolReply struct {
	Call    string `json:"call_id"`
	Tool    string `json:"tool"`
	Outcome string `json:"outcome"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Details json.RawMessage `json:"details"`
	Error   string          `json:"error"`
}

func (r toolReply) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func TestMicroLs(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	n := startNode(t, "n1", "-home", home)
	n.waitReady(t)

	out, errOut, err := runNats(t, "--server", n.url, "micro", "ls")
	if err != nil {
		t.Fatalf("nats micro ls: %v\n%s", err, errOut)
	}
	for _, svc := range []string{"toolbus-todo", "toolbus-computer"} {
		if !strings.Contains(out, svc) {
			t.Errorf("nats micro ls does not list %s:\n%s", svc, out)
		}
	}

	out, errOut, err = runNats(t, "--server", n.url, "micro", "ls", "--json")
	if err != nil {
		t.Fatalf("nats micro ls --json: %v\n%s", err, errOut)
	}
	var services []microInfo
	if err := json.Unmarshal([]byte(out), &services); err != nil {
		t.Fatalf("decode nats micro ls --json: %v\n%s", err, out)
	}
	var names []string
	for _, s := range services {
		names = append(names, s.Name)
		if s.Metadata["node"] != "n1" {
			t.Errorf("service %s: metadata node = %q, want n1", s.Name, s.Metadata["node"])
		}
		if want := strings.TrimPrefix(s.Name, "toolbus-"); s.Metadata["category"] != want {
			t.Errorf("service %s: metadata category = %q, want %q", s.Name, s.Metadata["category"], want)
		}
	}
	slices.Sort(names)
	var want []string // every built-in category, hosted by default
	for _, c := range toolsets.Categories() {
		want = append(want, bus.CategoryService(c))
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("nats micro ls --json lists %q, want %q", names, want)
	}

	out, errOut, err = runNats(t, "--server", n.url, "micro", "info", "toolbus-computer", "--json")
	if err != nil {
		t.Fatalf("nats micro info: %v\n%s", err, errOut)
	}
	var info struct {
		Info microInfo `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("decode nats micro info --json: %v\n%s", err, out)
	}
	tests := []struct {
		tool        string
		mode        string
		readOnly    string
		destructive string
		required    []string
	}{
		{"list_files", "parallel", "true", "false", nil},
		{"read_file", "parallel", "true", "false", []string{"path"}},
		{"write_file", "sequential", "false", "true", []string{"path", "content"}},
		{"run_command", "sequential", "false", "true", []string{"command"}},
	}
	if len(info.Info.Endpoints) != len(tests) {
		t.Errorf("toolbus-computer has %d endpoints, want %d:\n%s", len(info.Info.Endpoints), len(tests), out)
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			i := slices.IndexFunc(info.Info.Endpoints, func(e microEndpoint) bool { return e.Name == tt.tool })
			if i < 0 {
				t.Fatalf("no endpoint %s in:\n%s", tt.tool, out)
			}
			ep := info.Info.Endpoints[i]
			if want := "toolbus.tool.computer." + tt.tool; ep.Subject != want {
				t.Errorf("subject = %q, want %q", ep.Subject, want)
			}
			if ep.QueueGroup != "toolbus.computer" {
				t.Errorf("queue group = %q, want toolbus.computer", ep.QueueGroup)
			}
			md := ep.Metadata
			if md["mode"] != tt.mode || md["read_only"] != tt.readOnly || md["destructive"] != tt.destructive {
				t.Errorf("metadata mode/read_only/destructive = %s/%s/%s, want %s/%s/%s",
					md["mode"], md["read_only"], md["destructive"], tt.mode, tt.readOnly, tt.destructive)
			}
			if md["description"] == "" {
				t.Error("metadata has no description")
			}
			var schema struct {
				Type       string                     `json:"type"`
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			}
			if err := json.Unmarshal([]byte(md["schema"]), &schema); err != nil {
				t.Fatalf("metadata schema is not JSON: %v: %q", err, md["schema"])
			}
			if schema.Type != "object" {
				t.Errorf("schema type = %q, want object", schema.Type)
			}
			for _, r := range tt.required {
				if !slices.Contains(schema.Required, r) {
					t.Errorf("schema requires %q, want %q among them", schema.Required, r)
				}
				if _, ok := schema.Properties[r]; !ok {
					t.Errorf("schema has no property %q", r)
				}
			}
		})
	}
}

func TestNatsReqRunsTool(t *testing.T) {
	t.Parallel()
	n := startNode(t, "n1")
	homes := filepath.Join(n.dir, "homes")
	// A request without Toolbus-Agent runs as agent "default".
	if err := os.MkdirAll(filepath.Join(homes, "default"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(homes, "default", "x.txt"), []byte("hello from x\nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.waitReady(t)

	tests := []struct {
		name      string
		tool      string
		args      string
		headers   []string
		outcome   string
		contains  []string // in the content, or in the error when the outcome is not ok
		afterward func(t *testing.T)
		bwrap     bool // the command runs, in the sandbox
	}{
		{
			name: "read_file", tool: "read_file", args: `{"path":"x.txt"}`,
			outcome: "ok", contains: []string{"hello from x", "second line"},
		},
		{
			name: "read_file missing path", tool: "read_file", args: `{}`,
			outcome: "invalid", contains: []string{"path"},
		},
		{
			name: "read_file wrong type", tool: "read_file", args: `{"path":5}`,
			outcome: "invalid", contains: []string{"/path"},
		},
		{
			name: "read_file not JSON", tool: "read_file", args: `{"path":`,
			outcome: "invalid", contains: []string{"read_file"},
		},
		{
			name: "read_file missing file", tool: "read_file", args: `{"path":"nope.txt"}`,
			outcome: "error", contains: []string{"nope.txt"},
		},
		{
			name: "run_command as agent a1", tool: "run_command",
			args:    `{"command":"echo hi; pwd; echo made-by-a1 > made.txt"}`,
			headers: []string{"Toolbus-Agent:a1"},
			outcome: "ok", contains: []string{"hi\n", filepath.Join(homes, "a1")},
			afterward: func(t *testing.T) {
				b, err := os.ReadFile(filepath.Join(homes, "a1", "made.txt"))
				if err != nil || strings.TrimSpace(string(b)) != "made-by-a1" {
					t.Errorf("the command's file in a1's home: %q, %v", b, err)
				}
			},
			bwrap: true,
		},
		{
			name: "run_command bad agent header", tool: "run_command", args: `{"command":"echo no"}`,
			headers: []string{"Toolbus-Agent:../a1"},
			outcome: "invalid", contains: []string{"Toolbus-Agent"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.bwrap {
				needs.Bwrap(t)
			}
			args := []string{"--server", n.url, "req", "--raw", "toolbus.tool.computer." + tt.tool, tt.args}
			for _, h := range tt.headers {
				args = append(args, "-H", h)
			}
			out, errOut, err := runNats(t, args...)
			if err != nil {
				t.Fatalf("nats req: %v\n%s", err, errOut)
			}
			var r toolReply
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
				t.Fatalf("decode reply: %v\n%s", err, out)
			}
			if r.Outcome != tt.outcome {
				t.Fatalf("outcome = %q (%s), want %q\n%s", r.Outcome, r.Error, tt.outcome, out)
			}
			if r.Tool != tt.tool || r.Call == "" {
				t.Errorf("reply names tool %q, call %q; want tool %q and a call id", r.Tool, r.Call, tt.tool)
			}
			got := r.text()
			if tt.outcome != "ok" {
				got = r.Error
				if got == "" {
					t.Errorf("a %s reply without an error", r.Outcome)
				}
			}
			for _, want := range tt.contains {
				if !strings.Contains(got, want) {
					t.Errorf("reply does not contain %q:\n%s", want, out)
				}
			}
			if tt.afterward != nil {
				tt.afterward(t)
			}
		})
	}
}

func TestWrongPasswordRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t, "n1")
	n.waitReady(t)
	addr := n.url[strings.LastIndex(n.url, "@")+1:]

	tests := []struct {
		name    string
		url     string
		refused bool
	}{
		{"right password", n.url, false},
		{"wrong password", "nats://" + testUser + ":wrong@" + addr, true},
		{"unknown user", "nats://nobody:" + testPass + "@" + addr, true},
		{"no credentials", "nats://" + addr, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, err := runNats(t, "--server", tt.url, "pub", "toolbus.probe", "hello")
			if !tt.refused {
				if err != nil {
					t.Fatalf("nats pub with the right credentials: %v\n%s", err, errOut)
				}
				return
			}
			if err == nil {
				t.Fatalf("nats pub was accepted; want it refused\n%s", errOut)
			}
			if !strings.Contains(strings.ToLower(errOut), "authorization violation") {
				t.Errorf("nats pub failed without saying why; want an authorization violation:\n%s", errOut)
			}
		})
	}
}
