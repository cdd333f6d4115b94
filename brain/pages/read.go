package pages

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// PageChunk is the most text one read of a page returns, in bytes.
const PageChunk = 8000

// Excerpt is a part of a page: its text from Offset to End.
type Excerpt struct {
	ID      string    `json:"id"`
	Title   string    `json:"title"`
	Tags    []string  `json:"tags,omitempty"`
	Updated time.Time `json:"updated"`
	// Size is the whole text's length in bytes.
	Size   int `json:"size"`
	Offset int `json:"offset"`
	End    int `json:"end"`
	// NextOffset is where to read on; 0 when the excerpt ends the page.
	NextOffset int    `json:"next_offset,omitempty"`
	Text       string `json:"text,omitempty"`
}

// Read returns the part of a page that starts at offset (a byte offset, as a previous
// Read's NextOffset gives it): at most PageChunk bytes, ending at a line break when one
// is in its second half, else at a character boundary. An offset inside a character
// starts at the next one.
func (s *Store) Read(ctx context.Context, agent, id string, offset int) (Excerpt, error) {
	if offset < 0 {
		return Excerpt{}, fmt.Errorf("offset %d is negative", offset)
	}
	var ex Excerpt
	err := s.withRecord(ctx, agent, id, func(rec *Record) error {
		if offset > 0 && offset >= rec.Size {
			return fmt.Errorf("offset %d is past the end of page %s, which holds %d bytes", offset, id, rec.Size)
		}
		// Read a few bytes more than a chunk: enough to find where the next character
		// starts after the cut.
		window, err := s.window(ctx, rec, offset, PageChunk+utfMax)
		if err != nil {
			return err
		}
		ex = Excerpt{ID: rec.ID, Title: rec.Title, Tags: rec.Tags, Updated: rec.Updated, Size: rec.Size}
		skip := 0
		for skip < len(window) && skip < utfMax && !isRuneStart(window[skip]) {
			skip++
		}
		window = window[skip:]
		n := chunkEnd(window, rec.Size-offset-skip)
		ex.Offset = offset + skip
		ex.End = ex.Offset + n
		ex.Text = string(window[:n])
		if ex.End < rec.Size {
			ex.NextOffset = ex.End
		}
		return nil
	})
	return ex, err
}

// utfMax is the longest UTF-8 encoding of a character.
const utfMax = 4

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// chunkEnd is where the excerpt of window ends: all of it if the rest of the page
// (rest bytes) fits in a chunk; else at the last line break in the second half of the
// chunk, or else at the last character boundary within it.
func chunkEnd(window []byte, rest int) int {
	if rest <= PageChunk {
		return min(rest, len(window))
	}
	if i := bytes.LastIndexByte(window[PageChunk/2:PageChunk], '\n'); i >= 0 {
		return PageChunk/2 + i + 1
	}
	n := PageChunk
	for n > 0 && !isRuneStart(window[n]) {
		n--
	}
	return n
}

// window returns up to n bytes of a record's text from offset: a slice of inline text,
// or read from the object (streamed, so a long page is not held whole).
func (s *Store) window(ctx context.Context, rec *Record, offset, n int) ([]byte, error) {
	if rec.Object == "" {
		if offset > len(rec.Text) {
			return nil, nil
		}
		return []byte(rec.Text[offset:min(len(rec.Text), offset+n)]), nil
	}
	obs, err := s.objects(ctx)
	if err != nil {
		return nil, err
	}
	b, err := readDeleting(ctx, obs, rec.Object, func(ctx context.Context) ([]byte, error) {
		r, err := obs.Get(ctx, rec.Object)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		if _, err := io.CopyN(io.Discard, r, int64(offset)); err != nil {
			return nil, err
		}
		return io.ReadAll(io.LimitReader(r, int64(n)))
	})
	if err != nil {
		return nil, fmt.Errorf("read the text of page %s: %w", rec.ID, err)
	}
	return b, nil
}

// String is an excerpt as the model reads it: a header line, the text, and where to
// read on.
func (e Excerpt) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Page %s: %s", e.ID, e.Title)
	if len(e.Tags) > 0 {
		fmt.Fprintf(&b, " [%s]", strings.Join(e.Tags, ", "))
	}
	fmt.Fprintf(&b, " (updated %s", e.Updated.Format("2006-01-02 15:04 MST"))
	if e.Offset > 0 || e.NextOffset > 0 {
		fmt.Fprintf(&b, "; bytes %d–%d of %d", e.Offset, e.End, e.Size)
	}
	b.WriteString(")\n\n")
	b.WriteString(e.Text)
	if e.NextOffset > 0 {
		// One blank line between the text and the note, whether or not the part ends
		// with a line break.
		if !strings.HasSuffix(e.Text, "\n") {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "\n[The page goes on: call get_page with id %q and offset %d to read on.]", e.ID, e.NextOffset)
	}
	return b.String()
}
