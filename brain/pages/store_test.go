package pages_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/brain/pages"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/bus/bustest"
)

// The pages stand alone: written, read (a large one through the object store), listed,
// read in parts and deleted with this package only, with no index anywhere.
func TestPagesStandAlone(t *testing.T) {
	t.Parallel()
	js := bustest.JetStream(t, bustest.Server(t, nil), "pages")
	ctx := bustest.Context(t)
	s := pages.NewStore(js, pages.Options{})

	big := strings.Repeat("a line of a long runbook\n", 4000) // 100 KB: over InlineMax
	if _, err := s.Put(ctx, "ops", pages.Page{ID: "runbook", Title: "Runbook", Tags: []string{"Ops"}, Text: big}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "ops", pages.Page{ID: "runbook", Title: "again"}); !errors.Is(err, pages.ErrExists) {
		t.Fatalf("Create over a page = %v, want ErrExists", err)
	}
	p, err := s.Get(ctx, "ops", "runbook")
	if err != nil || p.Text != big || len(p.Tags) != 1 || p.Tags[0] != "ops" {
		t.Fatalf("Get = %q (%d bytes), %v", p.Tags, len(p.Text), err)
	}
	ex, err := s.Read(ctx, "ops", "runbook", 0)
	if err != nil || ex.NextOffset == 0 || len(ex.Text) > pages.PageChunk {
		t.Fatalf("Read = %d bytes, next %d, %v; want the first part", len(ex.Text), ex.NextOffset, err)
	}
	list, err := s.List(ctx, "ops")
	if err != nil || len(list) != 1 || list[0].ID != "runbook" || list[0].Size != len(big) {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if err := s.Delete(ctx, "ops", "runbook"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "ops", "runbook"); !errors.Is(err, pages.ErrNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrNotFound", err)
	}
}

// The text of a large page whose object is deleted while it is read (the page replaced
// meanwhile) is jetstream.ErrObjectNotFound soon after, not a read that waits for chunks
// that are gone until its context's deadline; and so for a part of it (Read, which reads
// the record again and finds the same deleted object). The object's chunks are purged
// first, as a deletion between nats.go's reading of the description and of the chunks
// leaves it, and the object deleted once the read waits for them: the read ends at the
// end of its attempt (5 s), when it asks whether the object is still there.
func TestTextOfObjectDeletedWhileRead(t *testing.T) {
	t.Parallel()
	js := bustest.JetStream(t, bustest.Server(t, nil), "pages")
	ctx := bustest.Context(t)
	s := pages.NewStore(js, pages.Options{})
	big := strings.Repeat("a line of a long runbook\n", 4000)
	for _, c := range []struct {
		page string
		read func(ctx context.Context, rec *pages.Record) error
		want error
	}{
		{"whole", func(ctx context.Context, rec *pages.Record) error { _, err := s.Text(ctx, rec); return err }, jetstream.ErrObjectNotFound},
		{"part", func(ctx context.Context, rec *pages.Record) error {
			_, err := s.Read(ctx, "ops", rec.ID, 100)
			if err != nil && strings.Contains(err.Error(), "is being replaced faster than it can be read") {
				return nil // its record read again names the deleted object each time
			}
			return fmt.Errorf("read a part: %v, want the page being replaced", err)
		}, nil},
	} {
		t.Run(c.page, func(t *testing.T) {
			t.Parallel()
			if _, err := s.Put(ctx, "ops", pages.Page{ID: c.page, Title: "Runbook", Text: big}); err != nil {
				t.Fatal(err)
			}
			kv, err := s.Bucket(ctx)
			if err != nil {
				t.Fatal(err)
			}
			e, err := kv.Get(ctx, "ops."+c.page)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := pages.Decode(e)
			if err != nil || rec.Object == "" {
				t.Fatalf("record %+v %v: want a large page's", rec, err)
			}
			obs, err := js.ObjectStore(ctx, bus.ObjectBrain)
			if err != nil {
				t.Fatal(err)
			}
			info, err := obs.GetInfo(ctx, rec.Object)
			if err != nil {
				t.Fatal(err)
			}
			stream, err := js.Stream(ctx, "OBJ_"+bus.ObjectBrain)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Purge(ctx, jetstream.WithPurgeSubject("$O."+bus.ObjectBrain+".C."+info.NUID)); err != nil {
				t.Fatal(err)
			}
			// The read waits for its chunks until the object is deleted; its context would
			// end it a minute on.
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			read := make(chan error, 1)
			go func() { read <- c.read(rctx, rec) }()
			select {
			case err := <-read:
				t.Fatalf("the read of an object without chunks ended before its deletion: %v", err)
			case <-time.After(500 * time.Millisecond):
			}
			start := time.Now()
			if err := obs.Delete(ctx, rec.Object); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-read:
				if (c.want == nil && err != nil) || (c.want != nil && !errors.Is(err, c.want)) {
					t.Errorf("the read of an object deleted while read: %v", err)
				}
				t.Logf("the read ended %v after the deletion", time.Since(start).Round(time.Millisecond))
			case <-time.After(20 * time.Second):
				t.Fatal("the read of a deleted object still waits 20 s after its deletion")
			}
		})
	}
}
