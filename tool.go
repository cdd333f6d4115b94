// Package toolbus is the tool contract of the toolbus runtime: what a tool is, what a call
// carries and what a result holds. It knows nothing of NATS or actors; the bus, the category
// hosts and the turn all speak in these types.
package toolbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Mode says how a call may be scheduled against its neighbours in one model response.
type Mode uint8

const (
	// Parallel calls that stand next to each other in a response run at the same time.
	Parallel Mode = iota
	// Sequential calls wait for every call before them and hold every call after them.
	Sequential
)

func (m Mode) String() string {
	switch m {
	case Parallel:
		return "parallel"
	case Sequential:
		return "sequential"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// MarshalText encodes the mode as "parallel" or "sequential".
func (m Mode) MarshalText() ([]byte, error) {
	if m > Sequential {
		return nil, fmt.Errorf("invalid mode %d", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText accepts "parallel" or "sequential".
func (m *Mode) UnmarshalText(b []byte) error {
	switch string(b) {
	case "parallel":
		*m = Parallel
	case "sequential":
		*m = Sequential
	default:
		return fmt.Errorf("invalid mode %q: want parallel or sequential", b)
	}
	return nil
}

// Spec is the data part of a tool: everything a model, a turn or a catalog needs to know
// about it, and nothing that runs. It encodes to JSON, so specs travel: a category host
// publishes them, a catalog reads them back, a turn and the gateways work on them alone.
type Spec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Params is the parameter schema; its root is always an object schema. It encodes as
	// the raw schema, byte for byte.
	Params *schema.Schema `json:"parameters"`
	// Strict asks the provider to enforce the schema (OpenAI strict mode); the model then
	// sees the strict projection of Params.
	Strict bool `json:"strict,omitempty"`
	// Namespace groups tools of one provider; the model sees it as a namespace.
	Namespace            string `json:"namespace,omitempty"`
	NamespaceDescription string `json:"namespace_description,omitempty"`
	// DeferLoading hides the tool behind tool search until the model asks for it.
	DeferLoading bool `json:"defer_loading,omitempty"`
	Mode         Mode `json:"mode"`
	ReadOnly     bool `json:"read_only,omitempty"`
	Destructive  bool `json:"destructive,omitempty"`
	// Timeout bounds one execution; zero means the runtime's default.
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// Category names the tool-category host that executes the tool.
	Category string `json:"category"`
}

// Check reports what makes a spec unusable: a name, category or namespace that is not a
// valid function name and subject token, or a missing parameter schema.
func (s *Spec) Check() error {
	if err := checkName("name", s.Name); err != nil {
		return err
	}
	if err := checkName("category", s.Category); err != nil {
		return err
	}
	if s.Namespace != "" {
		if err := checkNamespace(s.Namespace); err != nil {
			return err
		}
	}
	if s.Params == nil {
		return errors.New("no parameter schema")
	}
	if s.Mode > Sequential {
		return fmt.Errorf("invalid mode %d", uint8(s.Mode))
	}
	if s.Timeout < 0 {
		return fmt.Errorf("negative timeout %s", s.Timeout)
	}
	return nil
}

// QualifiedName is "namespace.name", or the name of a tool without a namespace: how people
// and error messages name a tool.
func (s *Spec) QualifiedName() string {
	if s.Namespace == "" {
		return s.Name
	}
	return s.Namespace + "." + s.Name
}

// Tool is a Spec plus the functions that run it. A tool lives where it runs, in a category
// host; everything else works on its Spec. A tool is a plain value, usually built with
// [Define]; nothing registers it behind the caller's back.
type Tool struct {
	Spec

	// DescribeActivity labels a call while it runs ("Reading notes.md"). Args are validated.
	DescribeActivity func(args json.RawMessage) string
	// DescribeCompletedActivity labels a finished call ("Read 120 lines of notes.md").
	// res.IsError tells the outcome: it is set whenever the call did not succeed (an
	// error result, an error returned by Execute, a timeout, a stop), with the error as
	// its text when Execute gave no content.
	DescribeCompletedActivity func(args json.RawMessage, res Result) string
	// Execute runs the call. Its arguments were parsed and validated against Params; ctx is
	// cancelled on abort or when the call's deadline passes. A returned error becomes an
	// error result the model sees.
	Execute func(ctx context.Context, call Call) (Result, error)
}

// Call is one invocation of a tool, as its execute function sees it.
type Call struct {
	Turn  string // turn id
	ID    string // call id, unique within the turn
	Tool  string
	Agent string
	Home  string // the agent's home directory; file and command tools are confined to it
	Task  string // workflow task id, if the turn is a task turn
	// Deadline is absolute; ctx carries it too.
	Deadline time.Time
	// Args is the validated JSON object.
	Args json.RawMessage
	// Progress publishes a progress event for the call; never nil while executing.
	Progress func(label string)
}

// Content part types.
const (
	ContentText  = "text"
	ContentImage = "image"
)

// ContentPart is one piece of what the model sees: text, or an image given
// inline (Data, base64 in JSON) or by URL. It is also the wire's (bus.ContentPart).
type ContentPart struct {
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	Data      []byte `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// Text returns a text content part.
func Text(s string) ContentPart { return ContentPart{Type: ContentText, Text: s} }

// Image returns an inline image content part.
func Image(mediaType string, data []byte) ContentPart {
	return ContentPart{Type: ContentImage, MediaType: mediaType, Data: data}
}

// Event is a presentation or completion event a tool hands to UIs. It never reaches the model.
type Event struct {
	Kind  string          `json:"kind"`
	Label string          `json:"label,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// Result is what a call produced.
type Result struct {
	// Content is what the model sees.
	Content []ContentPart `json:"content,omitempty"`
	// Details is structured data for logs and UIs; it is never sent to the model.
	Details json.RawMessage `json:"details,omitempty"`
	// Events are presentation events for UIs.
	Events []Event `json:"events,omitempty"`
	// Completion, when set, is the event that marks the call's completion in a UI.
	Completion *Event `json:"completion,omitempty"`
	// Terminate ends the turn after the current batch of calls.
	Terminate bool `json:"terminate,omitempty"`
	// IsError marks the content as an error message for the model.
	IsError bool `json:"is_error,omitempty"`
}

// TextResult is a result holding one text part.
func TextResult(s string) Result { return Result{Content: []ContentPart{Text(s)}} }

// ErrorResult is an error result holding one text part.
func ErrorResult(msg string) Result {
	return Result{Content: []ContentPart{Text(msg)}, IsError: true}
}

// Text joins the result's text parts with newlines.
func (r Result) Text() string {
	var b strings.Builder
	for _, p := range r.Content {
		if p.Type != ContentText {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String()
}

// WithDetails returns r with Details set to the JSON encoding of v. Encoding errors are
// reported in the details themselves rather than lost.
func (r Result) WithDetails(v any) Result {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"details_error": err.Error()})
	}
	r.Details = b
	return r
}

// Def describes a tool whose arguments decode into A. See [Define].
type Def[A any] struct {
	// Spec is the tool's data. Its Params may be left nil: Schema, or else A's struct
	// tags, then give the schema.
	Spec
	// Schema, when set, is a raw JSON Schema sent to the model byte for byte.
	Schema json.RawMessage

	DescribeActivity          func(args A) string
	DescribeCompletedActivity func(args A, res Result) string
	Execute                   func(ctx context.Context, call Call, args A) (Result, error)
}

// Define builds a Tool from a typed definition. It fails when the name, category or
// namespace is not a valid function name and subject token, when Execute is missing, or
// when the schema's root is not an object (with the message "function tool parameters must
// use a root object schema").
func Define[A any](d Def[A]) (*Tool, error) {
	spec := d.Spec
	if d.Execute == nil {
		return nil, fmt.Errorf("define tool %s: Execute is nil", d.Name)
	}
	if spec.Params == nil {
		var err error
		if d.Schema != nil {
			spec.Params, err = schema.FromJSON(d.Schema)
		} else {
			spec.Params, err = schema.For[A]()
		}
		if err != nil {
			return nil, fmt.Errorf("define tool %s: %w", d.Name, err)
		}
	}
	if err := spec.Check(); err != nil {
		if d.Name == "" {
			return nil, fmt.Errorf("define tool: %w", err)
		}
		return nil, fmt.Errorf("define tool %s: %w", d.Name, err)
	}
	decode := func(raw json.RawMessage) (A, error) {
		var a A
		if err := json.Unmarshal(raw, &a); err != nil {
			return a, fmt.Errorf("decode arguments of %s: %w", d.Name, err)
		}
		return a, nil
	}
	t := &Tool{
		Spec: spec,
		Execute: func(ctx context.Context, call Call) (Result, error) {
			a, err := decode(call.Args)
			if err != nil {
				return Result{}, err
			}
			return d.Execute(ctx, call, a)
		},
	}
	if d.DescribeActivity != nil {
		t.DescribeActivity = func(raw json.RawMessage) string {
			a, err := decode(raw)
			if err != nil {
				return d.Name
			}
			return d.DescribeActivity(a)
		}
	}
	if d.DescribeCompletedActivity != nil {
		t.DescribeCompletedActivity = func(raw json.RawMessage, res Result) string {
			a, err := decode(raw)
			if err != nil {
				return d.Name
			}
			return d.DescribeCompletedActivity(a, res)
		}
	}
	return t, nil
}

// MustDefine is Define for package-level tool values; it panics on a definition error.
func MustDefine[A any](d Def[A]) *Tool {
	t, err := Define(d)
	if err != nil {
		panic(err)
	}
	return t
}

// ActivityLabel is the running label of a call: DescribeActivity, or the tool name.
func (t *Tool) ActivityLabel(args json.RawMessage) string {
	if t.DescribeActivity != nil {
		if s := t.DescribeActivity(args); s != "" {
			return s
		}
	}
	return t.Name
}

// CompletedLabel is the label of a finished call: DescribeCompletedActivity, or the
// running label.
func (t *Tool) CompletedLabel(args json.RawMessage, res Result) string {
	if t.DescribeCompletedActivity != nil {
		if s := t.DescribeCompletedActivity(args, res); s != "" {
			return s
		}
	}
	return t.ActivityLabel(args)
}

// ErrBadName reports a tool, category or namespace name that cannot be used.
var ErrBadName = errors.New("bad name")

// checkName accepts the names providers accept for functions (letters, digits, '_' and
// '-', at most 64), which are also valid NATS subject tokens.
func checkName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrBadName, what)
	}
	if len(s) > 64 {
		return fmt.Errorf("%w: %s %q is longer than 64 characters", ErrBadName, what, s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("%w: %s %q may hold only letters, digits, '_' and '-'", ErrBadName, what, s)
		}
	}
	return nil
}

// NamespaceSeparator joins a namespace and a tool name where a wire has no namespaces
// (Chat Completions): "crm__lookup". A namespace never contains it, so the first one
// splits a flattened name unambiguously.
const NamespaceSeparator = "__"

// checkNamespace is checkName for namespaces, which also may not hold the separator.
func checkNamespace(s string) error {
	if err := checkName("namespace", s); err != nil {
		return err
	}
	if strings.Contains(s, NamespaceSeparator) {
		return fmt.Errorf("%w: namespace %q may not contain %q", ErrBadName, s, NamespaceSeparator)
	}
	return nil
}

// CheckNamespace reports whether s can name a namespace.
func CheckNamespace(s string) error { return checkNamespace(s) }

// Set is an ordered set of tool specs with lookup by namespace and name.
type Set struct {
	specs []*Spec
	index map[setKey]*Spec
}

type setKey struct{ namespace, name string }

// NewSet builds a set, refusing a nil spec, one without a name or parameter schema, and
// two specs with the same namespace and name. The rest of [Spec.Check] is for whoever
// makes specs (Define, a catalog): a turn builds a set per turn.
func NewSet(specs ...*Spec) (*Set, error) {
	s := &Set{index: make(map[setKey]*Spec, len(specs)), specs: make([]*Spec, 0, len(specs))}
	for i, sp := range specs {
		switch {
		case sp == nil:
			return nil, fmt.Errorf("tool set: spec %d is nil", i)
		case sp.Name == "":
			return nil, fmt.Errorf("tool set: spec %d has no name", i)
		case sp.Params == nil:
			return nil, fmt.Errorf("tool set: %s has no parameter schema", sp.QualifiedName())
		}
		k := setKey{sp.Namespace, sp.Name}
		if _, dup := s.index[k]; dup {
			return nil, fmt.Errorf("tool set: duplicate tool %q", sp.QualifiedName())
		}
		s.index[k] = sp
		s.specs = append(s.specs, sp)
	}
	return s, nil
}

// SpecsOf returns the specs of tools, in order.
func SpecsOf(tools []*Tool) []*Spec {
	specs := make([]*Spec, len(tools))
	for i, t := range tools {
		specs[i] = &t.Spec
	}
	return specs
}

// Specs returns the specs in assembly order. The slice must not be modified.
func (s *Set) Specs() []*Spec { return s.specs }

// Lookup finds a tool by namespace ("" for none) and name.
func (s *Set) Lookup(namespace, name string) (*Spec, bool) {
	sp, ok := s.index[setKey{namespace, name}]
	return sp, ok
}

// Len is the number of tools.
func (s *Set) Len() int { return len(s.specs) }

// Names lists the tools' qualified names in order.
func (s *Set) Names() []string {
	names := make([]string, len(s.specs))
	for i, sp := range s.specs {
		names[i] = sp.QualifiedName()
	}
	return names
}
