package brain

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// largeText is a text longer than a KV value may be, with characters of every UTF-8
// length and lines.
func largeText(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %d: grüße, 東京 and 🚀 go here\n", i)
	}
	return b.String()
}

// objectNames lists the objects of the large-page store whose name starts with prefix.
func objectNames(t *testing.T, js jetstream.JetStream, prefix string) []string {
	t.Helper()
	ctx := testContext(t)
	obs, err := js.ObjectStore(ctx, bus.ObjectBrain)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	list, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list {
		if strings.HasPrefix(o.Name, prefix) {
			names = append(names, o.Name)
		}
	}
	return names
}

func TestStoreRoundTrip(t *testing.T) {
	t.Parallel()
	b := startBus(t)
	js := b.js(t, "check")
	s := b.store(t, "brain", Options{})
	ctx := testContext(t)

	before := time.Now().Add(-time.Second)
	p, err := s.Create(ctx, "ann", Page{ID: "deploy", Title: "  How we deploy ", Text: "Build, push, roll out.", Tags: []string{"Ops", "ops", "deploy"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Title != "How we deploy" || strings.Join(p.Tags, ",") != "ops,deploy" || p.Updated.Before(before) {
		t.Errorf("stored page %+v: want the title trimmed, tags lower-cased once each, updated now", p)
	}
	got, err := s.Get(ctx, "ann", "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if got.Text != "Build, push, roll out." || got.Title != p.Title || !got.Updated.Equal(p.Updated) || strings.Join(got.Tags, ",") != "ops,deploy" {
		t.Errorf("read back %+v, stored %+v", got, p)
	}
	if _, err := s.Create(ctx, "ann", Page{ID: "deploy", Title: "Again", Text: "x"}); !errors.Is(err, ErrExists) {
		t.Errorf("create over an existing page: %v, want ErrExists", err)
	}
	// The same id is another page for another agent.
	if _, err := s.Create(ctx, "bob", Page{ID: "deploy", Title: "Bob's", Text: "y"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "ann", Page{ID: "deploy", Title: "How we deploy", Text: "Build, push, canary, roll out."}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, "ann", "deploy"); got.Text != "Build, push, canary, roll out." || got.Tags != nil {
		t.Errorf("after the replace: %+v", got)
	}

	// A large page keeps its text in the object store; its record stays small.
	big := largeText(3 * InlineMax)
	if _, err := s.Create(ctx, "ann", Page{ID: "big", Title: "Big", Text: big, Tags: []string{"large"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "ann", "big"); err != nil || got.Text != big {
		t.Fatalf("large page read back: %d bytes, err %v; want %d bytes", len(got.Text), err, len(big))
	}
	kv, err := js.KeyValue(ctx, bus.BucketBrain)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "ann.big")
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.Text != "" || rec.Size != len(big) || !strings.HasPrefix(rec.Object, "ann.big.") {
		t.Errorf("record of the large page (%d bytes): %+v, %v", len(e.Value()), rec, err)
	}
	if names := objectNames(t, js, "ann.big."); len(names) != 1 || names[0] != rec.Object {
		t.Errorf("objects %v, want exactly %s", names, rec.Object)
	}
	list, err := s.List(ctx, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "big" || list[0].Object == "" || list[0].Size != len(big) || list[1].ID != "deploy" || list[1].Object != "" {
		t.Errorf("list: %+v", list)
	}

	// Replacing a large page with a small one, and deleting one, removes its object.
	if _, err := s.Put(ctx, "ann", Page{ID: "big", Title: "Big", Text: "small now"}); err != nil {
		t.Fatal(err)
	}
	if names := objectNames(t, js, "ann.big."); len(names) != 0 {
		t.Errorf("objects after the replace: %v", names)
	}
	if _, err := s.Put(ctx, "ann", Page{ID: "big", Title: "Big", Text: big}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "ann", "big"); err != nil {
		t.Fatal(err)
	}
	if names := objectNames(t, js, "ann.big."); len(names) != 0 {
		t.Errorf("objects after the delete: %v", names)
	}
	if _, err := s.Get(ctx, "ann", "big"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get after delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "ann", "big"); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete twice: %v, want ErrNotFound", err)
	}
	// A deleted id can be created again.
	if _, err := s.Create(ctx, "ann", Page{ID: "big", Title: "Back", Text: "again"}); err != nil {
		t.Errorf("create after delete: %v", err)
	}
	if list, _ := s.List(ctx, "nobody"); len(list) != 0 {
		t.Errorf("list of an agent without pages: %+v", list)
	}
}

func TestPageRules(t *testing.T) {
	t.Parallel()
	b := startBus(t)
	s := b.store(t, "brain", Options{})
	ctx := testContext(t)
	tags := make([]string, MaxTags+1)
	for i := range tags {
		tags[i] = fmt.Sprint("t", i)
	}
	for _, tc := range []struct {
		agent string
		p     Page
		want  string
	}{
		{"ann", Page{ID: "", Title: "x"}, "page id is empty"},
		{"ann", Page{ID: "a.b", Title: "x"}, `page id "a.b" has '.' at position 2`},
		{"ann", Page{ID: "-a", Title: "x"}, `has '-' at position 1`},
		{"ann", Page{ID: strings.Repeat("a", MaxIDLen+1), Title: "x"}, "at most 64"},
		{"ann", Page{ID: "a", Title: "  "}, "page a has no title"},
		{"ann", Page{ID: "a", Title: strings.Repeat("x", MaxTitleLen+1)}, "title of page a is 301 bytes long"},
		{"ann", Page{ID: "a", Title: "x", Tags: tags}, "page a has 17 tags"},
		{"ann", Page{ID: "a", Title: "x", Tags: []string{"two words"}}, `tag "two words" has ' '`},
		{"ann", Page{ID: "a", Title: "x", Tags: []string{""}}, "a tag is empty"},
		{"ann", Page{ID: "a", Title: "x", Text: "\xff"}, "not valid UTF-8"},
		{"ann", Page{ID: "a", Title: "x", Text: strings.Repeat("x", MaxTextLen+1)}, "text of page a is 16777217 bytes long"},
		{"a.b", Page{ID: "a", Title: "x"}, `agent "a.b" cannot key pages`},
		{"", Page{ID: "a", Title: "x"}, "no agent id"},
	} {
		_, err := s.Put(ctx, tc.agent, tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("put %q (agent %q): %v, want %q", tc.p.ID, tc.agent, err, tc.want)
		}
		if tc.agent == "ann" && !errors.Is(err, ErrBadPage) {
			t.Errorf("put %q: %v does not match ErrBadPage", tc.p.ID, err)
		}
	}
	if list, _ := s.List(ctx, "ann"); len(list) != 0 {
		t.Errorf("refused pages were stored: %+v", list)
	}
}

// TestRacingWritersLeaveOneObject has writers replace one page with large and small
// texts at once: every write lands in turn, and exactly the last one's object (or none)
// remains.
func TestRacingWritersLeaveOneObject(t *testing.T) {
	t.Parallel()
	b := startBus(t)
	js := b.js(t, "check")
	ctx := testContext(t)
	stores := []*Store{b.store(t, "w1", Options{}), b.store(t, "w2", Options{}), b.store(t, "w3", Options{})}
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i := range 30 {
		wg.Go(func() {
			text := fmt.Sprintf("small %d", i)
			if i%2 == 0 {
				text = largeText(InlineMax + 1000*i)
			}
			if _, err := stores[i%3].Put(ctx, "ann", Page{ID: "hot", Title: "Hot", Text: text}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list, err := stores[0].List(ctx, "ann")
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	names := objectNames(t, js, "ann.hot.")
	switch {
	case list[0].Object == "" && len(names) != 0:
		t.Errorf("the page is inline, yet objects %v remain", names)
	case list[0].Object != "" && (len(names) != 1 || names[0] != list[0].Object):
		t.Errorf("the page names object %s; objects %v remain", list[0].Object, names)
	}
	if _, err := stores[1].Get(ctx, "ann", "hot"); err != nil {
		t.Error(err)
	}
}
