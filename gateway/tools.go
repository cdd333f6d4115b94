package gateway

import (
	"cmp"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/toolbus/toolbus"
)

// emptyParams stands in for a tool built without a schema.
var emptyParams = json.RawMessage(`{"type":"object","properties":{}}`)

// toolParams returns the parameter schema a tool is sent with and whether it is sent
// strict: the strict projection for Strict tools whose schema allows one, otherwise the
// schema exactly as the tool gave it.
func toolParams(t *toolbus.Spec, warn *fallbackLog) (json.RawMessage, bool) {
	if t.Params == nil {
		return emptyParams, false
	}
	if t.Strict {
		p := t.Params.Strict()
		if p.Err == nil {
			return p.JSON, true
		}
		warn.once(t.Name, p.Err)
	}
	return t.Params.JSON(), false
}

// fallbackLog says once per tool that a Strict tool went out non-strict, so a turn of
// forty steps does not log it forty times. A nil *fallbackLog logs nothing.
type fallbackLog struct {
	log  *slog.Logger
	seen sync.Map // tool name -> struct{}
}

func (f *fallbackLog) once(tool string, err error) {
	if f == nil {
		return
	}
	if _, dup := f.seen.LoadOrStore(tool, struct{}{}); dup {
		return
	}
	f.log.Warn("strict tool sent non-strict: its schema cannot be made strict",
		slog.String("tool", tool), slog.String("reason", err.Error()))
}

// toolSearchName is the function a Chat gateway offers for its software tool search; the
// Responses gateway uses the provider's own tool_search tool instead.
const toolSearchName = "tool_search"

// toolSearchDescription is shown to the model with a client-executed tool search.
const toolSearchDescription = "Load deferred tools before calling them. Search by tool name, namespace or words from " +
	"their descriptions; the matching tools become callable for the rest of the turn."

// toolSearchParams is the argument schema of a client-executed tool search.
var toolSearchParams = json.RawMessage(`{"type":"object","properties":{"query":{"type":"string",` +
	`"description":"Tool names, a namespace, or words describing the task"}},"required":["query"],"additionalProperties":false}`)

// maxSearchResults bounds how many tools one search loads.
const maxSearchResults = 8

// maxSearchRounds bounds how often one Respond answers tool searches and asks again.
const maxSearchRounds = 4

// hasDeferred reports whether any tool waits behind tool search.
func hasDeferred(tools []*toolbus.Spec) bool {
	return slices.ContainsFunc(tools, func(t *toolbus.Spec) bool { return t.DeferLoading })
}

// searchDeferred answers a tool search: the deferred tools the query names (by tool name
// or namespace), or when it names none, those sharing most words with the query; best
// first and in tool-set order among equals, at most maxSearchResults.
func searchDeferred(tools []*toolbus.Spec, query string) []*toolbus.Spec {
	words := searchWords(query)
	if len(words) == 0 {
		return nil
	}
	type hit struct {
		tool  *toolbus.Spec
		score int
		order int
	}
	var named, similar []hit
	for i, t := range tools {
		if !t.DeferLoading {
			continue
		}
		exact, overlap := 0, 0
		have := make(map[string]bool)
		for _, s := range []string{t.Name, t.Namespace, t.Description, t.NamespaceDescription} {
			for _, w := range searchWords(s) {
				have[w] = true
			}
		}
		for _, w := range words {
			switch {
			case strings.EqualFold(w, t.Name):
				exact += 2
			case t.Namespace != "" && strings.EqualFold(w, t.Namespace):
				exact++
			}
			if have[w] {
				overlap++
			}
		}
		switch {
		case exact > 0:
			named = append(named, hit{t, exact, i})
		case overlap > 0:
			similar = append(similar, hit{t, overlap, i})
		}
	}
	hits := similar
	if len(named) > 0 {
		// A query that names tools or namespaces wants those, not look-alikes.
		hits = named
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.order, b.order)
	})
	found := make([]*toolbus.Spec, 0, min(len(hits), maxSearchResults))
	for _, h := range hits[:min(len(hits), maxSearchResults)] {
		found = append(found, h.tool)
	}
	return found
}

// searchWords splits text into lower-case words of two or more letters or digits;
// "list_open_orders" gives "list_open_orders", "list", "open", "order", so a query can
// name a tool whole or in part.
func searchWords(s string) []string {
	var words []string
	for _, field := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '-'
	}) {
		parts := strings.FieldsFunc(field, func(r rune) bool { return r == '_' || r == '-' })
		if len(parts) > 1 {
			words = append(words, field)
		}
		for _, p := range parts {
			if len(p) > 1 && !stopWords[p] {
				words = append(words, stem(p))
			}
		}
	}
	return words
}

// stem drops a plural s, so "orders" finds "order"; both sides of a comparison are
// stemmed alike, so "address" becoming "addres" is harmless.
func stem(w string) string {
	if len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") {
		return w[:len(w)-1]
	}
	return w
}

// stopWords carry no meaning in a tool search.
var stopWords = map[string]bool{
	"a": true, "an": true, "and": true, "the": true, "to": true, "of": true, "for": true, "in": true,
	"on": true, "or": true, "by": true, "with": true, "is": true, "it": true, "tool": true, "tools": true,
	"find": true, "search": true, "load": true, "use": true, "me": true, "my": true, "that": true, "this": true,
}

// searchQuery reads the text of a tool search's arguments. The model usually sends
// {"query": "..."}, but hosted-style arguments such as {"paths": ["crm"]} or
// {"goal": "..."} are read too: every string in the arguments joins the query.
func searchQuery(args json.RawMessage) string {
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		// Not JSON: search the text itself.
		return string(args)
	}
	var parts []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			parts = append(parts, v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(v[k])
			}
		}
	}
	walk(v)
	return strings.Join(parts, " ")
}

// findTool finds a tool by namespace ("" for none) and name.
func findTool(set []*toolbus.Spec, namespace, name string) *toolbus.Spec {
	for _, t := range set {
		if t.Name == name && t.Namespace == namespace {
			return t
		}
	}
	return nil
}

// callNamespaces maps the call id of every function call in input to its namespace, for
// outputs that do not carry the namespace themselves.
func callNamespaces(input []toolbus.Item) map[string]string {
	ns := make(map[string]string)
	for _, it := range input {
		if it.Kind == toolbus.KindFunctionCall && it.Namespace != "" {
			ns[it.CallID] = it.Namespace
		}
	}
	return ns
}

// outputText joins the text parts of a call output. Images are named, not dropped
// silently, on wires that carry only text.
func outputText(parts []toolbus.ContentPart) string {
	var b strings.Builder
	for _, p := range parts {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		switch p.Type {
		case toolbus.ContentText:
			b.WriteString(p.Text)
		case toolbus.ContentImage:
			b.WriteString("[image " + cmp.Or(p.MediaType, p.URL) + " not shown: this endpoint takes text only]")
		}
	}
	return b.String()
}
