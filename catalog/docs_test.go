package catalog

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/micro"
)

// TestCatalogSkipLinesMatchDocs serves the category weather of docs/protocol.md §3 as a
// plain micro service of node go1 (one good endpoint, then the three bad ones the page
// shows), reads it with a catalog, and compares each line the catalog says it skipped
// (Category.Problems, which `toolbus tools -catalog` prints after "toolbus: ") with the
// page's sample, verbatim but for the service's instance id, which micro makes anew.
func TestCatalogSkipLinesMatchDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "toolbus: category weather: ") {
			want = append(want, strings.TrimPrefix(l, "toolbus: "))
		}
	}
	if len(want) != 3 {
		t.Fatalf("docs/protocol.md §3 shows %d skip lines of category weather, want 3:\n%s", len(want), strings.Join(want, "\n"))
	}
	docID := regexp.MustCompile(`\(instance (\w+)\)`).FindStringSubmatch(want[0])
	if docID == nil {
		t.Fatalf("no instance id in %q", want[0])
	}

	srv, nc := testBus(t)
	hostConn, err := srv.Connect("go1")
	if err != nil {
		t.Fatal(err)
	}
	defer hostConn.Close()
	svc, err := micro.AddService(hostConn, micro.Config{Name: "toolbus-weather", Version: Version,
		Metadata: map[string]string{KeyCategory: "weather", KeyNode: "go1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()
	good := Metadata(spec("forecast", "weather", "", "Forecast for a city."))
	with := func(key, value string) map[string]string {
		md := make(map[string]string, len(good))
		for k, v := range good {
			md[k] = v
		}
		md[key] = value
		return md
	}
	noop := micro.HandlerFunc(func(micro.Request) {})
	for _, ep := range []struct {
		name string
		md   map[string]string
	}{
		{"forecast", good},
		{"radar", with(KeySchema, `{"type":"object","properties":{"area":{"$ref":"https://example.com/area.json"}}}`)},
		{"alerts", with(KeyMode, "sometimes")},
		{"history", with(KeyTimeout, "90")},
	} {
		if err := svc.AddEndpoint(ep.name, noop, micro.WithEndpointSubject("toolbus.tool.weather."+ep.name),
			micro.WithEndpointQueueGroup("toolbus.weather"), micro.WithEndpointMetadata(ep.md)); err != nil {
			t.Fatal(err)
		}
	}
	if err := hostConn.Flush(); err != nil {
		t.Fatal(err)
	}
	cat := New(nc, quick())
	if err := cat.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	cats := cat.Categories()
	if len(cats) != 1 || cats[0].Name != "weather" || len(cats[0].Specs) != 1 {
		t.Fatalf("categories %+v, want weather with forecast alone", cats)
	}
	got := cats[0].Problems()
	if len(got) != len(want) {
		t.Fatalf("the catalog says\n%s\nthe page\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := range got {
		line := strings.ReplaceAll(got[i], "(instance "+svc.Info().ID+")", "(instance "+docID[1]+")")
		if line != want[i] {
			t.Errorf("skip line %d:\ncatalog: %s\npage:    %s", i+1, line, want[i])
		}
	}
}
