package pages

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// Options configure a Store.
type Options struct {
	// Replicas of the bucket and the object store when the store creates them
	// (capped by the cluster size).
	Replicas int
	Logger   *slog.Logger
}

func (o Options) withDefaults() Options {
	o.Replicas = max(o.Replicas, 1)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Store holds the knowledge pages of every agent on a bus, in JetStream: a record per
// page in the KV bucket bus.BucketBrain, the text of a large one in the object store
// bus.ObjectBrain. It is safe for concurrent use. Its buckets are opened (and created if
// missing) on first use, so a node can host the brain category before JetStream answers.
type Store struct {
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger

	mu  sync.Mutex // guards kv and obs while they are opened
	kv  jetstream.KeyValue
	obs jetstream.ObjectStore
}

// NewStore returns the store on js; nothing is opened until it is used.
func NewStore(js jetstream.JetStream, opts Options) *Store {
	opts = opts.withDefaults()
	return &Store{js: js, opts: opts, log: opts.Logger}
}

// Open is NewStore that opens (creating if needed) the page bucket at once; a user
// without JetStream is told so (bus.NoJetStream).
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	s := NewStore(js, opts)
	if _, err := s.Bucket(ctx); err != nil {
		return nil, bus.NoJetStream("knowledge pages", err)
	}
	return s, nil
}

// Bucket opens the page bucket on first use (and creates it if missing). A JetStream
// without a leader yet is waited for within ctx (bus.Retry).
func (s *Store) Bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	if s.js == nil {
		return nil, ErrNoStore
	}
	err := bus.Retry(ctx, "open the knowledge store", s.log, func(ctx context.Context) error {
		kv, err := bus.EnsureKeyValue(ctx, s.js, jetstream.KeyValueConfig{
			Bucket:       bus.BucketBrain,
			Description:  "toolbus knowledge pages, one key per agent and page",
			MaxValueSize: InlineMax,
			Storage:      jetstream.FileStorage,
			Replicas:     s.opts.Replicas,
		})
		s.kv = kv
		return err
	})
	return s.kv, err
}

// objects opens the object store of large pages on first use.
func (s *Store) objects(ctx context.Context) (jetstream.ObjectStore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.obs != nil {
		return s.obs, nil
	}
	if s.js == nil {
		return nil, ErrNoStore
	}
	err := bus.Retry(ctx, "open the store of large pages", s.log, func(ctx context.Context) error {
		obs, err := bus.ObjectStore(ctx, s.js, bus.ObjectBrain, s.opts.Replicas)
		s.obs = obs
		return err
	})
	return s.obs, err
}

// maxAttempts bounds the rounds of a Delete at the page's revision: each round of
// writers racing on one page lets one through. (Writes go through [bus.Change].)
const maxAttempts = 16

// Create stores a new page; an id the agent already uses yields ErrExists.
func (s *Store) Create(ctx context.Context, agent string, p Page) (Page, error) {
	return s.put(ctx, agent, p, true)
}

// Put stores a page, replacing the agent's page of the same id if there is one. The
// stored page, with its tags normalized and Updated set, is returned.
func (s *Store) Put(ctx context.Context, agent string, p Page) (Page, error) {
	return s.put(ctx, agent, p, false)
}

func (s *Store) put(ctx context.Context, agent string, p Page, create bool) (Page, error) {
	if err := CheckAgent(agent); err != nil {
		return Page{}, err
	}
	if err := normalize(&p); err != nil {
		return Page{}, err
	}
	kv, err := s.Bucket(ctx)
	if err != nil {
		return Page{}, err
	}
	p.Updated = time.Now().UTC().Truncate(time.Millisecond)
	rec := Record{ID: p.ID, Title: p.Title, Tags: p.Tags, Updated: p.Updated, Size: len(p.Text), Text: p.Text}
	b, err := json.Marshal(&rec)
	if err != nil {
		return Page{}, fmt.Errorf("encode page %s: %w", p.ID, err)
	}
	k := key(agent, p.ID)
	if len(b) > InlineMax {
		// The object first: a record never names an object that is not there.
		obs, err := s.objects(ctx)
		if err != nil {
			return Page{}, err
		}
		rec.Text, rec.Object = "", k+"."+bus.NewID()
		if _, err := obs.PutBytes(ctx, rec.Object, []byte(p.Text)); err != nil {
			return Page{}, fmt.Errorf("store the text of page %s: %w", p.ID, err)
		}
		if b, err = json.Marshal(&rec); err != nil {
			return Page{}, fmt.Errorf("encode page %s: %w", p.ID, err)
		}
	}
	old, err := s.swap(ctx, kv, k, b, create)
	if err != nil {
		if rec.Object != "" {
			s.dropObject(rec.Object)
		}
		if errors.Is(err, ErrExists) {
			return Page{}, fmt.Errorf("agent %s: page %s: %w", agent, p.ID, err)
		}
		return Page{}, fmt.Errorf("store page %s of %s: %w", p.ID, agent, err)
	}
	if old != nil && old.Object != "" {
		s.dropObject(old.Object)
	}
	return p, nil
}

// swap writes b under k with a compare-and-set on the key's revision ([bus.Change]) and
// returns the record it replaced (nil for none). With create, an existing key yields
// ErrExists.
func (s *Store) swap(ctx context.Context, kv jetstream.KeyValue, k string, b []byte, create bool) (*Record, error) {
	var old *Record
	_, _, err := bus.Change(ctx, kv, k, rawBytes, rawBytes, func(doc *[]byte, found bool) error {
		old = nil
		if found {
			if create {
				return ErrExists
			}
			var r Record
			if err := json.Unmarshal(*doc, &r); err != nil {
				r = Record{} // a record this build cannot read is replaced all the same
			}
			old = &r
		}
		*doc = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	return old, nil
}

// rawBytes is the decode and encode of a document [bus.Change] hands over as stored.
func rawBytes(b []byte) ([]byte, error) { return b, nil }

// dropObject deletes the object of a replaced, deleted or never recorded page. A
// failure leaves an orphan object, which is logged: no record names it.
func (s *Store) dropObject(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := s.objects(ctx)
	if err == nil {
		err = obs.Delete(ctx, name)
	}
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		s.log.Warn("knowledge store: an object no page names is left behind", "object", name, "err", err)
	}
}

// Get returns one page of an agent, its text read from the object store for a large
// page.
func (s *Store) Get(ctx context.Context, agent, id string) (Page, error) {
	var p Page
	err := s.withRecord(ctx, agent, id, func(rec *Record) error {
		text, err := s.Text(ctx, rec)
		if err != nil {
			return err
		}
		p = Page{ID: rec.ID, Title: rec.Title, Tags: rec.Tags, Updated: rec.Updated, Text: text}
		return nil
	})
	return p, err
}

// pageKey checks an agent and a page id and gives the bucket and the page's key in it.
func (s *Store) pageKey(ctx context.Context, agent, id string) (jetstream.KeyValue, string, error) {
	if err := CheckAgent(agent); err != nil {
		return nil, "", err
	}
	if err := CheckID(id); err != nil {
		return nil, "", err
	}
	kv, err := s.Bucket(ctx)
	if err != nil {
		return nil, "", err
	}
	return kv, key(agent, id), nil
}

// withRecord reads the record of an agent's page and gives it to use. A large page
// replaced between reading its record and its object loses that object (use sees
// jetstream.ErrObjectNotFound): then the new record is read, a few times at most.
func (s *Store) withRecord(ctx context.Context, agent, id string, use func(*Record) error) error {
	kv, k, err := s.pageKey(ctx, agent, id)
	if err != nil {
		return err
	}
	for range 3 {
		var e jetstream.KeyValueEntry
		err := bus.Retry(ctx, "read page "+id, s.log, func(ctx context.Context) (err error) {
			e, err = kv.Get(ctx, k)
			return err
		})
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("agent %s: page %s: %w", agent, id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		rec, err := Decode(e)
		if err != nil {
			return err
		}
		if err := use(rec); !errors.Is(err, jetstream.ErrObjectNotFound) {
			return err
		}
	}
	return fmt.Errorf("page %s of %s is being replaced faster than it can be read; try again", id, agent)
}

// Decode reads a page's record from its KV entry.
func Decode(e jetstream.KeyValueEntry) (*Record, error) {
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("stored page %s at revision %d is not a page record: %w", e.Key(), e.Revision(), err)
	}
	return &rec, nil
}

// Text is a record's text: inline, or read from its object. An object deleted while it
// is read (its page replaced meanwhile) is jetstream.ErrObjectNotFound within
// objectReadAttempt, as one deleted before: see readObject.
func (s *Store) Text(ctx context.Context, rec *Record) (string, error) {
	if rec.Object == "" {
		return rec.Text, nil
	}
	obs, err := s.objects(ctx)
	if err != nil {
		return "", err
	}
	b, err := readObject(ctx, obs, rec.Object)
	if err != nil {
		return "", fmt.Errorf("read the text of page %s: %w", rec.ID, err)
	}
	return string(b), nil
}

// objectReadAttempt bounds one attempt of readDeleting.
const objectReadAttempt = 5 * time.Second

// readObject reads an object whole (readDeleting).
func readObject(ctx context.Context, obs jetstream.ObjectStore, name string) ([]byte, error) {
	return readDeleting(ctx, obs, name, func(ctx context.Context) ([]byte, error) { return obs.GetBytes(ctx, name) })
}

// readDeleting runs read, a read of object name, for as long as ctx lasts, in attempts.
// nats.go reads an object's description, then its chunks: one deleted between the two (a
// page replaced while the knowledge index or a reader read it) has no chunks left, and
// the read waited for them until its context's deadline, which a cancellation does not
// cut short (the index's 30 s: its recall missed the page that long, seen in
// TestRolesUseTheStore under load). So each attempt has objectReadAttempt; one that runs
// out asks whether the object was deleted (jetstream.ErrObjectNotFound, as for an object
// deleted before), and if not reads again.
func readDeleting(ctx context.Context, obs jetstream.ObjectStore, name string, read func(context.Context) ([]byte, error)) ([]byte, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, objectReadAttempt)
		b, err := read(actx)
		// By the clock: the read's own deadline (its pipe's) can come a moment before
		// actx says it ended.
		ranOut := bus.OutOfTime(actx)
		cancel()
		if err == nil || !ranOut || ctx.Err() != nil {
			return b, err
		}
		info, ierr := obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted())
		if errors.Is(ierr, jetstream.ErrObjectNotFound) || (ierr == nil && info.Deleted) {
			return nil, fmt.Errorf("object %s was deleted while it was read: %w", name, jetstream.ErrObjectNotFound)
		}
	}
}

// List returns the agent's pages without their text, by id.
func (s *Store) List(ctx context.Context, agent string) ([]Info, error) {
	if err := CheckAgent(agent); err != nil {
		return nil, err
	}
	kv, err := s.Bucket(ctx)
	if err != nil {
		return nil, err
	}
	// The watch lives as long as this listing: its context ends it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var w jetstream.KeyWatcher
	err = bus.Retry(ctx, "list the pages of "+agent, s.log, func(context.Context) (err error) {
		w, err = kv.Watch(ctx, agent+".>", jetstream.IgnoreDeletes())
		return err
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var out []Info
	for done := false; !done; {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return nil, fmt.Errorf("list the pages of %s: the listing stopped early", agent)
			case e == nil:
				done = true
			default:
				rec, err := Decode(e)
				if err != nil {
					return nil, err
				}
				out = append(out, rec.info())
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("list the pages of %s: %w", agent, ctx.Err())
		}
	}
	slices.SortFunc(out, func(a, b Info) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Delete removes one page of an agent (and the object of a large one).
func (s *Store) Delete(ctx context.Context, agent, id string) error {
	kv, k, err := s.pageKey(ctx, agent, id)
	if err != nil {
		return err
	}
	for range maxAttempts {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("agent %s: page %s: %w", agent, id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("delete page %s of %s: %w", id, agent, err)
		}
		err = kv.Delete(ctx, k, jetstream.LastRevision(e.Revision()))
		if bus.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("delete page %s of %s: %w", id, agent, err)
		}
		if rec, derr := Decode(e); derr == nil && rec.Object != "" {
			s.dropObject(rec.Object)
		}
		return nil
	}
	return fmt.Errorf("delete page %s of %s: the page kept changing; try again", id, agent)
}
