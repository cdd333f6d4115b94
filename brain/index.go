package brain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2"
	_ "github.com/blevesearch/bleve/v2/analysis/analyzer/keyword" // the tags field's analyzer
	"github.com/blevesearch/bleve/v2/analysis/analyzer/standard"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/registry"
	"github.com/blevesearch/bleve/v2/search/highlight"
	"github.com/blevesearch/bleve/v2/search/highlight/format/plain"
	simplefrag "github.com/blevesearch/bleve/v2/search/highlight/fragmenter/simple"
	simplehl "github.com/blevesearch/bleve/v2/search/highlight/highlighter/simple"
	"github.com/blevesearch/bleve/v2/search/query"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/brain/pages"
	"github.com/toolbus/toolbus/bus"
)

// Bounds of a recall.
const (
	DefaultRecallLimit = 5
	MaxRecallLimit     = 20
	MaxQueryLen        = 500
	// SnippetRunes is the length of a snippet's fragment of text, in characters.
	SnippetRunes = 160
)

// highlighter is the name of the bleve highlighter of snippets: bleve's simple one,
// with fragments of SnippetRunes, hits in **bold** and "…" where text was left out.
const highlighter = "toolbus_brain"

func init() {
	err := registry.RegisterHighlighter(highlighter, func(map[string]any, *registry.Cache) (highlight.Highlighter, error) {
		return simplehl.NewHighlighter(simplefrag.NewFragmenter(SnippetRunes), plain.NewFragmentFormatter("**", "**"), "…"), nil
	})
	if err != nil {
		panic(err)
	}
}

// Fields of an indexed page.
const (
	fieldTitle = "title"
	fieldText  = "text"
	fieldTags  = "tags"
)

// indexedPage is what the index holds of a page.
type indexedPage struct {
	Title string   `json:"title"`
	Text  string   `json:"text"`
	Tags  []string `json:"tags"`
}

// pageMapping is the index mapping of pages: title and text analysed for English
// (stemming, stop words), the text stored with term vectors for snippets, the tags as
// whole keywords; nothing else is indexed.
func pageMapping() mapping.IndexMapping {
	title := bleve.NewTextFieldMapping()
	title.Analyzer = en.AnalyzerName
	title.IncludeInAll = false
	title.Store = false
	title.DocValues = false

	text := bleve.NewTextFieldMapping()
	text.Analyzer = en.AnalyzerName
	text.IncludeInAll = false
	text.Store = true // snippets are cut from the stored text
	text.IncludeTermVectors = true
	text.DocValues = false

	tags := bleve.NewKeywordFieldMapping()
	tags.IncludeInAll = false
	tags.Store = false
	tags.DocValues = false

	doc := bleve.NewDocumentStaticMapping()
	doc.AddFieldMappingsAt(fieldTitle, title)
	doc.AddFieldMappingsAt(fieldText, text)
	doc.AddFieldMappingsAt(fieldTags, tags)

	m := bleve.NewIndexMapping()
	m.DefaultMapping = doc
	m.DefaultAnalyzer = en.AnalyzerName
	m.StoreDynamic = false
	m.IndexDynamic = false
	m.DocValuesDynamic = false
	return m
}

// meta is what an index keeps of a page beside bleve: what a hit shows.
type meta struct {
	title   string
	tags    []string
	updated time.Time
	size    int
	lead    string // the text's first characters, for a hit with no match in the text
}

// indexes are a store's per-agent indexes, at most opts.MaxIndexes at once.
type indexes struct {
	s     *Store
	mu    sync.Mutex
	by    map[string]*agentIndex
	clock uint64 // ticks of use, for least-recently-used eviction
}

func newIndexes(s *Store) *indexes {
	return &indexes{s: s, by: make(map[string]*agentIndex)}
}

// agentIndex is one agent's index, fed by a watch of the agent's keys.
type agentIndex struct {
	agent string
	// ready is closed when the index holds every page the bucket held when the watch
	// started (err says why not).
	ready chan struct{}
	err   error
	done  chan struct{} // closed when the watch goroutine has ended and the index is closed
	// used is the store's clock at the last use, users the uses in progress (x.mu).
	used  uint64
	users int

	startMu sync.Mutex // guards w, cancel and stopped while the index starts
	w       jetstream.KeyWatcher
	// cancel ends the watch's context (and so its subscription).
	cancel  context.CancelFunc
	stopped bool

	mu    sync.RWMutex // R: searching, applying; W: closing
	idx   bleve.Index
	metas map[string]meta // guarded by metaMu
	// revision is the bucket revision of the last entry applied.
	revision atomic.Uint64

	metaMu sync.RWMutex
}

// errIndexClosed answers a search whose index closed under it (its watch ended).
var errIndexClosed = errors.New("the index was closed")

// get returns the agent's index, ready to search: the one held, or a new one built
// from the bucket (evicting the least recently used index if the store holds as many
// as it may).
//
// The index is in use until release: an index in use is never evicted, so a store may
// hold more than MaxIndexes indexes while more agents than that recall at once, and
// closes the extra ones as their recalls end.
func (x *indexes) get(ctx context.Context, agent string) (*agentIndex, error) {
	kv, err := x.s.Bucket(ctx)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	x.clock++
	ai := x.by[agent]
	fresh := ai == nil
	if fresh {
		x.evict(x.s.opts.MaxIndexes - 1)
		ai = &agentIndex{agent: agent, ready: make(chan struct{}), done: make(chan struct{}), metas: make(map[string]meta)}
		x.by[agent] = ai
	}
	ai.used = x.clock
	ai.users++
	x.mu.Unlock()
	if fresh {
		// Started without x.mu: other agents' recalls need not wait for this one's watch.
		x.start(ctx, kv, ai)
	}
	select {
	case <-ai.ready:
	case <-ctx.Done():
		x.release(ai)
		return nil, fmt.Errorf("build the index of %s: %w", agent, ctx.Err())
	}
	if ai.err != nil {
		x.release(ai)
		return nil, ai.err
	}
	return ai, nil
}

// release ends a use of ai that get began, and closes indexes beyond MaxIndexes that
// are no longer in use.
func (x *indexes) release(ai *agentIndex) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ai.users--
	x.evict(x.s.opts.MaxIndexes)
}

// evict closes the least recently used indexes not in use until the store holds at
// most max (or only indexes in use); x.mu is held.
func (x *indexes) evict(max int) {
	for len(x.by) > max {
		var lru *agentIndex
		for _, ai := range x.by {
			if ai.users == 0 && (lru == nil || ai.used < lru.used) {
				lru = ai
			}
		}
		if lru == nil {
			return
		}
		delete(x.by, lru.agent)
		lru.stop()
	}
}

// start makes the agent's index and its watch, and follows the watch; an index that
// cannot start is forgotten, with the reason for whoever waits on it.
func (x *indexes) start(ctx context.Context, kv jetstream.KeyValue, ai *agentIndex) {
	fail := func(err error) {
		x.forget(ai)
		ai.err = err
		close(ai.ready)
		close(ai.done)
	}
	idx, err := bleve.NewMemOnly(pageMapping())
	if err != nil {
		fail(fmt.Errorf("index of %s: %w", ai.agent, err))
		return
	}
	// The watch outlives this call: its context is its own, cancelled when it stops.
	wctx, cancel := context.WithCancel(context.Background())
	var w jetstream.KeyWatcher
	err = bus.Retry(ctx, "watch the pages of "+ai.agent, x.s.log, func(context.Context) (err error) {
		w, err = kv.Watch(wctx, ai.agent+".>")
		return err
	})
	if err != nil {
		cancel()
		_ = idx.Close()
		fail(err)
		return
	}
	ai.idx = idx
	ai.startMu.Lock()
	ai.w, ai.cancel = w, cancel
	stopped := ai.stopped
	ai.startMu.Unlock()
	go x.follow(ai)
	if stopped { // evicted while starting: follow ends at once
		ai.stop()
	}
}

// forget removes ai from the store's indexes, unless another index took its place.
func (x *indexes) forget(ai *agentIndex) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.by[ai.agent] == ai {
		delete(x.by, ai.agent)
	}
}

// batchSize is how many pages the initial build indexes at once.
const batchSize = 128

// follow applies the watch's entries to the index until the watch ends: the initial
// values in batches, then each change as it comes. A watch that ends (the store
// closed, the index evicted, the connection lost) closes the index and forgets it, so
// the next recall builds a new one.
func (x *indexes) follow(ai *agentIndex) {
	defer close(ai.done)
	batch := ai.idx.NewBatch()
	building := true
	flush := func() {
		if batch.Size() == 0 {
			return
		}
		if err := ai.idx.Batch(batch); err != nil {
			x.s.log.Warn("knowledge index: a batch of pages was not indexed", "agent", ai.agent, "err", err)
		}
		batch.Reset()
	}
	for e := range ai.w.Updates() {
		if e == nil {
			flush()
			building = false
			close(ai.ready)
			continue
		}
		ai.mu.RLock()
		x.apply(ai, e, batch, building)
		ai.mu.RUnlock()
		if building && batch.Size() >= batchSize {
			flush()
		}
	}
	// The watch has ended (stopped, or its connection closed).
	ai.cancel()
	x.forget(ai)
	if building {
		ai.err = fmt.Errorf("build the index of %s: the watch of its pages ended", ai.agent)
		close(ai.ready)
	}
	ai.mu.Lock()
	_ = ai.idx.Close()
	ai.idx = nil
	ai.mu.Unlock()
}

// apply indexes one entry (a page written or deleted), into batch while building.
func (x *indexes) apply(ai *agentIndex, e jetstream.KeyValueEntry, batch *bleve.Batch, building bool) {
	defer ai.revision.Store(e.Revision())
	id := strings.TrimPrefix(e.Key(), ai.agent+".")
	if e.Operation() != jetstream.KeyValuePut {
		ai.metaMu.Lock()
		delete(ai.metas, id)
		ai.metaMu.Unlock()
		if building {
			batch.Delete(id)
		} else if err := ai.idx.Delete(id); err != nil {
			x.s.log.Warn("knowledge index: a deleted page stays searchable", "agent", ai.agent, "page", id, "err", err)
		}
		return
	}
	rec, err := pages.Decode(e)
	if err != nil {
		x.s.log.Warn("knowledge index: a page is left out", "agent", ai.agent, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	text, err := x.s.Text(ctx, rec)
	cancel()
	if err != nil {
		// Replaced meanwhile (a later entry follows), or unreadable: the title and tags
		// are still searchable.
		x.s.log.Warn("knowledge index: a page's text is left out", "agent", ai.agent, "page", id, "err", err)
	}
	text = cut(text, x.s.opts.MaxIndexedBytes)
	doc := indexedPage{Title: rec.Title, Text: text, Tags: rec.Tags}
	ai.metaMu.Lock()
	ai.metas[id] = meta{title: rec.Title, tags: rec.Tags, updated: rec.Updated, size: rec.Size, lead: lead(text)}
	ai.metaMu.Unlock()
	if building {
		err = batch.Index(id, doc)
	} else {
		err = ai.idx.Index(id, doc)
	}
	if err != nil {
		x.s.log.Warn("knowledge index: a page is left out", "agent", ai.agent, "page", id, "err", err)
	}
}

// stop ends the index's watch, or has start end it; follow then closes the index.
func (ai *agentIndex) stop() {
	ai.startMu.Lock()
	defer ai.startMu.Unlock()
	ai.stopped = true
	if ai.w != nil {
		_ = ai.w.Stop()
		ai.cancel()
	}
}

// closeAll stops every index and waits for their watches to end.
func (x *indexes) closeAll() {
	x.mu.Lock()
	all := make([]*agentIndex, 0, len(x.by))
	for _, ai := range x.by {
		all = append(all, ai)
	}
	clear(x.by)
	x.mu.Unlock()
	for _, ai := range all {
		ai.stop()
	}
	for _, ai := range all {
		<-ai.done
	}
}

// cut returns at most n bytes of s, ending on a character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// lead is the start of a text on one line, at most SnippetRunes characters.
func lead(text string) string {
	var b strings.Builder
	n := 0
	space := false
	for _, r := range text {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if n == SnippetRunes {
			b.WriteString("…")
			break
		}
		if space {
			b.WriteByte(' ')
			n++
			space = false
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// Query is what recall searches for.
type Query struct {
	Text string
	// Limit bounds the hits (DefaultRecallLimit when 0, at most MaxRecallLimit).
	Limit int
	// Tags keeps only the pages that carry every one of them.
	Tags []string
}

// Hit is one page a recall found.
type Hit struct {
	ID      string    `json:"id"`
	Title   string    `json:"title"`
	Tags    []string  `json:"tags,omitempty"`
	Updated time.Time `json:"updated"`
	Size    int       `json:"size"`
	Score   float64   `json:"score"`
	// Snippet is the best fragment of the text around the query's terms, with the
	// terms in **bold**, or the text's start when only the title or tags matched.
	Snippet string `json:"snippet"`
}

// Recall is a recall's answer.
type Recall struct {
	Query string `json:"query"`
	// Total counts the matching pages, of which Hits are the best.
	Total uint64 `json:"total"`
	Hits  []Hit  `json:"hits"`
	// Pages is how many pages the agent's index holds.
	Pages int `json:"pages"`
}

// Recall ranks the agent's pages for a query. The first recall of an agent builds its
// index from the bucket; later ones search the index its watch keeps current.
func (s *Store) Recall(ctx context.Context, agent string, q Query) (Recall, error) {
	if err := pages.CheckAgent(agent); err != nil {
		return Recall{}, err
	}
	text := strings.TrimSpace(q.Text)
	switch {
	case text == "":
		return Recall{}, errors.New("the query is empty: say what to look for")
	case utf8.RuneCountInString(text) > MaxQueryLen:
		return Recall{}, fmt.Errorf("the query is %d characters long; keep it to %d", utf8.RuneCountInString(text), MaxQueryLen)
	case q.Limit < 0 || q.Limit > MaxRecallLimit:
		return Recall{}, fmt.Errorf("limit %d is out of range: 1 to %d", q.Limit, MaxRecallLimit)
	case len(q.Tags) > MaxTags:
		return Recall{}, fmt.Errorf("%d tags given; at most %d", len(q.Tags), MaxTags)
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultRecallLimit
	}
	var filter []query.Query
	for _, t := range q.Tags {
		t = strings.ToLower(strings.TrimSpace(t))
		if err := pages.CheckTag(t); err != nil {
			return Recall{}, fmt.Errorf("tags filter: %w", err)
		}
		tq := bleve.NewTermQuery(t)
		tq.SetField(fieldTags)
		filter = append(filter, tq)
	}
	// Every way a page can match adds to its score: the title weighs most, then an
	// exact phrase, then tags and single words of the text.
	title := bleve.NewMatchQuery(text)
	title.SetField(fieldTitle)
	title.SetBoost(3)
	words := bleve.NewMatchQuery(text)
	words.SetField(fieldText)
	phrase := bleve.NewMatchPhraseQuery(text)
	phrase.SetField(fieldText)
	phrase.SetBoost(2)
	tags := bleve.NewMatchQuery(text)
	tags.SetField(fieldTags)
	tags.Analyzer = standard.Name // the query's words against whole tags
	tags.SetBoost(2)
	var qq query.Query = bleve.NewDisjunctionQuery(title, words, phrase, tags)
	if len(filter) > 0 {
		qq = bleve.NewConjunctionQuery(append([]query.Query{qq}, filter...)...)
	}

	req := bleve.NewSearchRequestOptions(qq, limit, 0, false)
	req.Highlight = bleve.NewHighlightWithStyle(highlighter)
	req.Highlight.AddField(fieldText)
	ai, res, pages, err := s.search(ctx, agent, req)
	if err != nil {
		return Recall{}, err
	}
	out := Recall{Query: text, Total: res.Total, Hits: make([]Hit, 0, len(res.Hits)), Pages: int(pages)}
	ai.metaMu.RLock()
	defer ai.metaMu.RUnlock()
	for _, h := range res.Hits {
		m, ok := ai.metas[h.ID]
		if !ok {
			continue // deleted since the search
		}
		hit := Hit{ID: h.ID, Title: m.title, Tags: m.tags, Updated: m.updated, Size: m.size, Score: h.Score, Snippet: m.lead}
		if f := h.Fragments[fieldText]; len(f) > 0 {
			hit.Snippet = wholeWords(oneLine(f[0]))
		}
		out.Hits = append(out.Hits, hit)
	}
	return out, nil
}

// search runs req on the agent's index. An index whose watch ended between finding it
// and searching it (its connection lost) is built again, a few times.
func (s *Store) search(ctx context.Context, agent string, req *bleve.SearchRequest) (*agentIndex, *bleve.SearchResult, uint64, error) {
	for attempt := 1; ; attempt++ {
		ai, err := s.idx.get(ctx, agent)
		if err != nil {
			return nil, nil, 0, err
		}
		ai.mu.RLock()
		if ai.idx == nil {
			ai.mu.RUnlock()
			s.idx.release(ai)
			if attempt < 3 {
				continue
			}
			return nil, nil, 0, fmt.Errorf("recall for %s: %w; try again", agent, errIndexClosed)
		}
		res, err := ai.idx.SearchInContext(ctx, req)
		pages, _ := ai.idx.DocCount()
		ai.mu.RUnlock()
		s.idx.release(ai)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("recall for %s: %w", agent, err)
		}
		return ai, res, pages, nil
	}
}

// oneLine collapses the white space of a fragment to single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ellipsis marks where a snippet leaves text out.
const ellipsis = "…"

// wholeWords drops the partial words the fragmenter leaves where it cut the text (it
// counts characters, not words), unless that would leave less than half the snippet or
// the word is a hit.
func wholeWords(s string) string {
	if rest, ok := strings.CutPrefix(s, ellipsis); ok && rest != "" && rest[0] != ' ' && !strings.HasPrefix(rest, "**") {
		if i := strings.IndexByte(rest, ' '); i >= 0 && i < len(rest)/2 {
			s = ellipsis + rest[i+1:]
		}
	}
	if rest, ok := strings.CutSuffix(s, ellipsis); ok && rest != "" && rest[len(rest)-1] != ' ' && !strings.HasSuffix(rest, "**") {
		if i := strings.LastIndexByte(rest, ' '); i >= len(rest)/2 {
			s = rest[:i] + ellipsis
		}
	}
	return s
}

// indexed reports the bucket revision up to which the agent's index is current, and
// whether the store holds an index of the agent.
func (s *Store) indexed(agent string) (uint64, bool) {
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	ai, ok := s.idx.by[agent]
	if !ok {
		return 0, false
	}
	return ai.revision.Load(), true
}
