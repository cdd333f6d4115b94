// Package catalog turns tool specs into micro endpoint metadata and back, and keeps a live
// catalog of the tool categories served on the bus, read from micro's $SRV.INFO. Any
// process that publishes its specs this way, in any language, serves a category that
// turns can call.
package catalog

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// Endpoint metadata keys: the Spec of one tool, as strings (micro metadata is a string map).
const (
	KeyDescription          = "description"
	KeySchema               = "schema"
	KeyStrict               = "strict"
	KeyNamespace            = "namespace"
	KeyNamespaceDescription = "namespace_description"
	KeyDeferLoading         = "defer_loading"
	KeyMode                 = "mode"
	KeyReadOnly             = "read_only"
	KeyDestructive          = "destructive"
	KeyTimeout              = "timeout"
)

// Service metadata keys.
const (
	KeyCategory = "category"
	KeyNode     = "node"
)

// Metadata is the endpoint metadata that publishes s. Booleans are "true" or "false";
// the timeout is Go duration syntax and absent when zero, as are an empty namespace and
// its description. The category is not in it: the endpoint's subject and the service
// carry it.
func Metadata(s *toolbus.Spec) map[string]string {
	md := map[string]string{
		KeyDescription:  s.Description,
		KeySchema:       string(s.Params.JSON()),
		KeyStrict:       strconv.FormatBool(s.Strict),
		KeyMode:         s.Mode.String(),
		KeyReadOnly:     strconv.FormatBool(s.ReadOnly),
		KeyDestructive:  strconv.FormatBool(s.Destructive),
		KeyDeferLoading: strconv.FormatBool(s.DeferLoading),
	}
	if s.Namespace != "" {
		md[KeyNamespace] = s.Namespace
	}
	if s.NamespaceDescription != "" {
		md[KeyNamespaceDescription] = s.NamespaceDescription
	}
	if s.Timeout > 0 {
		md[KeyTimeout] = s.Timeout.String()
	}
	return md
}

// FromEndpoint reads back the Spec an endpoint publishes: its name, its subject
// (which must be the tool subject of category and name) and its metadata. Absent keys take
// their zero value (no namespace, not strict, parallel, no timeout); a present key with a
// bad value, or a schema that FromJSON refuses, is an error naming the key.
func FromEndpoint(category, name, subject string, md map[string]string) (*toolbus.Spec, error) {
	if want := bus.ToolSubject(category, name); subject != want {
		return nil, fmt.Errorf("endpoint %s: subject %q, want %q", name, subject, want)
	}
	s := &toolbus.Spec{
		Name:                 name,
		Category:             category,
		Description:          md[KeyDescription],
		Namespace:            md[KeyNamespace],
		NamespaceDescription: md[KeyNamespaceDescription],
	}
	// Empty is absent, as for every key (docs/protocol.md §2): a host that writes the
	// key with no schema in it is told it published none, not about a JSON decoder's end
	// of input.
	raw := md[KeySchema]
	if raw == "" {
		return nil, fmt.Errorf("endpoint %s: no %q metadata", name, KeySchema)
	}
	var err error
	if s.Params, err = schema.FromJSON([]byte(raw)); err != nil {
		return nil, fmt.Errorf("endpoint %s: metadata %q: %w", name, KeySchema, err)
	}
	for key, dst := range map[string]*bool{
		KeyStrict: &s.Strict, KeyReadOnly: &s.ReadOnly, KeyDestructive: &s.Destructive, KeyDeferLoading: &s.DeferLoading,
	} {
		if *dst, err = boolValue(md, key); err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", name, err)
		}
	}
	if v, ok := md[KeyMode]; ok && v != "" {
		if err := s.Mode.UnmarshalText([]byte(v)); err != nil {
			return nil, fmt.Errorf("endpoint %s: metadata %q: %w", name, KeyMode, err)
		}
	}
	if v, ok := md[KeyTimeout]; ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("endpoint %s: metadata %q: %q is not a Go duration of zero or more, such as \"30s\"", name, KeyTimeout, v)
		}
		s.Timeout = d
	}
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", name, err)
	}
	return s, nil
}

// boolValue reads "true" or "false", exactly (docs/protocol.md §2, §15); absent or
// empty is false. Other spellings ("True", "FALSE", "yes") are refused rather than
// read: a host that writes Python's str(True) learns it from the skip line, where a
// reading that guessed would have to be documented and matched by every reader.
func boolValue(md map[string]string, key string) (bool, error) {
	switch v := md[key]; v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, fmt.Errorf("metadata %q: %q is not true or false", key, v)
	}
}

// sameSpec reports whether two hosts publish the same tool. Schemas compare as JSON
// values, so two hosts that format one schema differently still agree.
func sameSpec(a, b *toolbus.Spec) bool {
	if a.Name != b.Name || a.Category != b.Category || a.Description != b.Description ||
		a.Strict != b.Strict || a.Namespace != b.Namespace || a.NamespaceDescription != b.NamespaceDescription ||
		a.DeferLoading != b.DeferLoading || a.Mode != b.Mode || a.ReadOnly != b.ReadOnly ||
		a.Destructive != b.Destructive || a.Timeout != b.Timeout {
		return false
	}
	return sameJSON(a.Params.JSON(), b.Params.JSON())
}

func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return string(a) == string(b)
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return string(ca) == string(cb)
}
