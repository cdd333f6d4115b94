package node

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/toolsets/computer"
)

func TestParseFlags(t *testing.T) {
	passFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(passFile, []byte("from-file-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("tvly-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vouchFile := filepath.Join(t.TempDir(), "vouch.key")
	if err := os.WriteFile(vouchFile, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
		check   func(*testing.T, *options)
	}{
		{name: "defaults", args: nil, check: func(t *testing.T, o *options) {
			if !o.turns || o.listen != "" || !strings.Contains(o.categories, "computer") {
				t.Errorf("defaults %+v", o)
			}
		}},
		{name: "password from env, not in defaults", args: []string{"-name", "n1", "-user", "u"},
			env: map[string]string{"NATS_PASSWORD": "secret"}, check: func(t *testing.T, o *options) {
				if o.pass != "secret" {
					t.Errorf("pass %q", o.pass)
				}
			}},
		{name: "password file beats env", args: []string{"-pass-file", passFile}, env: map[string]string{"NATS_PASSWORD": "env"},
			check: func(t *testing.T, o *options) {
				if o.pass != "from-file-pw" {
					t.Errorf("pass %q", o.pass)
				}
			}},
		{name: "user without password", args: []string{"-user", "ops"}, wantErr: "-user ops has no password: give it with -pass-file FILE or the environment variable NATS_PASSWORD"},
		{name: "env user without password", env: map[string]string{"NATS_USER": "ops"}, wantErr: "NATS_USER=ops has no password: give it with -pass-file FILE or the environment variable NATS_PASSWORD"},
		{name: "password on the command line", args: []string{"-pass", "secret"}, wantErr: "-pass-file FILE or the environment variable NATS_PASSWORD"},
		{name: "route password on the command line", args: []string{"-route-pass", "secret"}, wantErr: "-route-pass-file"},
		{name: "console off loopback without a password", args: []string{"-console", "0.0.0.0:7070"},
			wantErr: "-console 0.0.0.0:7070 is reachable from other hosts: give the console a password with -console-password-file FILE"},
		{name: "console off loopback with a password", args: []string{"-console", "0.0.0.0:7070", "-console-password-file", passFile},
			check: func(t *testing.T, o *options) {
				if o.console.Addr != "0.0.0.0:7070" || o.console.password != "from-file-pw" {
					t.Errorf("console %+v", o.console)
				}
			}},
		{name: "console on loopback", args: []string{"-console", "127.0.0.1:7070"}, check: func(t *testing.T, o *options) {
			if o.console.Addr != "127.0.0.1:7070" || o.console.password != "" {
				t.Errorf("console %+v", o.console)
			}
		}},
		{name: "route password file", args: []string{"-route-pass-file", passFile}, check: func(t *testing.T, o *options) {
			if o.routePass != "from-file-pw" {
				t.Errorf("route pass %q", o.routePass)
			}
		}},
		{name: "missing password file", args: []string{"-pass-file", "/nonexistent/pw"}, wantErr: "-pass-file"},
		{name: "tls key without cert", args: []string{"-tls-key", "k.pem"}, wantErr: "go together"},
		{name: "users with server", args: []string{"-server", "nats://x", "-users", "u.json"}, wantErr: "embedded server"},
		{name: "dotted name", args: []string{"-name", "a.b"}, wantErr: `-name "a.b"`},
		{name: "server and listen", args: []string{"-server", "nats://x", "-listen", "127.0.0.1:0"}, wantErr: "pick one"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "request timeout and key file", args: []string{"-request-timeout", "90s", "-api-key-file", "/run/secrets/model-key"},
			check: func(t *testing.T, o *options) {
				if o.gateway.RequestTimeout != 90*time.Second || o.gateway.KeyFile != "/run/secrets/model-key" {
					t.Errorf("request timeout %s, key file %q", o.gateway.RequestTimeout, o.gateway.KeyFile)
				}
			}},
		{name: "negative request timeout", args: []string{"-request-timeout", "-1m"}, wantErr: "-request-timeout -1m0s: want a positive duration"},
		{name: "hosted tool search", args: []string{"-hosted-tool-search"}, check: func(t *testing.T, o *options) {
			if !o.gateway.HostedSearch {
				t.Error("-hosted-tool-search not set")
			}
		}},
		{name: "sandbox by default", args: nil, check: func(t *testing.T, o *options) {
			if o.sandbox != computer.SandboxBwrap {
				t.Errorf("sandbox %q", o.sandbox)
			}
		}},
		{name: "sandbox off", args: []string{"-sandbox=off"}, check: func(t *testing.T, o *options) {
			if o.sandbox != computer.SandboxOff {
				t.Errorf("sandbox %q", o.sandbox)
			}
		}},
		{name: "vouch key file", args: []string{"-vouch-key-file", vouchFile}, check: func(t *testing.T, o *options) {
			if len(o.vouchKey) != 32 || o.vouchKey[0] != 0xab {
				t.Errorf("vouch key %x", o.vouchKey)
			}
		}},
		{name: "short vouch key", args: []string{"-vouch-key-file", passFile}, wantErr: "does not hold a key of 64 hex digits (openssl rand -hex 32 writes one)"},
		{name: "sandbox read-only folders", args: []string{"-sandbox-ro", "/opt/tools", "-sandbox-ro", "rel"}, check: func(t *testing.T, o *options) {
			wd, _ := os.Getwd()
			if len(o.sandboxRO) != 2 || o.sandboxRO[0] != "/opt/tools" || o.sandboxRO[1] != filepath.Join(wd, "rel") {
				t.Errorf("sandbox read-only %q", o.sandboxRO)
			}
		}},
		{name: "unknown sandbox", args: []string{"-sandbox", "docker"}, wantErr: `unknown sandbox mode "docker": want bwrap or off`},
		{name: "web keys from env", env: map[string]string{"TOOLBUS_BRAVE_API_KEY": "brave-env-key"}, check: func(t *testing.T, o *options) {
			if k := o.webKeys["brave"]; k.Secret != "brave-env-key" || len(k.Endpoints) != 0 || len(o.webKeys) != 1 {
				t.Errorf("web keys %+v", o.webKeys)
			}
		}},
		{name: "web key file beats env, endpoints", env: map[string]string{"TOOLBUS_TAVILY_API_KEY": "tvly-env"},
			args: []string{"-web-key-file", "tavily=" + keyFile, "-web-key-endpoint", "tavily=https://proxy.internal/tavily", "-web-key-endpoint", "tavily=http://10.0.0.5:8080"},
			check: func(t *testing.T, o *options) {
				k := o.webKeys["tavily"]
				if k.Secret != "tvly-from-file" || strings.Join(k.Endpoints, " ") != "https://proxy.internal/tavily http://10.0.0.5:8080" {
					t.Errorf("tavily key %+v", k)
				}
			}},
		{name: "web key endpoint without a key", args: []string{"-web-key-endpoint", "brave=https://proxy.internal"}, wantErr: "-web-key-endpoint brave: this node has no brave key to send there (set TOOLBUS_BRAVE_API_KEY or -web-key-file brave=FILE)"},
		{name: "web key for searxng", args: []string{"-web-key-file", "searxng=" + keyFile}, wantErr: "searxng takes no key"},
		{name: "web key without provider", args: []string{"-web-key-file", keyFile}, wantErr: "want provider=value (brave or tavily)"},
		{name: "web key endpoint not a URL", env: map[string]string{"TOOLBUS_BRAVE_API_KEY": "k-123456"}, args: []string{"-web-key-endpoint", "brave=ftp://x"}, wantErr: `"ftp://x" is not an http or https URL`},
		{name: "missing web key file", args: []string{"-web-key-file", "brave=/nonexistent/key"}, wantErr: "-web-key-file brave: API key file"},
		{name: "mcp servers", args: []string{"-mcp", "files=npx -y server-files /tmp", "-mcp", "remote=http://127.0.0.1:9/mcp"}, check: func(t *testing.T, o *options) {
			if len(o.mcp) != 2 || o.mcp[0].Category() != "mcp-files" || len(o.mcp[0].Command) != 4 || o.mcp[1].URL != "http://127.0.0.1:9/mcp" {
				t.Errorf("-mcp %+v", o.mcp)
			}
		}},
		{name: "mcp server twice", args: []string{"-mcp", "a=x", "-mcp", "a=y"}, wantErr: "two MCP servers are named a"},
		{name: "mcp server with a dotted name", args: []string{"-mcp", "a.b=x"}, wantErr: `mcp server "a.b": the name is its namespace`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NATS_URL", "")
			t.Setenv("NATS_USER", "")
			t.Setenv("NATS_PASSWORD", "")
			t.Setenv("TOOLBUS_ROUTE_PASSWORD", "")
			t.Setenv("TOOLBUS_BRAVE_API_KEY", "")
			t.Setenv("TOOLBUS_TAVILY_API_KEY", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var printed strings.Builder
			o, err := parseFlags("toolbus node", tc.args, &printed)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error()+printed.String(), tc.wantErr) {
					t.Fatalf("err %v (printed %q), want %q", err, printed.String(), tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

// TestHelp: -h prints the usage in the layout of every toolbus command, with
// every flag, and is no error to report.
func TestHelp(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	_, err := parseFlags("toolbus node", []string{"-h"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"Usage: toolbus node [flags]\n\n", "\n\nExample:\n  " + Example + "\n\nFlags:\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
	flagSet("toolbus node", io.Discard, &options{}).VisitAll(func(f *flag.Flag) {
		if !regexp.MustCompile(`\n  -` + regexp.QuoteMeta(f.Name) + `[ \t\n]`).MatchString(out.String()) {
			t.Errorf("usage does not list -%s", f.Name)
		}
	})
}
