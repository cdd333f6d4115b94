package toolbus_test

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/toolbus/toolbus"

// TestPackageLayers: every package of the module is in one layer of docs/internals.md §1,
// and imports only packages of lower layers. A change that adds an upward import, or a
// package the table does not name, fails here until the table (and so the page a
// contributor reads) says where it belongs.
func TestPackageLayers(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/internals.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	begin, end := strings.Index(text, "<!-- layers:"), strings.Index(text, "<!-- end of layers -->")
	if begin < 0 || end < begin {
		t.Fatal("docs/internals.md has no layer table between its markers")
	}
	layer := map[string]int{}
	row := regexp.MustCompile("^\\| (\\d+) \\| ([^|]+) \\|")
	name := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(text[begin:end], "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		for _, p := range name.FindAllStringSubmatch(m[2], -1) {
			path := module + "/" + p[1]
			if p[1] == "toolbus" {
				path = module
			}
			if prev, dup := layer[path]; dup {
				t.Errorf("%s is in layers %d and %d", p[1], prev, n)
			}
			layer[path] = n
		}
	}
	if len(layer) < 10 {
		t.Fatalf("read %d packages from the layer table", len(layer))
	}
	seen := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if base := d.Name(); path != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "examples" || base == "node_modules") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files here (or only tests): not a package of the module
		}
		imp := module
		if path != "." {
			imp = module + "/" + filepath.ToSlash(path)
		}
		seen++
		mine, ok := layer[imp]
		if !ok {
			t.Errorf("package %s (%s) is in no layer of docs/internals.md §1", imp, pkg.Name)
			return nil
		}
		for _, dep := range pkg.Imports {
			if dep != module && !strings.HasPrefix(dep, module+"/") {
				continue
			}
			if theirs, ok := layer[dep]; ok && theirs >= mine {
				t.Errorf("%s (layer %d) imports %s (layer %d): a package imports only lower layers", imp, mine, dep, theirs)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < len(layer) {
		t.Errorf("the table names %d packages, the module has %d: remove the ones gone", len(layer), seen)
	}
}
