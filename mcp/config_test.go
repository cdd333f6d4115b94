package mcp_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/mcp"
)

func TestMCPServerFlags(t *testing.T) {
	t.Parallel()
	c, err := mcp.ParseServerFlag("files=npx -y @modelcontextprotocol/server-filesystem /tmp")
	if err != nil || c.Name != "files" || strings.Join(c.Command, "|") != "npx|-y|@modelcontextprotocol/server-filesystem|/tmp" || c.Category() != "mcp-files" {
		t.Errorf("command form: %+v, %v", c, err)
	}
	c, err = mcp.ParseServerFlag("remote=https://mcp.example.com/mcp")
	if err != nil || c.URL != "https://mcp.example.com/mcp" || len(c.Command) != 0 {
		t.Errorf("URL form: %+v, %v", c, err)
	}
	for flag, want := range map[string]string{
		"nothing":             "want NAME=COMMAND",
		"a.b=cmd":             "may hold only letters",
		"a__b=cmd":            "may not contain",
		"x=":                  "want NAME=COMMAND",
		"x=http://":           "want http://HOST/PATH",
		"x=ftp://example.com": "", // a command named ftp://example.com: allowed, it fails when started
	} {
		_, err := mcp.ParseServerFlag(flag)
		if want == "" {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-mcp %q: %v, want %q", flag, err, want)
		}
	}

	path := filepath.Join(t.TempDir(), "mcp.json")
	doc := `{"mcpServers": {"everything": {"command": "mcp-server-everything", "args": ["stdio"], "env": {"LEVEL": "debug"}},
		"remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer k"}}}}`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.ParseConfigFile(path)
	if err != nil || len(cs) != 2 || cs[0].Name != "everything" || strings.Join(cs[0].Command, " ") != "mcp-server-everything stdio" ||
		cs[0].Env[0] != "LEVEL=debug" || cs[1].URL != "http://127.0.0.1:9/mcp" || cs[1].Headers["Authorization"] != "Bearer k" {
		t.Errorf("config file: %+v, %v", cs, err)
	}
	if err := os.WriteFile(path, []byte(`{"mcpServers": {"bad name": {"command": "x"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := mcp.ParseConfigFile(path); err == nil || !strings.Contains(err.Error(), `"bad name"`) {
		t.Errorf("a bad name in a config file: %v", err)
	}
}
