// Package pages holds the knowledge pages of a bus's agents as JetStream keeps them: a
// record per page in the KV bucket bus.BucketBrain, the text of a large one in the
// object store, with their rules and a compare-and-set write. Package brain searches
// them (a bleve index per agent); this package links none of that, so a client reads
// and writes pages with it (client.Pages).
package pages

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/toolbus/toolbus/bus"
)

// Limits of a page.
const (
	// MaxIDLen is the longest page id, in bytes.
	MaxIDLen = 64
	// MaxTitleLen is the longest title, in bytes.
	MaxTitleLen = 300
	// MaxTags is the most tags a page carries; MaxTagLen the longest tag, in bytes.
	MaxTags   = 16
	MaxTagLen = 32
	// MaxTextLen is the longest text a page holds, in bytes.
	MaxTextLen = 16 << 20
	// InlineMax is the longest record the KV bucket holds (its MaxValueSize): a page
	// whose record would be longer keeps its text in the object store.
	InlineMax = 64 << 10
)

// Errors callers branch on.
var (
	// ErrNotFound reports a page the agent does not have.
	ErrNotFound = errors.New("no such page")
	// ErrExists reports a page id that is taken, to Create.
	ErrExists = errors.New("page exists")
	// ErrBadPage wraps every refusal of a page's fields.
	ErrBadPage = errors.New("bad page")
	// ErrNoStore is what the tools answer when they were built without a store.
	ErrNoStore = errors.New("the knowledge store is not available on this node")
)

// Page is one page of an agent's knowledge store.
type Page struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Text  string `json:"text"`
	// Tags are lower-case words or short phrases (letters, digits, '-', '_', '.', ':').
	Tags []string `json:"tags,omitempty"`
	// Updated is when the page was last written; the store sets it.
	Updated time.Time `json:"updated"`
}

// Info is a page without its text, as List returns it.
type Info struct {
	ID      string    `json:"id"`
	Title   string    `json:"title"`
	Tags    []string  `json:"tags,omitempty"`
	Updated time.Time `json:"updated"`
	// Size is the text's length in bytes.
	Size int `json:"size"`
	// Object names the object holding the text of a large page; empty when inline.
	Object string `json:"object,omitempty"`
}

// Record is a page as the KV bucket holds it: its fields, and the text itself or the
// name of the object that holds it.
type Record struct {
	ID      string    `json:"id"`
	Title   string    `json:"title"`
	Tags    []string  `json:"tags,omitempty"`
	Updated time.Time `json:"updated"`
	Size    int       `json:"size"`
	Text    string    `json:"text,omitempty"`
	Object  string    `json:"object,omitempty"`
}

func (r *Record) info() Info {
	return Info{ID: r.ID, Title: r.Title, Tags: r.Tags, Updated: r.Updated, Size: r.Size, Object: r.Object}
}

func badPage(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadPage, fmt.Sprintf(format, args...))
}

// CheckID applies the rule for page ids: 1 to MaxIDLen ASCII letters, digits, '_' or
// '-', starting with a letter or digit. Such an id is one KV key token.
func CheckID(id string) error {
	if id == "" {
		return badPage("page id is empty")
	}
	if len(id) > MaxIDLen {
		return badPage("page id is %d bytes long; at most %d are allowed", len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if i > 0 {
			ok = ok || c == '_' || c == '-'
		}
		if !ok {
			r, _ := utf8.DecodeRuneInString(id[i:])
			return badPage("page id %q has %s at position %d; use ASCII letters, digits, '_' and '-' (not first)", id, strconv.QuoteRune(r), i+1)
		}
	}
	return nil
}

// Slug makes a page id from a title: lower-case letters and digits, other runs as
// '-', at most MaxIDLen bytes. A title with no ASCII letter or digit gives "".
func Slug(title string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(title) {
		if r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			if b.Len() >= MaxIDLen {
				break
			}
			continue
		}
		dash = true
	}
	return strings.TrimRight(b.String()[:min(b.Len(), MaxIDLen)], "-")
}

// normalize checks a page's fields and returns its tags lower-cased, without repeats,
// in their order.
func normalize(p *Page) error {
	if err := CheckID(p.ID); err != nil {
		return err
	}
	p.Title = strings.TrimSpace(p.Title)
	switch {
	case p.Title == "":
		return badPage("page %s has no title", p.ID)
	case len(p.Title) > MaxTitleLen:
		return badPage("the title of page %s is %d bytes long; at most %d are allowed", p.ID, len(p.Title), MaxTitleLen)
	case !utf8.ValidString(p.Title) || !utf8.ValidString(p.Text):
		return badPage("page %s is not valid UTF-8 text", p.ID)
	case len(p.Text) > MaxTextLen:
		return badPage("the text of page %s is %d bytes long; at most %d are allowed", p.ID, len(p.Text), MaxTextLen)
	case len(p.Tags) > MaxTags:
		return badPage("page %s has %d tags; at most %d are allowed", p.ID, len(p.Tags), MaxTags)
	}
	tags := make([]string, 0, len(p.Tags))
	for _, t := range p.Tags {
		t = strings.ToLower(strings.TrimSpace(t))
		if err := CheckTag(t); err != nil {
			return fmt.Errorf("%w: page %s: %w", ErrBadPage, p.ID, err)
		}
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	p.Tags = tags
	if len(tags) == 0 {
		p.Tags = nil
	}
	return nil
}

// CheckTag applies the rule for a (lower-cased) tag.
func CheckTag(t string) error {
	if t == "" {
		return errors.New("a tag is empty")
	}
	if len(t) > MaxTagLen {
		return fmt.Errorf("tag %q is %d bytes long; at most %d are allowed", t, len(t), MaxTagLen)
	}
	for _, r := range t {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.' || r == ':') {
			return fmt.Errorf("tag %q has %s; use letters, digits, '-', '_', '.' and ':'", t, strconv.QuoteRune(r))
		}
	}
	return nil
}

// key is the KV key of an agent's page.
func key(agent, id string) string { return agent + "." + id }

// CheckAgent refuses a call without an agent and agent ids that cannot key pages.
func CheckAgent(agent string) error {
	if agent == "" {
		return errors.New("no agent id: the knowledge store keeps pages per agent")
	}
	if err := bus.CheckAgent(agent); err != nil {
		return fmt.Errorf("agent %q cannot key pages: %w", agent, err)
	}
	return nil
}
