package nodecmd

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
	keyFile := filepath.Join(t.TempDir(), "vouch.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
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
		{name: "password on the command line", args: []string{"-pass", "secret"}, wantErr: "-pass-file FILE or the environment variable NATS_PASSWORD"},
		{name: "route password on the command line", args: []string{"-route-pass", "secret"}, wantErr: "-route-pass-file"},
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
				if o.reqTimeout != 90*time.Second || o.apiKeyFile != "/run/secrets/model-key" {
					t.Errorf("request timeout %s, key file %q", o.reqTimeout, o.apiKeyFile)
				}
			}},
		{name: "negative request timeout", args: []string{"-request-timeout", "-1m"}, wantErr: "-request-timeout -1m0s: want a positive duration"},
		{name: "hosted tool search", args: []string{"-hosted-tool-search"}, check: func(t *testing.T, o *options) {
			if !o.hostedSearch {
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
		{name: "vouch key file", args: []string{"-vouch-key-file", keyFile}, check: func(t *testing.T, o *options) {
			if len(o.vouchKey) != 32 || o.vouchKey[0] != 0xab {
				t.Errorf("vouch key %x", o.vouchKey)
			}
		}},
		{name: "short vouch key", args: []string{"-vouch-key-file", passFile}, wantErr: "does not hold a key of 64 hex digits (openssl rand -hex 32 writes one)"},
		{name: "unknown sandbox", args: []string{"-sandbox", "docker"}, wantErr: `unknown sandbox mode "docker": want bwrap or off`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NATS_URL", "")
			t.Setenv("NATS_PASSWORD", "")
			t.Setenv("TOOLBUS_ROUTE_PASSWORD", "")
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
