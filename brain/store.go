package brain

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/brain/pages"
)

// Defaults of Options.
const (
	DefaultMaxIndexes      = 16
	DefaultMaxIndexedBytes = 64 << 10
)

// Options configure a Store.
type Options struct {
	// Replicas of the bucket and the object store when the store creates them
	// (capped by the cluster size).
	Replicas int
	// MaxIndexes bounds the agents whose index the store holds in memory (default
	// DefaultMaxIndexes), beyond the indexes of recalls in progress.
	MaxIndexes int
	// MaxIndexedBytes bounds the text of each page that goes into the index (default
	// DefaultMaxIndexedBytes); the rest is stored but not searched.
	MaxIndexedBytes int
	Logger          *slog.Logger
}

func (o Options) withDefaults() Options {
	o.Replicas = max(o.Replicas, 1)
	if o.MaxIndexes <= 0 {
		o.MaxIndexes = DefaultMaxIndexes
	}
	if o.MaxIndexedBytes <= 0 {
		o.MaxIndexedBytes = DefaultMaxIndexedBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Store is the knowledge store of every agent on a bus: its pages in JetStream (package
// pages, whose methods it has) and, for recall, one in-memory index per agent recently
// searched. It is safe for concurrent use.
type Store struct {
	*pages.Store
	opts Options
	log  *slog.Logger
	idx  *indexes
}

// NewStore returns the store on js; nothing is opened until it is used.
func NewStore(js jetstream.JetStream, opts Options) *Store {
	opts = opts.withDefaults()
	return withIndex(pages.NewStore(js, pageOptions(opts)), opts)
}

// Open is NewStore that opens (creating if needed) the page bucket at once.
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	ps, err := pages.Open(ctx, js, pageOptions(opts))
	if err != nil {
		return nil, err
	}
	return withIndex(ps, opts), nil
}

func pageOptions(opts Options) pages.Options {
	return pages.Options{Replicas: opts.Replicas, Logger: opts.Logger}
}

// withIndex is the store of ps's pages with their indexes.
func withIndex(ps *pages.Store, opts Options) *Store {
	s := &Store{Store: ps, opts: opts, log: opts.Logger}
	s.idx = newIndexes(s)
	return s
}

// Close stops the store's index watches and drops its indexes. The pages stay in
// JetStream; a store used after Close builds its indexes again.
func (s *Store) Close() { s.idx.closeAll() }

// The pages' types, limits and rules are package pages'; these names keep them where
// the brain's tools and the commands have long read them.
type (
	Page    = pages.Page
	Info    = pages.Info
	Record  = pages.Record
	Excerpt = pages.Excerpt
)

const (
	MaxIDLen    = pages.MaxIDLen
	MaxTitleLen = pages.MaxTitleLen
	MaxTags     = pages.MaxTags
	MaxTagLen   = pages.MaxTagLen
	MaxTextLen  = pages.MaxTextLen
	InlineMax   = pages.InlineMax
	PageChunk   = pages.PageChunk
)

var (
	ErrNotFound = pages.ErrNotFound
	ErrExists   = pages.ErrExists
	ErrBadPage  = pages.ErrBadPage
	ErrNoStore  = pages.ErrNoStore
)

// CheckID is pages.CheckID.
func CheckID(id string) error { return pages.CheckID(id) }

// Slug is pages.Slug.
func Slug(title string) string { return pages.Slug(title) }
