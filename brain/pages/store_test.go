package pages_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/brain/pages"
	"github.com/toolbus/toolbus/bus/bustest"
)

// The pages stand alone: written, read (a large one through the object store), listed,
// read in parts and deleted with this package only, with no index anywhere.
func TestPagesStandAlone(t *testing.T) {
	t.Parallel()
	srv := bustest.Server(t, nil)
	js, err := jetstream.New(bustest.Conn(t, srv, "pages"))
	if err != nil {
		t.Fatal(err)
	}
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
