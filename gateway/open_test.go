package gateway_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/gateway"
)

func TestOpen(t *testing.T) {
	withKey := gateway.Config{APIKey: testKey}
	local := gateway.Config{BaseURL: "http://localhost:11434/v1"}
	for _, tc := range []struct {
		spec    string
		cfg     gateway.Config
		want    string // the model's type
		model   string
		wantErr string
		unknown bool
	}{
		{spec: "script:testdata/script.json", want: "*gateway.Scripted"},
		{spec: "script:testdata/missing.json", wantErr: "load script"},
		{spec: "openai:gpt-5.4", cfg: withKey, want: "*gateway.Responses", model: "gpt-5.4"},
		{spec: "openai:gpt-5.4", cfg: local, wantErr: "OPENAI_API_KEY"},
		{spec: "chat:llama3.1", cfg: local, want: "*gateway.Chat", model: "llama3.1"},
		{spec: "chat:gpt-4.1", cfg: withKey, want: "*gateway.Chat", model: "gpt-4.1"},
		{spec: "chat:llama3.1", wantErr: "--base-url"},
		{spec: "chat:qwen3:8b", cfg: local, want: "*gateway.Chat", model: "qwen3:8b"},
		{spec: "openai:", cfg: withKey, wantErr: "names no model"},
		{spec: "gpt-5.4", cfg: withKey, unknown: true},
		{spec: "anthropic:claude", cfg: withKey, unknown: true},
		{spec: "", unknown: true},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			m, err := gateway.Open(tc.spec, tc.cfg)
			switch {
			case tc.unknown:
				if !errors.Is(err, gateway.ErrUnknownModel) {
					t.Fatalf("err = %v, want ErrUnknownModel", err)
				}
				for _, form := range []string{"script:FILE", "openai:MODEL", "chat:MODEL"} {
					if !strings.Contains(err.Error(), form) {
						t.Errorf("error %q does not list %s", err, form)
					}
				}
				return
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if got := typeName(m); got != tc.want {
				t.Errorf("model type %s, want %s", got, tc.want)
			}
			if named, ok := m.(interface{ ModelName() string }); ok && named.ModelName() != tc.model {
				t.Errorf("model %q, want %q", named.ModelName(), tc.model)
			}
		})
	}
}

func typeName(m gateway.Model) string {
	switch m.(type) {
	case *gateway.Scripted:
		return "*gateway.Scripted"
	case *gateway.Responses:
		return "*gateway.Responses"
	case *gateway.Chat:
		return "*gateway.Chat"
	}
	return "unknown"
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", testKey)
	t.Setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
	cfg := gateway.ConfigFromEnv()
	if cfg.APIKey != testKey || cfg.BaseURL != "http://localhost:8000/v1" {
		t.Errorf("config %+v", cfg)
	}
}

func TestOpenErrorsHideKey(t *testing.T) {
	for _, spec := range []string{"openai:", "bogus", "chat:"} {
		_, err := gateway.Open(spec, gateway.Config{APIKey: testKey})
		if err == nil {
			t.Fatalf("%s: want an error", spec)
		}
		noKey(t, "error", err.Error())
	}
}
