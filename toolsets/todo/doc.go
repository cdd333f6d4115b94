// Package todo holds the tools of the "todo" category: todo_read and todo_write, which keep
// one todo list per agent in a JetStream key-value bucket, keyed by the agent id.
//
// todo_write replaces the whole list, as the model sees it, but the stored list is more than
// what the model sent: items keep their creation and completion times across writes, and
// the list counts its versions and remembers which turn wrote it. Every write is therefore
// a read-modify-write, done with a compare-and-set on the key's revision and retried on a
// conflict, so two turns of one agent writing at once never lose an update unnoticed: each
// write is applied on top of the one before it, and its result tells the model what it
// replaced, including items another turn had added.
package todo
