package toolbus_test

// The README's Go code is checked here, block by block. The convention:
//
//   - a ```go block that starts with "package" is a whole file: it is built as it
//     stands, a package of its own inside this module (so it uses the module's go.mod);
//   - any other ```go block is a fragment of declarations: it is wrapped in a package
//     of its own, with an import of each package of fragmentImports that it names
//     ("context." imports context), and type-checked with go vet.
//
// The embedding example, the one whole program that imports package node, is also run
// (offline: it plays a script), and what it prints must be the ```text block that
// follows it in the README.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fragmentImports are the packages a README fragment may name without importing them.
var fragmentImports = map[string]string{
	"context": "context",
	"errors":  "errors",
	"fmt":     "fmt",
	"json":    "encoding/json",
	"log":     "log",
	"os":      "os",
	"strings": "strings",
	"time":    "time",
	"toolbus": "github.com/toolbus/toolbus",
	"bus":     "github.com/toolbus/toolbus/bus",
	"client":  "github.com/toolbus/toolbus/client",
	"gateway": "github.com/toolbus/toolbus/gateway",
	"node":    "github.com/toolbus/toolbus/node",
	"schema":  "github.com/toolbus/toolbus/schema",
}

// Limits of the embedding example (issue 26): about 30 lines, at most two toolbus
// packages besides the contract.
const (
	embedMaxLines   = 35 // lines that are not blank
	embedMaxImports = 2
)

// block is one fenced code block of the README.
type block struct {
	lang, text string
	line       int // of the opening fence
}

func readmeBlocks(t *testing.T) []block {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	var cur *block
	var body strings.Builder
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: i + 1}
			body.Reset()
		case cur != nil && strings.TrimSpace(l) == "```":
			cur.text = body.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(l)
			body.WriteByte('\n')
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: unclosed code block", cur.line)
	}
	return blocks
}

// goTool is the go command, or a skip.
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	return p
}

// inModule writes src as the one file of a package directory inside the module and
// returns the directory's relative path ("./.readme-…"). Directories starting with a
// dot are left out of ./... patterns. The directory is named for what it holds (use,
// file, src), so that a block that did not change has the same import path as last
// time and the go command's caches (go vet's results, go run's executables) answer for
// it: the embedding example links the node, NATS server included, in about 5 s of
// CPU otherwise. Should that directory exist already (a run beside this one, or one
// that was killed), it gets a fresh one.
func inModule(t *testing.T, use, file, src string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(use + "\x00" + file + "\x00" + src))
	dir := ".readme-" + hex.EncodeToString(sum[:6])
	if err := os.Mkdir(dir, 0o755); err != nil {
		if dir, err = os.MkdirTemp(".", ".readme-"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, file), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return "./" + filepath.ToSlash(dir)
}

// goCmd runs the go command; its standard error goes with its standard output unless
// stderr is given.
func goCmd(t *testing.T, timeout time.Duration, stderr *bytes.Buffer, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if stderr != nil {
		cmd.Stderr = stderr
	}
	err := cmd.Run()
	return out.Bytes(), err
}

// wrapFragment makes a README fragment a package: a package clause and the imports of
// the packages it names.
func wrapFragment(text string) string {
	var b strings.Builder
	b.WriteString("package readme\n\nimport (\n")
	for _, name := range slices.Sorted(maps.Keys(fragmentImports)) {
		path := fragmentImports[name]
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(text) {
			if filepath.Base(path) == name {
				b.WriteString("\t" + strconv.Quote(path) + "\n")
			} else {
				b.WriteString("\t" + name + " " + strconv.Quote(path) + "\n")
			}
		}
	}
	b.WriteString(")\n\n")
	b.WriteString(text)
	return b.String()
}

func TestReadmeGoBlocksCompile(t *testing.T) {
	t.Parallel()
	var n int
	for _, bl := range readmeBlocks(t) {
		if bl.lang != "go" {
			continue
		}
		n++
		src, file := bl.text, "main.go"
		if !strings.HasPrefix(strings.TrimSpace(src), "package ") {
			src, file = wrapFragment(src), "readme.go"
		}
		dir := inModule(t, "vet", file, src)
		if out, err := goCmd(t, 5*time.Minute, nil, "vet", dir); err != nil {
			t.Errorf("README.md:%d: the go block does not compile: %v\n%s\n--- the file:\n%s", bl.line, err, out, src)
		}
	}
	if n < 2 {
		t.Fatalf("the README has %d go blocks, want the tool and the embedding example", n)
	}
}

// embedExample is the README's embedding example and the output it shows.
func embedExample(t *testing.T) (b block, want string) {
	blocks := readmeBlocks(t)
	for i, bl := range blocks {
		if bl.lang == "go" && strings.HasPrefix(bl.text, "package main") && strings.Contains(bl.text, `"github.com/toolbus/toolbus/node"`) {
			if i+1 == len(blocks) || blocks[i+1].lang != "text" {
				t.Fatalf("README.md:%d: the embedding example is not followed by a text block of what it prints", bl.line)
			}
			return bl, blocks[i+1].text
		}
	}
	t.Fatal("the README has no embedding example (a package main importing github.com/toolbus/toolbus/node)")
	return
}

func TestEmbedInThirtyLines(t *testing.T) {
	t.Parallel()
	ex, want := embedExample(t)
	var lines int
	for _, l := range strings.Split(ex.text, "\n") {
		if strings.TrimSpace(l) != "" {
			lines++
		}
	}
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", ex.text, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var toolbusImports []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasPrefix(p, "github.com/toolbus/toolbus/") {
			toolbusImports = append(toolbusImports, p)
		}
	}
	t.Logf("the embedding example: %d lines that are not blank (%d in all), toolbus imports besides the contract: %v",
		lines, strings.Count(ex.text, "\n"), toolbusImports)
	if lines > embedMaxLines {
		t.Errorf("README.md:%d: the embedding example has %d lines, want at most %d", ex.line, lines, embedMaxLines)
	}
	if len(toolbusImports) > embedMaxImports {
		t.Errorf("README.md:%d: the embedding example imports %v, want at most %d toolbus packages besides the contract", ex.line, toolbusImports, embedMaxImports)
	}

	// go run, not go build: it keeps the executable in the build cache, and builds it
	// again whenever the example or anything it imports changed.
	dir := inModule(t, "run", "main.go", ex.text)
	var stderr bytes.Buffer
	out, err := goCmd(t, 5*time.Minute, &stderr, "run", dir)
	if err != nil {
		t.Fatalf("build and run the embedding example: %v\n%s", err, stderr.Bytes())
	}
	if got := string(out); got != want {
		t.Errorf("the embedding example prints\n%s\nthe README says it prints\n%s", got, want)
	}
	if stderr.Len() > 0 {
		t.Logf("its standard error:\n%s", stderr.Bytes())
	}
}
