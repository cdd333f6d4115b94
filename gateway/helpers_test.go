package gateway_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/testmain"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the requests the fake servers receive")

// parallelTests: most of the tests' time is the SDKs' backoff between attempts; the
// package took 5.5 s at go test's default (2 here) and 4.3 s at 8.
const parallelTests = 8

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{Parallel: parallelTests})
}

// testKey is the API key of every test; no item, error or log line may contain it.
const testKey = "sk-test-7f3a9c1e5b2d4086aa51"

// exchange is one scripted answer of a fake API server.
type exchange struct {
	status int // 0 means 200
	body   string
	header map[string]string
	// hang holds the request until the client gives up.
	hang bool
	// drop closes the connection without an answer: a network error.
	drop bool
}

// received is one request a fake API server got.
type received struct {
	at     time.Time
	path   string
	header http.Header
	body   []byte
}

// fakeAPI is an httptest server that answers each request with the next exchange of its
// script and records what it received.
type fakeAPI struct {
	t      *testing.T
	srv    *httptest.Server
	script []exchange
	// arrived receives each request's index as it arrives.
	arrived chan int

	mu  sync.Mutex
	got []received
}

func newFakeAPI(t *testing.T, script ...exchange) *fakeAPI {
	t.Helper()
	f := &fakeAPI{t: t, script: script, arrived: make(chan int, 64)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		// The client went away while it sent the body: an attempt whose timeout fired
		// first (TestRequestTimeoutRetriedThenReported on a loaded machine). It arrived all
		// the same; what it sent is checked where it matters.
		f.t.Logf("request %s: the client left while sending the body: %v", r.URL.Path, err)
	case err != nil:
		f.t.Errorf("read request body: %v", err)
	}
	f.mu.Lock()
	n := len(f.got)
	f.got = append(f.got, received{at: time.Now(), path: r.URL.Path, header: r.Header.Clone(), body: body})
	f.mu.Unlock()
	f.arrived <- n
	if n >= len(f.script) {
		f.t.Errorf("unexpected request %d to %s", n+1, r.URL.Path)
		http.Error(w, `{"error":{"message":"unexpected request"}}`, http.StatusBadRequest)
		return
	}
	ex := f.script[n]
	switch {
	case ex.hang:
		<-r.Context().Done()
		return
	case ex.drop:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			f.t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	for k, v := range ex.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(cmp.Or(ex.status, http.StatusOK))
	io.WriteString(w, ex.body)
}

// requests returns what the server received so far.
func (f *fakeAPI) requests() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.got...)
}

// body decodes request i.
func (f *fakeAPI) body(i int) map[string]any {
	f.t.Helper()
	reqs := f.requests()
	if i >= len(reqs) {
		f.t.Fatalf("request %d: only %d received", i, len(reqs))
	}
	var v map[string]any
	if err := json.Unmarshal(reqs[i].body, &v); err != nil {
		f.t.Fatalf("request %d is not JSON: %v\n%s", i, err, reqs[i].body)
	}
	return v
}

// config points a gateway at the fake server, logging into logs.
func (f *fakeAPI) config(logs io.Writer) gateway.Config {
	return gateway.Config{
		APIKey:     testKey,
		BaseURL:    f.srv.URL + "/v1",
		HTTPClient: f.srv.Client(),
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// checkGolden compares a request body, indented, with testdata/NAME.golden.json.
func checkGolden(t *testing.T, name string, body []byte) {
	t.Helper()
	var got bytes.Buffer
	if err := json.Indent(&got, body, "", "  "); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, body)
	}
	got.WriteByte('\n')
	path := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("request body differs from %s (go test -update rewrites it)\ngot:\n%s", path, got.Bytes())
	}
}

// compact returns raw without insignificant whitespace, as it travels on the wire.
func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %s: %v", raw, err)
	}
	return b.String()
}

// noKey fails the test if any of the texts holds the API key.
func noKey(t *testing.T, what string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if strings.Contains(s, testKey) {
			t.Errorf("%s contains the API key: %s", what, s)
		}
	}
}

// noKeyInResponse checks every field of a response, raw items included.
func noKeyInResponse(t *testing.T, r *gateway.Response) {
	t.Helper()
	if r == nil {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	noKey(t, "response", string(b))
}

func execNothing(context.Context, toolbus.Call, map[string]any) (toolbus.Result, error) {
	return toolbus.TextResult("ok"), nil
}

// rawTool defines a tool from a raw JSON Schema.
func rawTool(t *testing.T, d toolbus.Def[map[string]any]) *toolbus.Spec {
	t.Helper()
	d.Category = cmp.Or(d.Category, "test")
	d.Execute = execNothing
	tool, err := toolbus.Define(d)
	if err != nil {
		t.Fatalf("define %s: %v", d.Name, err)
	}
	return &tool.Spec
}

// Schemas of the test tools. limitsSchema keeps its key order and number spellings
// (1.50, 1e3) and HTML-like characters, which must reach the server unchanged.
const (
	readFileSchema = `{"type":"object","properties":{"path":{"type":"string","description":"file to read"},` +
		`"limit":{"type":"integer","minimum":1}},"required":["path"]}`
	limitsSchema = `{"type": "object", "required": ["max"], "properties": {"max": {"type": "number", ` +
		`"minimum": 1.50, "maximum": 1e3}, "pattern": {"type": "string", "pattern": "^<[a-z]+&>$"}}}`
	// uniqueItems has no strict-mode equivalent, so a Strict tool with it goes out non-strict.
	tagsSchema = `{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},"uniqueItems":true}},"required":["tags"]}`
	idSchema   = `{"type":"object","properties":{"customer_id":{"type":"string"}},"required":["customer_id"],"additionalProperties":false}`
	etaSchema  = `{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"],"additionalProperties":false}`
)

// testTools is a tool set using every feature the gateways translate.
func testTools(t *testing.T) []*toolbus.Spec {
	t.Helper()
	const crm = "CRM tools for customer lookup and order management."
	return []*toolbus.Spec{
		rawTool(t, toolbus.Def[map[string]any]{Spec: toolbus.Spec{Name: "read_file", Description: "Read a file.", Strict: true}, Schema: json.RawMessage(readFileSchema)}),
		rawTool(t, toolbus.Def[map[string]any]{Spec: toolbus.Spec{Name: "set_limits", Description: "Set limits."}, Schema: json.RawMessage(limitsSchema)}),
		rawTool(t, toolbus.Def[map[string]any]{Spec: toolbus.Spec{Name: "tag", Description: "Tag things.", Strict: true}, Schema: json.RawMessage(tagsSchema)}),
		rawTool(t, toolbus.Def[map[string]any]{Spec: toolbus.Spec{Name: "get_customer", Description: "Fetch a customer profile by customer ID.", Strict: true, Namespace: "crm", NamespaceDescription: crm},
			Schema: json.RawMessage(idSchema)}),
		rawTool(t, toolbus.Def[map[string]any]{Spec: toolbus.Spec{Name: "list_open_orders", Description: "List open orders for a customer ID.", Strict: true, Namespace: "crm", NamespaceDescription: crm, DeferLoading: true},
			Schema: json.RawMessage(idSchema)}),
		rawTool(t, toolbus.Def[map[string]any]{Spec: toolbus.Spec{Name: "get_shipping_eta", Description: "Look up shipping ETA details for an order.", DeferLoading: true},
			Schema: json.RawMessage(etaSchema)}),
	}
}

// toolByName finds a test tool.
func toolByName(t *testing.T, tools []*toolbus.Spec, name string) *toolbus.Spec {
	t.Helper()
	for _, tool := range tools {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

// jsonPath walks decoded JSON: keys for objects, ints for arrays.
func jsonPath(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %q: not an object: %v", p, v)
			}
			v = m[p]
		case int:
			a, ok := v.([]any)
			if !ok || p >= len(a) {
				t.Fatalf("at [%d]: not an array that long: %v", p, v)
			}
			v = a[p]
		}
	}
	return v
}

// outputItem is a function_call_output for call id.
func outputItem(id, text string) toolbus.Item {
	return toolbus.Item{Kind: toolbus.KindCallOutput, CallID: id, Output: []toolbus.ContentPart{toolbus.Text(text)}}
}

// outputsFor answers every call of a response, as a turn would.
func outputsFor(r *gateway.Response) []toolbus.Item {
	var out []toolbus.Item
	for _, c := range r.Calls() {
		out = append(out, outputItem(c.CallID, "result of "+c.Name))
	}
	return out
}

// kinds lists the kinds of items.
func kinds(items []toolbus.Item) []toolbus.ItemKind {
	out := make([]toolbus.ItemKind, len(items))
	for i, it := range items {
		out[i] = it.Kind
	}
	return out
}

// toolbusDef is a minimal definition of a tool without parameters.
func toolbusDef(name string) toolbus.Def[map[string]any] {
	return toolbus.Def[map[string]any]{Spec: toolbus.Spec{Name: name}, Schema: json.RawMessage(`{"type":"object","properties":{}}`)}
}
