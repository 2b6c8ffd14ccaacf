package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/engramhq/engram/internal/api"
	"github.com/engramhq/engram/internal/engine"
	"github.com/engramhq/engram/internal/store"
	"github.com/engramhq/engram/internal/tokens"
	"github.com/engramhq/engram/internal/window"
)

// fillWindow opens a window as a harness would and appends turns until it
// has evicted; it returns the tool results appended, by turn, and the
// references made.
func fillWindow(t *testing.T, eng *engine.Engine, key store.WindowKey) ([]string, []window.Ref) {
	t.Helper()
	ctx := context.Background()
	cat, err := tokens.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	m := window.NewManager(eng, cat)
	if _, err := m.Open(ctx, key, window.OpenOptions{Limit: 3000, Output: 200, Safety: 100}); err != nil {
		t.Fatal(err)
	}
	var results []string
	var refs []window.Ref
	for i := range 8 {
		result := fmt.Sprintf("package pkg%d\n\n// handler%d serves requests.\n%s", i, i, strings.Repeat("\t// a line of the body, ünïcödé ✓\n", 40))
		results = append(results, result)
		res, err := m.Append(ctx, key, []window.Message{
			{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockText, Text: fmt.Sprintf("Step %d: read internal/pkg%d/file.go", i, i)}}},
			{Role: window.RoleAssistant, Blocks: []window.Block{{Type: window.BlockToolUse, ID: fmt.Sprintf("call-%d", i), Name: "read_file",
				Input: json.RawMessage(fmt.Sprintf(`{"path": "internal/pkg%d/file.go"}`, i))}}},
			{Role: window.RoleUser, Blocks: []window.Block{{Type: window.BlockToolResult, ToolUseID: fmt.Sprintf("call-%d", i), Text: result}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, res.Evicted...)
	}
	if len(refs) == 0 {
		t.Fatal("nothing was evicted")
	}
	return results, refs
}

// TestWindowTool: the window tool reports the connection's window (or the
// session's only one) and lists the session's windows; its markers expand
// with retrieve_context, byte for byte; and what the window holds is
// found by search_history and get_turn_range.
func TestWindowTool(t *testing.T) {
	cs, eng := newClient(t, Options{Session: "s1", Agent: "mcp-agent", Structured: true})
	results, refs := fillWindow(t, eng, store.WindowKey{SessionID: "s1", AgentID: "claude"})

	// The connection's agent has no window: the session's only one.
	text, res := call(t, cs, "window", map[string]any{})
	if res.IsError || !strings.HasPrefix(text, "window s1/claude (default, recency, 3000-token context): ") {
		t.Fatalf("window: %q (error %v)", text, res.IsError)
	}
	var out api.WindowsOut
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || len(out.Windows) != 1 || out.Windows[0].Budget != 2430 || out.Windows[0].Refs == 0 ||
		!strings.HasSuffix(text, fmt.Sprintf("%d evicted under %s", out.Windows[0].Evicted, plural(out.Windows[0].Refs, "reference"))) {
		t.Errorf("structured content: %s (%v), text %q", b, err, text)
	}
	if got := ok(t, cs, "window", map[string]any{"action": "status", "agent": "claude"}); got != text {
		t.Errorf("window with the agent named: %q, want %q", got, text)
	}
	fillWindow(t, eng, store.WindowKey{SessionID: "s1", AgentID: "codex"})
	if got := ok(t, cs, "window", map[string]any{"action": "list"}); strings.Count(got, "\n") != 1 || !strings.Contains(got, "window s1/codex") {
		t.Errorf("list: %q", got)
	}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, `session "s1" has 2 windows: name the agent (claude, codex)`},
		{map[string]any{"agent": "nobody"}, `no window for agent "nobody" of session "s1"`},
		{map[string]any{"session": "s9"}, `session "s9" has no window`},
		{map[string]any{"action": "evict"}, `action "evict": want status or list`},
	} {
		text, res := call(t, cs, "window", c.args)
		if !res.IsError || !strings.Contains(text, c.want) {
			t.Errorf("window(%v) = %q (error %v), want an error with %q", c.args, text, res.IsError, c.want)
		}
	}

	// The first marker, pasted whole, reads back the first turn's tool
	// result byte for byte.
	var r api.RetrieveOut
	_, res = call(t, cs, "retrieve_context", map[string]any{"ref_id": refs[0].Marker, "max_tokens": 8000})
	b, _ = json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, it := range r.Items {
		found = found || it.Content == results[0]
	}
	if !found {
		t.Errorf("retrieve_context(the marker): the tool result is not among %d items", len(r.Items))
	}

	// The window's content is the session's.
	if got := ok(t, cs, "search_history", map[string]any{"query": "handler5 serves requests", "session": "s1"}); !strings.Contains(got, "handler5 serves requests") {
		t.Errorf("search_history: %q", got)
	}
	if got := ok(t, cs, "get_turn_range", map[string]any{"session": "s1", "from": 1, "to": 2}); !strings.Contains(got, "Step 0: read internal/pkg0/file.go") ||
		!strings.Contains(got, results[0]) {
		t.Errorf("get_turn_range: %q", got)
	}
}

func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprint(n) + " " + thing + "s"
}
