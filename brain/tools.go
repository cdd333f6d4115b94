package brain

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/internal/label"
	"github.com/toolbus/toolbus/schema"
)

// Category is the tool category of recall and get_page.
const Category = "brain"

type recallArgs struct {
	Query string   `json:"query"`
	Limit int      `json:"limit,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

type getPageArgs struct {
	ID     string `json:"id"`
	Offset int    `json:"offset,omitempty"`
}

// The parameter schemas, sent byte for byte.
var (
	recallSchema = schema.MustFromJSON([]byte(`{
  "type": "object",
  "properties": {
    "query": {"type": "string", "minLength": 1, "maxLength": 500, "description": "Words or a phrase to look for."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "How many pages at most, best first (default 5)."},
    "tags": {
      "type": "array",
      "items": {"type": "string", "minLength": 1, "maxLength": 32},
      "maxItems": 16,
      "description": "Only pages that carry every one of these tags."
    }
  },
  "required": ["query"],
  "additionalProperties": false
}`))
	getPageSchema = schema.MustFromJSON([]byte(`{
  "type": "object",
  "properties": {
    "id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The page's id, as recall gives it."},
    "offset": {"type": "integer", "minimum": 0, "description": "Where to start reading: 0 (the default) or the offset a previous get_page said to read on from."}
  },
  "required": ["id"],
  "additionalProperties": false
}`))
)

// specs are the tools' specs; Tools adds the functions.
func specs() []toolbus.Spec {
	return []toolbus.Spec{
		{
			Name: "recall",
			Description: "Search your knowledge store, the pages kept for you across turns, for what you need to know. " +
				"Returns the best matching pages first, each with its id, title, tags and a snippet around the matching words. " +
				"Read a whole page with get_page.",
			Mode:     toolbus.Parallel,
			ReadOnly: true,
			Category: Category,
			Params:   recallSchema,
		},
		{
			Name:        "get_page",
			Description: "Read one page of your knowledge store by its id. A long page comes in parts: the result says which offset to read on from.",
			Mode:        toolbus.Parallel,
			ReadOnly:    true,
			Category:    Category,
			Params:      getPageSchema,
		},
	}
}

// Specs returns the specs of recall and get_page, in the order the model sees them.
func Specs() []*toolbus.Spec {
	s := specs()
	return []*toolbus.Spec{&s[0], &s[1]}
}

// Tools returns recall and get_page over store, for a host of the brain category: each
// call works on the pages of the calling agent (call.Agent). A nil store makes every
// call fail with ErrNoStore.
func Tools(store *Store) []*toolbus.Tool {
	s := specs()
	return []*toolbus.Tool{
		toolbus.MustDefine(toolbus.Def[recallArgs]{
			Spec: s[0],
			DescribeActivity: func(a recallArgs) string {
				return "Recalling " + quote(a.Query)
			},
			DescribeCompletedActivity: func(a recallArgs, res toolbus.Result) string {
				var r Recall
				if res.IsError || json.Unmarshal(res.Details, &r) != nil {
					return "Could not recall " + quote(a.Query)
				}
				return fmt.Sprintf("Found %s for %s", label.Plural(len(r.Hits), "page"), quote(a.Query))
			},
			Execute: func(ctx context.Context, call toolbus.Call, a recallArgs) (toolbus.Result, error) {
				if store == nil {
					return toolbus.Result{}, ErrNoStore
				}
				r, err := store.Recall(ctx, call.Agent, Query{Text: a.Query, Limit: a.Limit, Tags: a.Tags})
				if err != nil {
					return toolbus.Result{}, err
				}
				return toolbus.TextResult(r.String()).WithDetails(r), nil
			},
		}),
		toolbus.MustDefine(toolbus.Def[getPageArgs]{
			Spec: s[1],
			DescribeActivity: func(a getPageArgs) string {
				return "Reading page " + a.ID
			},
			DescribeCompletedActivity: func(a getPageArgs, res toolbus.Result) string {
				var d excerptDetails
				if res.IsError || json.Unmarshal(res.Details, &d) != nil {
					return "Could not read page " + a.ID
				}
				if d.Offset == 0 && d.NextOffset == 0 {
					return fmt.Sprintf("Read page %s (%s)", a.ID, label.Plural(d.Size, "byte"))
				}
				return fmt.Sprintf("Read page %s (bytes %d–%d of %d)", a.ID, d.Offset, d.End, d.Size)
			},
			Execute: func(ctx context.Context, call toolbus.Call, a getPageArgs) (toolbus.Result, error) {
				if store == nil {
					return toolbus.Result{}, ErrNoStore
				}
				ex, err := store.Read(ctx, call.Agent, a.ID, a.Offset)
				if err != nil {
					return toolbus.Result{}, err
				}
				d := excerptDetails(ex)
				d.Text = "" // the model has it; the details say where it was cut
				return toolbus.TextResult(ex.String()).WithDetails(d), nil
			},
		}),
	}
}

// excerptDetails are get_page's details: the excerpt without its text.
type excerptDetails Excerpt

// String is a recall as the model reads it.
func (r Recall) String() string {
	var b strings.Builder
	if len(r.Hits) == 0 {
		fmt.Fprintf(&b, "No page matches %s (your knowledge store holds %s).", quote(r.Query), label.Plural(r.Pages, "page"))
		return b.String()
	}
	switch {
	case uint64(len(r.Hits)) < r.Total:
		fmt.Fprintf(&b, "%d pages match %s; the best %d:\n", r.Total, quote(r.Query), len(r.Hits))
	case len(r.Hits) == 1:
		fmt.Fprintf(&b, "1 page matches %s:\n", quote(r.Query))
	default:
		fmt.Fprintf(&b, "%d pages match %s:\n", len(r.Hits), quote(r.Query))
	}
	for i, h := range r.Hits {
		fmt.Fprintf(&b, "%d. %s: %s", i+1, h.ID, h.Title)
		if len(h.Tags) > 0 {
			fmt.Fprintf(&b, " [%s]", strings.Join(h.Tags, ", "))
		}
		fmt.Fprintf(&b, " (updated %s)\n", h.Updated.Format("2006-01-02"))
		if h.Snippet != "" {
			fmt.Fprintf(&b, "   %s\n", h.Snippet)
		}
	}
	b.WriteString("Read a page with get_page and its id.")
	return b.String()
}

// quote quotes a query for a label, cut to 60 characters.
func quote(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > 60 {
		s = string([]rune(s)[:59]) + "…"
	}
	return "“" + s + "”"
}
