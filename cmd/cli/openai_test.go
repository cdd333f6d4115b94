package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/gateway/gatewaytest"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/toolsets/computer"
)

// fakeKey is the API key of the model-server tests: the server wants it in the
// Authorization header, and it must appear nowhere in what the CLI prints.
const fakeKey = "sk-cli-test-5e1d0c9b8a7f6e4d"

// modelStep is one answer of a fake model server: check inspects the request
// body (with t.Errorf: it runs on the server's goroutine), then the server
// answers with status and body, or with messages, a Messages API response that
// gatewaytest serves as the API does (SSE to a request that streams, JSON to one that
// does not).
type modelStep struct {
	check    func(t *testing.T, body []byte)
	status   int // 0 means 200
	body     string
	messages *gatewaytest.Messages
}

// modelServer is an httptest server that speaks one model API at one path and
// answers its requests with the steps of a script, in order.
type modelServer struct {
	t     *testing.T
	srv   *httptest.Server
	path  string
	steps []modelStep

	// auth is the value of authHeader (Authorization unless set) every request must
	// carry.
	auth, authHeader string

	mu   sync.Mutex
	seen int
}

func newModelServer(t *testing.T, path string, steps ...modelStep) *modelServer {
	t.Helper()
	s := &modelServer{t: t, path: path, steps: steps, auth: "Bearer " + fakeKey}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *modelServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.t.Errorf("read request body: %v", err)
	}
	s.mu.Lock()
	n := s.seen
	s.seen++
	s.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != s.path {
		s.t.Errorf("request %d: %s %s, want POST %s", n+1, r.Method, r.URL.Path, s.path)
	}
	header := cmp.Or(s.authHeader, "Authorization")
	if got := r.Header.Get(header); got != s.auth {
		s.t.Errorf("request %d: %s %q, want %q", n+1, header, got, s.auth)
	}
	if header != "Authorization" && r.Header.Get("Authorization") != "" {
		s.t.Errorf("request %d: an Authorization header beside %s", n+1, header)
	}
	if n >= len(s.steps) {
		s.t.Errorf("unexpected request %d:\n%s", n+1, body)
		http.Error(w, `{"error":{"message":"unexpected request"}}`, http.StatusBadRequest)
		return
	}
	step := s.steps[n]
	if step.check != nil {
		step.check(s.t, body)
	}
	if step.messages != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		step.messages.Stream().ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if step.status != 0 {
		w.WriteHeader(step.status)
	}
	io.WriteString(w, step.body)
}

// requests is how many requests the server received.
func (s *modelServer) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

// baseURL is the API root the gateways expect: the part before /responses or
// /chat/completions.
func (s *modelServer) baseURL() string { return s.srv.URL + "/v1" }

// The two calls of the first answer, and what their outputs must hold.
const (
	listCall = "call_list"
	readCall = "call_read"
)

// demoReadme is the file read_file must return to the model.
func demoReadme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(demoHome, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantOutputs checks the tool outputs the second request carries: the listing
// names the demo files, and read_file returns README.md line by line.
func wantOutputs(t *testing.T, outputs map[string]string, readme string) {
	t.Helper()
	if len(outputs) != 2 {
		t.Errorf("second request carries outputs for %d calls, want 2: %v", len(outputs), outputs)
	}
	for _, name := range []string{"README.md", "calc.sh", "check.sh", "notes.txt"} {
		if !strings.Contains(outputs[listCall], name) {
			t.Errorf("list_files output lacks %s:\n%s", name, outputs[listCall])
		}
	}
	for line := range strings.Lines(readme) {
		if line = strings.TrimSpace(line); line != "" && !strings.Contains(outputs[readCall], line) {
			t.Errorf("read_file output lacks README line %q:\n%s", line, outputs[readCall])
		}
	}
}

// responsesBody is a Responses API answer holding output items.
func responsesBody(id string, output ...string) string {
	return fmt.Sprintf(`{"id":%q,"object":"response","status":"completed","model":"gpt-test","output":[%s],`+
		`"usage":{"input_tokens":120,"output_tokens":30,"total_tokens":150}}`, id, strings.Join(output, ","))
}

func responsesCall(callID, name, args string) string {
	return fmt.Sprintf(`{"type":"function_call","id":"fc_%s","call_id":%q,"name":%q,"arguments":%q,"status":"completed"}`,
		callID, callID, name, args)
}

func responsesMessage(text string) string {
	return fmt.Sprintf(`{"type":"message","id":"msg_1","status":"completed","role":"assistant",`+
		`"content":[{"type":"output_text","text":%q,"annotations":[]}]}`, text)
}

// responsesScript is the Responses conversation of the acceptance test.
func responsesScript(t *testing.T) []modelStep {
	readme := demoReadme(t)
	return []modelStep{
		{
			check: func(t *testing.T, body []byte) {
				var req struct {
					Model string `json:"model"`
					Input []struct {
						Role    string `json:"role"`
						Content string `json:"content"`
					} `json:"input"`
					Tools []struct {
						Type string `json:"type"`
						Name string `json:"name"`
					} `json:"tools"`
				}
				if err := json.Unmarshal(body, &req); err != nil {
					t.Errorf("first request is not JSON: %v\n%s", err, body)
					return
				}
				if req.Model != "gpt-test" || len(req.Input) != 1 || req.Input[0].Role != "user" || req.Input[0].Content != demoPrompt {
					t.Errorf("first request: model %q, input %+v", req.Model, req.Input)
				}
				tools := map[string]bool{}
				for _, tool := range req.Tools {
					tools[tool.Type+":"+tool.Name] = true
				}
				if !tools["function:list_files"] || !tools["function:read_file"] {
					t.Errorf("first request offers tools %v", tools)
				}
			},
			body: responsesBody("resp_1",
				responsesCall(listCall, "list_files", `{"path":"."}`),
				responsesCall(readCall, "read_file", `{"path":"README.md"}`)),
		},
		{
			check: func(t *testing.T, body []byte) {
				var req struct {
					Input []struct {
						Type   string `json:"type"`
						CallID string `json:"call_id"`
						Output string `json:"output"`
					} `json:"input"`
				}
				if err := json.Unmarshal(body, &req); err != nil {
					t.Errorf("second request is not JSON: %v\n%s", err, body)
					return
				}
				calls, outputs := 0, map[string]string{}
				for _, it := range req.Input {
					switch it.Type {
					case "function_call":
						calls++
					case "function_call_output":
						outputs[it.CallID] = it.Output
					}
				}
				if calls != 2 {
					t.Errorf("second request carries %d function calls, want 2:\n%s", calls, body)
				}
				wantOutputs(t, outputs, readme)
			},
			body: responsesBody("resp_2", responsesMessage("All good.")),
		},
	}
}

// chatCompletion is a Chat Completions answer.
func chatCompletion(id, finish, message string) string {
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion","created":1,"model":"llama-test",`+
		`"choices":[{"index":0,"finish_reason":%q,"message":%s}],`+
		`"usage":{"prompt_tokens":90,"completion_tokens":12,"total_tokens":102}}`, id, finish, message)
}

func chatToolCall(id, name, args string) string {
	return fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}`, id, name, args)
}

// chatScript is the Chat Completions conversation of the acceptance test.
func chatScript(t *testing.T) []modelStep {
	readme := demoReadme(t)
	return []modelStep{
		{
			check: func(t *testing.T, body []byte) {
				var req struct {
					Model string `json:"model"`
					Tools []struct {
						Function struct {
							Name string `json:"name"`
						} `json:"function"`
					} `json:"tools"`
				}
				if err := json.Unmarshal(body, &req); err != nil {
					t.Errorf("first request is not JSON: %v\n%s", err, body)
					return
				}
				tools := map[string]bool{}
				for _, tool := range req.Tools {
					tools[tool.Function.Name] = true
				}
				if req.Model != "llama-test" || !tools["list_files"] || !tools["read_file"] {
					t.Errorf("first request: model %q, tools %v", req.Model, tools)
				}
			},
			body: chatCompletion("chatcmpl-1", "tool_calls", `{"role":"assistant","content":null,"tool_calls":[`+
				chatToolCall(listCall, "list_files", `{"path":"."}`)+","+
				chatToolCall(readCall, "read_file", `{"path":"README.md"}`)+`]}`),
		},
		{
			check: func(t *testing.T, body []byte) {
				var req struct {
					Messages []struct {
						Role       string `json:"role"`
						ToolCallID string `json:"tool_call_id"`
						Content    string `json:"content"`
						ToolCalls  []any  `json:"tool_calls"`
					} `json:"messages"`
				}
				if err := json.Unmarshal(body, &req); err != nil {
					t.Errorf("second request is not JSON: %v\n%s", err, body)
					return
				}
				calls, outputs := 0, map[string]string{}
				for _, m := range req.Messages {
					switch m.Role {
					case "assistant":
						calls += len(m.ToolCalls)
					case "tool":
						outputs[m.ToolCallID] = m.Content
					}
				}
				if calls != 2 {
					t.Errorf("second request carries %d tool calls, want 2:\n%s", calls, body)
				}
				wantOutputs(t, outputs, readme)
			},
			body: chatCompletion("chatcmpl-2", "stop", `{"role":"assistant","content":"All good."}`),
		},
	}
}

// anthropicMessage starts a Messages API answer; its usage reads cacheRead tokens from
// the prompt cache and writes cacheWrite to it.
func anthropicMessage(id string, cacheWrite, cacheRead int) *gatewaytest.Messages {
	return gatewaytest.NewMessages(id, gatewaytest.Usage{Input: 60, Output: 15, CacheCreation: cacheWrite, CacheRead: cacheRead})
}

// anthropicScript is the Messages API conversation of the acceptance test.
func anthropicScript(t *testing.T) []modelStep {
	readme := demoReadme(t)
	return []modelStep{
		{
			check: func(t *testing.T, body []byte) {
				var req struct {
					Model string `json:"model"`
					Tools []struct {
						Name string `json:"name"`
					} `json:"tools"`
				}
				if err := json.Unmarshal(body, &req); err != nil {
					t.Errorf("first request is not JSON: %v\n%s", err, body)
					return
				}
				tools := map[string]bool{}
				for _, tool := range req.Tools {
					tools[tool.Name] = true
				}
				if req.Model != "claude-test" || !tools["list_files"] || !tools["read_file"] {
					t.Errorf("first request: model %q, tools %v", req.Model, tools)
				}
			},
			messages: anthropicMessage("msg_1", 1500, 0).
				ToolUse(listCall, "list_files", `{"path":"."}`).
				ToolUse(readCall, "read_file", `{"path":`, `"README.md"}`).End("tool_use"),
		},
		{
			check: func(t *testing.T, body []byte) {
				var req struct {
					Messages []struct {
						Role    string `json:"role"`
						Content []struct {
							Type      string `json:"type"`
							ToolUseID string `json:"tool_use_id"`
							Content   []struct {
								Text string `json:"text"`
							} `json:"content"`
						} `json:"content"`
					} `json:"messages"`
				}
				if err := json.Unmarshal(body, &req); err != nil {
					t.Errorf("second request is not JSON: %v\n%s", err, body)
					return
				}
				calls, outputs := 0, map[string]string{}
				for _, m := range req.Messages {
					for _, c := range m.Content {
						switch c.Type {
						case "tool_use":
							calls++
						case "tool_result":
							for _, p := range c.Content {
								outputs[c.ToolUseID] += p.Text
							}
						}
					}
				}
				if calls != 2 {
					t.Errorf("second request carries %d tool_use blocks, want 2:\n%s", calls, body)
				}
				wantOutputs(t, outputs, readme)
			},
			messages: anthropicMessage("msg_2", 0, 1500).Text("All", " good.").End("end_turn"),
		},
	}
}

// The acceptance: run -model openai:... (and chat:..., anthropic:...) against
// a server speaking the API works end to end from the command line.
func TestRunAgainstModelServer(t *testing.T) {
	t.Parallel()
	// The run calls no command, so it needs no sandbox. Where there is none (no bwrap), the
	// embedded node says run_command will refuse every call; stderr holds that line alone.
	var wantStderr string
	if err := computer.CheckSandbox(computer.Config{}); err != nil {
		wantStderr = fmt.Sprintf("error: run_command will refuse every call: %v (node=cli)\n", err)
	}
	for _, tc := range []struct {
		name  string
		model string
		path  string
		steps func(*testing.T) []modelStep
		json  bool
		args  []string
	}{
		{"responses", "openai:gpt-test", "/v1/responses", responsesScript, false, nil},
		{"responses json", "openai:gpt-test", "/v1/responses", responsesScript, true, nil},
		{"chat", "chat:llama-test", "/v1/chat/completions", chatScript, false, nil},
		{"chat json", "chat:llama-test", "/v1/chat/completions", chatScript, true, nil},
		{"anthropic", "anthropic:claude-test", "/v1/messages", anthropicScript, false, nil},
		{"anthropic json", "anthropic:claude-test", "/v1/messages", anthropicScript, true, nil},
		// The same conversation unstreamed: the server answers it as one JSON message.
		{"anthropic unstreamed", "anthropic:claude-test", "/v1/messages", anthropicScript, false, []string{"-stream=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each run starts an embedded bus of its own
			// Every step streams, but with -stream=false.
			steps, streams := tc.steps(t), !slices.Contains(tc.args, "-stream=false")
			for i, step := range steps {
				steps[i].check = func(t *testing.T, body []byte) {
					var req struct {
						Stream bool `json:"stream"`
					}
					if err := json.Unmarshal(body, &req); err != nil || req.Stream != streams {
						t.Errorf("request %d: stream %v (%v), want %v", i+1, req.Stream, err, streams)
					}
					if step.check != nil {
						step.check(t, body)
					}
				}
			}
			srv := newModelServer(t, tc.path, steps...)
			base := srv.baseURL()
			if strings.HasPrefix(tc.model, "anthropic:") {
				// The Messages API's root is the host: the SDK asks for v1/messages.
				base, srv.authHeader, srv.auth = srv.srv.URL, "X-Api-Key", fakeKey
			}
			args := append([]string{"run", "-model", tc.model, "-base-url", base, "-home", demoHome}, tc.args...)
			if tc.json {
				args = append(args, "-json")
			}
			e := testEnv(map[string]string{gateway.EnvModelAPIKey: fakeKey}, "")
			code, stdout, stderr := cliEnv(testContext(t), e, append(args, demoPrompt)...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
			}
			if n := srv.requests(); n != 2 {
				t.Errorf("the server got %d requests, want 2", n)
			}
			if strings.Contains(stdout, fakeKey) || strings.Contains(stderr, fakeKey) {
				t.Errorf("the API key was printed:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
			if stderr != wantStderr {
				t.Errorf("stderr: %s", stderr)
			}
			if tc.json {
				checkTranscript(t, stdout)
				return
			}
			for _, want := range []string{
				"→ Listing the home directory\n",
				"✓ Listed 4 entries in the home directory (",
				"✓ Read 8 lines of README.md (",
				"\nAll good.\n",
				"completed · 2 steps · 2 calls · ",
			} {
				if !strings.Contains(stdout, want) {
					t.Errorf("output lacks %q:\n%s", want, stdout)
				}
			}
			if strings.HasPrefix(tc.model, "anthropic:") {
				if want := "3120 tokens in, 30 out (cache: 1500 written, 1500 read)"; !strings.Contains(stdout, want) {
					t.Errorf("the turn summary lacks %q:\n%s", want, stdout)
				}
			}
		})
	}
}

// checkTranscript checks what run -json printed: a completed turn whose two
// calls have their outputs, ending with the model's answer.
func checkTranscript(t *testing.T, stdout string) {
	t.Helper()
	var out client.RunOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("stdout is not the JSON transcript: %v\n%s", err, stdout)
	}
	if out.Status.State != bus.TurnCompleted || out.Status.Step != 2 || len(out.Status.Calls) != 2 || out.Status.Text != "All good." {
		t.Errorf("status %+v", out.Status)
	}
	names, outputs := map[string]string{}, map[string]toolbus.Item{}
	for _, it := range out.Transcript {
		switch it.Kind {
		case toolbus.KindFunctionCall:
			names[it.CallID] = it.Name
		case toolbus.KindCallOutput:
			outputs[it.CallID] = it
		}
	}
	if names[listCall] != "list_files" || names[readCall] != "read_file" {
		t.Errorf("transcript calls %v", names)
	}
	for id := range names {
		if o, ok := outputs[id]; !ok || o.IsError || len(o.Output) == 0 {
			t.Errorf("call %s: output %+v", id, o)
		}
	}
	if n := len(out.Transcript); n == 0 || out.Transcript[n-1].Kind != toolbus.KindMessage || out.Transcript[n-1].Text != "All good." {
		t.Errorf("transcript does not end with the answer: %+v", out.Transcript)
	}
}

// A refused key ends the run at once: one request, no retry, exit 1, and a
// message naming the status, with the key the server echoed removed.
func TestRunModelServerRefusesKey(t *testing.T) {
	t.Parallel()
	refused := modelStep{
		status: http.StatusUnauthorized,
		body:   `{"error":{"message":"Incorrect API key provided: ` + fakeKey + `.","type":"invalid_request_error","code":"invalid_api_key"}}`,
	}
	for _, tc := range []struct {
		model string
		path  string
	}{
		{"openai:gpt-test", "/v1/responses"},
		{"chat:llama-test", "/v1/chat/completions"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			srv := newModelServer(t, tc.path, refused)
			e := testEnv(map[string]string{gateway.EnvModelAPIKey: fakeKey}, "")
			code, stdout, stderr := cliEnv(testContext(t), e, "run", "-model", tc.model, "-base-url", srv.baseURL(), "-home", demoHome, demoPrompt)
			if code != exitFailed {
				t.Fatalf("exit %d, want %d; stderr:\n%s\nstdout:\n%s", code, exitFailed, stderr, stdout)
			}
			if n := srv.requests(); n != 1 {
				t.Errorf("the server got %d requests, want 1: a refused key is not retried", n)
			}
			for _, want := range []string{"toolbus: turn failed: ", "HTTP 401", "the API key was refused (check TOOLBUS_MODEL_API_KEY or the -api-key-file)", "Incorrect API key provided: [redacted]."} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if strings.Contains(stdout, fakeKey) || strings.Contains(stderr, fakeKey) {
				t.Errorf("the API key was printed:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
		})
	}
}

func TestGatewayConfig(t *testing.T) {
	t.Parallel()
	vars := map[string]string{gateway.EnvAPIKey: fakeKey, gateway.EnvBaseURL: "http://env.example/v1"}
	getenv := func(k string) string { return vars[k] }
	for _, tc := range []struct {
		baseURL, wantURL string
		hosted           bool
	}{
		{"", "http://env.example/v1", false},
		{"http://localhost:11434/v1", "http://localhost:11434/v1", true},
	} {
		got, err := (&node.GatewayFlags{BaseURL: tc.baseURL, HostedSearch: tc.hosted}).ConfigFrom(getenv)
		if err != nil {
			t.Fatal(err)
		}
		if got.OpenAIKey != fakeKey || got.BaseURL != tc.wantURL || got.HostedToolSearch != tc.hosted {
			t.Errorf("GatewayFlags.ConfigFrom(%q, %v): key set %v, base URL %q, hosted %v; want %q, %v",
				tc.baseURL, tc.hosted, got.OpenAIKey == fakeKey, got.BaseURL, got.HostedToolSearch, tc.wantURL, tc.hosted)
		}
	}
}

// OPENAI_API_KEY goes only to OpenAI: a server at another -base-url gets no
// key, or the one -api-key-file (or TOOLBUS_MODEL_API_KEY) gives it.
func TestRunModelServerKeyScope(t *testing.T) {
	t.Parallel()
	const openAIKey = "sk-openai-never-local-3c2b1a09"
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(fakeKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	answer := modelStep{body: chatCompletion("chatcmpl-1", "stop", `{"role":"assistant","content":"Hello."}`)}
	for _, tc := range []struct {
		name string
		args []string
		env  string // TOOLBUS_MODEL_API_KEY
		auth string
	}{
		{"OpenAI's key withheld", nil, "", ""},
		{"key file", []string{"-api-key-file", keyFile}, "", "Bearer " + fakeKey},
		{"key file over the variable", []string{"-api-key-file", keyFile}, "sk-env-overridden-77", "Bearer " + fakeKey},
		{"the endpoint's variable", nil, fakeKey, "Bearer " + fakeKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := testEnv(map[string]string{gateway.EnvAPIKey: openAIKey, gateway.EnvModelAPIKey: tc.env}, "")
			srv := newModelServer(t, "/v1/chat/completions", answer)
			srv.auth = tc.auth
			args := append([]string{"run", "-model", "chat:llama-test", "-base-url", srv.baseURL(), "-home", demoHome}, tc.args...)
			code, stdout, stderr := cliEnv(testContext(t), e, append(args, demoPrompt)...)
			if code != exitOK || srv.requests() != 1 {
				t.Fatalf("exit %d after %d requests; stderr:\n%s\nstdout:\n%s", code, srv.requests(), stderr, stdout)
			}
			for _, key := range []string{openAIKey, fakeKey} {
				if strings.Contains(stdout+stderr, key) {
					t.Errorf("a key was printed:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
				}
			}
		})
	}
}

// A model endpoint that never answers ends the turn after -request-timeout
// per attempt, with an error that says so, instead of waiting in silence.
func TestRunModelServerSilent(t *testing.T) {
	// Parallel with a timeout of a second, not 50 ms: beside the package's other tests,
	// under -race, an attempt of 50 ms missed the server (a failure, and attempts.Wait
	// hung), so the test was serial, its 1.7 s (the retries' backoff) added to the
	// package's time. A second costs 3 s more, while the other tests run.
	t.Parallel()
	const timeout = "1s"
	var attempts sync.WaitGroup
	attempts.Add(1 + gateway.DefaultMaxRetries)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read to the end: only then does the server notice the client hang up.
		_, _ = io.Copy(io.Discard, r.Body)
		attempts.Done()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	code, stdout, stderr := cli(testContext(t), "run", "-model", "chat:llama-test", "-base-url", srv.URL+"/v1",
		"-request-timeout", timeout, "-home", demoHome, demoPrompt)
	if code != exitFailed {
		t.Fatalf("exit %d, want %d; stderr:\n%s\nstdout:\n%s", code, exitFailed, stderr, stdout)
	}
	attempts.Wait() // exactly three attempts reached the server (a fourth would panic)
	// Each attempt is logged as it fails; the last line says how the turn ended.
	want := fmt.Sprintf("\ntoolbus: turn failed: model failed: model step 1: chat: no answer from %s/v1 within %s (3 attempts)\n", srv.URL, timeout)
	if !strings.HasSuffix(stderr, want) || strings.Count(stderr, "model request failed") != 3 {
		t.Errorf("stderr:\n%s\nwant three failed attempts, then:%s", stderr, want)
	}
}

// ANTHROPIC_API_KEY goes only to Anthropic and to the ANTHROPIC_BASE_URL it is set
// with: a server at another -base-url gets no key, or the one -api-key-file (or
// TOOLBUS_MODEL_API_KEY) gives it, always as x-api-key; OPENAI_BASE_URL is not the
// endpoint of an anthropic: model.
func TestRunAnthropicKeyScope(t *testing.T) {
	t.Parallel()
	const anthropicKey = "sk-ant-never-local-7d6c5b4a"
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(fakeKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	answer := modelStep{messages: anthropicMessage("msg_1", 0, 0).Text("Hello.").End("end_turn")}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		baseURL bool // -base-url names the server
		key     string
	}{
		{"ANTHROPIC_API_KEY withheld", nil, nil, true, ""},
		{"key file", []string{"-api-key-file", keyFile}, nil, true, fakeKey},
		{"the endpoint's variable", nil, map[string]string{gateway.EnvModelAPIKey: fakeKey}, true, fakeKey},
		{"ANTHROPIC_BASE_URL with its key", nil, map[string]string{gateway.EnvAnthropicBaseURL: "SERVER"}, false, anthropicKey},
		{"OPENAI_BASE_URL beside it", nil, map[string]string{gateway.EnvAnthropicBaseURL: "SERVER", gateway.EnvBaseURL: "http://openai.invalid/v1"}, false, anthropicKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newModelServer(t, "/v1/messages", answer)
			srv.authHeader, srv.auth = "X-Api-Key", tc.key
			vars := map[string]string{gateway.EnvAnthropicKey: anthropicKey}
			for k, v := range tc.env {
				vars[k] = strings.ReplaceAll(v, "SERVER", srv.srv.URL)
			}
			args := []string{"run", "-model", "anthropic:claude-test", "-home", demoHome}
			if tc.baseURL {
				args = append(args, "-base-url", srv.srv.URL)
			}
			code, stdout, stderr := cliEnv(testContext(t), testEnv(vars, ""), append(append(args, tc.args...), demoPrompt)...)
			if code != exitOK || srv.requests() != 1 {
				t.Fatalf("exit %d after %d requests; stderr:\n%s\nstdout:\n%s", code, srv.requests(), stderr, stdout)
			}
			for _, key := range []string{anthropicKey, fakeKey} {
				if strings.Contains(stdout+stderr, key) {
					t.Errorf("a key was printed:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
				}
			}
		})
	}
}
