package brain

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// benchWords is the vocabulary of the benchmark's generated pages.
var benchWords = strings.Fields(`
	deploy release rollback canary image registry migration database backup restore vacuum
	index query latency throughput cluster node leader replica stream consumer bucket key value
	object chunk snapshot checkpoint turn agent tool schema model prompt token budget cache
	queue worker schedule cron timeout deadline retry abort approval sandbox network firewall
	certificate secret password rotation pager incident alert dashboard metric log trace span
	kernel memory disk cpu thread goroutine channel mutex lock race panic error warning notice
	customer invoice payment refund order shipment warehouse inventory supplier contract meeting
	summary decision action owner review feedback roadmap milestone quarter budget hiring team`)

// benchPages generates n pages of about size bytes each, the same for every run. With
// zipf, words come from a vocabulary of 5000 generated words with a Zipf distribution
// (as words in prose do, stop words aside); without, from the 130 of benchWords, evenly:
// then every query word is in nearly every page, the worst case for ranking.
func benchPages(n, size int, zipf bool) []Page {
	r := rand.New(rand.NewPCG(1, 2))
	vocab := benchWords
	next := func() string { return vocab[r.IntN(len(vocab))] }
	if zipf {
		vocab = make([]string, 5000)
		for i := range vocab {
			vocab[i] = fmt.Sprintf("%s%d", benchWords[i%len(benchWords)], i/len(benchWords))
		}
		z := rand.NewZipf(r, 1.1, 2, uint64(len(vocab)-1))
		next = func() string { return vocab[z.Uint64()] }
	}
	pages := make([]Page, n)
	for i := range pages {
		var b strings.Builder
		for b.Len() < size {
			b.WriteString(next())
			if r.IntN(12) == 0 {
				b.WriteString(".\n")
			} else {
				b.WriteByte(' ')
			}
		}
		pages[i] = Page{
			ID:    fmt.Sprintf("page-%d", i),
			Title: next() + " " + next() + " notes",
			Text:  b.String(),
			Tags:  []string{benchWords[r.IntN(len(benchWords))]},
		}
	}
	return pages
}

// BenchmarkRecall ranks 300 pages of about 2 KB for two- and three-word queries, with
// snippets: the cost of one recall once the agent's index is built. It also reports
// what the index holds in memory per page (heap after the build minus before).
func BenchmarkRecall(b *testing.B) {
	for _, bc := range []struct {
		name    string
		zipf    bool
		queries []Query
	}{
		{"zipf", true, []Query{
			{Text: "canary3 rollback5"},
			{Text: "database7 backup2 restore9", Limit: 10},
			{Text: "leader1 replica4", Tags: []string{"cluster"}},
		}},
		{"dense", false, []Query{
			{Text: "canary rollback"},
			{Text: "database backup restore", Limit: 10},
			{Text: "leader replica", Tags: []string{"cluster"}},
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tb := startBus(b)
			s := tb.store(b, "brain", Options{})
			ctx := context.Background()
			pages := benchPages(300, 2000, bc.zipf)
			for _, p := range pages {
				if _, err := s.Create(ctx, "bench", p); err != nil {
					b.Fatal(err)
				}
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			r, err := s.Recall(ctx, "bench", bc.queries[0])
			if err != nil || r.Pages != len(pages) || len(r.Hits) == 0 {
				b.Fatalf("recall: %d pages, %d hits, %v", r.Pages, len(r.Hits), err)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			perPage := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(pages))
			i := 0
			for b.Loop() {
				if _, err := s.Recall(ctx, "bench", bc.queries[i%len(bc.queries)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(perPage, "index-B/page")
		})
	}
}

// BenchmarkBuildIndex builds an agent's index of 300 pages from the bucket: what the
// first recall of an agent (or the first after its index was evicted) costs.
func BenchmarkBuildIndex(b *testing.B) {
	tb := startBus(b)
	js := tb.js(b, "brain")
	ctx := context.Background()
	w := NewStore(js, Options{})
	defer w.Close()
	for _, p := range benchPages(300, 2000, true) {
		if _, err := w.Create(ctx, "bench", p); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		s := NewStore(js, Options{})
		if _, err := s.Recall(ctx, "bench", Query{Text: "canary"}); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}
