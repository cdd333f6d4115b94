// Package brain is an agent's knowledge store: pages (id, title, text, tags, updated)
// kept per agent in JetStream, a full-text index over them, and the read-only tools of
// the "brain" category, recall and get_page.
//
// # Storage
//
// A page is one key of the KV bucket bus.BucketBrain, "<agent>.<page id>", holding a
// JSON record (see [Record]). A record whose text would make it longer than
// [InlineMax] keeps its text in the object store bus.ObjectBrain instead, under a name
// of its own ("<agent>.<page id>.<nuid>"), and the record says which: a reader never
// sees a record whose object is not written yet, because the object is written first
// and the record second, with a compare-and-set on the key's revision. The object of
// a replaced or deleted page is deleted after its record.
//
// # Index
//
// recall searches an in-memory bleve index (github.com/blevesearch/bleve/v2) of one
// agent's pages, built from the bucket the first time the agent recalls and then kept
// current by a KV watch on "<agent>.>": pages written by another node or by the
// command line show up in it within the watch's delivery time, with no restart. The
// index ranks with bleve's tf-idf scoring over the title (boosted), the text (with an
// exact-phrase bonus) and the tags, with English stemming and stop words.
//
// Memory is bounded two ways: a store holds the indexes of at most
// [Options.MaxIndexes] agents (the least recently used one is closed when another is
// needed, and rebuilt from the bucket when it is needed again; an index is never closed
// under a recall, so while more agents than that recall at once the store holds one
// more for each, and closes them as their recalls end), and each
// page contributes at most [Options.MaxIndexedBytes] of its text to the index (the
// rest is still stored and read with get_page, but not searched). The index keeps the
// indexed text (for snippets) and its term vectors; docs/operations.md gives the
// measured cost per page.
package brain
