package todo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testmain"
)

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{})
}

// newBucket starts an in-process JetStream server and returns a fresh todo bucket on it.
func newBucket(t testing.TB) jetstream.KeyValue {
	t.Helper()
	_, kv := newStore(t)
	return kv
}

// newStore is newBucket that also returns the JetStream handle.
func newStore(t testing.TB) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		ServerName: "todo-test", DontListen: true, JetStream: true, StoreDir: t.TempDir(),
		JetStreamMaxMemory: 64 << 20, JetStreamMaxStore: 256 << 20, NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(s), nats.Name("todo-test"))
	if err != nil {
		s.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc.Close()
		s.Shutdown()
		s.WaitForShutdown()
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "todos", History: 5, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

func toolNamed(t testing.TB, kv jetstream.KeyValue, name string) *toolbus.Tool {
	t.Helper()
	for _, tool := range Tools(kv) {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

// call validates args like the category host does, then executes the tool.
func call(t testing.TB, tool *toolbus.Tool, agent, turn string, args any) (toolbus.Result, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	if err := tool.Params.Validate(raw); err != nil {
		t.Fatalf("%s: args %s rejected by the schema: %v", tool.Name, raw, err)
	}
	return tool.Execute(t.Context(), toolbus.Call{
		Turn: turn, ID: "call-" + turn, Tool: tool.Name, Agent: agent, Args: raw, Progress: func(string) {},
	})
}

func items(specs ...string) map[string]any {
	list := []map[string]string{}
	for _, s := range specs {
		id, rest, _ := strings.Cut(s, ":")
		status, content, _ := strings.Cut(rest, ":")
		list = append(list, map[string]string{"id": id, "status": status, "content": content})
	}
	return map[string]any{"todos": list}
}

func TestReadWrite(t *testing.T) {
	t.Parallel()
	kv := newBucket(t)
	read, write := toolNamed(t, kv, "todo_read"), toolNamed(t, kv, "todo_write")

	res, err := call(t, read, "agent-1", "t1", map[string]any{})
	if err != nil || res.Text() != "Your todo list is empty." {
		t.Fatalf("empty read: %v %q", err, res.Text())
	}

	res, err = call(t, write, "agent-1", "t1", items("1:in_progress:Write the parser", "2:pending:Test it"))
	if err != nil {
		t.Fatal(err)
	}
	var d WriteDetails
	if err := json.Unmarshal(res.Details, &d); err != nil {
		t.Fatal(err)
	}
	if d.List.Version != 1 || len(d.List.Items) != 2 || strings.Join(d.Added, ",") != "1,2" || d.Attempts != 1 {
		t.Errorf("first write details %+v", d)
	}
	if got := write.CompletedLabel(json.RawMessage(`{}`), res); got != "Updated the todo list: 0 of 2 done" {
		t.Errorf("label %q", got)
	}
	created := d.List.Items[0].CreatedAt

	res, err = call(t, write, "agent-1", "t1", items("1:completed:Write the parser", "2:in_progress:Test it"))
	if err != nil {
		t.Fatal(err)
	}
	d = WriteDetails{}
	if err := json.Unmarshal(res.Details, &d); err != nil {
		t.Fatal(err)
	}
	first := d.List.Items[0]
	if d.List.Version != 2 || len(d.Added) != 0 || strings.Join(d.Completed, ",") != "1" {
		t.Errorf("second write details %+v", d)
	}
	if !first.CreatedAt.Equal(created) || first.CompletedAt.IsZero() || !d.List.Items[1].CompletedAt.IsZero() {
		t.Errorf("item history not kept: %+v", d.List.Items)
	}

	res, err = call(t, read, "agent-1", "t1", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	want := "Your todo list (1 of 2 done):\n[x] Write the parser (id 1, completed)\n[>] Test it (id 2, in_progress)"
	if res.Text() != want {
		t.Errorf("read:\n%s\nwant:\n%s", res.Text(), want)
	}
	if got := read.CompletedLabel(json.RawMessage(`{}`), res); got != "Read the todo list (2 items, 1 done)" {
		t.Errorf("label %q", got)
	}

	// An empty list clears it.
	res, err = call(t, write, "agent-1", "t1", items())
	if err != nil || !strings.HasPrefix(res.Text(), "Your todo list is now empty.") {
		t.Fatalf("clear: %v %q", err, res.Text())
	}
	l, _, err := Load(context.Background(), kv, "agent-1")
	if err != nil || len(l.Items) != 0 || l.Version != 3 {
		t.Errorf("after clear: %+v %v", l, err)
	}
}

func TestAgentsAreIsolated(t *testing.T) {
	t.Parallel()
	kv := newBucket(t)
	write, read := toolNamed(t, kv, "todo_write"), toolNamed(t, kv, "todo_read")
	for _, agent := range []string{"alice", "bob"} {
		if _, err := call(t, write, agent, "t-"+agent, items("1:pending:task of "+agent)); err != nil {
			t.Fatal(err)
		}
	}
	for _, agent := range []string{"alice", "bob"} {
		res, err := call(t, read, agent, "t", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		other := map[string]string{"alice": "bob", "bob": "alice"}[agent]
		if !strings.Contains(res.Text(), "task of "+agent) || strings.Contains(res.Text(), "task of "+other) {
			t.Errorf("%s reads %q", agent, res.Text())
		}
	}
	if res, err := call(t, read, "carol", "t", map[string]any{}); err != nil || res.Text() != "Your todo list is empty." {
		t.Errorf("carol: %v %q", err, res.Text())
	}
}

func TestWriteRules(t *testing.T) {
	t.Parallel()
	kv := newBucket(t)
	write := toolNamed(t, kv, "todo_write")
	many := make([]string, MaxItems+1)
	for i := range many {
		many[i] = fmt.Sprintf("%d:pending:task %d", i, i)
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"two in progress", items("a:in_progress:x", "b:in_progress:y"), `items "a" and "b" are both in_progress`},
		{"duplicate id", items("a:pending:x", "a:completed:y"), `id "a" is used twice`},
		{"blank content", items("a:pending:   "), "every item needs an id and a content"},
		{"too many", items(many...), fmt.Sprintf("the list has %d items; keep it to %d", MaxItems+1, MaxItems)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(t, write, "agent-1", "t1", tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, rev, _ := Load(context.Background(), kv, "agent-1"); rev != 0 {
		t.Errorf("a refused write stored revision %d", rev)
	}
}

func TestSchemaRejectsBadArgs(t *testing.T) {
	t.Parallel()
	write := toolNamed(t, nil, "todo_write")
	for _, args := range []string{
		`{"todos":[{"id":"1","content":"x","status":"done"}]}`,
		`{"todos":[{"id":"1","status":"pending"}]}`,
		`{"todos":[{"id":"","content":"x","status":"pending"}]}`,
		`{"todos":"none"}`,
		`{}`,
	} {
		if err := write.Params.Validate(json.RawMessage(args)); err == nil {
			t.Errorf("schema accepted %s", args)
		}
	}
	if err := write.Params.Validate(json.RawMessage(`{"todos":[{"id":"1","content":"x","status":"in_progress"}]}`)); err != nil {
		t.Errorf("schema refused a good list: %v", err)
	}
	if err := toolNamed(t, nil, "todo_read").Params.Validate(json.RawMessage(`{}`)); err != nil {
		t.Errorf("todo_read refused {}: %v", err)
	}
}

func TestAgentKeys(t *testing.T) {
	t.Parallel()
	kv := newBucket(t)
	write := toolNamed(t, kv, "todo_write")
	for _, tc := range []struct {
		agent string
		ok    bool
	}{
		{"agent-1", true},
		{"A_b-9", true},
		{"", false},
		{"team.agent_2", false},
		{"a/b=c", false},
		{"a b", false},
		{"a.*", false},
		{"a.>", false},
		{".a", false},
		{"a.", false},
		{"a..b", false},
		{"agént", false},
	} {
		_, err := call(t, write, tc.agent, "t1", items("1:pending:x"))
		if (err == nil) != tc.ok {
			t.Errorf("agent %q: err = %v, want ok=%v", tc.agent, err, tc.ok)
		}
		if !tc.ok && tc.agent != "" && !errors.Is(err, bus.ErrBadAgent) {
			t.Errorf("agent %q: err = %v, want one matching bus.ErrBadAgent", tc.agent, err)
		}
	}
}

func TestWithoutStore(t *testing.T) {
	t.Parallel()
	for _, tool := range Tools(nil) {
		_, err := tool.Execute(context.Background(), toolbus.Call{Agent: "a", Args: json.RawMessage(`{"todos":[]}`)})
		if !errors.Is(err, ErrNoStore) {
			t.Errorf("%s without a store: err = %v", tool.Name, err)
		}
	}
}

// Writers of one agent's list racing each other: compare-and-set applies every write on top
// of the one before, so no version is handed out twice and none is skipped.
func TestConcurrentWritersLoseNoUpdate(t *testing.T) {
	t.Parallel()
	kv := newBucket(t)
	write := toolNamed(t, kv, "todo_write")
	const writers, each = 6, 5
	var (
		mu       sync.Mutex
		versions = map[uint64]string{}
		attempts int
		wg       sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				turn := fmt.Sprintf("turn-%d", w)
				res, err := call(t, write, "shared", turn, items(fmt.Sprintf("%d-%d:pending:write %d of %s", w, i, i, turn)))
				if err != nil {
					t.Error(err)
					return
				}
				var d WriteDetails
				if err := json.Unmarshal(res.Details, &d); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := versions[d.List.Version]; dup {
					t.Errorf("version %d written twice (%s and %s)", d.List.Version, prev, turn)
				}
				versions[d.List.Version] = turn
				attempts += d.Attempts
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	l, _, err := Load(context.Background(), kv, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if l.Version != writers*each || len(versions) != writers*each {
		t.Errorf("final version %d with %d distinct versions, want %d", l.Version, len(versions), writers*each)
	}
	t.Logf("%d writes took %d compare-and-set attempts", writers*each, attempts)
}

func TestReplacingAnotherTurnsListSaysSo(t *testing.T) {
	t.Parallel()
	kv := newBucket(t)
	write := toolNamed(t, kv, "todo_write")
	if _, err := call(t, write, "agent-1", "turn-a", items("a1:pending:Fetch data", "a2:pending:Plot it")); err != nil {
		t.Fatal(err)
	}
	res, err := call(t, write, "agent-1", "turn-b", items("a1:completed:Fetch data", "b1:pending:Write report"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"last written by another turn (turn-a)", "Removed:\n- Plot it (id a2, pending)"} {
		if !strings.Contains(res.Text(), want) {
			t.Errorf("text %q lacks %q", res.Text(), want)
		}
	}
	// The same turn writing again is no news.
	res, err = call(t, write, "agent-1", "turn-b", items("a1:completed:Fetch data"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Text(), "another turn") || !strings.Contains(res.Text(), "Write report (id b1") {
		t.Errorf("text %q", res.Text())
	}
}

func TestCorruptListIsReplaced(t *testing.T) {
	t.Parallel()
	kv := newBucket(t)
	if _, err := kv.Put(context.Background(), "agent-1", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, toolNamed(t, kv, "todo_read"), "agent-1", "t1", map[string]any{}); err == nil {
		t.Fatal("read of a corrupt list succeeded")
	}
	res, err := call(t, toolNamed(t, kv, "todo_write"), "agent-1", "t1", items("1:pending:x"))
	if err != nil || !strings.Contains(res.Text(), "could not be read and was replaced") {
		t.Fatalf("%v %q", err, res.Text())
	}
	if l, _, err := Load(context.Background(), kv, "agent-1"); err != nil || l.Version != 1 {
		t.Errorf("%+v %v", l, err)
	}
}

func TestToolContract(t *testing.T) {
	t.Parallel()
	for _, tool := range Tools(nil) {
		if tool.Category != Category || tool.Description == "" || tool.DescribeActivity == nil || tool.DescribeCompletedActivity == nil {
			t.Errorf("%s: incomplete definition", tool.Name)
		}
		if got := tool.CompletedLabel(json.RawMessage(`{}`), toolbus.ErrorResult("boom")); !strings.HasPrefix(got, "Could not") {
			t.Errorf("%s failure label %q", tool.Name, got)
		}
	}
	read, write := toolNamed(t, nil, "todo_read"), toolNamed(t, nil, "todo_write")
	if read.Mode != toolbus.Parallel || !read.ReadOnly || write.Mode != toolbus.Sequential || write.ReadOnly {
		t.Errorf("modes: read %v/%v write %v/%v", read.Mode, read.ReadOnly, write.Mode, write.ReadOnly)
	}
	if got := write.ActivityLabel(json.RawMessage(`{"todos":[]}`)); got != "Updating the todo list" {
		t.Errorf("label %q", got)
	}
}

func BenchmarkWrite(b *testing.B) {
	kv := newBucket(b)
	write := toolNamed(b, kv, "todo_write")
	args, _ := json.Marshal(items("1:in_progress:a", "2:pending:b", "3:pending:c"))
	value, _ := json.Marshal(List{Agent: "bench"})
	b.Run("baseline=kv.Put", func(b *testing.B) {
		for b.Loop() {
			if _, err := kv.Put(context.Background(), "baseline", value); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("todo_write", func(b *testing.B) {
		c := toolbus.Call{Agent: "bench", Turn: "t", Args: args}
		for b.Loop() {
			if _, err := write.Execute(context.Background(), c); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestStoreWaitsForAnAnswer: a bucket whose stream does not answer (here
// deleted; after a node is lost, one without a leader) gets "no responders";
// the store asks again until the call's context ends, then says why.
func TestStoreWaitsForAnAnswer(t *testing.T) {
	t.Parallel()
	js, kv := newStore(t)
	if err := js.DeleteKeyValue(t.Context(), "todos"); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"todo_read", "todo_write"} {
		t.Run(tool, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			raw, _ := json.Marshal(items("1:pending:x"))
			_, err := toolNamed(t, kv, tool).Execute(ctx, toolbus.Call{Agent: "agent-1", Turn: "t1", Args: raw, Progress: func(string) {}})
			if ctx.Err() == nil {
				t.Errorf("%s returned before its context ended: %v", tool, err)
			}
			if !errors.Is(err, nats.ErrNoResponders) || !strings.HasPrefix(err.Error(), "load todo list of agent-1: ") {
				t.Errorf("%s: %v; want the last no-responders error of loading the list", tool, err)
			}
		})
	}
}
