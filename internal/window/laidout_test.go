package window_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/engramhq/engram/internal/ctxref"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/store/sqlite"
	"github.com/engramhq/engram/internal/store/sqlite/sqlitetest"
	"github.com/engramhq/engram/internal/window"
)

// toolLoop makes an agent's tool loop of n steps: a task, then commands
// and their outputs, each output naming files and functions.
func toolLoop(n int) []window.Message {
	msgs := []window.Message{
		textMsg(window.RoleSystem, "You are a coding agent. Run one command a step."),
		textMsg(window.RoleUser, "Fix the failing test in internal/upload."),
	}
	for i := range n {
		id := fmt.Sprintf("call-%d", i)
		var out strings.Builder
		for j := range 30 {
			fmt.Fprintf(&out, "internal/upload/file%d.go:%d: func handler%d_%d() error\n", i, 100+j, i, j)
		}
		msgs = append(msgs,
			window.Message{Role: window.RoleAssistant, Blocks: []window.Block{
				{Type: window.BlockText, Text: fmt.Sprintf("Step %d: look at handler%d_0.", i, max(0, i-1))},
				{Type: window.BlockToolUse, ID: id, Name: "bash", Input: json.RawMessage(fmt.Sprintf(`{"command":"grep -n handler internal/upload/file%d.go"}`, i))}}},
			window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: id, Text: out.String()}}})
	}
	return msgs
}

// blockLoop is toolLoop with each output as an MCP tool's comes from
// Claude Code: an Anthropic tool_result whose content is an array of
// text blocks, kept in Block.Raw.
func blockLoop(n int) []window.Message {
	msgs := toolLoop(n)
	for i, m := range msgs {
		b := m.Blocks[0]
		if b.Type != window.BlockToolResult {
			continue
		}
		raw, err := json.Marshal(map[string]any{"type": "tool_result", "tool_use_id": b.ToolUseID,
			"content": []map[string]any{{"type": "text", "text": b.Text}}})
		if err != nil {
			panic(err)
		}
		msgs[i].Blocks = []window.Block{{Type: window.BlockToolResult, ToolUseID: b.ToolUseID, Raw: raw}}
	}
	return msgs
}

// TestLaidOutWindows: a window of the tool-loop role is laid out by the
// Layout: it holds a digest, never goes over its budget, every reference
// in it expands, and another process (or a restart) that reads the
// ledger lays it out byte for byte the same, appending in turn with the
// first. So too when the tool results come as arrays of content blocks.
func TestLaidOutWindows(t *testing.T) {
	t.Run("StringResults", func(t *testing.T) { testLaidOutWindows(t, toolLoop) })
	t.Run("BlockResults", func(t *testing.T) { testLaidOutWindows(t, blockLoop) })
}

func testLaidOutWindows(t *testing.T, toolLoop func(int) []window.Message) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	a, b := manager(t, path), manager(t, path)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	// References of two steps at most, so that one can come back.
	p := window.ToolLoopPolicy()
	p.MaxRefTokens = 1200
	st, err := a.Open(ctx, key, window.OpenOptions{Role: window.ToolLoopRole, Limit: 4000, Output: 1, Safety: 1, Policy: &p})
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings.Policy.Digest == 0 {
		t.Fatalf("the tool-loop role's policy keeps no digest: %+v", st.Settings.Policy)
	}
	msgs := toolLoop(40)
	// The system prompt and the task, then each step from one process or
	// the other, in turn.
	if _, err := a.Append(ctx, key, msgs[:2]); err != nil {
		t.Fatal(err)
	}
	evictions := 0
	for i := 2; i < len(msgs); i += 2 {
		m := a
		if i%4 == 0 {
			m = b
		}
		res, err := m.Append(ctx, key, msgs[i:i+2])
		if err != nil {
			t.Fatalf("step %d: %v", i/2, err)
		}
		if res.Used > res.Budget {
			t.Fatalf("step %d: %d tokens over a budget of %d", i/2, res.Used, res.Budget)
		}
		evictions += len(res.Evicted)
	}
	if evictions == 0 {
		t.Fatal("forty steps of ~600 tokens in a 4,000-token window evicted nothing")
	}
	ctxA, err := a.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ctxB, err := b.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ctxC, err := manager(t, path).Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ctxA, ctxB); diff != "" {
		t.Errorf("two processes lay the window out differently (-a +b):\n%s", diff)
	}
	if diff := cmp.Diff(ctxA, ctxC); diff != "" {
		t.Errorf("a restart lays the window out differently (-before +after):\n%s", diff)
	}
	excerpts, markers := 0, 0
	for _, it := range ctxA {
		switch {
		case it.Excerpt != "":
			excerpts++
		case it.Marker != "":
			markers++
			back, err := a.Expand(ctx, it.RefID)
			if err != nil || len(back) == 0 {
				t.Errorf("marker %s: %d messages, %v", it.RefID, len(back), err)
			}
		}
	}
	if markers == 0 || excerpts == 0 {
		t.Errorf("the context holds %d markers and %d excerpts; a laid-out window keeps a digest", markers, excerpts)
	}
	// A reference comes back into the window; the other process and a
	// restart lay it out the same, the re-admission taken from the ledger.
	readmitted := ""
	for _, it := range slices.Backward(ctxA) {
		if it.RefID == "" {
			continue
		}
		res, err := a.Readmit(ctx, it.RefID)
		if errors.Is(err, window.ErrNoRoom) {
			continue
		}
		if err != nil {
			t.Fatalf("readmit %s: %v", it.RefID, err)
		}
		if res.Used > res.Budget || len(res.Positions) == 0 {
			t.Fatalf("readmitted %s: %+v", it.RefID, res)
		}
		readmitted = it.RefID
		break
	}
	if readmitted == "" {
		t.Fatal("no reference of the window could be re-admitted")
	}
	ctxA, err = a.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(ctxA, func(it window.Item) bool { return it.RefID == readmitted }) {
		t.Errorf("reference %s is still shown as a marker after its re-admission", readmitted)
	}
	for _, m := range []*window.Manager{b, manager(t, path)} {
		got, err := m.Context(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ctxA, got); diff != "" {
			t.Errorf("another process lays the re-admitted window out differently (-a +other):\n%s", diff)
		}
	}
	// And the window goes on: the next steps append from the other
	// process, within the budget.
	more := toolLoop(44)[len(msgs):]
	for i := 0; i < len(more); i += 2 {
		res, err := b.Append(ctx, key, more[i:i+2])
		if err != nil {
			t.Fatal(err)
		}
		if res.Used > res.Budget {
			t.Fatalf("after the re-admission: %d tokens over a budget of %d", res.Used, res.Budget)
		}
	}
}

// TestWindowRedacts: a secret in a message never reaches the store, not
// even in the names a window notes for its markers, and the window holds
// the message as stored.
func TestWindowRedacts(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 4000}); err != nil {
		t.Fatal(err)
	}
	secret := "ghp_" + strings.Repeat("aB3", 12)
	res, err := m.Append(ctx, key, []window.Message{textMsg(window.RoleUser, "the token is "+secret+" for internal/auth/token.go")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Redacted) != 1 || len(res.Redacted[0]) == 0 {
		t.Fatalf("redacted: %v", res.Redacted)
	}
	items, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := items[0].Message.Blocks[0].Text; strings.Contains(got, secret) {
		t.Errorf("the window holds the secret: %q", got)
	}
	if slices.Contains(items[0].Message.Entities, secret) {
		t.Errorf("the window noted the secret as a name: %v", items[0].Message.Entities)
	}
}

// TestLaidOutRefusal: a message a laid-out window cannot take (a tool
// result whose call no message made) is refused with nothing stored, and
// the window goes on as it was, in this process and in a new one.
func TestLaidOutRefusal(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	m := manager(t, path)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	p := window.ToolLoopPolicy()
	p.Checkpoints = []float64{0.25}
	if _, err := m.Open(ctx, key, window.OpenOptions{Role: window.ToolLoopRole, Limit: 4000, Output: 1, Safety: 1, Policy: &p}); err != nil {
		t.Fatal(err)
	}
	msgs := toolLoop(6)
	if _, err := m.Append(ctx, key, msgs[:2]); err != nil {
		t.Fatal(err)
	}
	checkpoints := 0
	for i := 2; i < 8; i += 2 {
		res, err := m.Append(ctx, key, msgs[i:i+2])
		if err != nil {
			t.Fatal(err)
		}
		if res.Checkpoint {
			checkpoints++
		}
	}
	if checkpoints == 0 {
		t.Error("no checkpoint was due past 25 % of the budget")
	}
	before, err := m.Context(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	orphan := window.Message{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "nope", Text: "output"}}}
	if _, err := m.Append(ctx, key, []window.Message{msgs[8], msgs[9], orphan}); err == nil {
		t.Fatal("an orphan tool result was taken")
	}
	for name, mm := range map[string]*window.Manager{"this process": m, "a new one": manager(t, path)} {
		after, err := mm.Context(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("%s: a refused append changed the window (-before +after):\n%s", name, diff)
		}
	}
	if _, err := m.Append(ctx, key, msgs[8:10]); err != nil {
		t.Fatalf("the window does not go on after a refusal: %v", err)
	}
}

// viewed is a Manager with a window of a 20-step tool loop, in a
// 40,000-token window: whole.
func viewed(t *testing.T) (*window.Manager, store.WindowKey, []window.Message) {
	t.Helper()
	m, key := openedAt(t, filepath.Join(t.TempDir(), "engram.db"))
	msgs := toolLoop(20)
	if _, err := m.Append(context.Background(), key, msgs); err != nil {
		t.Fatal(err)
	}
	return m, key, msgs
}

// openedAt opens the window s/claude of 40,000 tokens in a store at path.
func openedAt(t *testing.T, path string) (*window.Manager, store.WindowKey) {
	t.Helper()
	m := manager(t, path)
	key := store.WindowKey{SessionID: "s", AgentID: "claude"}
	if _, err := m.Open(context.Background(), key, window.OpenOptions{Limit: 40000, Output: 1, Safety: 1}); err != nil {
		t.Fatal(err)
	}
	return m, key
}

// TestView: a window's messages laid out to another budget show whole
// when they fit it, and otherwise stand under markers that expand.
func TestView(t *testing.T) {
	ctx := context.Background()
	m, key, msgs := viewed(t)
	whole, err := m.View(ctx, key, 1, len(msgs), 1<<20)
	if err != nil || whole.Shown != len(msgs)-1 || whole.Refs != 0 || whole.Tokens != whole.Whole {
		t.Fatalf("a view with room for all: %+v, %v", whole, err)
	}
	v, err := m.View(ctx, key, 1, len(msgs), whole.Whole/3)
	if err != nil || v.Refs == 0 || v.Tokens > whole.Whole/3 {
		t.Fatalf("a view of a third: %+v, %v", v, err)
	}
	covered := 0
	for _, it := range v.Items {
		switch {
		case it.Message != nil:
			covered++
		case it.RefID != "":
			back, err := m.Expand(ctx, it.RefID)
			if err != nil {
				t.Fatal(err)
			}
			covered += len(back)
		}
	}
	if covered != len(msgs)-1 {
		t.Errorf("the view covers %d messages of %d", covered, len(msgs)-1)
	}
	if _, err := m.View(ctx, key, 5, 2, 1000); err == nil {
		t.Error("a view of messages 5 to 2")
	}
}

// TestTurn_View: a turn's view is the Manager's, read at one head, and
// writes nothing: its markers name runs of the ledger, and a Manager that
// never saw the window (another process) expands each to the messages it
// stands for, byte for byte.
func TestTurn_View(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	m, key := openedAt(t, path)
	msgs := toolLoop(20)
	if _, err := m.Append(ctx, key, msgs); err != nil {
		t.Fatal(err)
	}
	st := sqlitetest.OpenPath(t, path, sqlite.Options{})
	refsStored := func() int64 {
		s, err := st.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s.References
	}
	before := refsStored()
	turn, err := m.Turn(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_, got, _, err := turn.Messages(ctx)
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("a turn's messages: %d of %d, %v", len(got), len(msgs), err)
	}
	whole, err := turn.View(ctx, 1, len(msgs), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	v, err := turn.View(ctx, 1, len(msgs), whole.Whole/3)
	if err != nil || v.Refs < 2 {
		t.Fatalf("a view of a third: %+v, %v", v, err)
	}
	if n := refsStored(); n != before {
		t.Errorf("a turn's views wrote %d references", n-before)
	}
	other := manager(t, path)
	covered := 0
	for _, it := range v.Items {
		if it.Message != nil {
			covered++
			continue
		}
		if it.RefID == "" {
			continue
		}
		mk, err := ctxref.Parse(it.Marker)
		if err != nil || mk.ID != it.RefID {
			t.Fatalf("marker %q: %v", it.Marker, err)
		}
		back, err := other.Expand(ctx, it.RefID)
		if err != nil {
			t.Fatalf("the reference %s of a turn's view, expanded by another Manager: %v", it.RefID, err)
		}
		if diff := cmp.Diff(stripped(msgs[mk.TurnFrom-1:mk.TurnTo]), stripped(back)); diff != "" {
			t.Errorf("reference %s (places %d-%d) expands to other messages (-want +got):\n%s", it.RefID, mk.TurnFrom, mk.TurnTo, diff)
		}
		covered += len(back)
	}
	if covered != len(msgs)-1 {
		t.Errorf("the view covers %d messages of %d", covered, len(msgs)-1)
	}
	again, err := turn.View(ctx, 1, len(msgs), whole.Whole/3)
	if err != nil || !cmp.Equal(again, v) {
		t.Fatalf("the same view again differs: %v", err)
	}
}

// stripped is messages as a window's ledger gives them back, without what
// the window adds (tokens, entities, the time of their append).
func stripped(msgs []window.Message) []window.Message {
	out := make([]window.Message, len(msgs))
	for i, m := range msgs {
		out[i] = window.Message{Role: m.Role, Blocks: m.Blocks, Pinned: m.Pinned}
	}
	return out
}

// TestTurn_Prepare: a view laid out ahead (Turn.Prepare), then taken by a
// later turn with the messages appended since, is the view a Manager that
// never saw the window lays out from the ledger; and a window changed
// since its turn was read is not laid out ahead.
func TestTurn_Prepare(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "engram.db")
	m, key := openedAt(t, path)
	msgs := toolLoop(30)
	if _, err := m.Append(ctx, key, msgs[:42]); err != nil {
		t.Fatal(err)
	}
	turn, err := m.Turn(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := turn.View(ctx, 1, 42, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	budget := whole.Whole / 3
	if _, err := turn.View(ctx, 1, 42, budget); err != nil {
		t.Fatal(err)
	}
	if err := turn.Prepare(10, 42, budget); err != nil {
		t.Fatal(err)
	}
	if got := m.ViewStarts(key); !slices.Equal(got, []int{10, 1}) {
		t.Fatalf("views kept after Prepare start at %v, want [10 1]", got)
	}
	if _, err := m.Append(ctx, key, msgs[42:]); err != nil {
		t.Fatal(err)
	}
	if err := turn.Prepare(20, 42, budget); err != nil {
		t.Fatal(err)
	}
	if got := m.ViewStarts(key); !slices.Equal(got, []int{10, 1}) {
		t.Errorf("a turn of an older head laid out ahead: views start at %v", got)
	}
	next, err := m.Turn(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := next.View(ctx, 10, len(msgs), budget)
	if err != nil {
		t.Fatal(err)
	}
	want, err := manager(t, path).View(ctx, key, 10, len(msgs), budget)
	if err != nil {
		t.Fatal(err)
	}
	if got.Refs == 0 {
		t.Fatalf("the view shows every message (%d tokens for %d): it proves nothing", got.Tokens, got.Whole)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the view laid out ahead differs from one laid out anew (-anew +ahead):\n%s", diff)
	}
}

// TestWindowRedactsJSON: a secret in a tool call's input (a private key's
// header with no end, which runs to the end of the text) is redacted in
// its string: the input is still JSON, the window is read in a vendor's
// shape, and the reference of its eviction expands.
func TestWindowRedactsJSON(t *testing.T) {
	ctx := context.Background()
	m := manager(t, filepath.Join(t.TempDir(), "engram.db"))
	key := store.WindowKey{SessionID: "s", AgentID: "a"}
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 1000, Output: 100, Safety: 50}); err != nil {
		t.Fatal(err)
	}
	call := []window.Message{
		textMsg(window.RoleUser, "find stray keys"),
		{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: "t1", Name: "Bash",
			Input: json.RawMessage(`{"command":"grep -rl -- '-----BEGIN RSA PRIVATE KEY-----' ."}`)}}},
		{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: "t1", Text: "./deploy/old.pem"}}},
	}
	if _, err := m.Append(ctx, key, call); err != nil {
		t.Fatal(err)
	}
	var refs []string
	for i := range 10 {
		res, err := m.Append(ctx, key, []window.Message{textMsg(window.RoleUser, fmt.Sprintf("turn %d: %s", i, strings.Repeat("more words ", 40)))})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Evicted {
			refs = append(refs, r.ID)
		}
	}
	if len(refs) == 0 {
		t.Fatal("nothing was evicted")
	}
	back, err := m.Expand(ctx, refs[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(back) < 2 || string(back[1].Blocks[0].Input) != `{"command":"grep -rl -- '[REDACTED:private_key]"}` {
		t.Fatalf("the call expanded: %+v", back)
	}
	if _, err := window.ToAnthropic(back[1]); err != nil {
		t.Errorf("the call in Anthropic's shape: %v", err)
	}
}
