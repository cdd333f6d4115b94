package brain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus/bustest"
)

// call runs one tool of Tools(s) as agent, with arguments validated against its schema
// as a host does.
func call(t testing.TB, s *Store, agent, name string, args any) (toolbus.Result, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range Tools(s) {
		if tool.Name != name {
			continue
		}
		if err := tool.Params.Validate(raw); err != nil {
			return toolbus.Result{}, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return tool.Execute(ctx, toolbus.Call{Turn: "t1", ID: "c1", Tool: name, Agent: agent, Args: raw, Progress: func(string) {}})
	}
	t.Fatalf("no tool %s", name)
	return toolbus.Result{}, nil
}

func toolNamed(name string) *toolbus.Tool {
	for _, tool := range Tools(nil) {
		if tool.Name == name {
			return tool
		}
	}
	return nil
}

var readOnMark = regexp.MustCompile(`\[The page goes on: call get_page with id "([^"]+)" and offset (\d+) to read on\.\]$`)

// TestGetPagePaging reads long pages, inline and in the object store, part by part as
// the model would: following the offset each part names, the parts join into the text,
// none longer than PageChunk, each cut at a line break or a character boundary.
func TestGetPagePaging(t *testing.T) {
	t.Parallel()
	b := startBus(t)
	s := b.store(t, "brain", Options{})
	ctx := testContext(t)
	for _, tc := range []struct {
		id   string
		text string
	}{
		{"short", "One line only."},
		{"inline", largeText(InlineMax / 2)},                // several parts, kept in the KV
		{"object", largeText(2*InlineMax + 333)},            // several parts, kept in the object store
		{"no-lines", strings.Repeat("東京🚀a", PageChunk/4+7)}, // cut at character boundaries
	} {
		t.Run(tc.id, func(t *testing.T) {
			if _, err := s.Put(ctx, "ann", Page{ID: tc.id, Title: "Long " + tc.id, Text: tc.text}); err != nil {
				t.Fatal(err)
			}
			var (
				joined strings.Builder
				offset int
				parts  int
			)
			for {
				res, err := call(t, s, "ann", "get_page", map[string]any{"id": tc.id, "offset": offset})
				if err != nil {
					t.Fatal(err)
				}
				parts++
				var d Excerpt
				if err := json.Unmarshal(res.Details, &d); err != nil {
					t.Fatal(err)
				}
				body := res.Text()
				header, rest, ok := strings.Cut(body, "\n\n")
				if !ok || !strings.HasPrefix(header, "Page "+tc.id+": Long "+tc.id) {
					t.Fatalf("part %d: %q", parts, body[:min(len(body), 200)])
				}
				if d.Text != "" {
					t.Errorf("part %d: the details repeat the text", parts)
				}
				if d.End-d.Offset > len(rest) {
					t.Fatalf("part %d: details %+v, %d bytes of text", parts, d, len(rest))
				}
				text, after := rest[:d.End-d.Offset], rest[d.End-d.Offset:]
				if m := readOnMark.FindStringSubmatch(after); m != nil {
					if sep := after[:len(after)-len(m[0])]; sep != "\n" && sep != "\n\n" || !strings.HasSuffix(text+sep, "\n\n") {
						t.Errorf("part %d: %q between the text and the note", parts, sep)
					}
					if m[1] != tc.id || m[2] != fmt.Sprint(d.NextOffset) {
						t.Errorf("part %d says read on at %s %s; details say %d", parts, m[1], m[2], d.NextOffset)
					}
				} else if d.NextOffset != 0 || after != "" {
					t.Errorf("part %d: details say read on at %d; after the text: %q", parts, d.NextOffset, after)
				}
				if len(text) > PageChunk || !utf8.ValidString(text) || d.Offset != offset || d.End != offset+len(text) || d.Size != len(tc.text) {
					t.Fatalf("part %d: %d bytes, details %+v", parts, len(text), d)
				}
				if d.NextOffset != 0 && strings.Contains(tc.text, "\n") && !strings.HasSuffix(text, "\n") {
					t.Errorf("part %d does not end at a line break", parts)
				}
				joined.WriteString(text)
				if d.NextOffset == 0 {
					break
				}
				offset = d.NextOffset
			}
			if joined.String() != tc.text {
				t.Errorf("the parts join into %d bytes, want the %d of the page", joined.Len(), len(tc.text))
			}
			if want := (len(tc.text) + PageChunk - 1) / PageChunk; parts < want || parts > 2*want {
				t.Errorf("%d parts for %d bytes", parts, len(tc.text))
			}
		})
	}

	// An offset inside a character starts at the next one; one past the end is refused.
	res, err := call(t, s, "ann", "get_page", map[string]any{"id": "no-lines", "offset": 1})
	if err != nil {
		t.Fatal(err)
	}
	var d Excerpt
	_ = json.Unmarshal(res.Details, &d)
	if d.Offset != 3 {
		t.Errorf("offset 1 (inside 東) starts at %d, want 3", d.Offset)
	}
	for _, tc := range []struct {
		args any
		want string
	}{
		{map[string]any{"id": "short", "offset": 14}, "offset 14 is past the end of page short, which holds 14 bytes"},
		{map[string]any{"id": "gone"}, "page gone: no such page"},
		{map[string]any{"id": "a.b"}, `page id "a.b" has '.'`},
		{map[string]any{"id": "short", "offset": -1}, "offset"},
	} {
		if _, err := call(t, s, "ann", "get_page", tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("get_page %v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// Pages are per agent.
	if _, err := call(t, s, "bob", "get_page", map[string]any{"id": "short"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("bob reads ann's page: %v", err)
	}
}

// TestIndexFollowsChanges writes pages through another connection (as another node or
// the command line does) after the reader's index was built: each write, replace and
// delete shows up in the reader's recalls.
func TestIndexFollowsChanges(t *testing.T) {
	t.Parallel()
	b := startBus(t)
	reader := b.store(t, "reader", Options{MaxIndexedBytes: 2000})
	writer := b.store(t, "writer", Options{})
	ctx := testContext(t)
	if _, err := writer.Create(ctx, "ann", Page{ID: "first", Title: "First", Text: "Nothing of note."}); err != nil {
		t.Fatal(err)
	}
	hits := func(q string) []string {
		r, err := reader.Recall(ctx, "ann", Query{Text: q})
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(r.Hits))
		for i, h := range r.Hits {
			ids[i] = h.ID
		}
		return ids
	}
	expect := func(q string, want ...string) {
		t.Helper()
		bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if got := hits(q); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				return fmt.Errorf("recall %q: %v, want %v", q, got, want)
			}
			return nil
		})
	}
	expect("zeppelin") // builds the index: nothing yet
	if _, err := writer.Create(ctx, "ann", Page{ID: "ship", Title: "Airships", Text: "The zeppelin landed at noon."}); err != nil {
		t.Fatal(err)
	}
	expect("zeppelin", "ship")
	if _, err := writer.Put(ctx, "ann", Page{ID: "ship", Title: "Airships", Text: "The blimp landed at noon."}); err != nil {
		t.Fatal(err)
	}
	expect("blimp", "ship")
	expect("zeppelin")
	// A large page, its text in the object store: its first MaxIndexedBytes are
	// searched, the rest is not.
	text := "gondola " + largeText(InlineMax) + " hangar"
	if _, err := writer.Create(ctx, "ann", Page{ID: "big", Title: "Big", Text: text}); err != nil {
		t.Fatal(err)
	}
	expect("gondola", "big")
	expect("hangar")
	if err := writer.Delete(ctx, "ann", "ship"); err != nil {
		t.Fatal(err)
	}
	expect("blimp")
	// Another agent's pages never reach ann's index.
	if _, err := writer.Create(ctx, "bob", Page{ID: "ship", Title: "Bob's airship", Text: "blimp"}); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Create(ctx, "ann", Page{ID: "marker", Title: "Marker", Text: "lighthouse"}); err != nil {
		t.Fatal(err)
	}
	expect("lighthouse", "marker") // written after bob's page, so the watch has passed it
	expect("blimp")
	if rev, ok := reader.indexed("ann"); !ok || rev == 0 {
		t.Errorf("the reader holds ann's index up to revision %d (%v)", rev, ok)
	}
}

// TestIndexesAreBounded holds one index at a time: recalling for another agent closes
// the first agent's index, which the next recall builds again from the bucket.
func TestIndexesAreBounded(t *testing.T) {
	t.Parallel()
	b := startBus(t)
	s := b.store(t, "brain", Options{MaxIndexes: 1})
	ctx := testContext(t)
	for _, agent := range []string{"ann", "bob"} {
		if _, err := s.Create(ctx, agent, Page{ID: "p", Title: agent + "'s page", Text: "Notes of " + agent + " about otters."}); err != nil {
			t.Fatal(err)
		}
	}
	recall := func(agent string) {
		t.Helper()
		r, err := s.Recall(ctx, agent, Query{Text: "otters"})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Hits) != 1 || r.Hits[0].Title != agent+"'s page" {
			t.Errorf("recall for %s: %+v", agent, r.Hits)
		}
	}
	recall("ann")
	if _, ok := s.indexed("ann"); !ok {
		t.Fatal("no index of ann after a recall")
	}
	recall("bob")
	if _, ok := s.indexed("ann"); ok {
		t.Error("ann's index is still held beside bob's, with MaxIndexes 1")
	}
	recall("ann")
	if _, ok := s.indexed("bob"); ok {
		t.Error("bob's index is still held beside ann's, with MaxIndexes 1")
	}
}

// TestTools checks the tools' contract: the specs the turn side sees are the hosts'
// tools' specs, both read-only and parallel in the brain category; labels; a nil store.
func TestTools(t *testing.T) {
	t.Parallel()
	specs := Specs()
	tools := Tools(nil)
	if !reflect.DeepEqual(specs, toolbus.SpecsOf(tools)) {
		t.Error("Specs() differs from the specs of Tools()")
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
		if !s.ReadOnly || s.Mode != toolbus.Parallel || s.Category != Category || s.Destructive {
			t.Errorf("%s: read only %v, mode %s, category %s", s.Name, s.ReadOnly, s.Mode, s.Category)
		}
		if err := s.Check(); err != nil {
			t.Error(err)
		}
	}
	if !slices.Equal(names, []string{"recall", "get_page"}) {
		t.Errorf("tools %v", names)
	}
	for _, tc := range []struct {
		tool string
		args string
		ok   bool
	}{
		{"recall", `{"query": "otters"}`, true},
		{"recall", `{"query": "otters", "limit": 20, "tags": ["ops"]}`, true},
		{"recall", `{"query": ""}`, false},
		{"recall", `{"query": "x", "limit": 21}`, false},
		{"recall", `{"limit": 3}`, false},
		{"recall", `{"query": "x", "extra": 1}`, false},
		{"get_page", `{"id": "p", "offset": 8000}`, true},
		{"get_page", `{"id": "p", "offset": -1}`, false},
		{"get_page", `{}`, false},
	} {
		err := toolNamed(tc.tool).Params.Validate([]byte(tc.args))
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: %v, want ok %v", tc.tool, tc.args, err, tc.ok)
		}
	}

	for name, args := range map[string]any{"recall": map[string]any{"query": "x"}, "get_page": map[string]any{"id": "p"}} {
		if _, err := call(t, nil, "ann", name, args); !errors.Is(err, ErrNoStore) {
			t.Errorf("%s without a store: %v", name, err)
		}
	}

	recall, getPage := toolNamed("recall"), toolNamed("get_page")
	args := json.RawMessage(`{"query": "how  to\ndeploy"}`)
	details := func(v any) toolbus.Result { return toolbus.Result{}.WithDetails(v) }
	for _, tc := range []struct {
		got, want string
	}{
		{recall.ActivityLabel(args), "Recalling “how to deploy”"},
		{recall.CompletedLabel(args, details(Recall{Hits: make([]Hit, 3)})), "Found 3 pages for “how to deploy”"},
		{recall.CompletedLabel(args, details(Recall{Hits: make([]Hit, 1)})), "Found 1 page for “how to deploy”"},
		{recall.CompletedLabel(args, toolbus.ErrorResult("boom")), "Could not recall “how to deploy”"},
		{recall.ActivityLabel(json.RawMessage(`{"query": "` + strings.Repeat("é", 80) + `"}`)), "Recalling “" + strings.Repeat("é", 59) + "…”"},
		{getPage.ActivityLabel(json.RawMessage(`{"id": "deploy"}`)), "Reading page deploy"},
		{getPage.CompletedLabel(json.RawMessage(`{"id": "deploy"}`), details(Excerpt{Size: 120, End: 120})), "Read page deploy (120 bytes)"},
		{getPage.CompletedLabel(json.RawMessage(`{"id": "deploy", "offset": 8000}`), details(Excerpt{Offset: 8000, End: 16000, Size: 20000, NextOffset: 16000})), "Read page deploy (bytes 8000–16000 of 20000)"},
		{getPage.CompletedLabel(json.RawMessage(`{"id": "deploy"}`), toolbus.ErrorResult("no")), "Could not read page deploy"},
	} {
		if tc.got != tc.want {
			t.Errorf("label %q, want %q", tc.got, tc.want)
		}
	}
}

// TestRecallTool runs recall as a host would and reads what the model sees.
func TestRecallTool(t *testing.T) {
	t.Parallel()
	b := startBus(t)
	s := b.store(t, "brain", Options{})
	ctx := testContext(t)
	for _, p := range corpus {
		if _, err := s.Create(ctx, "ann", p); err != nil {
			t.Fatal(err)
		}
	}
	res, err := call(t, s, "ann", "recall", map[string]any{"query": "object store", "limit": 1})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Text()
	for _, want := range []string{
		"2 pages match “object store”; the best 1:\n1. nats-object-store: Large values in the NATS object store [nats, storage] (updated ",
		"**object** **store**",
		"Read a page with get_page and its id.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("recall result lacks %q:\n%s", want, text)
		}
	}
	var r Recall
	if err := json.Unmarshal(res.Details, &r); err != nil || r.Total != 2 || len(r.Hits) != 1 || r.Hits[0].ID != "nats-object-store" {
		t.Errorf("details %s (%v)", res.Details, err)
	}
	res, err = call(t, s, "bob", "recall", map[string]any{"query": "object store"})
	if err != nil || res.Text() != "No page matches “object store” (your knowledge store holds 0 pages)." {
		t.Errorf("bob's recall: %q, %v", res.Text(), err)
	}
}

func TestWholeWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"…e **object** store keeps chunks…", "…**object** store keeps…"}, // the fragmenter counts characters: the last word may be cut
		{"…**object** store keeps chun…", "…**object** store keeps…"},
		{"Whole start, partial en…", "Whole start, partial…"},
		{"…ab", "…ab"},
		{"…word and **hit**…", "…and **hit**…"},
		{"no cut at all", "no cut at all"},
	} {
		if got := wholeWords(tc.in); got != tc.want {
			t.Errorf("wholeWords(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestConcurrentRecallsUnderEviction recalls for more agents than the store holds
// indexes for, from several goroutines at once: indexes are evicted while others start
// and search, and every recall still answers with its own agent's page.
func TestConcurrentRecallsUnderEviction(t *testing.T) {
	t.Parallel()
	b := startBus(t)
	s := b.store(t, "brain", Options{MaxIndexes: 2})
	ctx := testContext(t)
	agents := []string{"a1", "a2", "a3", "a4", "a5"}
	for _, agent := range agents {
		if _, err := s.Create(ctx, agent, Page{ID: "p", Title: "Page of " + agent, Text: "otters and " + agent}); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 100)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 15 {
				agent := agents[(g*7+i*3)%len(agents)]
				r, err := s.Recall(ctx, agent, Query{Text: "otters"})
				switch {
				case err != nil:
					errs <- err
				case len(r.Hits) != 1 || r.Hits[0].Title != "Page of "+agent:
					errs <- fmt.Errorf("recall for %s: %+v", agent, r.Hits)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s.idx.mu.Lock()
	n := len(s.idx.by)
	s.idx.mu.Unlock()
	if n > 2 {
		t.Errorf("the store holds %d indexes, more than 2", n)
	}
}
