package web

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCleanSnippet: whatever a provider sends as a snippet becomes one line of valid
// text within its bound.
func FuzzCleanSnippet(f *testing.F) {
	for _, s := range []string{"A <strong>tide pool</strong> &amp; more", "<script>x</script>y", "&#xFFFF;", "a\n\tb", "<", "é\xff"} {
		f.Add(s, 20)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		max = 2 + abs(max)%600
		got := cleanSnippet(s, max)
		if n := utf8.RuneCountInString(got); n > max {
			t.Fatalf("%d characters, bound %d", n, max)
		}
		if strings.ContainsAny(got, "\n\t\r") || got != strings.TrimSpace(got) {
			t.Fatalf("not one trimmed line: %q", got)
		}
	})
}

// FuzzWindow: the parts of a page, read on offset by offset, add up to the page, each
// within its bound.
func FuzzWindow(f *testing.F) {
	f.Add("line one\nline two\nline three", 3)
	f.Add(strings.Repeat("ü ", 50), 7)
	f.Add("", 1)
	f.Fuzz(func(t *testing.T, page string, maxChars int) {
		page = strings.ToValidUTF8(page, "?")
		maxChars = 1 + abs(maxChars)%64
		var b strings.Builder
		offset := 0
		for i := 0; ; i++ {
			w, err := window(page, offset, maxChars)
			if err != nil {
				t.Fatalf("offset %d: %v", offset, err)
			}
			if w.end-w.start > maxChars || w.end <= w.start && w.total > 0 {
				t.Fatalf("part [%d,%d) of bound %d", w.start, w.end, maxChars)
			}
			b.WriteString(w.text)
			if w.next == 0 {
				break
			}
			offset = w.next
		}
		if b.String() != page {
			t.Fatalf("parts %q, page %q", b.String(), page)
		}
	})
}

// FuzzHTMLToMarkdown: any page converts without a panic, to valid UTF-8.
func FuzzHTMLToMarkdown(f *testing.F) {
	f.Add("<html><head><title>T</title></head><body><nav>n</nav><article><p>text</p></article></body></html>")
	f.Add("<p>unclosed <b>bold <i>both</p><table><tr><td>a<td>b</table>")
	f.Add("<svg><script>alert(1)</script></svg><!-- c --><pre>x</pre>")
	u, _ := url.Parse("https://example.com/a/b")
	f.Fuzz(func(t *testing.T, page string) {
		if len(page) > 1<<16 {
			return
		}
		_, md, err := htmlToMarkdown([]byte(strings.ToValidUTF8(page, "?")), u)
		if err == nil && !utf8.ValidString(md) {
			t.Fatalf("invalid UTF-8 from %q", page)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		if n == -n {
			return 0
		}
		return -n
	}
	return n
}
