package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/gateway"
)

// OPENAI_API_KEY goes to OPENAI_BASE_URL when the environment gives both; a base URL
// set apart from the environment's (a -base-url flag) gets only its own key.
func TestOpenAIEnvPairSendsKey(t *testing.T) {
	var mu sync.Mutex
	auth := map[string]string{} // server → the Authorization it got
	serve := func(name string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			auth[name] = r.Header.Get("Authorization")
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(chatBody("c1", "stop", "hi")))
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	proxy, local := serve("proxy"), serve("local")

	t.Setenv(gateway.EnvAPIKey, testKey)
	t.Setenv(gateway.EnvBaseURL, proxy.URL+"/v1/")
	t.Setenv(gateway.EnvModelAPIKey, "")
	cfg, err := gateway.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OpenAIBaseURL != proxy.URL+"/v1/" {
		t.Fatalf("OpenAIBaseURL = %q", cfg.OpenAIBaseURL)
	}
	for _, base := range []string{cfg.BaseURL, proxy.URL + "/v1"} { // a -base-url naming the same endpoint
		cfg.BaseURL, auth["proxy"] = base, "none"
		if _, err := ask(t, newChat(t, cfg)); err != nil {
			t.Fatal(err)
		}
		if got := auth["proxy"]; got != "Bearer "+testKey {
			t.Errorf("OPENAI_BASE_URL %s got Authorization %q, want OPENAI_API_KEY", base, got)
		}
	}

	// -base-url names another endpoint: OPENAI_API_KEY stays home.
	cfg.BaseURL = local.URL + "/v1"
	if _, err := ask(t, newChat(t, cfg)); err != nil {
		t.Fatal(err)
	}
	if got := auth["local"]; got != "" {
		t.Errorf("a -base-url apart from the environment's got Authorization %q", got)
	}
	// ... and gets its own key when it has one.
	cfg.APIKey = "sk-local-0123456789"
	if _, err := ask(t, newChat(t, cfg)); err != nil {
		t.Fatal(err)
	}
	if got := auth["local"]; got != "Bearer sk-local-0123456789" {
		t.Errorf("the -base-url's own key: Authorization %q", got)
	}

	// OPENAI_API_KEY alone stays the OpenAI API's.
	t.Setenv(gateway.EnvBaseURL, "")
	if cfg, _ = gateway.ConfigFromEnv(); cfg.OpenAIBaseURL != "" {
		t.Errorf("OpenAIBaseURL = %q without OPENAI_BASE_URL", cfg.OpenAIBaseURL)
	}
}

func TestSameEndpoint(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"http://h:8080/v1", "http://H:8080/v1/", true},
		{"https://h/v1", "https://h:443/v1", true},
		{"http://h/v1", "https://h/v1", false},
		{"http://h/v1", "http://h/v2", false},
		{"http://h:1/v1", "http://h:2/v1", false},
		{"http://a@h/v1", "http://h/v1", false},
		{"", "", false},
		{"h/v1", "h/v1", false},
	} {
		if got := gateway.SameEndpoint(c.a, c.b); got != c.same {
			t.Errorf("SameEndpoint(%q, %q) = %v", c.a, c.b, got)
		}
	}
}
