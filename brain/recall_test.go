package brain

import (
	"slices"
	"strings"
	"testing"
)

// corpus is a small fixed set of pages whose rankings the tests know.
var corpus = []Page{
	{ID: "nats-kv-watch", Title: "Watching a NATS key-value bucket", Tags: []string{"nats", "kv"},
		Text: "A watch on a bucket first delivers the last value of every key, then a nil marker, then each change as it happens. " +
			"Under the hood it is an ordered consumer, which recreates itself after a gap. Stop the watcher to close its channel."},
	{ID: "nats-object-store", Title: "Large values in the NATS object store", Tags: []string{"nats", "storage"},
		Text: "The object store splits a large value into chunks of 128 KiB and keeps a meta record per object. " +
			"Use the object store for anything bigger than the key-value limit; reading streams the chunks back in order."},
	{ID: "deploy-checklist", Title: "Deployment checklist for the API service", Tags: []string{"ops", "deploy"},
		Text: "Before you deploy: run the migrations on a copy, build the image, start a canary at five percent. " +
			"Watch the error rate for ten minutes. If it climbs, roll back to the previous image and open an incident."},
	{ID: "rollback", Title: "Rolling back a failed release", Tags: []string{"ops"},
		Text: "To roll back a release, redeploy the previous image tag from the registry; never revert the database migrations by hand. " +
			"Rolling back takes about four minutes. Tell the on-call channel when the rollback is done."},
	{ID: "postgres-vacuum", Title: "Postgres vacuum and table bloat", Tags: []string{"database"},
		Text: "Autovacuum removes dead tuples. A table with heavy updates bloats when vacuum falls behind; " +
			"raise autovacuum_vacuum_scale_factor only after measuring the dead tuple ratio."},
	{ID: "postgres-backup", Title: "Postgres backups with pg_dump", Tags: []string{"database", "ops"},
		Text: "Nightly backups run pg_dump at 02:00 UTC into the backups bucket and keep thirty days. " +
			"To restore, create an empty database and feed it the dump with pg_restore."},
	{ID: "team-oncall", Title: "On-call rotation", Tags: []string{"team"},
		Text: "The on-call engineer carries the pager for a week, from Monday to Monday. Escalate to the team lead after thirty minutes. " +
			"Nobody should deploy on a Friday afternoon."},
	{ID: "coffee", Title: "Coffee machine", Tags: []string{"office"},
		Text: "Descale the coffee machine every week with the blue bottle. Beans are in the left cupboard; grind them medium fine."},
	{ID: "bleve-notes", Title: "Full-text search with bleve", Tags: []string{"search"},
		Text: "bleve ranks documents with tf-idf scoring. The English analyzer stems words, so searching backups also finds backup, " +
			"and it drops stop words. Highlighting cuts fragments around the terms that matched."},
	{ID: "kv-limits", Title: "Key-value limits", Tags: []string{"nats", "kv"},
		Text: "A key-value entry holds at most the server's maximum payload, one megabyte by default. " +
			"Pages larger than that go to the object store, and the key holds only a pointer to the object."},
}

// TestRecallRanks searches a small fixed corpus and checks which pages come first: the
// title weighs most, words match through stemming, an exact phrase counts, tags filter,
// and a query with nothing to find finds nothing.
func TestRecallRanks(t *testing.T) {
	t.Parallel()
	b := startBus(t)
	s := b.store(t, "brain", Options{})
	ctx := testContext(t)
	for _, p := range corpus {
		if _, err := s.Create(ctx, "ann", p); err != nil {
			t.Fatal(err)
		}
	}
	// Another agent's pages never show up in ann's recalls.
	if _, err := s.Create(ctx, "bob", Page{ID: "vacuum-cleaner", Title: "Vacuum cleaner", Text: "The vacuum cleaner is in the hall."}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		q     Query
		top   []string // the first hits, in this order
		total int      // how many pages match; -1: not checked
		not   []string // pages that must not be among the hits
	}{
		{name: "title words", q: Query{Text: "watch a key value bucket"}, top: []string{"nats-kv-watch"}, total: -1},
		{name: "stemmed", q: Query{Text: "roll back a release"}, top: []string{"rollback", "deploy-checklist"}, total: -1},
		{name: "plural finds singular", q: Query{Text: "postgres backup"}, top: []string{"postgres-backup"}, total: -1},
		{name: "one page only", q: Query{Text: "vacuum"}, top: []string{"postgres-vacuum"}, total: 1, not: []string{"vacuum-cleaner"}},
		{name: "stem of a verb", q: Query{Text: "descaling"}, top: []string{"coffee"}, total: 1},
		{name: "phrase", q: Query{Text: "object store"}, top: []string{"nats-object-store", "kv-limits"}, total: 2},
		{name: "tag filter", q: Query{Text: "deploy", Tags: []string{"team"}}, top: []string{"team-oncall"}, total: 1},
		{name: "tags filter together", q: Query{Text: "restore database", Tags: []string{"OPS", "database"}}, top: []string{"postgres-backup"}, total: 1},
		{name: "a tag as a word", q: Query{Text: "office"}, top: []string{"coffee"}, total: 1},
		{name: "limit", q: Query{Text: "nats", Limit: 2}, top: nil, total: 3},
		{name: "nothing to find", q: Query{Text: "kubernetes"}, total: 0},
		{name: "stop words only", q: Query{Text: "the and of"}, total: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s.Recall(ctx, "ann", tc.q)
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]string, len(r.Hits))
			for i, h := range r.Hits {
				ids[i] = h.ID
			}
			if len(ids) < len(tc.top) || !slices.Equal(ids[:len(tc.top)], tc.top) {
				t.Errorf("hits %v, want %v first", ids, tc.top)
			}
			if tc.total >= 0 && int(r.Total) != tc.total {
				t.Errorf("total %d, want %d (hits %v)", r.Total, tc.total, ids)
			}
			want := cmpLimit(tc.q.Limit)
			if len(ids) > want {
				t.Errorf("%d hits, more than the limit %d", len(ids), want)
			}
			for _, id := range tc.not {
				if slices.Contains(ids, id) {
					t.Errorf("hits %v include %s", ids, id)
				}
			}
			if r.Pages != len(corpus) {
				t.Errorf("the index holds %d pages, want %d", r.Pages, len(corpus))
			}
			for i := 1; i < len(r.Hits); i++ {
				if r.Hits[i].Score > r.Hits[i-1].Score {
					t.Errorf("hit %d scores more than hit %d: %v", i, i-1, r.Hits)
				}
			}
		})
	}

	// A snippet is cut around the words that matched, with them in bold, and bounded.
	r, err := s.Recall(ctx, "ann", Query{Text: "dead tuples"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Hits) == 0 || r.Hits[0].ID != "postgres-vacuum" {
		t.Fatalf("hits %v, want postgres-vacuum first", r.Hits)
	}
	sn := r.Hits[0].Snippet
	if !strings.Contains(sn, "**dead**") || !strings.Contains(sn, "**tuples**") || len([]rune(sn)) > SnippetRunes+20 {
		t.Errorf("snippet %q: want the matched words in bold, within about %d characters", sn, SnippetRunes)
	}
	// A page found by its title alone shows the start of its text.
	r, err = s.Recall(ctx, "ann", Query{Text: "rotation"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Hits) != 1 || !strings.HasPrefix(r.Hits[0].Snippet, "The on-call engineer carries the pager") {
		t.Errorf("hits %+v: want team-oncall with the start of its text", r.Hits)
	}

	// Bad queries get a clear error.
	for _, tc := range []struct {
		q    Query
		want string
	}{
		{Query{Text: "  "}, "the query is empty"},
		{Query{Text: strings.Repeat("x", MaxQueryLen+1)}, "keep it to 500"},
		{Query{Text: "x", Limit: MaxRecallLimit + 1}, "limit 21 is out of range"},
		{Query{Text: "x", Tags: []string{"no spaces"}}, `tag "no spaces" has ' '`},
	} {
		if _, err := s.Recall(ctx, "ann", tc.q); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("recall %+v: error %v, want %q", tc.q, err, tc.want)
		}
	}
	if _, err := s.Recall(ctx, "a.b", Query{Text: "x"}); err == nil || !strings.Contains(err.Error(), "cannot key pages") {
		t.Errorf("recall for agent a.b: error %v", err)
	}
}

func cmpLimit(n int) int {
	if n == 0 {
		return DefaultRecallLimit
	}
	return n
}
