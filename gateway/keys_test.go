package gateway_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/gateway"
)

// OPENAI_API_KEY reaches the OpenAI API only; another base URL gets the key given for it,
// or none.
func TestKeyGoesOnlyToItsEndpoint(t *testing.T) {
	t.Parallel()
	const endpointKey = "sk-endpoint-5d1f0a9b7c"
	for _, tc := range []struct {
		name     string
		endpoint string // Config.APIKey
		want     string // the Authorization header the server gets
	}{
		{"OpenAI's key only", "", ""},
		{"a key of its own", endpointKey, "Bearer " + endpointKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, exchange{body: chatBody("c1", "stop", "hi")})
			cfg := api.config(&bytes.Buffer{})
			cfg.APIKey, cfg.OpenAIKey = tc.endpoint, testKey
			if _, err := ask(t, newChat(t, cfg)); err != nil {
				t.Fatal(err)
			}
			h := api.requests()[0].header
			if got := h.Get("Authorization"); got != tc.want {
				t.Errorf("Authorization %q, want %q", got, tc.want)
			}
			for k, vs := range h {
				noKey(t, "header "+k, vs...)
			}
		})
	}
}

// An endpoint that wants a key it did not get says why it did not get OPENAI_API_KEY.
func TestKeyWithheldExplained(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, exchange{status: http.StatusUnauthorized, body: `{"error":{"message":"missing bearer token"}}`})
	cfg := api.config(&bytes.Buffer{})
	cfg.APIKey, cfg.OpenAIKey = "", testKey
	_, err := ask(t, newChat(t, cfg))
	var gwErr *gateway.Error
	if !errors.As(err, &gwErr) || gwErr.Status != http.StatusUnauthorized {
		t.Fatalf("err = %v, want a 401 *gateway.Error", err)
	}
	want := "chat: HTTP 401: the endpoint wants an API key and none was sent (OPENAI_API_KEY is sent only to api.openai.com and to OPENAI_BASE_URL: give " +
		api.srv.URL + "/v1 its own key in TOOLBUS_MODEL_API_KEY or -api-key-file): missing bearer token"
	if err.Error() != want {
		t.Errorf("err = %q\nwant  %q", err, want)
	}
}

// roundTripFunc answers requests without a network.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The OpenAI API, at its default base URL, gets OPENAI_API_KEY.
func TestOpenAIKeyGoesToOpenAI(t *testing.T) {
	t.Parallel()
	var got *http.Request
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(responseBody("resp_1", messageOut("ok")))), Request: r}, nil
	})}
	if _, err := ask(t, newResponses(t, gateway.Config{OpenAIKey: testKey, HTTPClient: client})); err != nil {
		t.Fatal(err)
	}
	if got.URL.Host != "api.openai.com" || got.Header.Get("Authorization") != "Bearer "+testKey {
		t.Errorf("request to %s with Authorization %q", got.URL, got.Header.Get("Authorization"))
	}
}

func TestIsOpenAIAPI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{gateway.DefaultBaseURL, true},
		{"https://API.OpenAI.com/v1", true},
		{"https://api.openai.com:443/v1", true},
		{"https://api.openai.com./v1", true},
		{"https://eu.api.openai.com/v1", true},
		{"http://api.openai.com/v1", false},
		{"https://api.openai.com:8443/v1", false},
		{"https://api.openai.com.example.net/v1", false},
		{"https://notapi.openai.com/v1", false},
		{"https://user:pw@api.openai.com/v1", false},
		{"http://localhost:11434/v1", false},
		{"", false},
		{"://bad", false},
	} {
		if got := gateway.IsOpenAIAPI(tc.url); got != tc.want {
			t.Errorf("IsOpenAIAPI(%q) = %v, want %v", tc.url, got, tc.want)
		}
	}
}

func TestReadKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, err := gateway.ReadKeyFile(write("ok", "  "+testKey+"\n"))
	if err != nil || key != testKey {
		t.Errorf("ReadKeyFile = %q, %v; want the key trimmed", key, err)
	}
	for _, tc := range []struct{ name, content, want string }{
		{"empty", "\n", "is empty"},
		{"two words", testKey + "\n" + testKey + "x\n", "more than one word"},
		{"too large", strings.Repeat(testKey, 4000), "larger than 64 KiB"},
	} {
		_, err := gateway.ReadKeyFile(write(tc.name, tc.content))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		if err != nil {
			noKey(t, tc.name+" error", err.Error())
		}
	}
	if _, err := gateway.ReadKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file: no error")
	}
}
