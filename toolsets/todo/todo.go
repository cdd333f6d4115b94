package todo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/label"
	"github.com/toolbus/toolbus/schema"
)

// Category is the tool category of the todo tools.
const Category = "todo"

// Item statuses.
const (
	Pending    = "pending"
	InProgress = "in_progress"
	Completed  = "completed"
)

// MaxItems is the longest list todo_write accepts.
const MaxItems = 100

// Item is one entry of a todo list as the model writes it.
type Item struct {
	ID      string `json:"id" jsonschema:"minLength=1,maxLength=64" jsonschema_description:"A short id for the item, kept the same across updates (for example \"1\" or \"tests\")."`
	Content string `json:"content" jsonschema:"minLength=1,maxLength=2000" jsonschema_description:"What is to be done, in one sentence."`
	Status  string `json:"status" jsonschema:"enum=pending,enum=in_progress,enum=completed" jsonschema_description:"pending, in_progress (at most one item at a time) or completed."`
}

// StoredItem is an item as the bucket holds it.
type StoredItem struct {
	Item
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	CompletedAt time.Time `json:"completed_at,omitzero"`
}

// List is an agent's todo list as the bucket holds it.
type List struct {
	Agent string       `json:"agent"`
	Items []StoredItem `json:"items"`
	// Version counts the writes of this list.
	Version   uint64    `json:"version"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// UpdatedBy names the turn and call of the last write.
	UpdatedBy Writer `json:"updated_by,omitzero"`
}

// Writer identifies the call that wrote a list.
type Writer struct {
	Turn string `json:"turn,omitempty"`
	Call string `json:"call,omitempty"`
}

// Done counts the completed items.
func (l List) Done() int {
	n := 0
	for _, it := range l.Items {
		if it.Status == Completed {
			n++
		}
	}
	return n
}

// WriteDetails are the details of a todo_write result.
type WriteDetails struct {
	List List `json:"list"`
	// Previous is the list this write replaced.
	Previous List `json:"previous"`
	// IDs of items added, completed by this write, and removed by it.
	Added     []string `json:"added,omitempty"`
	Completed []string `json:"completed,omitempty"`
	Removed   []string `json:"removed,omitempty"`
	// Attempts is the number of compare-and-set rounds the write took.
	Attempts int `json:"attempts"`
}

type readArgs struct{}

type writeArgs struct {
	Todos []Item `json:"todos" jsonschema_description:"The complete new list; it replaces the current one. Send an empty list to clear it."`
}

// ErrNoStore is returned by the tools' Execute when they were built without a bucket (the
// turn side needs only their schemas).
var ErrNoStore = errors.New("the todo list store is not available on this node")

// Specs returns the specs of the todo tools, in the order the model sees them.
func Specs() []*toolbus.Spec {
	return specs()
}

// specs are the tools' specs; Tools adds the functions.
func specs() []*toolbus.Spec {
	return []*toolbus.Spec{
		{
			Name:        "todo_read",
			Description: "Read your todo list: each item with its id, status and content.",
			Mode:        toolbus.Parallel,
			ReadOnly:    true,
			Category:    Category,
			Params:      schema.MustFor[readArgs](),
		},
		{
			Name: "todo_write",
			Description: "Replace your todo list with the given items. Use it to plan multi-step work and to track progress: " +
				"mark an item in_progress when you start it (one at a time) and completed as soon as it is done. " +
				"Send the whole list every time, keeping each item's id.",
			Mode:     toolbus.Sequential,
			Category: Category,
			Params:   schema.MustFor[writeArgs](),
		},
	}
}

// Tools returns todo_read and todo_write over kv, the todo bucket. Specs describes them
// without one; a nil kv makes every call fail with ErrNoStore.
func Tools(kv jetstream.KeyValue) []*toolbus.Tool {
	specs := specs()
	s := store{kv: kv}
	return []*toolbus.Tool{
		toolbus.MustDefine(toolbus.Def[readArgs]{
			Spec: *specs[0],
			DescribeActivity: func(readArgs) string {
				return "Reading the todo list"
			},
			DescribeCompletedActivity: func(_ readArgs, res toolbus.Result) string {
				var l List
				if res.IsError || json.Unmarshal(res.Details, &l) != nil {
					return "Could not read the todo list"
				}
				return fmt.Sprintf("Read the todo list (%s, %d done)", label.Plural(len(l.Items), "item"), l.Done())
			},
			Execute: s.read,
		}),
		toolbus.MustDefine(toolbus.Def[writeArgs]{
			Spec: *specs[1],
			DescribeActivity: func(writeArgs) string {
				return "Updating the todo list"
			},
			DescribeCompletedActivity: func(_ writeArgs, res toolbus.Result) string {
				var d WriteDetails
				if res.IsError || json.Unmarshal(res.Details, &d) != nil {
					return "Could not update the todo list"
				}
				return fmt.Sprintf("Updated the todo list: %d of %d done", d.List.Done(), len(d.List.Items))
			},
			Execute: s.write,
		}),
	}
}

type store struct {
	kv jetstream.KeyValue
}

// checkKey refuses a call without an agent, and agent ids that cannot key a todo list: those
// that bus.CheckAgent refuses (an error that matches bus.ErrBadAgent).
func checkKey(agent string) error {
	if agent == "" {
		return errors.New("this call carries no agent id, so it has no todo list")
	}
	if err := bus.CheckAgent(agent); err != nil {
		return fmt.Errorf("agent %q cannot key a todo list: %w", agent, err)
	}
	return nil
}

// Load returns the agent's list and its revision; an agent without a list gets an empty
// one at revision 0.
func Load(ctx context.Context, kv jetstream.KeyValue, agent string) (List, uint64, error) {
	if kv == nil {
		return List{}, 0, ErrNoStore
	}
	if err := checkKey(agent); err != nil {
		return List{}, 0, err
	}
	// The bucket has no stream leader to answer for a few seconds after the
	// node that led it is lost: wait within ctx, which carries the call's
	// deadline.
	var e jetstream.KeyValueEntry
	err := bus.Retry(ctx, "load todo list of "+agent, nil, func(ctx context.Context) (err error) {
		e, err = kv.Get(ctx, agent)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return List{Agent: agent, Items: []StoredItem{}}, 0, nil
	}
	if err != nil {
		return List{}, 0, err
	}
	var l List
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return List{}, e.Revision(), fmt.Errorf("%w: todo list of %s at revision %d: %w", errCorrupt, agent, e.Revision(), err)
	}
	if l.Items == nil {
		l.Items = []StoredItem{}
	}
	return l, e.Revision(), nil
}

var errCorrupt = errors.New("stored todo list is not valid")

func (s store) read(ctx context.Context, call toolbus.Call, _ readArgs) (toolbus.Result, error) {
	l, _, err := Load(ctx, s.kv, call.Agent)
	if err != nil {
		return toolbus.Result{}, err
	}
	if len(l.Items) == 0 {
		return toolbus.TextResult("Your todo list is empty.").WithDetails(l), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Your todo list (%d of %d done):\n", l.Done(), len(l.Items))
	writeItems(&b, l.Items)
	return toolbus.TextResult(strings.TrimSuffix(b.String(), "\n")).WithDetails(l), nil
}

// check applies the rules the schema cannot express.
func check(items []Item) error {
	if len(items) > MaxItems {
		return fmt.Errorf("the list has %d items; keep it to %d", len(items), MaxItems)
	}
	seen := make(map[string]bool, len(items))
	active := ""
	for _, it := range items {
		if strings.TrimSpace(it.ID) == "" || strings.TrimSpace(it.Content) == "" {
			return errors.New("every item needs an id and a content")
		}
		if seen[it.ID] {
			return fmt.Errorf("id %q is used twice; give every item its own id", it.ID)
		}
		seen[it.ID] = true
		switch it.Status {
		case Pending, Completed:
		case InProgress:
			if active != "" {
				return fmt.Errorf("items %q and %q are both in_progress; only one item may be in progress at a time", active, it.ID)
			}
			active = it.ID
		default:
			return fmt.Errorf("item %q has status %q; use pending, in_progress or completed", it.ID, it.Status)
		}
	}
	return nil
}

func (s store) write(ctx context.Context, call toolbus.Call, a writeArgs) (toolbus.Result, error) {
	if s.kv == nil {
		return toolbus.Result{}, ErrNoStore
	}
	if err := checkKey(call.Agent); err != nil {
		return toolbus.Result{}, err
	}
	if err := check(a.Todos); err != nil {
		return toolbus.Result{}, err
	}
	d, replacedCorrupt, err := s.update(ctx, call, a.Todos)
	if err != nil {
		return toolbus.Result{}, err
	}

	var b strings.Builder
	if len(d.List.Items) == 0 {
		b.WriteString("Your todo list is now empty.")
	} else {
		fmt.Fprintf(&b, "Todo list updated (%d of %d done):\n", d.List.Done(), len(d.List.Items))
		writeItems(&b, d.List.Items)
	}
	if replacedCorrupt {
		b.WriteString("\nThe stored list could not be read and was replaced.")
	}
	prev := d.Previous
	if len(prev.Items) > 0 && prev.UpdatedBy.Turn != "" && prev.UpdatedBy.Turn != call.Turn {
		// Another turn of this agent wrote the list last: say so, and what went, so that a
		// concurrent change is never overwritten without the model hearing about it.
		fmt.Fprintf(&b, "\nNote: the list you replaced was last written by another turn (%s).", prev.UpdatedBy.Turn)
	}
	if len(d.Removed) > 0 {
		b.WriteString("\nRemoved:")
		for _, it := range prev.Items {
			if slices.Contains(d.Removed, it.ID) {
				fmt.Fprintf(&b, "\n- %s (id %s, %s)", it.Content, it.ID, it.Status)
			}
		}
	}
	return toolbus.TextResult(strings.TrimRight(b.String(), "\n")).WithDetails(d), nil
}

// update applies items on top of the stored list with compare-and-set ([bus.Change]),
// merging onto what another writer stored when it came first.
func (s store) update(ctx context.Context, call toolbus.Call, items []Item) (WriteDetails, bool, error) {
	var (
		d        WriteDetails
		attempts int
	)
	stored, _, err := bus.Change(ctx, s.kv, call.Agent, decodeStored, encodeStored, func(doc *storedList, found bool) error {
		attempts++
		prev := doc.list
		if !found || doc.corrupt {
			prev = List{Agent: call.Agent, Items: []StoredItem{}}
		}
		d = merge(prev, items, call, time.Now().UTC())
		d.Attempts = attempts
		*doc = storedList{list: d.List, corrupt: doc.corrupt}
		return nil
	})
	switch {
	case err != nil && attempts == 0:
		// The list could not be read (no stream leader until ctx ended, say).
		return WriteDetails{}, false, fmt.Errorf("load todo list of %s: %w", call.Agent, err)
	case err != nil:
		return WriteDetails{}, false, fmt.Errorf("store todo list of %s: %w", call.Agent, err)
	}
	return d, stored.corrupt, nil
}

// storedList is a todo list as [bus.Change] reads it: a stored value that is not a list
// is replaced by the write, and corrupt says so.
type storedList struct {
	list    List
	corrupt bool
}

func decodeStored(b []byte) (storedList, error) {
	var l List
	if err := json.Unmarshal(b, &l); err != nil {
		return storedList{corrupt: true}, nil
	}
	if l.Items == nil {
		l.Items = []StoredItem{}
	}
	return storedList{list: l}, nil
}

func encodeStored(s storedList) ([]byte, error) { return json.Marshal(s.list) }

// merge builds the list that replaces prev with items, carrying each kept item's history.
func merge(prev List, items []Item, call toolbus.Call, now time.Time) WriteDetails {
	old := make(map[string]StoredItem, len(prev.Items))
	for _, it := range prev.Items {
		old[it.ID] = it
	}
	next := List{
		Agent:     call.Agent,
		Items:     make([]StoredItem, 0, len(items)),
		Version:   prev.Version + 1,
		UpdatedAt: now,
		UpdatedBy: Writer{Turn: call.Turn, Call: call.ID},
	}
	d := WriteDetails{Previous: prev}
	kept := make(map[string]bool, len(items))
	for _, it := range items {
		kept[it.ID] = true
		si, existed := old[it.ID]
		if !existed {
			si = StoredItem{CreatedAt: now, UpdatedAt: now}
			d.Added = append(d.Added, it.ID)
		} else if si.Item != it {
			si.UpdatedAt = now
		}
		if it.Status == Completed && (!existed || si.Status != Completed) {
			si.CompletedAt = now
			d.Completed = append(d.Completed, it.ID)
		}
		if it.Status != Completed {
			si.CompletedAt = time.Time{}
		}
		si.Item = it
		next.Items = append(next.Items, si)
	}
	for _, it := range prev.Items {
		if !kept[it.ID] {
			d.Removed = append(d.Removed, it.ID)
		}
	}
	d.List = next
	return d
}

func writeItems(b *strings.Builder, items []StoredItem) {
	for _, it := range items {
		mark := "[ ]"
		switch it.Status {
		case InProgress:
			mark = "[>]"
		case Completed:
			mark = "[x]"
		}
		fmt.Fprintf(b, "%s %s (id %s, %s)\n", mark, it.Content, it.ID, it.Status)
	}
}
