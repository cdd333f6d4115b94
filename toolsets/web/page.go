package web

import (
	"bytes"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"codeberg.org/readeck/go-readability/v2"
	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/base"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/commonmark"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/table"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// maxElements bounds the elements readability scores; a page with more is converted
// whole (without its boilerplate elements) instead.
const maxElements = 200000

// minArticle is the shortest main content, in characters of text, that readability's
// choice must have to be taken; below it the page is converted whole (a short page, a
// list, a search form), because readability's guess on such pages drops what matters.
const minArticle = 140

// boilerplate are the elements dropped when a page is converted whole.
var boilerplate = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Nav: true, atom.Header: true, atom.Footer: true, atom.Aside: true,
	atom.Form: true, atom.Iframe: true, atom.Svg: true, atom.Button: true,
}

// htmlToMarkdown returns a page's title and its main content as Markdown: readability
// (a port of Firefox's reader view) picks the content, html-to-markdown writes it.
func htmlToMarkdown(raw []byte, pageURL *url.URL) (title, md string, err error) {
	doc, err := html.Parse(bytes.NewReader(raw))
	if err != nil {
		return "", "", fmt.Errorf("parse HTML: %w", err)
	}
	p := readability.NewParser()
	p.MaxElemsToParse = maxElements
	art, aerr := p.ParseDocument(doc, pageURL)
	title = strings.TrimSpace(art.Title())
	node := art.Node
	if aerr != nil || node == nil || len(strings.TrimSpace(innerText(node))) < minArticle {
		node = stripped(doc)
		if title == "" {
			title = docTitle(doc)
		}
	}
	conv := converter.NewConverter(converter.WithPlugins(
		base.NewBasePlugin(), commonmark.NewCommonmarkPlugin(), table.NewTablePlugin(),
	))
	var opts []converter.ConvertOptionFunc
	if pageURL != nil {
		opts = append(opts, converter.WithDomain(pageURL.Scheme+"://"+pageURL.Host))
	}
	out, err := conv.ConvertNode(node, opts...)
	if err != nil {
		return title, "", fmt.Errorf("convert HTML to Markdown: %w", err)
	}
	md = tidy(string(out))
	if title != "" && !strings.HasPrefix(md, "# ") {
		md = "# " + title + "\n\n" + md
	}
	return title, md, nil
}

// stripped is a copy of doc's body without its boilerplate elements.
func stripped(doc *html.Node) *html.Node {
	body := find(doc, atom.Body)
	if body == nil {
		body = doc
	}
	c := clone(body)
	var drop func(n *html.Node)
	drop = func(n *html.Node) {
		for ch := n.FirstChild; ch != nil; {
			next := ch.NextSibling
			if ch.Type == html.CommentNode || ch.Type == html.ElementNode && boilerplate[ch.DataAtom] {
				n.RemoveChild(ch)
			} else {
				drop(ch)
			}
			ch = next
		}
	}
	drop(c)
	return c
}

// clone copies a node and its subtree.
func clone(n *html.Node) *html.Node {
	c := &html.Node{Type: n.Type, DataAtom: n.DataAtom, Data: n.Data, Namespace: n.Namespace, Attr: append([]html.Attribute(nil), n.Attr...)}
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		c.AppendChild(clone(ch))
	}
	return c
}

// find returns the first element a in n's subtree.
func find(n *html.Node, a atom.Atom) *html.Node {
	if n.Type == html.ElementNode && n.DataAtom == a {
		return n
	}
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		if f := find(ch, a); f != nil {
			return f
		}
	}
	return nil
}

// docTitle is the text of the document's <title>.
func docTitle(doc *html.Node) string {
	if t := find(doc, atom.Title); t != nil {
		return strings.Join(strings.Fields(innerText(t)), " ")
	}
	return ""
}

// innerText is the text under n.
func innerText(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(n)
	return b.String()
}

var blankLines = regexp.MustCompile(`\n{3,}`)

// tidy trims trailing spaces and runs of blank lines.
func tidy(md string) string {
	lines := strings.Split(md, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.TrimSpace(blankLines.ReplaceAllString(strings.Join(lines, "\n"), "\n\n"))
}
