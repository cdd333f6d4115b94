package gateway_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/gateway"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	withKey := gateway.Config{APIKey: testKey}
	openAIKey := gateway.Config{OpenAIKey: testKey}
	local := gateway.Config{BaseURL: "http://localhost:11434/v1"}
	localWithOpenAIKey := gateway.Config{BaseURL: "http://localhost:11434/v1", OpenAIKey: testKey}
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
		{spec: "openai:gpt-5.4", cfg: openAIKey, want: "*gateway.Responses", model: "gpt-5.4"},
		{spec: "openai:gpt-5.4", cfg: gateway.Config{}, wantErr: "no API key: set OPENAI_API_KEY"},
		{spec: "openai:gpt-5.4", cfg: local, wantErr: "no API key for http://localhost:11434/v1 (give http://localhost:11434/v1 its key in TOOLBUS_MODEL_API_KEY or -api-key-file)"},
		{spec: "openai:gpt-5.4", cfg: localWithOpenAIKey, wantErr: "OPENAI_API_KEY is sent only to api.openai.com and to OPENAI_BASE_URL: give http://localhost:11434/v1 its own key in TOOLBUS_MODEL_API_KEY or -api-key-file"},
		{spec: "chat:gpt-4.1", cfg: openAIKey, want: "*gateway.Chat", model: "gpt-4.1"},
		{spec: "chat:llama3.1", cfg: localWithOpenAIKey, want: "*gateway.Chat", model: "llama3.1"},
		{spec: "chat:llama3.1", cfg: local, want: "*gateway.Chat", model: "llama3.1"},
		{spec: "chat:gpt-4.1", cfg: withKey, want: "*gateway.Chat", model: "gpt-4.1"},
		{spec: "chat:llama3.1", wantErr: "-base-url"},
		{spec: "chat:qwen3:8b", cfg: local, want: "*gateway.Chat", model: "qwen3:8b"},
		{spec: "openai:", cfg: withKey, wantErr: "names no model"},
		{spec: "gpt-5.4", cfg: withKey, unknown: true},
		{spec: "anthropic:claude-sonnet-4-5", cfg: withKey, want: "*gateway.Anthropic", model: "claude-sonnet-4-5"},
		{spec: "anthropic:claude-sonnet-4-5", cfg: gateway.Config{AnthropicKey: testKey}, want: "*gateway.Anthropic", model: "claude-sonnet-4-5"},
		{spec: "anthropic:claude-sonnet-4-5", cfg: openAIKey, wantErr: "no API key: set ANTHROPIC_API_KEY"},
		{spec: "anthropic:claude-sonnet-4-5", cfg: local, want: "*gateway.Anthropic", model: "claude-sonnet-4-5"},
		{spec: "gemini:flash", cfg: withKey, unknown: true},
		{spec: "", unknown: true},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			m, err := gateway.Open(tc.spec, tc.cfg)
			switch {
			case tc.unknown:
				if !errors.Is(err, gateway.ErrUnknownModel) {
					t.Fatalf("err = %v, want ErrUnknownModel", err)
				}
				for _, form := range []string{"script:FILE", "openai:MODEL", "chat:MODEL", "anthropic:MODEL"} {
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
	case *gateway.Anthropic:
		return "*gateway.Anthropic"
	}
	return "unknown"
}

func TestConfigFromEnv(t *testing.T) {
	const endpointKey = "sk-endpoint-0b9e2c4d"
	t.Setenv("OPENAI_API_KEY", testKey)
	t.Setenv("TOOLBUS_MODEL_API_KEY", endpointKey)
	t.Setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
	t.Setenv("TOOLBUS_REQUEST_TIMEOUT", "90s")
	cfg, err := gateway.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OpenAIKey != testKey || cfg.APIKey != endpointKey || cfg.BaseURL != "http://localhost:8000/v1" || cfg.RequestTimeout != 90*time.Second {
		t.Errorf("config %+v", cfg)
	}
	for _, bad := range []string{"2", "-1m", "soon"} {
		t.Setenv("TOOLBUS_REQUEST_TIMEOUT", bad)
		if _, err := gateway.ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "TOOLBUS_REQUEST_TIMEOUT=") {
			t.Errorf("TOOLBUS_REQUEST_TIMEOUT=%s: err = %v, want one naming the variable", bad, err)
		}
	}
}

func TestOpenErrorsHideKey(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"openai:", "bogus", "chat:"} {
		_, err := gateway.Open(spec, gateway.Config{APIKey: testKey})
		if err == nil {
			t.Fatalf("%s: want an error", spec)
		}
		noKey(t, "error", err.Error())
	}
}
