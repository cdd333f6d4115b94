package node

import (
	"reflect"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/actors"
)

// TestOneNodeType: a program knows one node, node.Node, whose methods are its own;
// none come from an embedded type (as actors.Node's did, the bench writing
// s.node.Node.Run). And what actors.Node exports is what node and the bench use of
// it (through Node.Actors), listed here so that a new export is a choice someone made.
func TestOneNodeType(t *testing.T) {
	t.Parallel()
	nt := reflect.TypeFor[Node]()
	for f := range nt.Fields() {
		if f.Anonymous {
			t.Errorf("node.Node embeds %s: keep it in a named field and give Node the methods programs need", f.Type)
		}
	}

	// What node and the bench use of a node's actors: node runs its turns (Run), hosts
	// its tools and MCP categories (Host, Unhost) and closes it (Close); the bench also
	// spawns turns it aborts (Spawn), assembles kits (Assemble) and the agent profiles
	// behind them (Profiles), starts durable turns (Start) and reads the node's own
	// connection and JetStream (Conn, JetStream).
	want := []string{"Assemble", "Close", "Conn", "Host", "JetStream", "Profiles", "Run", "Spawn", "Start", "Unhost"}
	var got []string
	for m := range reflect.TypeFor[*actors.Node]().Methods() {
		got = append(got, m.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("*actors.Node exports %q, want %q: unexport what only package actors uses, or add it to this list with what needs it", got, want)
	}
}
